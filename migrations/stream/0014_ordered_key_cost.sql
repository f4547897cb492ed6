-- Two functions of 0008_ordered_set.sql restated for the cost of an ordered range's key leases;
-- neither changes an answer (docs/ordering.md#key-leases, docs/ordering.md#the-predecessor-rule).
--
-- ordered_preds_N: the same rule, the same result, one snapshot, still one inlinable SELECT. What
-- changes is what it costs per pair. In 0008 every pair ran three probes, and two of them did
-- not depend on the pair in the common case: the scan of the group's range leases (skipping the caller's own) and the
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

-- take_keys_N of 0008_ordered_set.sql restated with a fast path for the common case of a range's
-- first keys: none of them has a lease row (a range's release deletes its rows). The fast path is
-- the same statement (the predecessor rule and the lease rows of every key without a predecessor,
-- in key order, one snapshot) with a plain INSERT instead of INSERT … ON CONFLICT DO UPDATE, which
-- spends a speculative insertion per row (a pre-check probe of the primary key and a confirm
-- record); a 1,000-message range writes ~630 rows. If any wanted key has a row (live, expired, or
-- this token's own), the INSERT fails with unique_violation, the block's subtransaction undoes
-- everything it wrote, and the statement of 0008 runs as before, in a fresh snapshot of its own, so
-- every answer still comes from one statement. Only calls with more than one key take the fast path:
-- take_key_N (one key, called per row by start_exceptions_N) goes straight to the upsert, so a
-- batch of exception starts opens no subtransaction per row.
CREATE OR REPLACE FUNCTION {{schema}}.take_keys_{{N}}(
  p_group BIGINT, p_token UUID, p_own_low BIGINT, p_own_high BIGINT, p_keys JSONB)
RETURNS TABLE (k TEXT, kind TEXT, pred_id BIGINT)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  v_pred JSONB;
BEGIN
  IF jsonb_array_length(p_keys) > 1 THEN
    BEGIN
      -- A data-modifying WITH runs to completion whether or not the SELECT reads it.
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
        INSERT INTO {{schema}}.message_key_lease_{{N}} (consumer_group_id, message_key, token, expires_at)
        SELECT p_group, w.key, p_token, now() + w.ms * interval '1 millisecond'
          FROM want w
         ORDER BY w.key
      )
      SELECT COALESCE(jsonb_agg(jsonb_build_array(pred.key, pred.pred_id)), '[]'::jsonb)
        INTO v_pred
        FROM pred;
    EXCEPTION WHEN unique_violation THEN
      v_pred := NULL;
    END;
    IF v_pred IS NOT NULL THEN
      -- Every key without a predecessor was taken: only the 'pred' refusals to return.
      RETURN QUERY SELECT p->>0, 'pred'::text, (p->>1)::bigint FROM jsonb_array_elements(v_pred) p;
      RETURN;
    END IF;
  END IF;
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
