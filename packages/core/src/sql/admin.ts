// Statements of registration, inspection and operations (docs/guide/configuration.md#the-stored-document, docs/guide/operations.md).
import type { Tables } from "./cycle.js";
import { blockedRows } from "./operator.js";

/** $1 stream id, $2 group name, $3 config. Inserts or replaces the config; never touches paused. */
export function upsertGroup(q: string): string {
  return `INSERT INTO ${q}.consumer_group_config (stream_id, name, config) VALUES ($1, $2, $3::jsonb)
          ON CONFLICT (stream_id, name) DO UPDATE SET config = EXCLUDED.config, updated_at = now()
          RETURNING id::text`;
}

/** Creates the cursor if missing; with $2 true, at the head visible to this transaction. */
export function createCursor(t: Tables): string {
  return `INSERT INTO ${t.groupCursor} (consumer_group_id, claimed, committed, settled_head)
          SELECT $1, h, h, h FROM (SELECT CASE WHEN $2::boolean THEN COALESCE(max(id), 0) ELSE 0 END AS h FROM ${t.messageLog}) x
          ON CONFLICT (consumer_group_id) DO NOTHING`;
}

export function groupId(q: string): string {
  return `SELECT id::text, paused, config FROM ${q}.consumer_group_config WHERE stream_id = $1 AND name = $2`;
}

export function progress(q: string, t: Tables): string {
  return `SELECT g.paused, c.claimed::text, c.committed::text, h.head::text AS head,
       (SELECT count(*)::int FROM ${t.claimLease} l WHERE l.consumer_group_id = g.id) AS open_leases,
       (SELECT count(*)::int FROM ${t.claimLease} l WHERE l.consumer_group_id = g.id AND l.expires_at < now()) AS expired_leases,
       (SELECT COALESCE(jsonb_object_agg(status, n), '{}'::jsonb)
          FROM (SELECT e.status, count(*)::int AS n FROM ${t.exceptionQueue} e WHERE e.consumer_group_id = g.id GROUP BY e.status) s) AS counts,
       (EXTRACT(EPOCH FROM (now() - LEAST(
          (SELECT m.created_at FROM ${t.messageLog} m WHERE m.id > c.committed ORDER BY m.id LIMIT 1),
          (SELECT min(m.created_at) FROM ${t.exceptionQueue} e JOIN ${t.messageLog} m ON m.id = e.message_id
            WHERE e.consumer_group_id = g.id AND ${t.fn("unresolved")}(e.status))))) * 1000)::float8 AS oldest_ms,
       (g.config->>'maxConcurrency')::int AS max_concurrency,
       (SELECT count(*)::int FROM ${q}.group_slot s WHERE s.group_id = g.id AND s.expires_at > now()) AS drains_running,
       COALESCE((SELECT f.capped FROM ${q}.group_flow f WHERE f.group_id = g.id), 0)::float8 AS capped,
       (SELECT count(*)::int FROM (${blockedRows(t, "g.id")}) bk) AS blocked_keys
  FROM ${q}.consumer_group_config g
  JOIN ${t.groupCursor} c ON c.consumer_group_id = g.id
  CROSS JOIN LATERAL (SELECT COALESCE(max(m.id), 0) AS head FROM ${t.messageLog} m) h
 WHERE g.stream_id = $1 AND g.name = $2`;
}

export function setPaused(q: string): string {
  return `UPDATE ${q}.consumer_group_config
             SET paused = $3, paused_at = CASE WHEN $3 THEN COALESCE(paused_at, now()) ELSE NULL END, updated_at = now()
           WHERE stream_id = $1 AND name = $2 RETURNING id`;
}

export function lockCursor(t: Tables): string {
  return `SELECT claimed::text, committed::text, settled_head::text FROM ${t.groupCursor} WHERE consumer_group_id = $1 FOR UPDATE`;
}

export function visibleHead(t: Tables): string {
  return `SELECT COALESCE(max(id), 0)::text AS head FROM ${t.messageLog}`;
}

export function firstIdAtOrAfter(t: Tables): string {
  return `SELECT min(id)::text AS id FROM ${t.messageLog} WHERE id >= $1`;
}

export function firstIdAtOrAfterTime(t: Tables): string {
  return `SELECT min(id)::text AS id FROM ${t.messageLog} WHERE created_at >= $1`;
}

export function openLeases(t: Tables): string {
  return `SELECT EXISTS (SELECT 1 FROM ${t.claimLease} WHERE consumer_group_id = $1) AS ranges,
                 EXISTS (SELECT 1 FROM ${t.exceptionQueue} WHERE consumer_group_id = $1 AND lease_token IS NOT NULL
                            AND lease_expires_at > now()) AS rows`;
}

export function forceRelease(t: Tables): string[] {
  return [
    `DELETE FROM ${t.claimLease} WHERE consumer_group_id = $1`,
    `DELETE FROM ${t.keyLease} WHERE consumer_group_id = $1`,
    `UPDATE ${t.exceptionQueue} SET status = 'ready', lease_token = NULL, lease_expires_at = NULL, updated_at = now()
      WHERE consumer_group_id = $1 AND lease_token IS NOT NULL AND status IN ('inflight', 'ready', 'deferred')`,
  ];
}

export function deleteRowsAbove(t: Tables): string {
  return `DELETE FROM ${t.exceptionQueue} WHERE consumer_group_id = $1 AND message_id > $2`;
}

export function seekCursor(t: Tables): string {
  return `UPDATE ${t.groupCursor} c
             SET claimed = $2, settled_head = GREATEST(c.settled_head, $2),
                 committed = LEAST($2::bigint, (SELECT min(e.message_id) - 1 FROM ${t.exceptionQueue} e
                                          WHERE e.consumer_group_id = $1 AND ${t.fn("unresolved")}(e.status))),
                 updated_at = now()
           WHERE c.consumer_group_id = $1
       RETURNING claimed::text, committed::text`;
}

/** $2: JSON array of {message_id, concurrency}. */
export function redriveRows(t: Tables): string {
  return `UPDATE ${t.exceptionQueue} e
             SET status = 'ready', attempts = 0, delays = 0, can_run_after = now(), lease_token = NULL,
                 lease_expires_at = NULL, concurrency = r.concurrency, updated_at = now()
            FROM jsonb_to_recordset($2::jsonb) AS r(message_id BIGINT, concurrency TEXT)
           WHERE e.consumer_group_id = $1 AND e.message_id = r.message_id AND e.status = 'dead'`;
}
