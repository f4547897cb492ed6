// Maintenance statements (docs/retention.md): the retention floor, partition drops, the row sweep, TTL and
// lease sweeps. Every table name comes from the quoted schema and the numeric stream id; every
// time comparison uses the database clock (now()). Each exported function runs its statements
// through query() on the connection it is given (or a pooled one) and holds no state.
import type pg from "pg";
import { type Db, type Queryable, query } from "../db.js";
import { partitionName, table } from "./names.js";

/** Rows per batch of every deleting step (docs/retention.md#maintain). */
export const BATCH = 1000;
/** Lock timeout of the drop and sweep transactions (docs/retention.md#maintain step 2). */
export const LOCK_TIMEOUT = "2000ms";
/** Empty compaction heads idle for this long are deleted (docs/ordering.md#compaction). */
export const EMPTY_HEAD_IDLE = "1 hour";

export interface MaintainedStream {
  id: string;
  name: string;
  partitionSize: bigint;
  retentionMs: bigint;
  idempotencyKeyTtlMs: bigint;
}

interface StreamRow {
  id: string;
  name: string;
  partition_size: string;
  retention_ms: string;
  idempotency_key_ttl_ms: string;
}

/** The maintenance settings of every stream, or of the named ones (unknown names are left out). */
export async function loadStreams(db: Db, names?: string[]): Promise<MaintainedStream[]> {
  const cols = `id::text, name, partition_size::text, retention_ms::text, idempotency_key_ttl_ms::text`;
  const r =
    names === undefined
      ? await query<StreamRow>(db, db.pool, `SELECT ${cols} FROM ${db.q}.stream_config ORDER BY id`)
      : await query<StreamRow>(db, db.pool, `SELECT ${cols} FROM ${db.q}.stream_config WHERE name = ANY($1::text[]) ORDER BY id`, [names]);
  return r.rows.map((x) => ({
    id: x.id,
    name: x.name,
    partitionSize: BigInt(x.partition_size),
    retentionMs: BigInt(x.retention_ms),
    idempotencyKeyTtlMs: BigInt(x.idempotency_key_ttl_ms),
  }));
}

export interface PartitionState {
  /** The id the sequence hands out next. */
  next: bigint;
  /** Indexes of the existing message_log_N partitions, ascending. */
  partitions: bigint[];
}

/** Sequence position and existing partitions, in one statement. */
export async function partitionState(db: Db, streamId: string): Promise<PartitionState> {
  const ml = table(db.q, streamId, "message_log");
  const r = await query<{ next: string; parts: string[] | null }>(
    db,
    db.pool,
    `SELECT (SELECT CASE WHEN s.is_called THEN s.last_value + 1 ELSE s.last_value END FROM ${ml}_id_seq s)::text AS next,
            ARRAY(SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                   WHERE i.inhparent = to_regclass($1)) AS parts`,
    [ml],
  );
  const prefix = `message_log_${streamId}_`;
  const partitions = (r.rows[0].parts ?? [])
    .filter((n) => n.startsWith(prefix) && /^[0-9]+$/.test(n.slice(prefix.length)))
    .map((n) => BigInt(n.slice(prefix.length)))
    .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  return { next: BigInt(r.rows[0].next), partitions };
}

/** Who holds the retention floor (docs/retention.md#the-floor). */
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
 * The retention floor of a stream (docs/retention.md#the-floor): the minimum over its groups of LEAST(committed,
 * MIN(message_id) − 1 of the group's ready, inflight or deferred rows); with no group, the
 * visible head. Also says which group holds it, for progress() and the maintenance report.
 * One read-only statement.
 */
export async function floorOf(db: Db, streamId: string, on: Queryable = db.pool): Promise<Floor> {
  const ml = table(db.q, streamId, "message_log");
  const eq = table(db.q, streamId, "exception_queue");
  const cur = table(db.q, streamId, "consumer_group_cursor");
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
              (SELECT min(e.message_id) FROM ${eq} e
                WHERE e.consumer_group_id = cfg.id AND e.status IN ('ready', 'inflight', 'deferred')) AS unresolved
         FROM ${db.q}.consumer_group_config cfg
         LEFT JOIN ${cur} c ON c.consumer_group_id = cfg.id
        WHERE cfg.stream_id = $1
     )
     SELECT (SELECT COALESCE(max(m.id), 0) FROM ${ml} m)::text AS head,
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

/**
 * Whether every row of partition k is older than now − retention (an empty partition counts as
 * expired). The newest id's row is checked first through the primary key, so a partition that
 * is not expired yet costs one index probe; only a candidate for dropping is scanned.
 */
export async function partitionExpired(db: Db, streamId: string, k: bigint, retentionMs: bigint): Promise<boolean> {
  const p = partitionName(db.q, streamId, k);
  const r = await query<{ expired: boolean }>(
    db,
    db.pool,
    `WITH cut AS (SELECT now() - $1::bigint * interval '1 millisecond' AS t)
     SELECT CASE
              WHEN EXISTS (SELECT 1 FROM (SELECT m.created_at FROM ${p} m ORDER BY m.id DESC LIMIT 1) top, cut
                            WHERE top.created_at >= cut.t) THEN false
              ELSE NOT EXISTS (SELECT 1 FROM ${p} m, cut WHERE m.created_at >= cut.t)
            END AS expired`,
    [String(retentionMs)],
  );
  return r.rows[0].expired;
}

/**
 * Deletes up to one batch of delivery_log_N rows of messages in [lo, hi) ahead of a partition
 * drop, so that the drop transaction (which blocks producers) stays short. Returns rows deleted.
 * Rows another session holds (a second maintain() deleting the same range, say) are skipped, not
 * waited for: two deleters that each wait on rows the other locked first deadlock.
 */
export async function deleteDeliveryLogBatch(db: Db, streamId: string, lo: bigint, hi: bigint): Promise<number> {
  const dl = table(db.q, streamId, "delivery_log");
  const r = await query(
    db,
    db.pool,
    `DELETE FROM ${dl} WHERE id IN (
       SELECT d.id FROM ${dl} d WHERE d.message_id >= $1 AND d.message_id < $2 LIMIT ${BATCH} FOR UPDATE SKIP LOCKED)`,
    [String(lo), String(hi)],
  );
  return r.rowCount ?? 0;
}

/** Advisory lock keys. Concurrent maintain() calls on one stream never drop or sweep together. */
export function retentionLockKey(db: Db, streamId: string): string {
  return `sqlstreams.retention:${db.schema}:${streamId}`;
}

export async function tryXactLock(db: Db, c: pg.PoolClient, key: string): Promise<boolean> {
  const r = await query<{ ok: boolean }>(db, c, "SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0)) AS ok", [key]);
  return r.rows[0].ok;
}

export type DropOutcome = "dropped" | "gone" | "busy";

/** Thrown inside a drop transaction to roll it back when the floor no longer covers the partition. */
export class FloorMoved extends Error {
  constructor() {
    super("the retention floor moved below the partition while it was being dropped");
  }
}

/**
 * The drop transaction of partition k (docs/retention.md#maintain step 2), run inside the caller's transaction
 * on c. Order matters for deadlock freedom: the advisory lock, then the table lock on the parent
 * (producers and pollers lock message_log_N before any row of the family, so nobody who holds
 * that lock waits for us), then row work, then DROP. The floor is read again under the lock, after
 * the dead rows are deleted, so a redrive that raced us keeps its message: FloorMoved is thrown and
 * the caller's transaction rolls back.
 */
export async function dropPartitionTx(
  db: Db,
  c: pg.PoolClient,
  streamId: string,
  partitionSize: bigint,
  k: bigint,
): Promise<{ outcome: DropOutcome; exceptionRows: number; deliveryLogRows: number; headsEmptied: number }> {
  const none = { exceptionRows: 0, deliveryLogRows: 0, headsEmptied: 0 };
  const p = partitionName(db.q, streamId, k);
  const ml = table(db.q, streamId, "message_log");
  const eq = table(db.q, streamId, "exception_queue");
  const dl = table(db.q, streamId, "delivery_log");
  const ch = table(db.q, streamId, "compaction_head");
  const lo = k * partitionSize;
  const hi = (k + 1n) * partitionSize;
  await query(db, c, `SET LOCAL lock_timeout = '${LOCK_TIMEOUT}'`);
  if (!(await tryXactLock(db, c, retentionLockKey(db, streamId)))) return { outcome: "busy", ...none };
  await query(db, c, `LOCK TABLE ONLY ${ml} IN ACCESS EXCLUSIVE MODE`);
  // Checked only now: taking a table lock makes this backend read the catalog changes other
  // sessions committed (a partition another maintain() dropped a moment ago).
  const exists = await query<{ ok: boolean }>(db, c, "SELECT to_regclass($1) IS NOT NULL AS ok", [p]);
  if (!exists.rows[0].ok) return { outcome: "gone", ...none };
  const groups = await query<{ ids: string[] | null }>(
    db,
    c,
    `SELECT array_agg(id::text) AS ids FROM ${db.q}.consumer_group_config WHERE stream_id = $1`,
    [streamId],
  );
  const del = await query<{ eq: string; dl: string; ch: string }>(
    db,
    c,
    `WITH e AS (
       DELETE FROM ${eq} WHERE consumer_group_id = ANY($3::bigint[]) AND message_id >= $1 AND message_id < $2
          AND status IN ('dead', 'superseded') RETURNING 1
     ), d AS (
       DELETE FROM ${dl} WHERE message_id >= $1 AND message_id < $2 RETURNING 1
     ), h AS (
       UPDATE ${ch} SET message_id = NULL, compaction_rank = NULL, updated_at = now()
        WHERE message_id >= $1 AND message_id < $2 RETURNING 1
     )
     SELECT (SELECT count(*) FROM e)::text AS eq, (SELECT count(*) FROM d)::text AS dl, (SELECT count(*) FROM h)::text AS ch`,
    [String(lo), String(hi), groups.rows[0].ids ?? []],
  );
  const f = await floorOf(db, streamId, c);
  // A redrive or a seek moved the floor below this partition since it was chosen: roll back.
  if (hi - 1n > f.floor) throw new FloorMoved();
  await query(db, c, `DROP TABLE ${p}`);
  return {
    outcome: "dropped",
    exceptionRows: Number(del.rows[0].eq),
    deliveryLogRows: Number(del.rows[0].dl),
    headsEmptied: Number(del.rows[0].ch),
  };
}

/** One window of the row sweep: the next ids after `after` up to `limit`, oldest first. */
export interface SweepWindow {
  /** Highest id in the window (the next window starts after it); null when the window is empty. */
  last: bigint | null;
  /** Ids in the window whose message is older than now − retention. */
  expired: { id: string; key: string | null; compacted: boolean }[];
}

export async function sweepWindow(db: Db, streamId: string, after: bigint, limit: bigint, retentionMs: bigint): Promise<SweepWindow> {
  const ml = table(db.q, streamId, "message_log");
  const r = await query<{ id: string; message_key: string | null; compacted: boolean; expired: boolean }>(
    db,
    db.pool,
    `SELECT m.id::text, m.message_key, m.compaction_rank IS NOT NULL AS compacted,
            m.created_at < now() - $3::bigint * interval '1 millisecond' AS expired
       FROM ${ml} m WHERE m.id > $1 AND m.id <= $2 ORDER BY m.id LIMIT ${BATCH}`,
    [String(after), String(limit), String(retentionMs)],
  );
  if (r.rows.length === 0) return { last: null, expired: [] };
  return {
    last: BigInt(r.rows[r.rows.length - 1].id),
    expired: r.rows.filter((x) => x.expired).map((x) => ({ id: x.id, key: x.message_key, compacted: x.compacted })),
  };
}

/**
 * Deletes one batch of expired messages (docs/retention.md#maintain step 3) with their exception and
 * delivery-log rows, emptying the compaction heads that pointed at them, inside the caller's
 * transaction on c. A message keeps its row when a group holds an unresolved exception row for it
 * (a redrive that raced the floor) or when its compaction head is being written right now.
 * Returns the counts, or null when another maintain() is sweeping this stream.
 */
export async function sweepBatchTx(
  db: Db,
  c: pg.PoolClient,
  streamId: string,
  candidates: SweepWindow["expired"],
): Promise<{ messages: number; exceptionRows: number; deliveryLogRows: number; headsEmptied: number } | null> {
  const ml = table(db.q, streamId, "message_log");
  const eq = table(db.q, streamId, "exception_queue");
  const dl = table(db.q, streamId, "delivery_log");
  const ch = table(db.q, streamId, "compaction_head");
  await query(db, c, `SET LOCAL lock_timeout = '${LOCK_TIMEOUT}'`);
  if (!(await tryXactLock(db, c, retentionLockKey(db, streamId)))) return null;
  const ids = candidates.map((x) => x.id);
  // Lock the exception rows of the candidates in a fixed order; the locked versions are current,
  // so a row that a redrive has put back to ready shows as ready here and keeps its message.
  const rows = await query<{ message_id: string; status: string }>(
    db,
    c,
    `SELECT e.message_id::text, e.status FROM ${eq} e
      WHERE e.consumer_group_id IN (SELECT id FROM ${db.q}.consumer_group_config WHERE stream_id = $1)
        AND e.message_id = ANY($2::bigint[])
      ORDER BY e.consumer_group_id, e.message_id FOR UPDATE OF e`,
    [streamId, ids],
  );
  const keep = new Set<string>();
  for (const row of rows.rows) if (row.status !== "dead" && row.status !== "superseded") keep.add(row.message_id);
  // Compaction heads that point at a candidate: lock them without waiting; a head a producer is
  // writing at this moment keeps its message until a later batch.
  const compacted = candidates.filter((x) => x.compacted && x.key !== null && !keep.has(x.id));
  let headKeys: string[] = [];
  if (compacted.length > 0) {
    const heads = await query<{ message_id: string; compaction_key: string; locked: boolean }>(
      db,
      c,
      `WITH h AS (
         SELECT compaction_key, message_id FROM ${ch}
          WHERE compaction_key = ANY($1::text[]) AND message_id = ANY($2::bigint[])
       ), l AS MATERIALIZED (
         SELECT compaction_key FROM ${ch}
          WHERE compaction_key = ANY($1::text[]) AND message_id = ANY($2::bigint[])
          ORDER BY compaction_key FOR UPDATE SKIP LOCKED
       )
       SELECT h.message_id::text, h.compaction_key, l.compaction_key IS NOT NULL AS locked
         FROM h LEFT JOIN l ON l.compaction_key = h.compaction_key`,
      [compacted.map((x) => x.key), compacted.map((x) => x.id)],
    );
    for (const h of heads.rows) {
      if (h.locked) headKeys.push(h.compaction_key);
      else keep.add(h.message_id);
    }
  }
  const doomed = ids.filter((id) => !keep.has(id));
  if (doomed.length === 0) return { messages: 0, exceptionRows: 0, deliveryLogRows: 0, headsEmptied: 0 };
  headKeys = headKeys.filter((k, i, a) => a.indexOf(k) === i);
  const r = await query<{ m: string; e: string; d: string; h: string }>(
    db,
    c,
    `WITH m AS (
       DELETE FROM ${ml} WHERE id = ANY($2::bigint[]) RETURNING 1
     ), e AS (
       DELETE FROM ${eq}
        WHERE consumer_group_id IN (SELECT id FROM ${db.q}.consumer_group_config WHERE stream_id = $1)
          AND message_id = ANY($2::bigint[]) AND status IN ('dead', 'superseded') RETURNING 1
     ), d AS (
       DELETE FROM ${dl} WHERE message_id = ANY($2::bigint[]) RETURNING 1
     ), h AS (
       UPDATE ${ch} SET message_id = NULL, compaction_rank = NULL, updated_at = now()
        WHERE compaction_key = ANY($3::text[]) AND message_id = ANY($2::bigint[]) RETURNING 1
     )
     SELECT (SELECT count(*) FROM m)::text AS m, (SELECT count(*) FROM e)::text AS e,
            (SELECT count(*) FROM d)::text AS d, (SELECT count(*) FROM h)::text AS h`,
    [streamId, doomed, headKeys],
  );
  const x = r.rows[0];
  return { messages: Number(x.m), exceptionRows: Number(x.e), deliveryLogRows: Number(x.d), headsEmptied: Number(x.h) };
}

/** Whether the lowest message above the floor (and below `below`) is already past retention. */
export async function expiredAboveFloor(db: Db, streamId: string, floor: bigint, below: bigint, retentionMs: bigint): Promise<boolean> {
  const ml = table(db.q, streamId, "message_log");
  const r = await query<{ expired: boolean }>(
    db,
    db.pool,
    `SELECT COALESCE((SELECT m.created_at < now() - $3::bigint * interval '1 millisecond'
                        FROM ${ml} m WHERE m.id > $1 AND m.id < $2 ORDER BY m.id LIMIT 1), false) AS expired`,
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
  const ml = table(db.q, streamId, "message_log");
  const r = await query<{ retention_ms: string; over_ms: number | null }>(
    db,
    on,
    `SELECT s.retention_ms::text,
            (SELECT EXTRACT(EPOCH FROM (now() - s.retention_ms * interval '1 millisecond' - m.created_at)) * 1000
               FROM ${ml} m WHERE m.id > $2 ORDER BY m.id LIMIT 1)::float8 AS over_ms
       FROM ${db.q}.stream_config s WHERE s.id = $1`,
    [streamId, String(f.floor)],
  );
  const retentionMs = BigInt(r.rows[0]?.retention_ms ?? "0");
  const over = r.rows[0]?.over_ms ?? null;
  const held = retentionMs > 0n && f.heldBy !== null && over !== null && over > 0;
  return { retentionMs, floor: f.floor, heldBy: f.heldBy, held, heldForMs: held ? Math.round(over as number) : null };
}

/** Deletes one batch of idempotency keys older than the stream's TTL (docs/retention.md#maintain step 4). */
export async function deleteIdempotencyKeys(db: Db, streamId: string, ttlMs: bigint): Promise<number> {
  const ik = table(db.q, streamId, "idempotency_key");
  const r = await query(
    db,
    db.pool,
    `DELETE FROM ${ik} WHERE idempotency_key IN (
       SELECT k.idempotency_key FROM ${ik} k WHERE k.created_at < now() - $1::bigint * interval '1 millisecond'
        ORDER BY k.created_at LIMIT ${BATCH} FOR UPDATE SKIP LOCKED)`,
    [String(ttlMs)],
  );
  return r.rowCount ?? 0;
}

/** Deletes one batch of expired message key leases (docs/retention.md#maintain step 5). */
export async function deleteExpiredKeyLeases(db: Db, streamId: string): Promise<number> {
  const kl = table(db.q, streamId, "message_key_lease");
  const r = await query(
    db,
    db.pool,
    `DELETE FROM ${kl} WHERE (consumer_group_id, message_key) IN (
       SELECT k.consumer_group_id, k.message_key FROM ${kl} k WHERE k.expires_at < now()
        LIMIT ${BATCH} FOR UPDATE SKIP LOCKED)`,
  );
  return r.rowCount ?? 0;
}

/** Deletes one batch of compaction heads left empty for over an hour (docs/retention.md#maintain step 6). */
export async function deleteEmptyHeads(db: Db, streamId: string): Promise<number> {
  const ch = table(db.q, streamId, "compaction_head");
  const r = await query(
    db,
    db.pool,
    `DELETE FROM ${ch} WHERE compaction_key IN (
       SELECT h.compaction_key FROM ${ch} h
        WHERE h.message_id IS NULL AND h.updated_at < now() - interval '${EMPTY_HEAD_IDLE}'
        ORDER BY h.updated_at LIMIT ${BATCH} FOR UPDATE SKIP LOCKED)`,
  );
  return r.rowCount ?? 0;
}
