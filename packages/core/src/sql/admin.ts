// Statements of registration, inspection and operations (docs/guide/configuration.md#the-stored-document, docs/guide/operations.md).
import type { ConsumerConfig } from "../config.js";
import type { SchemaNames } from "./names.js";
import { blockedRows } from "./operator.js";
import { defineStatement } from "./statement.js";

/** Inserts or replaces a group's config (`config`, JSON text); never touches paused. */
export const upsertGroup = defineStatement<{ streamId: string; group: string; config: string }, { id: string }, SchemaNames>(
  ["streamId", "group", "config"], (t, p) =>
    `INSERT INTO ${t.schema}.consumer_group_config (stream_id, name, config) VALUES (${p.streamId}, ${p.group}, ${p.config}::jsonb)
          ON CONFLICT (stream_id, name) DO UPDATE SET config = EXCLUDED.config, updated_at = now()
          RETURNING id::text`);

/** Creates the cursor if missing; with `atHead`, at the head visible to this transaction. */
export const createCursor = defineStatement<{ groupId: string; atHead: boolean }>(["groupId", "atHead"], (t, p) =>
  `INSERT INTO ${t.groupCursor} (consumer_group_id, claimed, committed, settled_head)
          SELECT ${p.groupId}, h, h, h FROM (SELECT CASE WHEN ${p.atHead}::boolean THEN COALESCE(max(id), 0) ELSE 0 END AS h FROM ${t.messageLog}) x
          ON CONFLICT (consumer_group_id) DO NOTHING`);

/** A group's id, pause flag and stored config. */
export const groupId = defineStatement<{ streamId: string; group: string }, { id: string; paused: boolean; config: ConsumerConfig }, SchemaNames>(
  ["streamId", "group"], (t, p) =>
    `SELECT id::text, paused, config FROM ${t.schema}.consumer_group_config WHERE stream_id = ${p.streamId} AND name = ${p.group}`);

export interface ProgressRow {
  paused: boolean;
  claimed: string;
  committed: string;
  head: string;
  open_leases: number;
  expired_leases: number;
  counts: Record<string, number>;
  oldest_ms: number | null;
  max_concurrency: number | null;
  key_concurrency: number;
  drains_running: number;
  capped: number;
  blocked_keys: number;
  rate_limit: unknown;
  rate_limited: number;
  rate_limited_at: Date | null;
}

/** Where a group stands (progress()). */
export const progress = defineStatement<{ streamId: string; group: string }, ProgressRow>(["streamId", "group"], (t, p) =>
  `SELECT g.paused, c.claimed::text, c.committed::text, h.head::text AS head,
       (SELECT count(*)::int FROM ${t.claimLease} l WHERE l.consumer_group_id = g.id) AS open_leases,
       (SELECT count(*)::int FROM ${t.claimLease} l WHERE l.consumer_group_id = g.id AND ${t.fn("lease_expired")}(l.expires_at)) AS expired_leases,
       (SELECT COALESCE(jsonb_object_agg(status, n), '{}'::jsonb)
          FROM (SELECT e.status, count(*)::int AS n FROM ${t.exceptionQueue} e WHERE e.consumer_group_id = g.id GROUP BY e.status) s) AS counts,
       (EXTRACT(EPOCH FROM (now() - LEAST(
          (SELECT m.created_at FROM ${t.messageLog} m WHERE m.id > c.committed ORDER BY m.id LIMIT 1),
          (SELECT min(m.created_at) FROM ${t.exceptionQueue} e JOIN ${t.messageLog} m ON m.id = e.message_id
            WHERE e.consumer_group_id = g.id AND ${t.fn("unresolved")}(e.status))))) * 1000)::float8 AS oldest_ms,
       (g.config->>'maxConcurrency')::int AS max_concurrency,
       COALESCE((g.config->>'keyConcurrency')::int, 1) AS key_concurrency,
       (SELECT count(*)::int FROM ${t.schema}.group_slot s WHERE s.group_id = g.id AND s.expires_at > now()) AS drains_running,
       COALESCE((SELECT f.capped FROM ${t.schema}.group_flow f WHERE f.group_id = g.id), 0)::float8 AS capped,
       g.config->'rateLimit' AS rate_limit,
       COALESCE((SELECT r.limited FROM ${t.schema}.group_rate r WHERE r.group_id = g.id), 0)::float8 AS rate_limited,
       (SELECT r.limited_at FROM ${t.schema}.group_rate r WHERE r.group_id = g.id) AS rate_limited_at,
       (SELECT count(*)::int FROM (${blockedRows(t, "g.id")}) bk) AS blocked_keys
  FROM ${t.schema}.consumer_group_config g
  JOIN ${t.groupCursor} c ON c.consumer_group_id = g.id
  CROSS JOIN LATERAL (SELECT COALESCE(max(m.id), 0) AS head FROM ${t.messageLog} m) h
 WHERE g.stream_id = ${p.streamId} AND g.name = ${p.group}`);

export const setPaused = defineStatement<{ streamId: string; group: string; paused: boolean }, { id: string }, SchemaNames>(
  ["streamId", "group", "paused"], (t, p) =>
    `UPDATE ${t.schema}.consumer_group_config
             SET paused = ${p.paused}, paused_at = CASE WHEN ${p.paused} THEN COALESCE(paused_at, now()) ELSE NULL END, updated_at = now()
           WHERE stream_id = ${p.streamId} AND name = ${p.group} RETURNING id`);

export const lockCursor = defineStatement<{ groupId: string }, { claimed: string; committed: string; settled_head: string }>(["groupId"], (t, p) =>
  `SELECT claimed::text, committed::text, settled_head::text FROM ${t.groupCursor} WHERE consumer_group_id = ${p.groupId} FOR UPDATE`);

export const visibleHead = defineStatement<Record<string, never>, { head: string }>([], (t) =>
  `SELECT COALESCE(max(id), 0)::text AS head FROM ${t.messageLog}`);

export const firstIdAtOrAfter = defineStatement<{ id: string }, { id: string | null }>(["id"], (t, p) =>
  `SELECT min(id)::text AS id FROM ${t.messageLog} WHERE id >= ${p.id}`);

export const firstIdAtOrAfterTime = defineStatement<{ time: Date }, { id: string | null }>(["time"], (t, p) =>
  `SELECT min(id)::text AS id FROM ${t.messageLog} WHERE created_at >= ${p.time}`);

export const openLeases = defineStatement<{ groupId: string }, { ranges: boolean; rows: boolean }>(["groupId"], (t, p) =>
  `SELECT EXISTS (SELECT 1 FROM ${t.claimLease} WHERE consumer_group_id = ${p.groupId}) AS ranges,
                 EXISTS (SELECT 1 FROM ${t.exceptionQueue} WHERE consumer_group_id = ${p.groupId} AND lease_token IS NOT NULL
                            AND NOT ${t.fn("lease_expired")}(lease_expires_at)) AS rows`);

/** A forced seek's release of every lease of the group: range leases, key leases, reserved and running rows. */
export const forceRelease = [
  defineStatement<{ groupId: string }>(["groupId"], (t, p) => `DELETE FROM ${t.claimLease} WHERE consumer_group_id = ${p.groupId}`),
  defineStatement<{ groupId: string }>(["groupId"], (t, p) => `DELETE FROM ${t.keyLease} WHERE consumer_group_id = ${p.groupId}`),
  defineStatement<{ groupId: string }>(["groupId"], (t, p) =>
    `UPDATE ${t.exceptionQueue} SET status = 'ready', lease_token = NULL, lease_expires_at = NULL, updated_at = now()
      WHERE consumer_group_id = ${p.groupId} AND lease_token IS NOT NULL AND status IN ('inflight', 'ready', 'deferred')`),
] as const;

export const deleteRowsAbove = defineStatement<{ groupId: string; position: string }>(["groupId", "position"], (t, p) =>
  `DELETE FROM ${t.exceptionQueue} WHERE consumer_group_id = ${p.groupId} AND message_id > ${p.position}`);

export const seekCursor = defineStatement<{ groupId: string; position: string }, { claimed: string; committed: string }>(
  ["groupId", "position"], (t, p) =>
    `UPDATE ${t.groupCursor} c
             SET claimed = ${p.position}, settled_head = GREATEST(c.settled_head, ${p.position}),
                 committed = LEAST(${p.position}::bigint, (SELECT min(e.message_id) - 1 FROM ${t.exceptionQueue} e
                                          WHERE e.consumer_group_id = ${p.groupId} AND ${t.fn("unresolved")}(e.status))),
                 updated_at = now()
           WHERE c.consumer_group_id = ${p.groupId}
       RETURNING claimed::text, committed::text`);

/**
 * Lowers the group's redrive floor to `floor`, the lowest row redriven (consumer_group_cursor_N.redrive_floor): the
 * exception reservation reads waiting rows from there when it lies at or below committed.
 */
export const lowerRedriveFloor = defineStatement<{ groupId: string; floor: string }>(["groupId", "floor"], (t, p) =>
  `UPDATE ${t.groupCursor} SET redrive_floor = LEAST(COALESCE(redrive_floor, ${p.floor}::bigint), ${p.floor}::bigint)
           WHERE consumer_group_id = ${p.groupId}`);

/**
 * Dead or expired rows back to ready with a fresh budget: `rows` is a JSON array of {message_id, concurrency}.
 * A redriven expired row runs all the same (expiry_waived).
 */
export const redriveRows = defineStatement<{ groupId: string; rows: string }>(["groupId", "rows"], (t, p) =>
  `UPDATE ${t.exceptionQueue} e
             SET status = 'ready', attempts = 0, delays = 0, can_run_after = now(), lease_token = NULL,
                 lease_expires_at = NULL, concurrency = r.concurrency, updated_at = now(),
                 expiry_waived = e.expiry_waived OR e.status = 'expired'
            FROM jsonb_to_recordset(${p.rows}::jsonb) AS r(message_id BIGINT, concurrency TEXT)
           WHERE e.consumer_group_id = ${p.groupId} AND e.message_id = r.message_id AND e.status IN ('dead', 'expired')`);
