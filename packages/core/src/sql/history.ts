// Progress history (docs/protocol/data-model.md#progress-history): one sample per group per maintain(),
// kept HISTORY_RETENTION and at most HISTORY_MAX_ROWS per group.
import { table } from "./names.js";

/** How long samples are kept. */
export const HISTORY_RETENTION = "7 days";
/** Samples kept per group at most (7 days of 5-minute runs is 2 016). */
export const HISTORY_MAX_ROWS = 5_000;

/**
 * Prunes the history of stream $1 (see pruneProgress) and samples every group of it, in one
 * statement; the row count is the number of samples written.
 */
export function sampleProgress(q: string, n: string): string {
  return `WITH pruned AS (${pruneProgress(q, n)})
  ${insertSamples(q, n)}`;
}

function insertSamples(q: string, n: string): string {
  const ph = table(q, n, "progress_history");
  const messageLog = table(q, n, "message_log");
  const exceptionQueue = table(q, n, "exception_queue");
  const groupCursor = table(q, n, "consumer_group_cursor");
  return `INSERT INTO ${ph} AS p (consumer_group_id, head, committed, lag, ready, deferred, inflight, dead, superseded, oldest_unresolved_ms)
  SELECT g.id, h.head, c.committed, GREATEST(h.head - c.committed, 0),
         e.ready, e.deferred, e.inflight, e.dead, e.superseded,
         (EXTRACT(EPOCH FROM (now() - LEAST(
            (SELECT m.created_at FROM ${messageLog} m WHERE m.id > c.committed ORDER BY m.id LIMIT 1),
            (SELECT min(m.created_at) FROM ${exceptionQueue} x JOIN ${messageLog} m ON m.id = x.message_id
              WHERE x.consumer_group_id = g.id AND ${table(q, n, "unresolved")}(x.status)))) * 1000))::bigint
    FROM ${q}.consumer_group_config g
    JOIN ${groupCursor} c ON c.consumer_group_id = g.id
    CROSS JOIN LATERAL (SELECT COALESCE(max(m.id), 0) AS head FROM ${messageLog} m) h
    CROSS JOIN LATERAL (
      SELECT count(*) FILTER (WHERE x.status = 'ready')::int AS ready,
             count(*) FILTER (WHERE x.status = 'deferred')::int AS deferred,
             count(*) FILTER (WHERE x.status = 'inflight')::int AS inflight,
             count(*) FILTER (WHERE x.status = 'dead')::int AS dead,
             count(*) FILTER (WHERE x.status = 'superseded')::int AS superseded
        FROM ${exceptionQueue} x WHERE x.consumer_group_id = g.id) e
   WHERE g.stream_id = $1
  ON CONFLICT (consumer_group_id, sampled_at) DO NOTHING`;
}

/**
 * Deletes the samples of stream $1 older than the retention, and all but the newest
 * HISTORY_MAX_ROWS − 1 of each group, leaving room for the sample written in the same statement
 * (one index probe per group for its cutoff).
 */
function pruneProgress(q: string, n: string): string {
  const ph = table(q, n, "progress_history");
  return `DELETE FROM ${ph} p
   USING (SELECT g.id, (SELECT o.sampled_at FROM ${ph} o WHERE o.consumer_group_id = g.id
                         ORDER BY o.sampled_at DESC OFFSET ${HISTORY_MAX_ROWS - 1} LIMIT 1) AS cutoff
            FROM ${q}.consumer_group_config g WHERE g.stream_id = $1
          UNION ALL SELECT NULL::bigint, NULL::timestamptz) c
   WHERE (c.id IS NULL AND p.sampled_at < now() - interval '${HISTORY_RETENTION}')
      OR (p.consumer_group_id = c.id AND p.sampled_at <= c.cutoff)`;
}

/** Samples of group $1 since $2 (timestamptz or null), oldest first, the newest $3 of them. */
export function readProgress(q: string, n: string): string {
  const ph = table(q, n, "progress_history");
  return `SELECT * FROM (
    SELECT sampled_at, head::text, committed::text, lag::text, ready, deferred, inflight, dead, superseded,
           oldest_unresolved_ms::float8 AS oldest_unresolved_ms
      FROM ${ph} WHERE consumer_group_id = $1 AND ($2::timestamptz IS NULL OR sampled_at >= $2::timestamptz)
     ORDER BY sampled_at DESC LIMIT $3) s
   ORDER BY sampled_at`;
}
