-- SQLStreams per-stream table family, version 3: the delivery log records an operator's discard
-- of a dead message ('discarded'), the audit row that outlives the deleted exception row
-- (docs/operations.md#discarding-dead-messages).
ALTER TABLE {{schema}}.delivery_log_{{N}} DROP CONSTRAINT IF EXISTS delivery_log_{{N}}_status_check;
ALTER TABLE {{schema}}.delivery_log_{{N}} ADD CONSTRAINT delivery_log_{{N}}_status_check
  CHECK (status IN ('failure', 'delayed', 'deferred', 'superseded', 'expired', 'killed', 'success', 'redriven', 'discarded'));
