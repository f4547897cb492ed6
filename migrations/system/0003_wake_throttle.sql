-- Wake on produce (docs/producing.md#wake-on-produce): one row per consumer group that has been
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
