-- SQLStreams per-stream table family, version 6: progress samples of every group of the stream,
-- written by maintain() and kept 7 days (at most 5 000 per group), so the CLI and dashboards can
-- show lag and throughput over time (docs/data-model.md#progress-history).
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
  PRIMARY KEY (consumer_group_id, sampled_at)
);
