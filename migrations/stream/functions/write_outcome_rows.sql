-- Writes a range's outcome rows (docs/protocol/poll-cycle.md#recording-a-range): p_exceptions, a JSON
-- array of exception rows {message_id, status, message_key, concurrency, attempts, delays,
-- run_after_ms, last_error} (a row the group has already is left as it is), and p_deliveries, a JSON
-- array of delivery-log rows {message_id, attempt, status, error}. Either may be NULL or empty.
-- The one definition: record_range_N, record_take_keys_N and the statements that write such rows
-- outside a record (expiry, reclaim, redrive) call it.
CREATE OR REPLACE FUNCTION {{schema}}.write_outcome_rows_{{N}}(p_group BIGINT, p_exceptions JSONB, p_deliveries JSONB)
RETURNS VOID
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
  IF p_exceptions IS NOT NULL AND jsonb_array_length(p_exceptions) > 0 THEN
    INSERT INTO {{schema}}.exception_queue_{{N}}
      (consumer_group_id, message_id, status, message_key, concurrency, attempts, delays, can_run_after, last_error)
    SELECT p_group, r.message_id, r.status, r.message_key, r.concurrency, r.attempts, r.delays,
           now() + r.run_after_ms * interval '1 millisecond', r.last_error
      FROM jsonb_to_recordset(p_exceptions) AS r(message_id BIGINT, status TEXT, message_key TEXT, concurrency TEXT,
                                                 attempts INTEGER, delays INTEGER, run_after_ms BIGINT, last_error TEXT)
    ON CONFLICT DO NOTHING;
  END IF;
  IF p_deliveries IS NOT NULL AND jsonb_array_length(p_deliveries) > 0 THEN
    INSERT INTO {{schema}}.delivery_log_{{N}} (consumer_group_id, message_id, attempt, status, error)
    SELECT p_group, r.message_id, r.attempt, r.status, r.error
      FROM jsonb_to_recordset(p_deliveries) AS r(message_id BIGINT, attempt INTEGER, status TEXT, error TEXT);
  END IF;
END
$fn$;
