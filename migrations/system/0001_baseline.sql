-- SQLStreams control plane: the baseline (tables; the functions are in functions/, one file per
-- function). __SCHEMA__ is replaced by the validated, double-quoted schema name; nothing else is
-- substituted.

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

-- One row per numbered migration applied: the control plane's (scope 'system') and each stream
-- family's (scope 'stream'). A family's rows go with its stream_config row.
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

-- The functions in place (docs/protocol/data-model.md#upgrades): one row per function file applied, to
-- the control plane (stream_id NULL) or to one stream family, with the SHA-256 of the file's text.
-- A migration re-creates exactly the functions whose file hash differs from the row's.
CREATE TABLE IF NOT EXISTS __SCHEMA__.function_version (
  stream_id       BIGINT NULL REFERENCES __SCHEMA__.stream_config (id) ON DELETE CASCADE,
  name            TEXT NOT NULL,
  hash            TEXT NOT NULL,
  library_version TEXT NOT NULL,
  applied_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX IF NOT EXISTS function_version_name
  ON __SCHEMA__.function_version (COALESCE(stream_id, 0), name);

-- Wake on produce (docs/guide/producing.md#wake-on-produce): one row per consumer group that has been
-- woken. A producer claims a wake for a group only when no wake is in flight (woken_at older than
-- the window, or released by the poller); otherwise it marks the group pending, and the poller,
-- releasing its wake when idle, drains again. Row locks serialize producers and the poller, so a
-- burst wakes each group at most once per window across every producer, and no wake is lost.
CREATE TABLE IF NOT EXISTS __SCHEMA__.wake_throttle (
  group_id BIGINT PRIMARY KEY REFERENCES __SCHEMA__.consumer_group_config (id) ON DELETE CASCADE,
  woken_at TIMESTAMPTZ NOT NULL,
  pending  BOOLEAN NOT NULL DEFAULT false,
  wakes    BIGINT NOT NULL DEFAULT 1
);

-- Which roles may produce through the SQL functions produce()/produce_batch(), per stream
-- (docs/guide/security.md). Written only by grant_produce()/revoke_produce(), which only the schema's
-- owner may call; read inside produce(), which runs as the owner. A role is kept by OID so that a
-- rename keeps its grants; a dropped role's rows match no session and are ignored.
CREATE TABLE IF NOT EXISTS __SCHEMA__.produce_grant (
  stream_id  BIGINT NOT NULL REFERENCES __SCHEMA__.stream_config (id) ON DELETE CASCADE,
  role_oid   OID NOT NULL,
  granted_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (stream_id, role_oid)
);

-- Concurrency slots of groups with maxConcurrency (docs/guide/configuration.md#maxconcurrency): slot
-- 1..maxConcurrency of a group, each a lease a drain holds while it runs (token, expires_at from
-- the database clock), renews while it runs and releases at its end; an expired slot is free, so
-- a crashed drain's slot frees itself. group_flow counts the polls that found the group at its cap.
CREATE TABLE IF NOT EXISTS __SCHEMA__.group_slot (
  group_id   BIGINT NOT NULL REFERENCES __SCHEMA__.consumer_group_config (id) ON DELETE CASCADE,
  slot       INTEGER NOT NULL CHECK (slot >= 1),
  token      UUID NULL,
  taken_at   TIMESTAMPTZ NULL,
  expires_at TIMESTAMPTZ NOT NULL DEFAULT '-infinity',
  PRIMARY KEY (group_id, slot)
);

CREATE TABLE IF NOT EXISTS __SCHEMA__.group_flow (
  group_id  BIGINT PRIMARY KEY REFERENCES __SCHEMA__.consumer_group_config (id) ON DELETE CASCADE,
  capped    BIGINT NOT NULL DEFAULT 0,
  capped_at TIMESTAMPTZ NULL
);

-- The token bucket of a group with rateLimit (docs/guide/configuration.md#ratelimit), kept as GCRA: tat
-- is the theoretical arrival time, the moment the bucket is full again (the database clock). A take
-- of n tokens at time t, with T = 1000 / perSecond ms per token, grants k = min(n, floor(burst −
-- (max(tat, t) − t) / T)) and moves tat to max(tat, t) + k·T: one row update, in the transaction
-- that claims the work (docs/protocol/poll-cycle.md#rate-limit). limited counts the takes that got
-- fewer tokens than they asked for; limited_at is the last of them.
CREATE TABLE IF NOT EXISTS __SCHEMA__.group_rate (
  group_id   BIGINT PRIMARY KEY REFERENCES __SCHEMA__.consumer_group_config (id) ON DELETE CASCADE,
  tat        TIMESTAMPTZ NOT NULL DEFAULT '-infinity',
  limited    BIGINT NOT NULL DEFAULT 0,
  limited_at TIMESTAMPTZ NULL
);
