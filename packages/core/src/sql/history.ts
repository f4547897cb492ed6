// Progress history (docs/protocol/data-model.md#progress-history): one sample per group per maintain(),
// kept HISTORY_RETENTION and at most HISTORY_MAX_ROWS per group.
import type { Tables } from "./names.js";
import { defineStatement } from "./statement.js";

/** How long samples are kept. */
export const HISTORY_RETENTION = "7 days";
/** Samples kept per group at most (7 days of 5-minute runs is 2 016). */
export const HISTORY_MAX_ROWS = 5_000;

/**
 * Prunes the history of stream `streamId` (see pruneProgress) and samples every group of it, in
 * one statement; the row count is the number of samples written.
 */
export const sampleProgress = defineStatement<{ streamId: string }>(["streamId"], (t, p) =>
  `WITH pruned AS (${pruneProgress(t, p.streamId)})
  ${insertSamples(t, p.streamId)}`);

function insertSamples(t: Tables, streamId: string): string {
  return `INSERT INTO ${t.progressHistory} AS p (consumer_group_id, head, committed, lag, ready, deferred, inflight, dead, superseded, expired, oldest_unresolved_ms)
  SELECT g.id, h.head, c.committed, GREATEST(h.head - c.committed, 0),
         e.ready, e.deferred, e.inflight, e.dead, e.superseded, e.expired,
         (EXTRACT(EPOCH FROM (now() - LEAST(
            (SELECT m.created_at FROM ${t.messageLog} m WHERE m.id > c.committed ORDER BY m.id LIMIT 1),
            (SELECT min(m.created_at) FROM ${t.exceptionQueue} x JOIN ${t.messageLog} m ON m.id = x.message_id
              WHERE x.consumer_group_id = g.id AND ${t.fn("unresolved")}(x.status)))) * 1000))::bigint
    FROM ${t.schema}.consumer_group_config g
    JOIN ${t.groupCursor} c ON c.consumer_group_id = g.id
    CROSS JOIN LATERAL (SELECT COALESCE(max(m.id), 0) AS head FROM ${t.messageLog} m) h
    CROSS JOIN LATERAL (
      SELECT count(*) FILTER (WHERE x.status = 'ready')::int AS ready,
             count(*) FILTER (WHERE x.status = 'deferred')::int AS deferred,
             count(*) FILTER (WHERE x.status = 'inflight')::int AS inflight,
             count(*) FILTER (WHERE x.status = 'dead')::int AS dead,
             count(*) FILTER (WHERE x.status = 'superseded')::int AS superseded,
             count(*) FILTER (WHERE x.status = 'expired')::int AS expired
        FROM ${t.exceptionQueue} x WHERE x.consumer_group_id = g.id) e
   WHERE g.stream_id = ${streamId}
  ON CONFLICT (consumer_group_id, sampled_at) DO NOTHING`;
}

/**
 * Deletes the samples of the stream older than the retention, and all but the newest
 * HISTORY_MAX_ROWS − 1 of each group, leaving room for the sample written in the same statement
 * (one index probe per group for its cutoff).
 */
function pruneProgress(t: Tables, streamId: string): string {
  return `DELETE FROM ${t.progressHistory} p
   USING (SELECT g.id, (SELECT o.sampled_at FROM ${t.progressHistory} o WHERE o.consumer_group_id = g.id
                         ORDER BY o.sampled_at DESC OFFSET ${HISTORY_MAX_ROWS - 1} LIMIT 1) AS cutoff
            FROM ${t.schema}.consumer_group_config g WHERE g.stream_id = ${streamId}
          UNION ALL SELECT NULL::bigint, NULL::timestamptz) c
   WHERE (c.id IS NULL AND p.sampled_at < now() - interval '${HISTORY_RETENTION}')
      OR (p.consumer_group_id = c.id AND p.sampled_at <= c.cutoff)`;
}

/** A progress sample as history() reads it. */
export interface ProgressSampleRow {
  sampled_at: Date;
  head: string;
  committed: string;
  lag: string;
  ready: number;
  deferred: number;
  inflight: number;
  dead: number;
  superseded: number;
  expired: number;
  oldest_unresolved_ms: number | null;
}

/** Samples of group `groupId` since `since` (null: all kept), oldest first, the newest `limit` of them. */
export const readProgress = defineStatement<{ groupId: string; since: Date | null; limit: number }, ProgressSampleRow>(
  ["groupId", "since", "limit"], (t, p) =>
    `SELECT * FROM (
    SELECT sampled_at, head::text, committed::text, lag::text, ready, deferred, inflight, dead, superseded, expired,
           oldest_unresolved_ms::float8 AS oldest_unresolved_ms
      FROM ${t.progressHistory} WHERE consumer_group_id = ${p.groupId} AND (${p.since}::timestamptz IS NULL OR sampled_at >= ${p.since}::timestamptz)
     ORDER BY sampled_at DESC LIMIT ${p.limit}) s
   ORDER BY sampled_at`);
