// Step 3 of maintain() (docs/protocol/retention.md#maintain): expired rows at or below the retention floor
// are deleted one batch per transaction, lowest id first, with their exception and delivery-log
// rows; the partition the producers write into is never swept.
import type pg from "pg";
import { type Db, query, transaction } from "../db.js";
import { table } from "../sql/names.js";
import { floorOf, retentionLockKey, tryXactLock } from "./floor.js";
import { BATCH, LOCK_FAILURES, LOCK_TIMEOUT, type MaintainRun } from "./run.js";

/** 3. Sweep expired rows at or below the floor, lowest id first, one batch per transaction. */
export async function sweep(run: MaintainRun): Promise<void> {
  if (run.dropsPending) return;
  const { db, s, report } = run;
  const f = (run.floor ??= await floorOf(db, s.id));
  report.floor = String(f.floor);
  const limit = f.floor < run.activeLow - 1n ? f.floor : run.activeLow - 1n;
  let after = 0n;
  while (after < limit) {
    if (run.late()) return;
    const w = await sweepWindow(db, s.id, after, limit, s.retentionMs);
    if (w.last === null || w.expired.length === 0) return;
    const r = await sweepBatch(run, w.expired);
    if (r === null || r.messages === 0) return; // another maintain() is sweeping, or nothing left to take
    report.rowsSwept += r.messages;
    report.exceptionRowsDeleted += r.exceptionRows;
    report.deliveryLogRowsDeleted += r.deliveryLogRows;
    after = w.last;
  }
}

/** One sweep transaction; null when a row of the batch stayed locked (the sweep resumes next run). */
async function sweepBatch(run: MaintainRun, ids: SweepWindow["expired"]): Promise<Awaited<ReturnType<typeof sweepBatchTx>>> {
  const { db, s } = run;
  try {
    return await transaction(db, (c) => sweepBatchTx(db, c, s.id, ids));
  } catch (e) {
    const code = (e as { code?: string }).code ?? "";
    if (!LOCK_FAILURES.has(code)) throw e;
    // Locked for 2 s by a redrive or a producer writing a head.
    db.events.emit({ level: "warn", code: "SQL0041", message: `sweep of ${s.name} paused: ${(e as Error).message}`, stream: s.name });
    return null;
  }
}

/** One window of the row sweep: the next ids after `after` up to `limit`, oldest first. */
interface SweepWindow {
  /** Highest id in the window (the next window starts after it); null when the window is empty. */
  last: bigint | null;
  /** Ids in the window whose message is older than now − retention. */
  expired: { id: string; key: string | null; compacted: boolean }[];
}

async function sweepWindow(db: Db, streamId: string, after: bigint, limit: bigint, retentionMs: bigint): Promise<SweepWindow> {
  const messageLog = table(db.q, streamId, "message_log");
  const r = await query<{ id: string; message_key: string | null; compacted: boolean; expired: boolean }>(
    db,
    db.pool,
    `SELECT m.id::text, m.message_key, m.compaction_rank IS NOT NULL AS compacted,
            m.created_at < now() - $3::bigint * interval '1 millisecond' AS expired
       FROM ${messageLog} m WHERE m.id > $1 AND m.id <= $2 ORDER BY m.id LIMIT ${BATCH}`,
    [String(after), String(limit), String(retentionMs)],
  );
  if (r.rows.length === 0) return { last: null, expired: [] };
  return {
    last: BigInt(r.rows[r.rows.length - 1].id),
    expired: r.rows.filter((x) => x.expired).map((x) => ({ id: x.id, key: x.message_key, compacted: x.compacted })),
  };
}

/**
 * Deletes one batch of expired messages (docs/protocol/retention.md#maintain step 3) with their exception and
 * delivery-log rows, emptying the compaction heads that pointed at them, inside the caller's
 * transaction on c. A message keeps its row when a group holds an unresolved exception row for it
 * (a redrive that raced the floor) or when its compaction head is being written right now.
 * Returns the counts, or null when another maintain() is sweeping this stream.
 */
async function sweepBatchTx(
  db: Db,
  c: pg.PoolClient,
  streamId: string,
  candidates: SweepWindow["expired"],
): Promise<{ messages: number; exceptionRows: number; deliveryLogRows: number; headsEmptied: number } | null> {
  const messageLog = table(db.q, streamId, "message_log");
  const exceptionQueue = table(db.q, streamId, "exception_queue");
  const deliveryLog = table(db.q, streamId, "delivery_log");
  const compactionHead = table(db.q, streamId, "compaction_head");
  await query(db, c, `SET LOCAL lock_timeout = '${LOCK_TIMEOUT}'`);
  if (!(await tryXactLock(db, c, retentionLockKey(db, streamId)))) return null;
  const ids = candidates.map((x) => x.id);
  // Lock the exception rows of the candidates in a fixed order; the locked versions are current,
  // so a row that a redrive has put back to ready shows as ready here and keeps its message.
  const rows = await query<{ message_id: string; status: string }>(
    db,
    c,
    `SELECT e.message_id::text, e.status FROM ${exceptionQueue} e
      WHERE e.consumer_group_id IN (SELECT id FROM ${db.q}.consumer_group_config WHERE stream_id = $1)
        AND e.message_id = ANY($2::bigint[])
      ORDER BY e.consumer_group_id, e.message_id FOR UPDATE OF e`,
    [streamId, ids],
  );
  const keep = new Set<string>();
  for (const row of rows.rows) if (row.status !== "dead" && row.status !== "superseded" && row.status !== "expired") keep.add(row.message_id);
  // Compaction heads that point at a candidate: lock them without waiting; a head a producer is
  // writing at this moment keeps its message until a later batch.
  const compacted = candidates.filter((x) => x.compacted && x.key !== null && !keep.has(x.id));
  let headKeys: string[] = [];
  if (compacted.length > 0) {
    const heads = await query<{ message_id: string; compaction_key: string; locked: boolean }>(
      db,
      c,
      `WITH h AS (
         SELECT compaction_key, message_id FROM ${compactionHead}
          WHERE compaction_key = ANY($1::text[]) AND message_id = ANY($2::bigint[])
       ), l AS MATERIALIZED (
         SELECT compaction_key FROM ${compactionHead}
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
       DELETE FROM ${messageLog} WHERE id = ANY($2::bigint[]) RETURNING 1
     ), e AS (
       DELETE FROM ${exceptionQueue}
        WHERE consumer_group_id IN (SELECT id FROM ${db.q}.consumer_group_config WHERE stream_id = $1)
          AND message_id = ANY($2::bigint[]) AND status IN ('dead', 'superseded', 'expired') RETURNING 1
     ), d AS (
       DELETE FROM ${deliveryLog} WHERE message_id = ANY($2::bigint[]) RETURNING 1
     ), h AS (
       UPDATE ${compactionHead} SET message_id = NULL, compaction_rank = NULL, updated_at = now()
        WHERE compaction_key = ANY($3::text[]) AND message_id = ANY($2::bigint[]) RETURNING 1
     )
     SELECT (SELECT count(*) FROM m)::text AS m, (SELECT count(*) FROM e)::text AS e,
            (SELECT count(*) FROM d)::text AS d, (SELECT count(*) FROM h)::text AS h`,
    [streamId, doomed, headKeys],
  );
  const x = r.rows[0];
  return { messages: Number(x.m), exceptionRows: Number(x.e), deliveryLogRows: Number(x.d), headsEmptied: Number(x.h) };
}
