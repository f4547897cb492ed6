-- The record of a keyed chain's previous range and the key leases of the range after it, in one
-- statement and one transaction (docs/protocol/poll-cycle.md#keyed-ranges-claimed-ahead). A range claimed
-- ahead can only take its keys once the range before it has recorded: that record releases the
-- earlier range's key leases, deletes its range lease and writes its exception rows, and the
-- predecessor rule (docs/protocol/ordering.md#the-predecessor-rule) must see all of that. In this order:
--   1. the key leases of the recorded range under p_rec_key_token: with p_rec_keys the JSON string
--      "all", every lease under the token (found by the token alone, no key compared); with an
--      array, the keys named (a run with an abandoned run leaves that run's lease, still renewed,
--      out); NULL releases nothing (the next range takes the leases over);
--   2. the record, as record_range_N does for a range run whole, except the cursor advance: the
--      claim ahead of the range after this one may hold the group's cursor row (claim_N locks it
--      FOR UPDATE) on another connection, and the advance would wait for it. The committed cursor
--      moves with the chain's next record that advances (every chain ends with one) or the poll's
--      advance; nothing in between needs it newer (the predecessor rule reads `claimed`);
--   3. the record row: recorded (false: the range lease was lost; nothing was written but the key
--      release), and what the load would say (paused, reclaimable, expirable, reservable); the
--      caller ends the chain on any of them, as claim_N does after a record;
--   4. take_keys_N for the range after (its own range lease excluded from the rule as always),
--      one row per key not taken.
-- p_start names the range after when it was claimed ahead: it starts now, so its lease is no
-- longer `released` (docs/protocol/poll-cycle.md#claiming-ahead), whatever became of the record.
CREATE OR REPLACE FUNCTION {{schema}}.record_take_keys_{{N}}(
  p_group BIGINT, p_rec_token UUID, p_rec_eq JSONB, p_rec_dl JSONB, p_rec_key_token UUID, p_rec_keys JSONB,
  p_token UUID, p_own_low BIGINT, p_own_high BIGINT, p_keys JSONB, p_start UUID DEFAULT NULL)
RETURNS TABLE (recorded BOOLEAN, paused BOOLEAN, reclaimable BOOLEAN, expirable BOOLEAN,
               reservable BOOLEAN, k TEXT, kind TEXT, pred_id BIGINT)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
  IF p_rec_keys = '"all"'::jsonb THEN
    -- Every lease the run took carries its key token, and none is to outlive the run: the token
    -- alone names the rows.
    DELETE FROM {{schema}}.message_key_lease_{{N}} l
     WHERE l.consumer_group_id = p_group AND l.token = p_rec_key_token;
  ELSIF jsonb_typeof(p_rec_keys) = 'array' AND jsonb_array_length(p_rec_keys) > 0 THEN
    -- The keys named (an abandoned run's lease, still renewed, is left out).
    DELETE FROM {{schema}}.message_key_lease_{{N}} l
     WHERE l.consumer_group_id = p_group
       AND l.message_key = ANY (ARRAY(SELECT jsonb_array_elements_text(p_rec_keys)))
       AND l.token = p_rec_key_token;
  END IF;
  IF p_start IS NOT NULL THEN
    UPDATE {{schema}}.claim_lease_{{N}} l SET released = false
     WHERE l.consumer_group_id = p_group AND l.token = p_start AND l.released;
  END IF;
  DELETE FROM {{schema}}.claim_lease_{{N}} l WHERE l.consumer_group_id = p_group AND l.token = p_rec_token;
  recorded := FOUND;
  IF recorded THEN
    PERFORM {{schema}}.write_outcome_rows_{{N}}(p_group, p_rec_eq, p_rec_dl);
    SELECT f.paused, f.reclaimable, f.expirable, f.reservable
      INTO paused, reclaimable, expirable, reservable
      FROM {{schema}}.group_flags_{{N}}(p_group) f;
  END IF;
  RETURN NEXT;
  recorded := NULL; paused := NULL; reclaimable := NULL; expirable := NULL; reservable := NULL;
  IF p_keys IS NOT NULL AND jsonb_array_length(p_keys) > 0 THEN
    RETURN QUERY SELECT NULL::boolean, NULL::boolean, NULL::boolean, NULL::boolean, NULL::boolean, t.k, t.kind, t.pred_id
                   FROM {{schema}}.take_keys_{{N}}(p_group, p_token, p_own_low, p_own_high, p_keys) t;
  END IF;
END
$fn$;
