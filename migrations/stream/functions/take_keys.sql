-- The key leases of a range's keyed chains, in one statement (docs/protocol/ordering.md#key-leases): p_keys
-- is a JSON array of {k, id, ordered, ms, held}, `id` the chain member the predecessor rule
-- (ordered_preds_N, docs/protocol/ordering.md#the-predecessor-rule) is checked for, `ms` the lease length of
-- its run. A key with `held` is leased under p_token already (a drain's chain of ranges shares one
-- key token and passes its leases on): it still answers to the predecessor rule, in the same
-- statement as every other key, but writes nothing (no INSERT, whose conflict with the caller's own
-- row would send every key to the upsert). Other keys are inserted in key order, so concurrent
-- polls lock lease rows in one order; when an insert conflicts, the whole set is taken again by
-- upsert (a lease expired, or held under p_token, is taken over). Every lease it takes or holds ends
-- no later than the caller's range lease (LEAST ignores a NULL cap), so a lease never outlives the
-- range holding it (docs/protocol/crash-recovery.md: a reclaim finds its keys free).
-- Returns one row per key not taken: kind 'pred' (pred_id the unresolved predecessor) or 'busy'.
CREATE OR REPLACE FUNCTION {{schema}}.take_keys_{{N}}(
  p_group BIGINT, p_token UUID, p_own_low BIGINT, p_own_high BIGINT, p_keys JSONB)
RETURNS TABLE (k TEXT, kind TEXT, pred_id BIGINT)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  v_pred JSONB;
  v_cap TIMESTAMPTZ;
BEGIN
  -- No key lease outlives the range lease of the range that holds it: a reclaim after a crash then
  -- finds the keys free. The caller's range lease is the one within (p_own_low, p_own_high] (none
  -- for an exception start, which passes (0, 0]). Leases passed on from the range before are
  -- shortened to it where they would outlive it.
  SELECT min(l.expires_at) INTO v_cap FROM {{schema}}.claim_lease_{{N}} l
   WHERE l.consumer_group_id = p_group AND l.low >= p_own_low AND l.high <= p_own_high;
  IF v_cap IS NOT NULL THEN
    UPDATE {{schema}}.message_key_lease_{{N}} l SET expires_at = v_cap
     WHERE l.consumer_group_id = p_group AND l.token = p_token AND l.expires_at > v_cap;
  END IF;
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
          FROM jsonb_to_recordset(p_keys) AS x(k TEXT, ms BIGINT, held BOOLEAN)
         WHERE NOT EXISTS (SELECT 1 FROM pred WHERE pred.key = x.k) AND x.held IS NOT TRUE
         GROUP BY x.k
      ), taken AS (
        INSERT INTO {{schema}}.message_key_lease_{{N}} (consumer_group_id, message_key, token, expires_at)
        SELECT p_group, w.key, p_token, LEAST(now() + w.ms * interval '1 millisecond', v_cap)
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
      FROM jsonb_to_recordset(p_keys) AS x(k TEXT, ms BIGINT, held BOOLEAN)
     WHERE NOT EXISTS (SELECT 1 FROM pred WHERE pred.key = x.k) AND x.held IS NOT TRUE
     GROUP BY x.k
  ), taken AS (
    INSERT INTO {{schema}}.message_key_lease_{{N}} AS l (consumer_group_id, message_key, token, expires_at)
    SELECT p_group, w.key, p_token, LEAST(now() + w.ms * interval '1 millisecond', v_cap)
      FROM want w
     ORDER BY w.key
    ON CONFLICT (consumer_group_id, message_key) DO UPDATE
       SET token = EXCLUDED.token, expires_at = EXCLUDED.expires_at
     WHERE {{schema}}.lease_expired_{{N}}(l.expires_at) OR l.token = EXCLUDED.token
    RETURNING l.message_key
  )
  SELECT pred.key, 'pred'::text, pred.pred_id FROM pred
  UNION ALL
  SELECT w.key, 'busy'::text, NULL::bigint FROM want w
   WHERE NOT EXISTS (SELECT 1 FROM taken t WHERE t.message_key = w.key);
END
$fn$;
