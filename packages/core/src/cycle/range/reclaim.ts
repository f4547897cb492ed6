// Reclaiming an expired range (docs/protocol/poll-cycle.md#the-range-lease): taken over under a new token
// and run again, or quarantined into exception rows once reclaimed too often
// (docs/protocol/crash-recovery.md#quarantine).
import { randomUUID } from "node:crypto";
import type pg from "pg";
import { transactionRetry } from "../../db.js";
import type { LeaseRow } from "../../sql/cycle.js";
import * as statements from "../../sql/cycle.js";
import { type PollContext, leaseParams, rangeLeaseCap, resolve } from "../context.js";
import type { Chain, RangeFacts } from "./chain.js";
import { type Facts, NO_FACTS } from "./record.js";
import { type LeasedRange, RangeRun } from "./run.js";
import { type MonotonicMs, now } from "../../clock.js";

const QUARANTINE_TEXT = "quarantined: range reclaimed too many times";

/** The expired lease an attempt found, kept so a repeat after a lost reply can tell what it did. */
interface FirstFound {
  token: string;
  low: string;
  high: string;
  released: boolean;
  quarantine: boolean;
}

/** What the takeover transaction did: nothing to reclaim, a range to run, or a range done with (quarantined). */
interface Takeover {
  range: LeasedRange | "none" | "done";
  /** The lease found and its new reclaim count, for the attempt that committed (never for a repeat). */
  lease?: LeaseRow;
  reclaims?: number;
  advance?: boolean;
}

/** An expired range of the group, reclaimed and run, or quarantined (docs/protocol/poll-cycle.md#the-range-lease). */
export async function reclaimPhase<T>(ctx: PollContext<T>, chain: Chain<T>): Promise<RangeFacts> {
  const sentAt = now();
  // Decided once, so a repeat after a lost COMMIT reply can find this poll's own takeover.
  const token = randomUUID();
  const found: { first: FirstFound | null } = { first: null };
  const taken = await transactionRetry(ctx.db, (c, attempt) => takeOver(ctx, c, token, attempt > 0 ? found.first : null, found));
  if (taken.range === "none") return { ...NO_FACTS, took: false, fenceBlocked: false };
  countReclaim(ctx, taken);
  let facts: Facts = { ...NO_FACTS, advance: taken.advance === true };
  if (taken.range !== "done") facts = await runReclaimed(ctx, chain, taken.range, sentAt);
  return { ...facts, took: true, fenceBlocked: false };
}

/** Counted once, for the attempt that committed (never for a repeat of this poll's own reclaim). */
function countReclaim<T>(ctx: PollContext<T>, taken: Takeover): void {
  const { lease, reclaims } = taken;
  if (lease === undefined || reclaims === undefined) return;
  if (lease.released) ctx.report.rangesResumed++;
  else {
    ctx.report.rangesReclaimed++;
    ctx.db.events.emit({ level: "warn", code: "SQL0035", message: `expired range (${lease.low}, ${lease.high}] reclaimed (reclaim ${reclaims})`, stream: ctx.stream, group: ctx.group, low: lease.low, high: lease.high, reclaims });
  }
}

/** One attempt of the takeover transaction; `first` is what an earlier attempt found, when this is a repeat. */
async function takeOver<T>(
  ctx: PollContext<T>, c: pg.PoolClient, token: string, first: FirstFound | null, found: { first: FirstFound | null },
): Promise<Takeover> {
  const { db, tables: t, groupId } = ctx;
  if (first !== null) {
    const repeat = await ownTakeover(ctx, c, token, first);
    if (repeat !== null) return repeat;
  }
  const l = await statements.lockExpiredRange.query(db, c, t, { groupId });
  if (l.rowCount === 0) return { range: "none" };
  const lease = l.rows[0];
  const reclaims = lease.released ? lease.reclaims : lease.reclaims + 1;
  // Decided from ids, options and keys only: a range whose payloads crash the process (out of
  // memory) is still counted and quarantined (docs/protocol/poll-cycle.md#the-byte-bound).
  const msgs = (await statements.readRangeIds.query(db, c, t, { low: lease.low, high: lease.high })).rows;
  const quarantineIt = reclaims >= ctx.resolution.maxRangeReclaims || msgs.length === 0;
  found.first = { token: lease.token, low: lease.low, high: lease.high, released: lease.released, quarantine: quarantineIt };
  if (quarantineIt) {
    if (msgs.length > 0) await quarantine(ctx, c, msgs);
    await statements.deleteRange.query(db, c, t, { groupId, token: lease.token });
    return { range: "done", lease, reclaims, advance: true };
  }
  const over = await statements.takeOverRange.query(db, c, t, {
    groupId, oldToken: lease.token, token, reclaims, timeoutMax: Math.max(...msgs.map((m) => resolve(ctx, m).timeout)), size: msgs.length,
    ...leaseParams(ctx, rangeLeaseCap(ctx)),
  });
  return { range: { token, low: lease.low, high: lease.high, leaseMs: over.rows[0].lease_ms, msgs: [] }, lease, reclaims };
}

/**
 * docs/protocol/crash-recovery.md#unknown-commits: the first attempt may have committed unheard. Its
 * takeover is found under this poll's token; its quarantine by the old lease being gone. Null:
 * neither, so the repeat reclaims afresh.
 */
async function ownTakeover<T>(ctx: PollContext<T>, c: pg.PoolClient, token: string, first: FirstFound): Promise<Takeover | null> {
  const { db, tables: t, groupId } = ctx;
  const own = await statements.leaseByToken.query(db, c, t, { groupId, token });
  if (own.rowCount !== 0) {
    const o = own.rows[0];
    // What is left of the lease by the database clock, counted from before the first attempt: never longer than it.
    const lease = { token: first.token, low: o.low, high: o.high, reclaims: o.reclaims, released: first.released };
    return { range: { token, low: o.low, high: o.high, leaseMs: o.left_ms, msgs: [] }, lease, reclaims: o.reclaims };
  }
  if (!first.quarantine) return null;
  const old = await statements.leaseByToken.query(db, c, t, { groupId, token: first.token });
  if (old.rowCount !== 0) return null;
  db.events.emit({
    level: "warn", code: "SQL0044",
    message: `the reply to the quarantine of range (${first.low}, ${first.high}] was lost; it was done, by this poll or another`,
    stream: ctx.stream, group: ctx.group, low: first.low, high: first.high,
  });
  return { range: "done", advance: true };
}

/** The payloads are read only once the takeover (and its reclaim count) has committed; then the range runs alone. */
async function runReclaimed<T>(ctx: PollContext<T>, chain: Chain<T>, range: LeasedRange, sentAt: MonotonicMs): Promise<Facts> {
  range.msgs = (await statements.readRange.retry(ctx.db, ctx.tables, { low: range.low, high: range.high })).rows;
  if (range.msgs.length === 0) {
    await statements.deleteRange.retry(ctx.db, ctx.tables, { groupId: ctx.groupId, token: range.token });
    return { ...NO_FACTS, advance: true };
  }
  const run = new RangeRun(ctx, range, sentAt, chain.sample);
  await run.takeFirstKeys(chain.headroom(false));
  const failure = await run.dispatch();
  const facts = await run.record(failure !== null);
  if (failure) throw failure.e;
  return facts;
}

async function quarantine<T>(ctx: PollContext<T>, c: pg.PoolClient, msgs: statements.MessageRow[] | Omit<statements.MessageRow, "payload" | "created_at">[]): Promise<void> {
  const { db, tables: t, groupId } = ctx;
  const rows = msgs.map((m) => ({ message_id: m.id, message_key: m.message_key, concurrency: resolve(ctx, m).concurrency }));
  const ins = await statements.quarantineRows.query(db, c, t, { groupId, rows: JSON.stringify(rows), error: QUARANTINE_TEXT });
  if (ctx.mode !== "off" && ins.rows.length > 0) {
    const deliveryLog = ins.rows.map((r) => ({ message_id: r.message_id, attempt: 0, status: "failure", error: QUARANTINE_TEXT }));
    await statements.insertDeliveryLog.query(db, c, t, { groupId, rows: JSON.stringify(deliveryLog) });
  }
  ctx.report.rangesQuarantined++;
  db.events.emit({ level: "warn", code: "SQL0036", message: `range quarantined into ${ins.rows.length} exception row(s)`, stream: ctx.stream, group: ctx.group, ids: ins.rows.map((r) => r.message_id) });
}
