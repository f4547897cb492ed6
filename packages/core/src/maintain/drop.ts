// Step 2 of maintain() (docs/protocol/retention.md#maintain): expired partitions that lie wholly at or below
// the retention floor are dropped, oldest first, with the exception and delivery-log rows of their
// messages.
import type pg from "pg";
import { type Db, query, transaction } from "../db.js";
import { dropTable, localLockTimeout, relationExists } from "../sql/catalog.js";
import * as MaintainSql from "../sql/maintain.js";
import { partitionName, tables } from "../sql/names.js";
import { floorOf, retentionLockKey, tryXactLock } from "./floor.js";
import { BATCH, LOCK_FAILURES, LOCK_TIMEOUT, type MaintainRun } from "./run.js";

/** 2. Drop expired partitions that lie wholly at or below the floor. */
export async function dropExpired(run: MaintainRun): Promise<void> {
  const { s, report } = run;
  const f = (run.floor = await floorOf(run.db, s.id));
  report.floor = String(f.floor);
  const candidates = run.partitions.filter((j) => j < run.active).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  for (const j of candidates) {
    if ((j + 1n) * s.partitionSize - 1n > f.floor) break; // above the floor: so are the later ones
    if (run.late()) {
      run.dropsPending = true;
      return;
    }
    const expired = await partitionExpiredOrGone(run, j);
    if (expired === "gone") continue; // another maintain() dropped it since step 1 listed it
    if (!expired) break; // later partitions are newer
    const r = await dropPartition(run, j);
    if (r === "dropped") report.partitionsDropped++;
    else if (r === "skipped" || r === "stop") {
      // Whoever holds the log will likely hold it for the next partition too: next run.
      if (r === "skipped") report.partitionsSkipped++;
      run.dropsPending = true;
      return;
    }
  }
}

/** Whether partition j is wholly expired; "gone" when another maintain() dropped it since step 1. */
async function partitionExpiredOrGone(run: MaintainRun, j: bigint): Promise<boolean | "gone"> {
  try {
    return await partitionExpired(run.db, run.s.id, j, run.s.retentionMs);
  } catch (e) {
    if ((e as { code?: string }).code === "42P01") return "gone";
    throw e;
  }
}

/**
 * Drops partition j: first the partition's delivery-log rows in batches (audit rows of messages
 * that are expired and resolved by every group), so that the drop transaction, which blocks
 * producers for its duration, only deletes the few rows left; then the drop transaction. A lock
 * it cannot get (timeout) or a deadlock anywhere on the way skips the partition until the next run.
 */
async function dropPartition(run: MaintainRun, j: bigint): Promise<"dropped" | "skipped" | "gone" | "stop"> {
  const { db, s, report, late } = run;
  const lo = j * s.partitionSize;
  const hi = lo + s.partitionSize;
  try {
    for (;;) {
      if (late()) return "stop";
      const n = await deleteDeliveryLogBatch(db, s.id, lo, hi);
      report.deliveryLogRowsDeleted += n;
      if (n < BATCH) break;
    }
    if (late()) return "stop";
    const r = await transaction(db, (c) => dropPartitionTx(db, c, s.id, s.partitionSize, j));
    if (r.outcome === "dropped") {
      report.exceptionRowsDeleted += r.exceptionRows;
      report.deliveryLogRowsDeleted += r.deliveryLogRows;
      return "dropped";
    }
    if (r.outcome === "gone") return "gone";
    return "stop"; // another maintain() holds the stream's retention lock
  } catch (e) {
    if (e instanceof FloorMoved) return "stop";
    const code = (e as { code?: string }).code ?? "";
    if (LOCK_FAILURES.has(code)) {
      db.events.emit({
        level: "warn",
        code: "SQL0041",
        message: `drop of partition ${j} of ${s.name} skipped: ${(e as Error).message}; retried on the next maintain()`,
        stream: s.name,
        partition: String(j),
      });
      return "skipped";
    }
    throw e;
  }
}

/**
 * Whether every row of partition k is older than now − retention (an empty partition counts as
 * expired). The newest id's row is checked first through the primary key, so a partition that
 * is not expired yet costs one index probe; only a candidate for dropping is scanned.
 */
async function partitionExpired(db: Db, streamId: string, k: bigint, retentionMs: bigint): Promise<boolean> {
  const p = partitionName(db.q, streamId, k);
  const r = await query<{ expired: boolean }>(db, db.pool, MaintainSql.partitionExpired(p), [String(retentionMs)]);
  return r.rows[0].expired;
}

/**
 * Deletes up to one batch of delivery_log_N rows of messages in [lo, hi) ahead of a partition
 * drop, so that the drop transaction (which blocks producers) stays short. Returns rows deleted.
 * Rows another session holds (a second maintain() deleting the same range, say) are skipped, not
 * waited for: two deleters that each wait on rows the other locked first deadlock.
 */
async function deleteDeliveryLogBatch(db: Db, streamId: string, lo: bigint, hi: bigint): Promise<number> {
  const r = await MaintainSql.deleteDeliveryLogBatch.query(db, db.pool, tables(db.q, streamId), { lo: String(lo), hi: String(hi) });
  return r.rowCount ?? 0;
}

type DropOutcome = "dropped" | "gone" | "busy";

/** Thrown inside a drop transaction to roll it back when the floor no longer covers the partition. */
class FloorMoved extends Error {
  constructor() {
    super("the retention floor moved below the partition while it was being dropped");
  }
}

/**
 * The drop transaction of partition k (docs/protocol/retention.md#maintain step 2), run inside the caller's transaction
 * on c. Order matters for deadlock freedom: the advisory lock, then the table lock on the parent
 * (producers and pollers lock message_log_N before any row of the family, so nobody who holds
 * that lock waits for us), then row work, then DROP. The floor is read again under the lock, after
 * the dead rows are deleted, so a redrive that raced us keeps its message: FloorMoved is thrown and
 * the caller's transaction rolls back.
 */
async function dropPartitionTx(
  db: Db,
  c: pg.PoolClient,
  streamId: string,
  partitionSize: bigint,
  k: bigint,
): Promise<{ outcome: DropOutcome; exceptionRows: number; deliveryLogRows: number; headsEmptied: number }> {
  const none = { exceptionRows: 0, deliveryLogRows: 0, headsEmptied: 0 };
  const p = partitionName(db.q, streamId, k);
  const t = tables(db.q, streamId);
  const lo = k * partitionSize;
  const hi = (k + 1n) * partitionSize;
  await query(db, c, localLockTimeout(LOCK_TIMEOUT));
  if (!(await tryXactLock(db, c, retentionLockKey(db, streamId)))) return { outcome: "busy", ...none };
  await MaintainSql.lockLogOnly.query(db, c, t, {});
  // Checked only now: taking a table lock makes this backend read the catalog changes other
  // sessions committed (a partition another maintain() dropped a moment ago).
  const exists = await relationExists.query(db, c, t, { name: p });
  if (!exists.rows[0].ok) return { outcome: "gone", ...none };
  const groups = await MaintainSql.groupIds.query(db, c, t, { streamId });
  const del = await MaintainSql.deletePartitionRows.query(db, c, t, { lo: String(lo), hi: String(hi), groupIds: groups.rows[0].ids ?? [] });
  const f = await floorOf(db, streamId, c);
  // A redrive or a seek moved the floor below this partition since it was chosen: roll back.
  if (hi - 1n > f.floor) throw new FloorMoved();
  await query(db, c, dropTable(p));
  return {
    outcome: "dropped",
    exceptionRows: Number(del.rows[0].exception_rows),
    deliveryLogRows: Number(del.rows[0].delivery_rows),
    headsEmptied: Number(del.rows[0].heads_emptied),
  };
}
