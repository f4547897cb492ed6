-- Start one later row of a group (start_exceptions_N): p_lead_ok is true when the group's lead and
-- every row of the group before this one started in this call; p_cut is the group's lowest
-- unresolved predecessor outside it (group_pred_N), or NULL. The row runs under the lead's key
-- lease, so it takes none. kind as start_exceptions_N: 'lost' (not reserved under p_token any more,
-- or its message is gone), 'started' (inflight under p_token until now() + p_run_ms; already
-- inflight under it: a repeat of the call), 'deferred' (reason 'pred', ref the row it waits for:
-- p_lead when it or a row before this one did not start or the message is compacted (it starts
-- alone), else p_cut).
CREATE OR REPLACE FUNCTION {{schema}}.start_follower_{{N}}(
  p_group BIGINT, p_token UUID, p_id BIGINT, p_lead BIGINT, p_run_ms BIGINT, p_lead_ok BOOLEAN, p_cut BIGINT)
RETURNS TABLE (kind TEXT, reason TEXT, ref BIGINT)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  v_status TEXT;
  v_rank BIGINT;
BEGIN
  SELECT e.status INTO v_status FROM {{schema}}.exception_queue_{{N}} e
   WHERE e.consumer_group_id = p_group AND e.message_id = p_id AND e.lease_token = p_token
     AND e.status IN ('ready', 'deferred', 'inflight')
   FOR UPDATE;
  IF NOT FOUND THEN
    RETURN QUERY SELECT 'lost'::text, NULL::text, NULL::bigint;
    RETURN;
  END IF;
  IF v_status = 'inflight' THEN
    RETURN QUERY SELECT 'started'::text, NULL::text, NULL::bigint;
    RETURN;
  END IF;
  IF NOT p_lead_ok THEN
    RETURN QUERY SELECT 'deferred'::text, 'pred'::text, p_lead;
    RETURN;
  END IF;
  IF p_cut IS NOT NULL AND p_cut < p_id THEN
    RETURN QUERY SELECT 'deferred'::text, 'pred'::text, p_cut;
    RETURN;
  END IF;
  SELECT m.compaction_rank INTO v_rank FROM {{schema}}.message_log_{{N}} m WHERE m.id = p_id;
  IF NOT FOUND THEN
    RETURN QUERY SELECT 'lost'::text, NULL::text, NULL::bigint;
    RETURN;
  END IF;
  IF v_rank IS NOT NULL THEN
    RETURN QUERY SELECT 'deferred'::text, 'pred'::text, p_lead;
    RETURN;
  END IF;
  UPDATE {{schema}}.exception_queue_{{N}} e
     SET status = 'inflight', lease_expires_at = now() + p_run_ms * interval '1 millisecond', updated_at = now()
   WHERE e.consumer_group_id = p_group AND e.message_id = p_id;
  RETURN QUERY SELECT 'started'::text, NULL::text, NULL::bigint;
END
$fn$;
