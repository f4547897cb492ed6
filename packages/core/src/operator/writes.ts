// The operator writes on a consumer group (docs/guide/operations.md): pause/resume, seek(), redrive()
// and discard().
import type { PoolClient } from "pg";
import { groupResolution, resolveMessage } from "../config.js";
import { transaction } from "../db.js";
import { SqlStreamsError, groupNotRegistered } from "../errors.js";
import * as Admin from "../sql/admin.js";
import { type Tables, insertDeliveryLog } from "../sql/cycle.js";
import * as OperatorSql from "../sql/operator.js";
import * as Registry from "../sql/register.js";
import { setTimeout as sleep } from "node:timers/promises";
import { type GroupRef, lookupGroup, streamTables } from "./group.js";
import type { BatchOptions, DeadSelector, RedriveSelector, SeekTarget } from "./types.js";
import { type Batch, type Selector, asId, asTime, validateBatch, validateSelector } from "./validate.js";


/** While paused, every poll returns at once with paused: true and writes nothing. */
export async function setPaused(ref: GroupRef, paused: boolean): Promise<void> {
  const { id, t } = await streamTables(ref);
  const r = await Admin.setPaused.query(ref.client.db, ref.client.db.pool, t, { streamId: id, group: ref.group, paused });
  if (r.rowCount === 0) throw groupNotRegistered(ref.stream, ref.group);
}

/**
 * Moves the group's position (docs/guide/operations.md#seek): the next delivered message is the first existing id
 * ≥ `to.id`, or the first created at or after `to.time`. Refused while leases are open unless forced.
 */
export async function seek(ref: GroupRef, to: SeekTarget, opts: { force?: boolean }): Promise<{ claimed: string; committed: string; previous: { claimed: string; committed: string }; deletedRows: number }> {
  if (typeof to !== "object" || to === null || (to.id === undefined) === (to.time === undefined)) {
    throw new SqlStreamsError("SQL0015", "seek() takes exactly one of { id } or { time }");
  }
  const byId = to.id !== undefined ? asId(to.id, "seek id", "SQL0015") : null;
  const byTime = to.time !== undefined ? asTime(to.time, "seek time", "SQL0015") : null;
  const db = ref.client.db;
  const { t, groupId } = await lookupGroup(ref);
  const out = await transaction(db, async (c) => {
    const groupCursor = await Admin.lockCursor.query(db, c, t, { groupId });
    const head = BigInt((await Admin.visibleHead.query(db, c, t, {})).rows[0].head);
    let p: bigint;
    if (byId !== null) {
      const want = BigInt(byId);
      if (want < 0n || want > head) throw new SqlStreamsError("SQL0029", `seek id ${want} is outside the log (0 … head ${head})`, { id: byId, head: head.toString() });
      const f = (await Admin.firstIdAtOrAfter.query(db, c, t, { id: byId })).rows[0].id;
      p = f === null ? head : BigInt(f) - 1n;
    } else {
      const f = (await Admin.firstIdAtOrAfterTime.query(db, c, t, { time: byTime as Date })).rows[0].id;
      p = f === null ? head : BigInt(f) - 1n;
    }
    if (p < 0n || p > head) throw new SqlStreamsError("SQL0029", `seek position ${p} is outside the log (0 … head ${head})`, { head: head.toString() });
    const open = (await Admin.openLeases.query(db, c, t, { groupId })).rows[0];
    if ((open.ranges || open.rows) && !opts.force) {
      throw new SqlStreamsError("SQL0028", `seek of ${ref.stream}/${ref.group} refused: the group has open leases; pause it and wait for them to end, or pass { force: true }`, { ranges: open.ranges, rows: open.rows });
    }
    if (opts.force) for (const s of Admin.forceRelease) await s.query(db, c, t, { groupId });
    const del = await Admin.deleteRowsAbove.query(db, c, t, { groupId, position: p.toString() });
    const r = await Admin.seekCursor.query(db, c, t, { groupId, position: p.toString() });
    return { ...r.rows[0], previous: groupCursor.rows[0], deletedRows: del.rowCount ?? 0 };
  });
  db.events.emit({
    level: "info", code: "SEEK", message: `seek moved ${ref.stream}/${ref.group} from claimed ${out.previous.claimed}/committed ${out.previous.committed} to claimed ${out.claimed}/committed ${out.committed}; ${out.deletedRows} exception row(s) deleted`,
    stream: ref.stream, group: ref.group, ...out,
  }, false);
  return out;
}

/**
 * Puts dead rows back to work with a fresh budget (docs/guide/operations.md#redrive); with `rate`, in
 * small paced transactions that can be stopped and run again (redriven rows are no longer dead).
 */
export async function redrive(ref: GroupRef, selector: RedriveSelector, opts: BatchOptions): Promise<{ redriven: number; skipped: number; batches?: number }> {
  const b = validateBatch(opts, "SQL0030", "redrive");
  const sel = validateSelector(selector, "SQL0030", "redrive", b.rate !== null);
  const db = ref.client.db;
  const { t, groupId, config, streamId } = await lookupGroup(ref);
  const g = groupResolution(config ?? {});
  const modeRow = await Registry.deliveryLogMode.query(db, db.pool, t, { streamId });
  const mode = modeRow.rows[0].mode;
  const r = await onDead(ref, t, groupId, sel, b, async (c, rows) => {
    const live = rows.filter((x) => x.exists);
    if (live.length > 0) {
      const upd = live.map((x) => ({
        message_id: x.message_id,
        concurrency: resolveMessage(g, x.options, x.message_key !== null, x.compacted === true).resolved.concurrency,
      }));
      await Admin.redriveRows.query(db, c, t, { groupId, rows: JSON.stringify(upd) });
      const lowest = live.map((x) => BigInt(x.message_id)).reduce((a, v) => (v < a ? v : a));
      await Admin.lowerRedriveFloor.query(db, c, t, { groupId, floor: lowest.toString() });
      if (mode !== "off") {
        const logs = live.map((x) => ({ message_id: x.message_id, attempt: x.attempts, status: "redriven", error: `redriven: ${b.reason}` }));
        await insertDeliveryLog.query(db, c, t, { groupId, rows: JSON.stringify(logs) });
      }
    }
    return live.length;
  });
  return { redriven: r.done, skipped: r.skipped, ...(b.rate === null ? {} : { batches: r.batches }) };
}

/**
 * Throws dead rows away (docs/guide/operations.md#discarding-dead-messages): each row is deleted and a
 * `discarded: <reason>` row is written to the delivery log, whatever its mode, as the audit trail.
 * The message stays in the log (retention removes it); the group will not run it again.
 */
export async function discard(ref: GroupRef, selector: DeadSelector, opts: BatchOptions): Promise<{ discarded: number; skipped: number; batches?: number }> {
  const b = validateBatch(opts, "SQL0059", "discard");
  const sel = validateSelector(selector, "SQL0059", "discard", b.rate !== null);
  const db = ref.client.db;
  const { t, groupId } = await lookupGroup(ref);
  const r = await onDead(ref, t, groupId, sel, b, async (c, rows) => {
    const gone = await OperatorSql.discardRows.query(db, c, t, { groupId, ids: rows.map((x) => x.message_id), reason: b.reason });
    return gone.rowCount ?? 0;
  });
  return { discarded: r.done, skipped: r.skipped, ...(b.rate === null ? {} : { batches: r.batches }) };
}

/** Selects dead rows (all at once, or in paced batches walking up the ids) and applies `apply` to each selection in its transaction. */
async function onDead(ref: GroupRef, t: Tables, groupId: string, sel: Selector, b: Batch, apply: (c: PoolClient, rows: OperatorSql.DeadRow[]) => Promise<number>): Promise<{ done: number; skipped: number; batches: number }> {
  const db = ref.client.db;
  const size = b.rate === null ? Number.MAX_SAFE_INTEGER : b.batchSize;
  const chunks: string[][] = [];
  if (sel.ids) for (let i = 0; i < sel.ids.length; i += Math.min(size, sel.ids.length)) chunks.push(sel.ids.slice(i, i + size));
  const total = { done: 0, skipped: 0, batches: 0 };
  let after = "0";
  let remaining = sel.limit;
  const started = performance.now();
  for (let i = 0; ; i++) {
    if (i > 0 && b.signal?.aborted) break;
    if (sel.ids && i >= chunks.length) break;
    if (!sel.ids && remaining <= 0) break;
    if (b.rate !== null && total.done + total.skipped > 0) {
      const due = started + ((total.done + total.skipped) / b.rate) * 1000;
      const wait = due - performance.now();
      if (wait > 0) await sleep(wait);
      if (b.signal?.aborted) break;
    }
    const want = sel.ids ? chunks[i].length : Math.min(size, remaining);
    const r = await transaction(db, async (c) => {
      const rows = sel.ids
        ? (await OperatorSql.selectDeadByIds.query(db, c, t, { groupId, ids: chunks[i] })).rows
        : (await OperatorSql.selectDeadByFilter.query(db, c, t, {
            groupId, errorContains: sel.errorContains, since: sel.deadSince, before: sel.deadBefore, limit: want, key: sel.key, payload: sel.payload, after, status: sel.status,
          })).rows;
      const done = rows.length === 0 ? 0 : await apply(c, rows);
      return { rows, done };
    });
    total.batches++;
    total.done += r.done;
    total.skipped += sel.ids ? chunks[i].length - r.done : r.rows.length - r.done;
    b.onBatch?.({ ...total });
    if (!sel.ids) {
      if (r.rows.length > 0) after = r.rows[r.rows.length - 1].message_id;
      remaining -= r.rows.length;
      if (r.rows.length < want) break;
    }
  }
  return total;
}
