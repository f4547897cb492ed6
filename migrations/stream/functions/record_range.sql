-- Record a range's outcomes and advance the cursor (docs/protocol/poll-cycle.md#recording-a-range, docs/protocol/poll-cycle.md#cursor-advance) in one transaction.
-- p_keep_from NULL: the range is done, its lease is deleted. Otherwise the prefix up to
-- p_keep_from is recorded and the rest released at once under p_new_token.
-- p_keys lists the key leases ({k, t}) the range's chains took, released here in one go.
-- p_start names the poll's range claimed ahead that starts after this record
-- (docs/protocol/poll-cycle.md#claiming-ahead): its lease is no longer `released`, whatever
-- became of this range's.
-- Returns the committed cursor afterwards, or NULL when the lease was lost (nothing written).
CREATE OR REPLACE FUNCTION {{schema}}.record_range_{{N}}(
  p_group BIGINT, p_token UUID, p_keep_from BIGINT, p_new_token UUID, p_eq JSONB, p_dl JSONB, p_keys JSONB,
  p_start UUID DEFAULT NULL)
RETURNS BIGINT
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
  IF p_start IS NOT NULL THEN
    UPDATE {{schema}}.claim_lease_{{N}} SET released = false
     WHERE consumer_group_id = p_group AND token = p_start AND released;
  END IF;
  -- Key leases the range's chains held are released whatever happens to the range lease.
  IF p_keys IS NOT NULL AND jsonb_array_length(p_keys) > 0 THEN
    DELETE FROM {{schema}}.message_key_lease_{{N}} k
     USING jsonb_to_recordset(p_keys) AS r(k TEXT, t UUID)
     WHERE k.consumer_group_id = p_group AND k.message_key = r.k AND k.token = r.t;
  END IF;
  IF p_keep_from IS NULL THEN
    DELETE FROM {{schema}}.claim_lease_{{N}} WHERE consumer_group_id = p_group AND token = p_token;
  ELSE
    UPDATE {{schema}}.claim_lease_{{N}}
       SET low = p_keep_from, expires_at = now(), released = true, token = p_new_token
     WHERE consumer_group_id = p_group AND token = p_token;
  END IF;
  IF NOT FOUND THEN RETURN NULL; END IF;
  PERFORM {{schema}}.write_outcome_rows_{{N}}(p_group, p_eq, p_dl);
  RETURN {{schema}}.advance_{{N}}(p_group);
END
$fn$;
