-- Message expiry (docs/guide/producing.md#expiry): a message produced with expiresAt or ttl that a
-- group has not started by then ends in the group's exception row with status 'expired', a
-- terminal state like dead: counted by progress(), listed by failures(), redrivable, and passed by
-- the cursor and by the ordered predecessor rule (which wait only on ready, inflight and deferred).
ALTER TABLE {{schema}}.exception_queue_{{N}} DROP CONSTRAINT IF EXISTS exception_queue_{{N}}_status_check;
ALTER TABLE {{schema}}.exception_queue_{{N}} ADD CONSTRAINT exception_queue_{{N}}_status_check
  CHECK (status IN ('ready', 'deferred', 'inflight', 'dead', 'superseded', 'expired'));
-- A redriven expired row runs all the same ("run it anyway", docs/guide/operations.md#redrive): its
-- start no longer checks the message's expiry. A constant default: no table rewrite.
ALTER TABLE {{schema}}.exception_queue_{{N}} ADD COLUMN IF NOT EXISTS expiry_waived BOOLEAN NOT NULL DEFAULT false;
-- maintain()'s progress samples count expired rows too (docs/protocol/data-model.md#progress-history).
ALTER TABLE {{schema}}.progress_history_{{N}} ADD COLUMN IF NOT EXISTS expired INTEGER NOT NULL DEFAULT 0;
