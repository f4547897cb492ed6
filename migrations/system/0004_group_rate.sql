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
