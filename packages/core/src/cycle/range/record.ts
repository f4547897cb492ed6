// Recording a range (docs/protocol/poll-cycle.md#recording-a-range): the rows a recorded prefix writes, the
// record sent alone (record_range_N), the record row of a statement that recorded it together with
// more, and what a lost reply leaves to decide (docs/protocol/crash-recovery.md#unknown-commits).
import { randomUUID } from "node:crypto";
import type { RetryState } from "../../db.js";
import type { RecordFlagsRow, RecordParams } from "../../sql/cycle.js";
import * as statements from "../../sql/cycle.js";
import { type PollContext, type RangeMessage, big, logDead, logNotStarted, lostLease } from "../context.js";
import { type Plan, type RunOutcome, plan } from "../plan.js";
import { type KeyRelease, keyLeaseJson } from "./keys.js";
import { type MonotonicMs, now } from "../../clock.js";

/** The rows a record writes for a prefix of the range, and what the report counts of it. */
export interface RangeRows {
  exceptions: unknown[];
  deliveries: unknown[];
  plans: [RangeMessage, Plan][];
  plainSuccesses: number;
}

/** A range's record: its token, the rows of the recorded prefix and the key leases it releases. */
export interface RangeRecord {
  token: string;
  rows: RangeRows;
  keys: KeyRelease;
  /**
   * Claim the next range even if due exception rows wait (docs/protocol/poll-cycle.md#due-rows-and-the-chain):
   * only after a range without keyed messages.
   */
  pastDue: boolean;
}

/** What a phase learnt that the rest of the poll acts on. */
export interface Facts {
  /** Something it did or saw can move the committed cursor: advance it at the end of the poll. */
  advance: boolean;
  /** Exception rows to expire, or due to reserve, as a record row said. */
  expirable: boolean;
  reservable: boolean;
}

export const NO_FACTS: Facts = Object.freeze({ advance: false, expirable: false, reservable: false });

export function mergeFacts(a: Facts, b: Facts): Facts {
  return { advance: a.advance || b.advance, expirable: a.expirable || b.expirable, reservable: a.reservable || b.reservable };
}

/** The range a record is of: bounds, token, and when its lease expires at the earliest (monotonic ms). */
export interface RecordedRange {
  token: string;
  low: string;
  high: string;
  leaseExpiry: MonotonicMs;
}

/** The exception and delivery-log rows of a recorded prefix; plain successes write none. */
export function rowsOf<T>(ctx: PollContext<T>, recorded: RangeMessage[]): RangeRows {
  const out: RangeRows = { exceptions: [], deliveries: [], plans: [], plainSuccesses: 0 };
  for (const m of recorded) {
    const o = m.outcome as RunOutcome;
    if (o.kind === "success" && ctx.mode !== "all") {
      out.plainSuccesses++;
      continue;
    }
    const p = plan(o, 0, 0, m.resolved, ctx.resolution.exceptionInitialBackoff, ctx.mode);
    out.plans.push([m, p]);
    if (p.row.status !== "delete" && p.row.status !== "superseded") {
      out.exceptions.push({
        message_id: m.id, status: p.row.status, message_key: m.message_key, concurrency: m.resolved.concurrency,
        attempts: p.row.attempts, delays: p.row.delays, run_after_ms: p.row.runAfterMs ?? 0, last_error: p.row.lastError,
      });
    }
    if (p.log) out.deliveries.push({ message_id: m.id, attempt: p.log.attempt, status: p.log.status, error: p.log.error });
  }
  return out;
}

/** The rows of a recorded prefix whose every message succeeded, outside mode `all`: none to write (as rowsOf would find). */
export function plainRows(n: number): RangeRows {
  return { exceptions: [], deliveries: [], plans: [], plainSuccesses: n };
}

/** A record's rows as JSON arrays, as record_range_N, claim_N and record_take_keys_N take them. */
export function rowsJson(rows: RangeRows): { recordExceptions: string | null; recordDeliveries: string | null } {
  return {
    recordExceptions: rows.exceptions.length ? JSON.stringify(rows.exceptions) : null,
    recordDeliveries: rows.deliveries.length ? JSON.stringify(rows.deliveries) : null,
  };
}

/** A record as claim_N and record_range_N take it. */
export function recordParams(rec: RangeRecord): RecordParams {
  return { recordToken: rec.token, ...rowsJson(rec.rows), recordKeys: keyLeaseJson(rec.keys) };
}

/** The report's counters of a recorded prefix. */
export function countRecorded<T>(ctx: PollContext<T>, rows: RangeRows): void {
  ctx.report.succeeded += rows.plainSuccesses;
  for (const [m, p] of rows.plans) {
    ctx.report[p.counter]++;
    if (p.row.status === "dead") logDead(ctx, m.id, p.row.lastError);
  }
}

/**
 * A range whose lease was lost records nothing; its key leases are released, and a range claimed
 * ahead that starts next (`start`) is marked started all the same.
 */
export async function recordLost<T>(ctx: PollContext<T>, range: RecordedRange, keys: KeyRelease, start: string | null): Promise<Facts> {
  lostLease(ctx, `range (${range.low}, ${range.high}]`);
  const recordKeys = keyLeaseJson(keys);
  if (recordKeys !== null || start !== null) {
    await statements.recordRange.retry(ctx.db, ctx.tables, {
      groupId: ctx.groupId, recordToken: randomUUID(), keepFrom: null, newToken: null, recordExceptions: "[]", recordDeliveries: "[]", recordKeys, start,
    });
  }
  return NO_FACTS;
}

/**
 * record_range_N: the contiguous prefix of messages with an outcome is recorded (`keepFrom` the
 * last id recorded, null: all of it); the rest is released at once under a new token. `start`:
 * the poll's range claimed ahead that starts after this record, marked started by it
 * (docs/protocol/poll-cycle.md#claiming-ahead).
 */
export async function recordAlone<T>(
  ctx: PollContext<T>, range: RecordedRange, rec: RangeRecord, keepFrom: string | null, start: string | null,
): Promise<Facts> {
  const newToken = keepFrom !== null ? randomUUID() : null;
  const retry: RetryState = { retried: false };
  const r = await statements.recordRange.retry(ctx.db, ctx.tables, { groupId: ctx.groupId, keepFrom, newToken, start, ...recordParams(rec) }, retry);
  const committed = r.rows[0].committed;
  if (committed === null) return recordMissing(ctx, range, rec.rows, retry, newToken);
  ctx.report.committedAfter = committed;
  countRecorded(ctx, rec.rows);
  return NO_FACTS;
}

/** The prefix a record keeps: up to the first message without an outcome; logs the unstarted rest. */
export function recordedPrefix<T>(ctx: PollContext<T>, msgs: RangeMessage[], failed: boolean): {
  recorded: RangeMessage[];
  keepFrom: string | null;
} {
  const firstOpen = msgs.find((m) => m.outcome === undefined);
  if (firstOpen === undefined) return { recorded: msgs, keepFrom: null };
  ctx.report.rangesPartial++;
  if (!failed) logNotStarted(ctx, msgs.filter((m) => m.outcome === undefined).length);
  return { recorded: msgs.filter((m) => big(m.id) < big(firstOpen.id)), keepFrom: (big(firstOpen.id) - 1n).toString() };
}

/**
 * The record row of a statement that recorded a range with more (the next claim, or the next
 * range's key take): counts the recorded prefix and notes the expired and due exception rows it
 * saw. `landed` false when the record did not land under the range's token.
 */
export async function recordRowFacts<T>(
  ctx: PollContext<T>, range: RecordedRange, row: RecordFlagsRow, rows: RangeRows, retry: RetryState,
): Promise<Facts & { landed: boolean }> {
  if (!row.recorded) return { ...(await recordMissing(ctx, range, rows, retry, null)), landed: false };
  countRecorded(ctx, rows);
  return { advance: false, expirable: row.expirable === true, reservable: row.reservable === true, landed: true };
}

/**
 * The record found no lease under the range's token: lost, or recorded by an attempt whose reply
 * was lost (ownRecord). When it is ours, its prefix is counted and the advance reports the cursor.
 */
async function recordMissing<T>(ctx: PollContext<T>, range: RecordedRange, rows: RangeRows, retry: RetryState, newToken: string | null): Promise<Facts> {
  const mine = retry.retried ? await ownRecord(ctx, range, newToken) : "lost";
  if (mine === "lost") lostLease(ctx, `range (${range.low}, ${range.high}]`);
  if (mine !== "mine") return NO_FACTS;
  countRecorded(ctx, rows);
  return { ...NO_FACTS, advance: true };
}

/**
 * The record found no lease under the range's token, after an attempt whose reply was lost: was
 * that attempt's commit ours? A partial record left the rest under its new token: found, it is
 * ours. Otherwise, while the lease had not expired nobody could have taken the range over, so the
 * missing lease is our own record. After the expiry nobody can tell: SQL0044
 * (docs/protocol/crash-recovery.md#unknown-commits).
 */
async function ownRecord<T>(ctx: PollContext<T>, range: RecordedRange, newToken: string | null): Promise<"mine" | "lost" | "unknown"> {
  const answeredAt = now();
  if (newToken !== null) {
    const rest = await statements.leaseByToken.retry(ctx.db, ctx.tables, { groupId: ctx.groupId, token: newToken });
    if (rest.rowCount !== 0) return "mine";
  }
  if (answeredAt < range.leaseExpiry) return "mine";
  ctx.db.events.emit({
    level: "warn", code: "SQL0044",
    message: `the reply to recording range (${range.low}, ${range.high}] was lost and its lease has expired since: ` +
      "whether its outcomes were recorded is unknown (if not, the range runs again)",
    stream: ctx.stream, group: ctx.group, low: range.low, high: range.high,
  });
  return "unknown";
}
