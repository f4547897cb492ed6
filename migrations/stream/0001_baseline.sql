-- SQLStreams per-stream table family: the baseline every new stream is created from (tables,
-- sequences and indexes; the protocol functions are in functions/, one file per function).
-- Placeholders: {{schema}} is the validated, double-quoted schema name; {{N}} is the numeric
-- stream id (stream_config.id); {{partition_size}} is the stream's numeric partition size.
-- No other text is substituted: stream names, group names, keys and payloads never reach SQL text.

CREATE SEQUENCE IF NOT EXISTS {{schema}}.message_log_{{N}}_id_seq AS BIGINT START 1 CACHE 1 NO CYCLE;

CREATE TABLE IF NOT EXISTS {{schema}}.message_log_{{N}} (
  id              BIGINT NOT NULL DEFAULT nextval('{{schema}}.message_log_{{N}}_id_seq'),
  message_key     TEXT NULL,
  compaction_rank BIGINT NULL,
  routing_key     TEXT NULL,
  schema_version  INTEGER NOT NULL DEFAULT 1,
  -- The payload's JSON text exactly as the producer sent it (json, not jsonb: no conversion on
  -- the way in or out; docs/protocol/data-model.md#payloads). Query it with ->> or cast it ::jsonb.
  payload         JSON NOT NULL,
  options         JSONB NULL,
  created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (id)
) PARTITION BY RANGE (id);

ALTER SEQUENCE {{schema}}.message_log_{{N}}_id_seq OWNED BY {{schema}}.message_log_{{N}}.id;

CREATE TABLE IF NOT EXISTS {{schema}}.message_log_{{N}}_0
  PARTITION OF {{schema}}.message_log_{{N}} FOR VALUES FROM (0) TO ({{partition_size}});

CREATE INDEX IF NOT EXISTS message_log_{{N}}_message_key
  ON {{schema}}.message_log_{{N}} (message_key, id) WHERE message_key IS NOT NULL;

CREATE TABLE IF NOT EXISTS {{schema}}.exception_queue_{{N}} (
  consumer_group_id BIGINT NOT NULL,
  message_id        BIGINT NOT NULL,
  status            TEXT NOT NULL CHECK (status IN ('ready', 'deferred', 'inflight', 'dead', 'superseded', 'expired')),
  message_key       TEXT NULL,
  concurrency       TEXT NOT NULL CHECK (concurrency IN ('parallel', 'exclusive', 'ordered')),
  attempts          INTEGER NOT NULL DEFAULT 0,
  delays            INTEGER NOT NULL DEFAULT 0,
  can_run_after     TIMESTAMPTZ NOT NULL DEFAULT now(),
  last_error        TEXT NULL,
  lease_token       UUID NULL,
  lease_expires_at  TIMESTAMPTZ NULL,
  created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
  -- A redriven expired row runs all the same (docs/guide/producing.md#expiry).
  expiry_waived     BOOLEAN NOT NULL DEFAULT false,
  PRIMARY KEY (consumer_group_id, message_id),
  CHECK (attempts >= delays),
  CHECK (delays >= 0),
  CHECK ((lease_token IS NULL) = (lease_expires_at IS NULL)),
  CHECK (status <> 'inflight' OR lease_token IS NOT NULL),
  CHECK (status NOT IN ('dead', 'superseded') OR lease_token IS NULL)
);
CREATE INDEX IF NOT EXISTS exception_queue_{{N}}_key
  ON {{schema}}.exception_queue_{{N}} (consumer_group_id, message_key, message_id) WHERE message_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS exception_queue_{{N}}_due
  ON {{schema}}.exception_queue_{{N}} (consumer_group_id, status, can_run_after);
-- failures() pages: newest update first, keyset by (updated_at, message_id).
CREATE INDEX IF NOT EXISTS exception_queue_{{N}}_page
  ON {{schema}}.exception_queue_{{N}} (consumer_group_id, status, updated_at DESC, message_id DESC);

CREATE TABLE IF NOT EXISTS {{schema}}.delivery_log_{{N}} (
  id                BIGSERIAL PRIMARY KEY,
  consumer_group_id BIGINT NOT NULL,
  message_id        BIGINT NOT NULL,
  attempt           INTEGER NOT NULL,
  status            TEXT NOT NULL CHECK (status IN ('failure', 'delayed', 'deferred', 'superseded', 'expired', 'killed', 'success', 'redriven', 'discarded')),
  error             TEXT NOT NULL DEFAULT '',
  attempted_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS delivery_log_{{N}}_group_message
  ON {{schema}}.delivery_log_{{N}} (consumer_group_id, message_id, attempt);
CREATE INDEX IF NOT EXISTS delivery_log_{{N}}_message
  ON {{schema}}.delivery_log_{{N}} (message_id);

CREATE TABLE IF NOT EXISTS {{schema}}.consumer_group_cursor_{{N}} (
  consumer_group_id BIGINT PRIMARY KEY REFERENCES {{schema}}.consumer_group_config (id) ON DELETE CASCADE,
  claimed           BIGINT NOT NULL DEFAULT 0,
  committed         BIGINT NOT NULL DEFAULT 0,
  settled_head      BIGINT NOT NULL DEFAULT 0,
  pending_head      BIGINT NOT NULL DEFAULT 0,
  pending_xid       XID8 NULL,
  updated_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
  -- The lowest row redrive() put back at or below committed; NULL once none is left
  -- (the exception reservation reads waiting rows from here or from committed).
  redrive_floor     BIGINT NULL
);

CREATE TABLE IF NOT EXISTS {{schema}}.claim_lease_{{N}} (
  consumer_group_id BIGINT NOT NULL,
  token             UUID NOT NULL,
  low               BIGINT NOT NULL,
  high              BIGINT NOT NULL,
  expires_at        TIMESTAMPTZ NOT NULL,
  reclaims          INTEGER NOT NULL DEFAULT 0,
  released          BOOLEAN NOT NULL DEFAULT false,
  created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer_group_id, token),
  CHECK (low < high)
);
CREATE INDEX IF NOT EXISTS claim_lease_{{N}}_expiry
  ON {{schema}}.claim_lease_{{N}} (consumer_group_id, expires_at);

CREATE TABLE IF NOT EXISTS {{schema}}.message_key_lease_{{N}} (
  consumer_group_id BIGINT NOT NULL,
  message_key       TEXT NOT NULL,
  token             UUID NOT NULL,
  expires_at        TIMESTAMPTZ NOT NULL,
  PRIMARY KEY (consumer_group_id, message_key)
);

CREATE TABLE IF NOT EXISTS {{schema}}.compaction_head_{{N}} (
  compaction_key  TEXT PRIMARY KEY,
  message_id      BIGINT NULL,
  compaction_rank BIGINT NULL,
  schema_version  INTEGER NULL,
  created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
  CHECK ((message_id IS NULL) = (compaction_rank IS NULL))
);
CREATE INDEX IF NOT EXISTS compaction_head_{{N}}_empty
  ON {{schema}}.compaction_head_{{N}} (updated_at) WHERE message_id IS NULL;

CREATE TABLE IF NOT EXISTS {{schema}}.idempotency_key_{{N}} (
  idempotency_key UUID PRIMARY KEY,
  message_id      BIGINT NOT NULL,
  created_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS idempotency_key_{{N}}_created
  ON {{schema}}.idempotency_key_{{N}} (created_at);

-- Progress samples of every group of the stream, written by maintain() and kept 7 days (at most 5 000 per
-- group), so the CLI and dashboards can show lag and throughput over time (docs/protocol/data-model.md#progress-history).
CREATE TABLE IF NOT EXISTS {{schema}}.progress_history_{{N}} (
  consumer_group_id    BIGINT NOT NULL,
  sampled_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
  head                 BIGINT NOT NULL,
  committed            BIGINT NOT NULL,
  lag                  BIGINT NOT NULL,
  ready                INTEGER NOT NULL DEFAULT 0,
  deferred             INTEGER NOT NULL DEFAULT 0,
  inflight             INTEGER NOT NULL DEFAULT 0,
  dead                 INTEGER NOT NULL DEFAULT 0,
  superseded           INTEGER NOT NULL DEFAULT 0,
  oldest_unresolved_ms BIGINT NULL,
  expired              INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (consumer_group_id, sampled_at)
);

-- Scheduled delivery (docs/guide/producing.md#scheduled-delivery): a message produced with
-- deliverAt or delay waits here, not in the log, until its due time (database clock). The mover
-- (move_scheduled_N) appends due rows to message_log_N in due order and deletes them in the same
-- transaction, so a message is in exactly one of the two tables at any commit. Its id here is the
-- scheduled id (its own sequence) that produce returns and cancelScheduled takes; the log id it
-- gets when it is moved is a new one, drawn at its due time.
-- The mover's and the poll's read: the earliest due rows first.
CREATE SEQUENCE IF NOT EXISTS {{schema}}.scheduled_message_{{N}}_id_seq AS BIGINT START 1 CACHE 1 NO CYCLE;

CREATE TABLE IF NOT EXISTS {{schema}}.scheduled_message_{{N}} (
  id              BIGINT NOT NULL DEFAULT nextval('{{schema}}.scheduled_message_{{N}}_id_seq') PRIMARY KEY,
  message_key     TEXT NULL,
  compaction_rank BIGINT NULL,
  payload         JSON NOT NULL,
  options         JSONB NULL,
  idempotency_key UUID NULL,
  due_at          TIMESTAMPTZ NOT NULL,
  created_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);

ALTER SEQUENCE {{schema}}.scheduled_message_{{N}}_id_seq OWNED BY {{schema}}.scheduled_message_{{N}}.id;

CREATE INDEX IF NOT EXISTS scheduled_message_{{N}}_due
  ON {{schema}}.scheduled_message_{{N}} (due_at, id);
CREATE INDEX IF NOT EXISTS scheduled_message_{{N}}_key
  ON {{schema}}.scheduled_message_{{N}} (message_key, due_at) WHERE message_key IS NOT NULL;
