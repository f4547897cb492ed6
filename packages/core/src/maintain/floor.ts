// The retention floor (docs/protocol/retention.md#the-floor): which messages every group has resolved, who
// holds it back, and retention as operators see it. Read by maintain(), progress() and destroy.
import type pg from "pg";
import type { Db, Queryable } from "../db.js";
import { tryAdvisoryXactLock } from "../sql/catalog.js";
import * as MaintainSql from "../sql/maintain.js";
import { schemaNames, tables } from "../sql/names.js";

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
  const r = await MaintainSql.floor.query(db, on, tables(db.q, streamId), { streamId });
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
  const r = await MaintainSql.expiredAboveFloor.query(db, db.pool, tables(db.q, streamId), {
    floor: String(floor), below: String(below), retentionMs: String(retentionMs),
  });
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
  const r = await MaintainSql.retentionOverrun.query(db, on, tables(db.q, streamId), { streamId, floor: String(f.floor) });
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
  const r = await tryAdvisoryXactLock.query(db, c, schemaNames(db.q), { lockKey: key });
  return r.rows[0].ok;
}
