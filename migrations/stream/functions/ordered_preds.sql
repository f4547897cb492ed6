-- The lowest unresolved predecessor of each {k, id} of p_keys for the group, or NULL
-- (docs/protocol/ordering.md#the-predecessor-rule): one row per element; elements with "ordered": false are
-- skipped, absent means checked. Unresolved: an exception row of the key below id in ready,
-- inflight or deferred; a message of the key below id inside another range lease of the group (in
-- flight, released or expired: its outcome is not written yet); or one not claimed yet (after a
-- seek back). dead, superseded and expired rows are resolved. A lease inside the caller's own range
-- (p_own_low, p_own_high] is its own (or what is left of it): ranges are disjoint, so skipping it
-- skips exactly the ids the caller's chain orders itself.
-- One statement, so one snapshot: a range recording (which deletes its lease and writes its
-- exception rows in one transaction) is seen either before or after. The group's other range
-- leases and its cursor are read once per call, in the FROM clause (one row each, init plans);
-- a pair probes message_log_N only when they leave something to find (another lease with
-- low < id; claimed < id - 1). The exception-row probe uses exception_queue_N_key, the log probes
-- message_log_N_message_key.
-- LANGUAGE sql, STABLE, one SELECT, not STRICT: the planner inlines it into the calling statement
-- (take_keys_N, ordered_pred_N), whose plan plpgsql caches, with no function call and no
-- planning per key.
-- search_path: not set, because a function with a SET clause is never inlined. Its built-in
-- functions are qualified with pg_catalog instead; its operators are resolved under the caller's
-- search_path, which is pg_catalog, pg_temp in every caller.
CREATE OR REPLACE FUNCTION {{schema}}.ordered_preds_{{N}}(
  p_group BIGINT, p_own_low BIGINT, p_own_high BIGINT, p_keys JSONB)
RETURNS TABLE (message_key TEXT, message_id BIGINT, pred_id BIGINT)
LANGUAGE sql STABLE AS $fn$
  SELECT x.k, x.id, LEAST(
    (SELECT pg_catalog.min(e.message_id) FROM {{schema}}.exception_queue_{{N}} e
      WHERE e.consumer_group_id = p_group AND e.message_key = x.k AND e.message_id < x.id
        AND {{schema}}.unresolved_{{N}}(e.status)),
    CASE WHEN o.low < x.id THEN
      (SELECT pg_catalog.min(m.id) FROM {{schema}}.claim_lease_{{N}} l
         JOIN {{schema}}.message_log_{{N}} m
           ON m.message_key = x.k AND m.id > l.low AND m.id <= l.high AND m.id < x.id
        WHERE l.consumer_group_id = p_group AND l.low < x.id
          AND NOT (l.low >= p_own_low AND l.high <= p_own_high)) END,
    CASE WHEN c.claimed < x.id - 1 THEN
      (SELECT pg_catalog.min(m.id) FROM {{schema}}.message_log_{{N}} m
        WHERE m.message_key = x.k AND m.id > c.claimed AND m.id < x.id) END)
    FROM (SELECT pg_catalog.min(l.low) AS low FROM {{schema}}.claim_lease_{{N}} l
           WHERE l.consumer_group_id = p_group
             AND NOT (l.low >= p_own_low AND l.high <= p_own_high)) o,
         (SELECT (SELECT cur.claimed FROM {{schema}}.consumer_group_cursor_{{N}} cur
                   WHERE cur.consumer_group_id = p_group) AS claimed) c,
         pg_catalog.jsonb_to_recordset(p_keys) AS x(k TEXT, id BIGINT, ordered BOOLEAN)
   WHERE x.ordered IS NOT FALSE
$fn$;
