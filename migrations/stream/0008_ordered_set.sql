-- The predecessor rule and the key-lease upsert, each written once and set-based
-- (docs/ordering.md#the-predecessor-rule, docs/ordering.md#key-leases).
-- Placeholders as in 0001_family.sql: {{schema}} (validated, quoted) and {{N}} (numeric) only.
--
-- Before this migration the rule was written in ordered_pred_N and again inline in take_keys_N,
-- which ran it (and the lease upsert) once per key in a loop; the upsert was also written in
-- take_key_N. Now:
--   ordered_preds_N   the rule, for many (key, id) pairs in one statement;
--   ordered_pred_N    the one-pair case of it (the reservation calls it per candidate row);
--   take_keys_N       the rule and the lease upsert for all keys of a call in one statement;
--   take_key_N        the compaction head check, then take_keys_N for its one key.

-- The lowest unresolved predecessor of each {k, id} of p_keys for the group, or NULL (one row per
-- element; elements with "ordered": false are skipped, absent means checked). Unresolved: an
-- exception row of the key below id in ready, inflight or deferred; a message of the key below id
-- inside another range lease of the group (in flight, released or expired: its outcome is not
-- written yet); or one not claimed yet (after a seek back). dead and superseded rows are resolved.
-- A lease inside the caller's own range (p_own_low, p_own_high] is its own (or what is left of
-- it): ranges are disjoint, so skipping it skips exactly the ids the caller's chain orders itself.
-- One statement, so one snapshot: a range recording (which deletes its lease and writes its
-- exception rows in one transaction) is seen either before or after. LANGUAGE sql, STABLE, one
-- SELECT, not STRICT: the planner inlines it into the calling statement, so a caller's plan (cached
-- by plpgsql) probes the indexes message_log_N_message_key (message_key, id) and
-- exception_queue_N_key (consumer_group_id, message_key, message_id) per pair, with no function
-- call and no planning per key.
CREATE OR REPLACE FUNCTION {{schema}}.ordered_preds_{{N}}(
  p_group BIGINT, p_own_low BIGINT, p_own_high BIGINT, p_keys JSONB)
RETURNS TABLE (message_key TEXT, message_id BIGINT, pred_id BIGINT)
LANGUAGE sql STABLE AS $fn$
  SELECT x.k, x.id, LEAST(
    (SELECT min(e.message_id) FROM {{schema}}.exception_queue_{{N}} e
      WHERE e.consumer_group_id = p_group AND e.message_key = x.k AND e.message_id < x.id
        AND e.status IN ('ready', 'inflight', 'deferred')),
    (SELECT min(m.id) FROM {{schema}}.claim_lease_{{N}} l
       JOIN {{schema}}.message_log_{{N}} m
         ON m.message_key = x.k AND m.id > l.low AND m.id <= l.high AND m.id < x.id
      WHERE l.consumer_group_id = p_group AND l.low < x.id
        AND NOT (l.low >= p_own_low AND l.high <= p_own_high)),
    (SELECT min(m.id) FROM {{schema}}.consumer_group_cursor_{{N}} cur
       JOIN {{schema}}.message_log_{{N}} m
         ON m.message_key = x.k AND m.id > cur.claimed AND m.id < x.id
      WHERE cur.consumer_group_id = p_group AND cur.claimed < x.id - 1))
    FROM jsonb_to_recordset(p_keys) AS x(k TEXT, id BIGINT, ordered BOOLEAN)
   WHERE x.ordered IS NOT FALSE
$fn$;

-- The one-pair case (the reservation statement's per-row check). plpgsql, so its one statement,
-- with ordered_preds_N inlined into it, is planned once per session and not at every call.
CREATE OR REPLACE FUNCTION {{schema}}.ordered_pred_{{N}}(
  p_group BIGINT, p_key TEXT, p_message_id BIGINT, p_own_low BIGINT, p_own_high BIGINT)
RETURNS BIGINT
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  RETURN (SELECT p.pred_id FROM {{schema}}.ordered_preds_{{N}}(
            p_group, p_own_low, p_own_high, jsonb_build_array(jsonb_build_object('k', p_key, 'id', p_message_id))) p);
END
$fn$;

-- Take the key leases of p_keys ({k, id, ordered, ms}) under p_token in one statement
-- (docs/ordering.md#key-leases): the predecessor rule (ordered_preds_N) for the ordered ones, then
-- one upsert for every key without a predecessor, in key order, so concurrent callers lock lease
-- rows in the same order and cannot deadlock. The upsert takes over only a lease that has expired
-- or carries p_token; a key it does not get is busy. `ms` is the lease length of the run. Returns
-- the keys NOT taken, one row each: kind 'pred' (pred_id: the lowest unresolved predecessor) or
-- 'busy'; every other key of p_keys is held under p_token when the statement commits. (Returning
-- only the refusals keeps the hot path's reply small: a range usually takes every key.)
-- Keys are expected once each; a repeated key is leased once.
DROP FUNCTION IF EXISTS {{schema}}.take_keys_{{N}}(BIGINT, UUID, BIGINT, BIGINT, JSONB);
CREATE FUNCTION {{schema}}.take_keys_{{N}}(
  p_group BIGINT, p_token UUID, p_own_low BIGINT, p_own_high BIGINT, p_keys JSONB)
RETURNS TABLE (k TEXT, kind TEXT, pred_id BIGINT)
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
  RETURN QUERY
  WITH pred AS (
    SELECT p.message_key AS key, min(p.pred_id) AS pred_id
      FROM {{schema}}.ordered_preds_{{N}}(p_group, p_own_low, p_own_high, p_keys) p
     WHERE p.pred_id IS NOT NULL
     GROUP BY p.message_key
  ), want AS (
    SELECT x.k AS key, max(x.ms) AS ms
      FROM jsonb_to_recordset(p_keys) AS x(k TEXT, ms BIGINT)
     WHERE NOT EXISTS (SELECT 1 FROM pred WHERE pred.key = x.k)
     GROUP BY x.k
  ), taken AS (
    INSERT INTO {{schema}}.message_key_lease_{{N}} AS l (consumer_group_id, message_key, token, expires_at)
    SELECT p_group, w.key, p_token, now() + w.ms * interval '1 millisecond'
      FROM want w
     ORDER BY w.key
    ON CONFLICT (consumer_group_id, message_key) DO UPDATE
       SET token = EXCLUDED.token, expires_at = EXCLUDED.expires_at
     WHERE l.expires_at < now() OR l.token = EXCLUDED.token
    RETURNING l.message_key
  )
  SELECT pred.key, 'pred'::text, pred.pred_id FROM pred
  UNION ALL
  SELECT w.key, 'busy'::text, NULL::bigint FROM want w
   WHERE NOT EXISTS (SELECT 1 FROM taken t WHERE t.message_key = w.key);
END
$fn$;

-- The lease of one key: the compaction head check (docs/poll-cycle.md#dispatch step 4), then
-- take_keys_N for its one key. Signature and result text as in 0001_family.sql (start_exception_N
-- calls it): NULL when taken, else 'busy', 'pred:<id>' or 'superseded:<head id>'.
CREATE OR REPLACE FUNCTION {{schema}}.take_key_{{N}}(
  p_group BIGINT, p_key TEXT, p_token UUID, p_ms BIGINT, p_message_id BIGINT,
  p_ordered BOOLEAN, p_own_low BIGINT, p_own_high BIGINT, p_compacted BOOLEAN)
RETURNS TEXT
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  v_head BIGINT;
  r RECORD;
BEGIN
  IF p_compacted THEN
    SELECT h.message_id INTO v_head FROM {{schema}}.compaction_head_{{N}} h WHERE h.compaction_key = p_key;
    IF v_head IS DISTINCT FROM p_message_id THEN
      RETURN 'superseded:' || COALESCE(v_head::text, 'none');
    END IF;
  END IF;
  SELECT t.kind, t.pred_id INTO r
    FROM {{schema}}.take_keys_{{N}}(p_group, p_token, p_own_low, p_own_high,
           jsonb_build_array(jsonb_build_object('k', p_key, 'id', p_message_id, 'ordered', p_ordered, 'ms', p_ms))) t;
  IF NOT FOUND THEN RETURN NULL; END IF;
  RETURN CASE r.kind WHEN 'busy' THEN 'busy' ELSE 'pred:' || r.pred_id END;
END
$fn$;
