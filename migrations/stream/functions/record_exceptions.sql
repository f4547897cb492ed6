-- Record outcomes (docs/protocol/exception-lifecycle.md#retries), each guarded by its row's lease token
-- p_token (the run's, or the reservation's for a row resolved at start). p_rows is a JSON array of
-- {id, key, key_token, status ('deleted', 'ready', 'dead', 'deferred', 'superseded'), attempts,
-- delays, run_after_ms (NULL keeps can_run_after), last_error (NULL keeps it), dl_status,
-- dl_attempt, dl_error (dl_status NULL: no delivery-log row)}. Releases each run's key lease.
-- One result row per input row: kind 'lost' (the row lease was lost: nothing written for it),
-- 'recorded', or 'key_taken_over' (recorded, but the run's key lease had expired and been taken).
CREATE OR REPLACE FUNCTION {{schema}}.record_exceptions_{{N}}(
  p_group BIGINT, p_token UUID, p_rows JSONB)
RETURNS TABLE (message_id BIGINT, kind TEXT)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  x RECORD;
BEGIN
  FOR x IN SELECT j.* FROM jsonb_to_recordset(p_rows) AS j(
             id BIGINT, key TEXT, key_token UUID, status TEXT, attempts INTEGER, delays INTEGER,
             run_after_ms BIGINT, last_error TEXT, dl_status TEXT, dl_attempt INTEGER, dl_error TEXT)
           ORDER BY j.key NULLS FIRST, j.id
  LOOP
    message_id := x.id;
    kind := 'recorded';
    IF x.status = 'deleted' THEN
      DELETE FROM {{schema}}.exception_queue_{{N}} e
       WHERE e.consumer_group_id = p_group AND e.message_id = x.id AND e.lease_token = p_token;
    ELSE
      UPDATE {{schema}}.exception_queue_{{N}} e
         SET status = x.status, attempts = x.attempts, delays = x.delays,
             can_run_after = CASE WHEN x.run_after_ms IS NULL THEN e.can_run_after
                                  ELSE now() + x.run_after_ms * interval '1 millisecond' END,
             last_error = COALESCE(x.last_error, e.last_error),
             lease_token = NULL, lease_expires_at = NULL, updated_at = now()
       WHERE e.consumer_group_id = p_group AND e.message_id = x.id AND e.lease_token = p_token;
    END IF;
    IF NOT FOUND THEN
      kind := 'lost';
      RETURN NEXT;
      CONTINUE;
    END IF;
    IF x.key_token IS NOT NULL THEN
      DELETE FROM {{schema}}.message_key_lease_{{N}} l
       WHERE l.consumer_group_id = p_group AND l.message_key = x.key AND l.token = x.key_token;
      IF NOT FOUND THEN kind := 'key_taken_over'; END IF;
    END IF;
    IF x.dl_status IS NOT NULL THEN
      INSERT INTO {{schema}}.delivery_log_{{N}} (consumer_group_id, message_id, attempt, status, error)
      VALUES (p_group, x.id, x.dl_attempt, x.dl_status, x.dl_error);
    END IF;
    RETURN NEXT;
  END LOOP;
END
$fn$;
