-- The lowest exception row redrive() put back to work at or below the group's committed cursor, or
-- NULL: the only waiting rows at or below committed are redriven ones, so the exception
-- reservation reads waiting rows from here (or from committed when NULL) instead of from the
-- group's first row, past every resolved row not vacuumed yet (docs/protocol/poll-cycle.md#the-exception-phase).
-- redrive() lowers it; the reservation clears it once no unresolved row is left below committed.
ALTER TABLE {{schema}}.consumer_group_cursor_{{N}} ADD COLUMN IF NOT EXISTS redrive_floor BIGINT NULL;
UPDATE {{schema}}.consumer_group_cursor_{{N}} c
   SET redrive_floor = (SELECT min(e.message_id) FROM {{schema}}.exception_queue_{{N}} e
                         WHERE e.consumer_group_id = c.consumer_group_id AND e.message_id <= c.committed
                           AND e.status IN ('ready', 'inflight', 'deferred'));
