-- SQLStreams control plane, version 1.
-- __SCHEMA__ is replaced by the validated, double-quoted schema name; nothing else is substituted.

CREATE SCHEMA IF NOT EXISTS __SCHEMA__;

CREATE TABLE IF NOT EXISTS __SCHEMA__.stream_config (
  id                     BIGSERIAL PRIMARY KEY,
  name                   TEXT NOT NULL UNIQUE,
  partition_size         BIGINT NOT NULL CHECK (partition_size >= 2),
  retention_ms           BIGINT NOT NULL DEFAULT 0 CHECK (retention_ms >= 0),
  delivery_log_mode      TEXT NOT NULL DEFAULT 'failures' CHECK (delivery_log_mode IN ('failures', 'all', 'off')),
  idempotency_key_ttl_ms BIGINT NOT NULL DEFAULT 86400000,
  max_payload_bytes      INTEGER NOT NULL DEFAULT 1048576,
  created_at             TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at             TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS __SCHEMA__.consumer_group_config (
  id         BIGSERIAL PRIMARY KEY,
  stream_id  BIGINT NOT NULL REFERENCES __SCHEMA__.stream_config (id) ON DELETE CASCADE,
  name       TEXT NOT NULL,
  config     JSONB NOT NULL DEFAULT '{}',
  paused     BOOLEAN NOT NULL DEFAULT false,
  paused_at  TIMESTAMPTZ NULL,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  UNIQUE (stream_id, name)
);

CREATE TABLE IF NOT EXISTS __SCHEMA__.migration_log (
  id              BIGSERIAL PRIMARY KEY,
  scope           TEXT NOT NULL CHECK (scope IN ('system', 'stream')),
  stream_id       BIGINT NULL REFERENCES __SCHEMA__.stream_config (id) ON DELETE CASCADE,
  version         INTEGER NOT NULL,
  status          TEXT NOT NULL CHECK (status IN ('success', 'failure')),
  error           TEXT NULL,
  library_version TEXT NOT NULL,
  created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
  CHECK ((scope = 'stream') = (stream_id IS NOT NULL))
);
