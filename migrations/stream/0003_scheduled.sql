-- Scheduled delivery (docs/guide/producing.md#scheduled-delivery): a message produced with
-- deliverAt or delay waits here, not in the log, until its due time (database clock). The mover
-- (move_scheduled_N) appends due rows to message_log_N in due order and deletes them in the same
-- transaction, so a message is in exactly one of the two tables at any commit. Its id here is the
-- scheduled id (its own sequence) that produce returns and cancelScheduled takes; the log id it
-- gets when it is moved is a new one, drawn at its due time.
CREATE SEQUENCE IF NOT EXISTS {{schema}}.scheduled_message_{{N}}_id_seq AS BIGINT START 1 CACHE 1 NO CYCLE;

CREATE TABLE IF NOT EXISTS {{schema}}.scheduled_message_{{N}} (
  id              BIGINT NOT NULL DEFAULT nextval('{{schema}}.scheduled_message_{{N}}_id_seq') PRIMARY KEY,
  message_key     TEXT NULL,
  compaction_rank BIGINT NULL,
  payload         JSONB NOT NULL,
  options         JSONB NULL,
  idempotency_key UUID NULL,
  due_at          TIMESTAMPTZ NOT NULL,
  created_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);

ALTER SEQUENCE {{schema}}.scheduled_message_{{N}}_id_seq OWNED BY {{schema}}.scheduled_message_{{N}}.id;

-- The mover's and the poll's read: the earliest due rows first.
CREATE INDEX IF NOT EXISTS scheduled_message_{{N}}_due
  ON {{schema}}.scheduled_message_{{N}} (due_at, id);
CREATE INDEX IF NOT EXISTS scheduled_message_{{N}}_key
  ON {{schema}}.scheduled_message_{{N}} (message_key, due_at) WHERE message_key IS NOT NULL;
