// The retention floor (docs/protocol/retention.md#the-floor): which messages every group has resolved, who
// holds it back, and retention as operators see it. Read by maintain(), progress() and destroy.
import type pg from "pg";
import { type Db, type Queryable, query } from "../db.js";
import { table } from "../sql/names.js";

/** Who holds the retention floor (docs/protocol/retention.md#the-floor). */
export interface FloorHolder {
  groupId: string;
  group: string;
  committed: bigint;
  /** Lowest message id of the group's ready/inflight/deferred rows, when that is below its cursor. */
  unresolvedFrom: bigint | null;
  paused: boolean;
}

export interface Floor {
  /** Nothing above this id may be removed. */
  floor: bigint;
  /** The visible head, MAX(id) of message_log_N (0 when empty). */
  head: bigint;
  /** The group with the lowest floor; null when the stream has no group (the floor is the head). */
  heldBy: FloorHolder | null;
  /** Ids of the stream's groups (retention deletes their exception rows by primary key). */
  groupIds: string[];
}

/**
 * The retention floor of a stream (docs/protocol/retention.md#the-floor): the minimum over its groups of LEAST(committed,
 * MIN(message_id) − 1 of the group's ready, inflight or deferred rows); with no group, the
 * visible head. Also says which group holds it, for progress() and the maintenance report.
 * One read-only statement.
 */
export async function floorOf(db: Db, streamId: string, on: Queryable = db.pool): Promise<Floor> {
  const messageLog = table(db.q, streamId, "message_log");
  const exceptionQueue = table(db.q, streamId, "exception_queue");
  const groupCursor = table(db.q, streamId, "consumer_group_cursor");
  const r = await query<{
    head: string;
    groups: string[] | null;
    id: string | null;
    name: string | null;
    paused: boolean | null;
    committed: string | null;
    unresolved: string | null;
    floor: string | null;
  }>(
    db,
    on,
    `WITH g AS (
       SELECT cfg.id, cfg.name, cfg.paused, COALESCE(c.committed, 0) AS committed,
              (SELECT min(e.message_id) FROM ${exceptionQueue} e
                WHERE e.consumer_group_id = cfg.id AND ${table(db.q, streamId, "unresolved")}(e.status)) AS unresolved
         FROM ${db.q}.consumer_group_config cfg
         LEFT JOIN ${groupCursor} c ON c.consumer_group_id = cfg.id
        WHERE cfg.stream_id = $1
     )
     SELECT (SELECT COALESCE(max(m.id), 0) FROM ${messageLog} m)::text AS head,
            (SELECT array_agg(g.id::text ORDER BY g.id) FROM g) AS groups,
            f.id::text, f.name, f.paused, f.committed::text, f.unresolved::text, f.floor::text
       FROM (SELECT 1) one
       LEFT JOIN LATERAL (
         SELECT g.*, LEAST(g.committed, g.unresolved - 1) AS floor FROM g
          ORDER BY LEAST(g.committed, g.unresolved - 1), g.id LIMIT 1
       ) f ON true`,
    [streamId],
  );
  const row = r.rows[0];
  const head = BigInt(row.head);
  if (row.id === null) return { floor: head, head, heldBy: null, groupIds: [] };
  const committed = BigInt(row.committed as string);
  const unresolved = row.unresolved === null ? null : BigInt(row.unresolved);
  return {
    floor: BigInt(row.floor as string),
    head,
    heldBy: {
      groupId: row.id,
      group: row.name as string,
      committed,
      unresolvedFrom: unresolved !== null && unresolved - 1n < committed ? unresolved : null,
      paused: row.paused === true,
    },
    groupIds: row.groups ?? [],
  };
}

/** Whether the lowest message above the floor (and below `below`) is already past retention. */
export async function expiredAboveFloor(db: Db, streamId: string, floor: bigint, below: bigint, retentionMs: bigint): Promise<boolean> {
  const messageLog = table(db.q, streamId, "message_log");
  const r = await query<{ expired: boolean }>(
    db,
    db.pool,
    `SELECT COALESCE((SELECT m.created_at < now() - $3::bigint * interval '1 millisecond'
                        FROM ${messageLog} m WHERE m.id > $1 AND m.id < $2 ORDER BY m.id LIMIT 1), false) AS expired`,
    [String(floor), String(below), String(retentionMs)],
  );
  return r.rows[0].expired;
}

/** Retention as operators see it: for progress(), the CLI and monitoring. */
export interface RetentionStatus {
  /** The stream's retention in ms; 0 = keep forever (then nothing below is ever held). */
  retentionMs: bigint;
  floor: bigint;
  heldBy: FloorHolder | null;
  /**
   * True when retention is on and the oldest message above the floor is already past it: the
   * holder (a lagging or paused group, or its oldest unresolved row) keeps expired messages.
   */
  held: boolean;
  /** How far past retention that oldest held message is, in ms; null when nothing is held. */
  heldForMs: number | null;
}

/** Two read-only statements. */
export async function retentionStatus(db: Db, streamId: string, on: Queryable = db.pool): Promise<RetentionStatus> {
  const f = await floorOf(db, streamId, on);
  const messageLog = table(db.q, streamId, "message_log");
  const r = await query<{ retention_ms: string; over_ms: number | null }>(
    db,
    on,
    `SELECT s.retention_ms::text,
            (SELECT EXTRACT(EPOCH FROM (now() - s.retention_ms * interval '1 millisecond' - m.created_at)) * 1000
               FROM ${messageLog} m WHERE m.id > $2 ORDER BY m.id LIMIT 1)::float8 AS over_ms
       FROM ${db.q}.stream_config s WHERE s.id = $1`,
    [streamId, String(f.floor)],
  );
  const retentionMs = BigInt(r.rows[0]?.retention_ms ?? "0");
  const over = r.rows[0]?.over_ms ?? null;
  const held = retentionMs > 0n && f.heldBy !== null && over !== null && over > 0;
  return { retentionMs, floor: f.floor, heldBy: f.heldBy, held, heldForMs: held ? Math.round(over as number) : null };
}

/** Advisory lock keys. Concurrent maintain() calls on one stream never drop or sweep together. */
export function retentionLockKey(db: Db, streamId: string): string {
  return `sqlstreams.retention:${db.schema}:${streamId}`;
}

export async function tryXactLock(db: Db, c: pg.PoolClient, key: string): Promise<boolean> {
  const r = await query<{ ok: boolean }>(db, c, "SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0)) AS ok", [key]);
  return r.rows[0].ok;
}
