-- A drain's chain of keyed ranges passes its key leases on (docs/ordering.md#key-leases,
-- docs/poll-cycle.md#keyed-ranges-claimed-ahead): record_take_keys_N and take_keys_N restated.
-- Placeholders as in 0001_family.sql: {{schema}} (validated, quoted) and {{N}} (numeric) only.
--
-- record_take_keys_N: the release of the recorded range's key leases, cheaper; with p_rec_keys NULL
-- (the next range takes the leases over) it releases nothing, as before.
-- 0015 released them with `message_key = ANY (ARRAY(SELECT jsonb_array_elements_text(keys)))`,
-- meant as an index scan of the primary key. The array is an init plan's parameter, so the planner
-- costs it blind and, for a table as small as the lease table, picks a bitmap scan of the whole
-- group with the `= ANY` as a filter: every lease row with the token is compared with the keys one
-- after another. For a range of 1,000 messages over 1,000 keys that is about 985 rows times 985
-- keys: 9 ms of a 15 ms statement, measured with auto_explain in the bench's ordered arm. A join
-- against the keys fared worse: the token's selectivity makes the planner expect one lease row, and
-- it runs the set-returning function again for every row.
--
-- A range run's key leases all carry its own key token (a fresh UUID per run, so a reclaimed
-- run's token is another). The only lease under it that must outlive the record is an abandoned
-- run's (docs/ordering.md#key-leases: renewed until the handler settles). So p_rec_keys may now be
-- the JSON string "all": the run has no abandoned run, and every lease under its token goes, found
-- by the token in one pass over the group's lease rows, no key compared. Clients send "all"
-- whenever they can; an array (older clients, or a run with an abandoned run) is released by its
-- keys as 0015 did.

CREATE OR REPLACE FUNCTION {{schema}}.record_take_keys_{{N}}(
  p_group BIGINT, p_rec_token UUID, p_rec_eq JSONB, p_rec_dl JSONB, p_rec_key_token UUID, p_rec_keys JSONB,
  p_token UUID, p_own_low BIGINT, p_own_high BIGINT, p_keys JSONB)
RETURNS TABLE (recorded BOOLEAN, paused BOOLEAN, reclaimable BOOLEAN, expirable BOOLEAN,
               reservable BOOLEAN, k TEXT, kind TEXT, pred_id BIGINT)
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
BEGIN
  IF p_rec_keys = '"all"'::jsonb THEN
    -- Every lease the run took carries its key token, and none is to outlive the run: the token
    -- alone names the rows.
    DELETE FROM {{schema}}.message_key_lease_{{N}} l
     WHERE l.consumer_group_id = p_group AND l.token = p_rec_key_token;
  ELSIF jsonb_typeof(p_rec_keys) = 'array' AND jsonb_array_length(p_rec_keys) > 0 THEN
    -- The keys named (an abandoned run's lease, still renewed, is left out), as 0015 did.
    DELETE FROM {{schema}}.message_key_lease_{{N}} l
     WHERE l.consumer_group_id = p_group
       AND l.message_key = ANY (ARRAY(SELECT jsonb_array_elements_text(p_rec_keys)))
       AND l.token = p_rec_key_token;
  END IF;
  DELETE FROM {{schema}}.claim_lease_{{N}} l WHERE l.consumer_group_id = p_group AND l.token = p_rec_token;
  recorded := FOUND;
  IF recorded THEN
    IF p_rec_eq IS NOT NULL AND jsonb_array_length(p_rec_eq) > 0 THEN
      INSERT INTO {{schema}}.exception_queue_{{N}}
        (consumer_group_id, message_id, status, message_key, concurrency, attempts, delays, can_run_after, last_error)
      SELECT p_group, r.message_id, r.status, r.message_key, r.concurrency, r.attempts, r.delays,
             now() + r.run_after_ms * interval '1 millisecond', r.last_error
        FROM jsonb_to_recordset(p_rec_eq) AS r(message_id BIGINT, status TEXT, message_key TEXT, concurrency TEXT,
                                               attempts INTEGER, delays INTEGER, run_after_ms BIGINT, last_error TEXT)
      ON CONFLICT DO NOTHING;
    END IF;
    IF p_rec_dl IS NOT NULL AND jsonb_array_length(p_rec_dl) > 0 THEN
      INSERT INTO {{schema}}.delivery_log_{{N}} (consumer_group_id, message_id, attempt, status, error)
      SELECT p_group, r.message_id, r.attempt, r.status, r.error
        FROM jsonb_to_recordset(p_rec_dl) AS r(message_id BIGINT, attempt INTEGER, status TEXT, error TEXT);
    END IF;
    SELECT g.paused,
           EXISTS (SELECT 1 FROM {{schema}}.claim_lease_{{N}} l WHERE l.consumer_group_id = p_group AND l.expires_at < now()),
           EXISTS (SELECT 1 FROM {{schema}}.exception_queue_{{N}} e WHERE e.consumer_group_id = p_group AND e.status = 'inflight'
                      AND e.lease_expires_at < now()),
           EXISTS (SELECT 1 FROM {{schema}}.exception_queue_{{N}} e WHERE e.consumer_group_id = p_group
                      AND ((e.status = 'ready' AND e.can_run_after <= now()) OR e.status = 'deferred')
                      AND (e.lease_expires_at IS NULL OR e.lease_expires_at < now()))
      INTO paused, reclaimable, expirable, reservable
      FROM {{schema}}.consumer_group_config g WHERE g.id = p_group;
  END IF;
  RETURN NEXT;
  recorded := NULL; paused := NULL; reclaimable := NULL; expirable := NULL; reservable := NULL;
  IF p_keys IS NOT NULL AND jsonb_array_length(p_keys) > 0 THEN
    RETURN QUERY SELECT NULL::boolean, NULL::boolean, NULL::boolean, NULL::boolean, NULL::boolean, t.k, t.kind, t.pred_id
                   FROM {{schema}}.take_keys_{{N}}(p_group, p_token, p_own_low, p_own_high, p_keys) t;
  END IF;
END
$fn$;

-- take_keys_N of 0014_ordered_key_cost.sql restated for a drain's chain of keyed ranges
-- (docs/ordering.md#key-leases): a key in p_keys may say `held`: the caller holds its lease under
-- p_token already, long enough for this range's run (a chain's ranges share one key token, and a
-- range passes its leases on to the next instead of releasing them). A held key still answers to
-- the predecessor rule, in the same statement as every other key, but writes nothing: no INSERT
-- (whose conflict with the caller's own row would send every key to the upsert), no upsert. Keys
-- without `held` (every key of an older client) are taken as before. And every lease it takes or
-- holds ends no later than the caller's range lease (LEAST ignores a NULL cap), so a lease with
-- headroom never outlives the range holding it (docs/crash-recovery.md: a reclaim finds its keys free).
CREATE OR REPLACE FUNCTION {{schema}}.take_keys_{{N}}(
  p_group BIGINT, p_token UUID, p_own_low BIGINT, p_own_high BIGINT, p_keys JSONB)
RETURNS TABLE (k TEXT, kind TEXT, pred_id BIGINT)
LANGUAGE plpgsql VOLATILE AS $fn$
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
     WHERE l.expires_at < now() OR l.token = EXCLUDED.token
    RETURNING l.message_key
  )
  SELECT pred.key, 'pred'::text, pred.pred_id FROM pred
  UNION ALL
  SELECT w.key, 'busy'::text, NULL::bigint FROM want w
   WHERE NOT EXISTS (SELECT 1 FROM taken t WHERE t.message_key = w.key);
END
$fn$;
