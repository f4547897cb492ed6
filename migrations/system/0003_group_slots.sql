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
