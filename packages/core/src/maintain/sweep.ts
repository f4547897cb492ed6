// Step 3 of maintain() (docs/protocol/retention.md#maintain): expired rows at or below the retention floor
// are deleted one batch per transaction, lowest id first, with their exception and delivery-log
// rows; the partition the producers write into is never swept.
import type pg from "pg";
import { type Db, query, transaction } from "../db.js";
import { localLockTimeout } from "../sql/catalog.js";
import * as MaintainSql from "../sql/maintain.js";
import { tables } from "../sql/names.js";
import { floorOf, retentionLockKey, tryXactLock } from "./floor.js";
import { LOCK_FAILURES, LOCK_TIMEOUT, type MaintainRun } from "./run.js";

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
  const r = await MaintainSql.sweepWindow.query(db, db.pool, tables(db.q, streamId), {
    after: String(after), limit: String(limit), retentionMs: String(retentionMs),
  });
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
  const t = tables(db.q, streamId);
  await query(db, c, localLockTimeout(LOCK_TIMEOUT));
  if (!(await tryXactLock(db, c, retentionLockKey(db, streamId)))) return null;
  const ids = candidates.map((x) => x.id);
  // Lock the exception rows of the candidates in a fixed order; the locked versions are current,
  // so a row that a redrive has put back to ready shows as ready here and keeps its message.
  const rows = await MaintainSql.lockSweepRows.query(db, c, t, { streamId, ids });
  const keep = new Set<string>();
  for (const row of rows.rows) if (row.status !== "dead" && row.status !== "superseded" && row.status !== "expired") keep.add(row.message_id);
  // Compaction heads that point at a candidate: lock them without waiting; a head a producer is
  // writing at this moment keeps its message until a later batch.
  const compacted = candidates.filter((x) => x.compacted && x.key !== null && !keep.has(x.id));
  let headKeys: string[] = [];
  if (compacted.length > 0) {
    const heads = await MaintainSql.lockSweepHeads.query(db, c, t, { keys: compacted.map((x) => x.key), ids: compacted.map((x) => x.id) });
    for (const h of heads.rows) {
      if (h.locked) headKeys.push(h.compaction_key);
      else keep.add(h.message_id);
    }
  }
  const doomed = ids.filter((id) => !keep.has(id));
  if (doomed.length === 0) return { messages: 0, exceptionRows: 0, deliveryLogRows: 0, headsEmptied: 0 };
  headKeys = headKeys.filter((k, i, a) => a.indexOf(k) === i);
  const r = await MaintainSql.sweepRows.query(db, c, t, { streamId, ids: doomed, headKeys });
  const x = r.rows[0];
  return { messages: Number(x.m), exceptionRows: Number(x.e), deliveryLogRows: Number(x.d), headsEmptied: Number(x.h) };
}
