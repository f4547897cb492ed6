-- ordered_preds_N of 0008_ordered_set.sql restated: the same rule, the same result, one snapshot,
-- still one inlinable SELECT (docs/ordering.md#the-predecessor-rule). What changes is what it
-- costs per pair. In 0008 every pair ran three probes, and two of them did not depend on the pair
-- in the common case: the scan of the group's range leases (skipping the caller's own) and the
-- read of the group's cursor. Both are now read once per call, in the FROM clause (one row each,
-- so the planner makes them init plans), and a pair's probe into message_log_N runs only when they
-- leave something to find:
--   * other ranges: only when some other range lease of the group has low < id (the lowest such
--     low is read once); the probe itself is as before, so a lease that does not cover the pair
--     still finds nothing;
--   * unclaimed messages: only when claimed < id - 1, as before, with claimed read once.
-- The exception-row probe is unchanged. A take_keys_N of a 1,000-message range with ~630 keys and
-- no other range lease scanned claim_lease_N ~630 times (one bitmap scan per key, each seeing
-- every not-yet-vacuumed dead lease row of the group); now once.
-- Placeholders as in 0001_family.sql: {{schema}} (validated, quoted) and {{N}} (numeric) only.

CREATE OR REPLACE FUNCTION {{schema}}.ordered_preds_{{N}}(
  p_group BIGINT, p_own_low BIGINT, p_own_high BIGINT, p_keys JSONB)
RETURNS TABLE (message_key TEXT, message_id BIGINT, pred_id BIGINT)
LANGUAGE sql STABLE AS $fn$
  SELECT x.k, x.id, LEAST(
    (SELECT min(e.message_id) FROM {{schema}}.exception_queue_{{N}} e
      WHERE e.consumer_group_id = p_group AND e.message_key = x.k AND e.message_id < x.id
        AND e.status IN ('ready', 'inflight', 'deferred')),
    CASE WHEN o.low < x.id THEN
      (SELECT min(m.id) FROM {{schema}}.claim_lease_{{N}} l
         JOIN {{schema}}.message_log_{{N}} m
           ON m.message_key = x.k AND m.id > l.low AND m.id <= l.high AND m.id < x.id
        WHERE l.consumer_group_id = p_group AND l.low < x.id
          AND NOT (l.low >= p_own_low AND l.high <= p_own_high)) END,
    CASE WHEN c.claimed < x.id - 1 THEN
      (SELECT min(m.id) FROM {{schema}}.message_log_{{N}} m
        WHERE m.message_key = x.k AND m.id > c.claimed AND m.id < x.id) END)
    FROM (SELECT min(l.low) AS low FROM {{schema}}.claim_lease_{{N}} l
           WHERE l.consumer_group_id = p_group
             AND NOT (l.low >= p_own_low AND l.high <= p_own_high)) o,
         (SELECT (SELECT cur.claimed FROM {{schema}}.consumer_group_cursor_{{N}} cur
                   WHERE cur.consumer_group_id = p_group) AS claimed) c,
         jsonb_to_recordset(p_keys) AS x(k TEXT, id BIGINT, ordered BOOLEAN)
   WHERE x.ordered IS NOT FALSE
$fn$;
