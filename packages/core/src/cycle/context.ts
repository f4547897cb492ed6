// What one poll knows and shares between its phases, and the small helpers every phase uses.
import type { Runtime } from "../runtime.js";
import {
  type DeliveryLogMode, type GroupResolution, type MessageOptions, type ResolvedMessage, type ResolvedPollOptions,
  resolveMessage, timeoutBounds,
} from "../config.js";
import type { Db } from "../db.js";
import { compareIds } from "../ids.js";
import type { LeaseParams, MessageRow, Tables, TimeoutParams } from "../sql/cycle.js";
import { RunMessage } from "./run.js";
import type { RunOutcome } from "./plan.js";
import type { CycleReport, Handler } from "./types.js";
import { type MonotonicMs, type OnMonotonicClock, now } from "../clock.js";

export interface RangeMessage extends MessageRow {
  resolved: ResolvedMessage;
  /** When the message expires on the monotonic clock (null: never; docs/guide/producing.md#expiry). */
  expiry: MonotonicMs | null;
  /** Its outcome in the range's run, once it has one (undefined: not run, or still running). */
  outcome?: RunOutcome | undefined;
}

/** Poll options as a poll runs with them: the deadline on the monotonic clock. */
export type PollOptions = OnMonotonicClock<ResolvedPollOptions>;

export interface PollContext<T> {
  client: Runtime;
  db: Db;
  tables: Tables;
  stream: string;
  group: string;
  groupId: string;
  resolution: GroupResolution;
  mode: DeliveryLogMode;
  handler: Handler<T>;
  options: PollOptions;
  report: CycleReport;
  /** Set once no further handler may start in this poll (abort, deadline, lost lease). */
  stop: boolean;
  /** Resolutions of messages produced without options, by (has key, compacted). */
  plain: Map<number, ResolvedMessage>;
  /** The group's resolved rateLimit as the claim and the reservation take it (JSON), or null for none. */
  rate: string | null;
  /** Ms until the group's next token, when a claim or reservation of this poll was rate-limited. */
  rateWaitMs: number | null;
}

export const big = (s: string) => BigInt(s);

/** Orders rows by id (they usually arrive in order from the index scan: then this is one pass). */
export function byId<R extends { id: string }>(rows: R[]): R[] {
  for (let i = 1; i < rows.length; i++) {
    if (compareIds(rows[i - 1].id, rows[i].id) > 0) return rows.sort((x, y) => compareIds(x.id, y.id));
  }
  return rows;
}

export function aborted<T>(ctx: PollContext<T>): boolean {
  return ctx.options.signal?.aborted === true;
}

/** Whether a message takes a key lease: it has a key and is not parallel (docs/protocol/ordering.md#key-leases). */
export function isKeyed(concurrency: string, key: string | null): key is string {
  return concurrency !== "parallel" && key !== null;
}

/** The cap of every lease this poll takes: deadline + recordMargin (null without a deadline). */
export function leaseCap<T>(ctx: PollContext<T>): number | null {
  return ctx.options.deadline === undefined ? null : Math.max(1, Math.floor(ctx.options.deadline - now()) + ctx.options.recordMargin);
}

/**
 * A run's lease: one run of `timeout` plus recordMargin (+ `headroom`, for a key lease a chain
 * passes on), capped at deadline + recordMargin.
 */
export function runLeaseMs<T>(ctx: PollContext<T>, timeout: number, headroom = 0): number {
  const cap = leaseCap(ctx);
  const ms = timeout + ctx.options.recordMargin + headroom;
  return cap === null ? ms : Math.min(ms, cap);
}

/**
 * The cap of a range lease: leaseCap, and in a drain also the lease bound (or one run of the
 * default timeout when that is longer). A message that would not fit in the remaining lease
 * extends it before it starts (docs/protocol/poll-cycle.md#range-size-in-a-drain).
 */
export function rangeLeaseCap<T>(ctx: PollContext<T>): number | null {
  const cap = leaseCap(ctx);
  if (ctx.options.rangeLeaseBound === undefined) return cap;
  const bound = Math.max(ctx.options.rangeLeaseBound, ctx.resolution.defaults.timeout + ctx.options.recordMargin);
  return cap === null ? bound : Math.min(cap, bound);
}

/** What a lease is sized with, as the claim, the takeover and the reservation take it. */
export function leaseParams<T>(ctx: PollContext<T>, leaseCapMs: number | null): LeaseParams {
  return { concurrency: ctx.options.concurrency, recordMargin: ctx.options.recordMargin, leaseCapMs };
}

/** The group's timeout bounds, as the claim and the reservation take them. */
export function timeoutParams<T>(ctx: PollContext<T>): TimeoutParams {
  const b = timeoutBounds(ctx.resolution);
  return { timeoutDefault: b.def, timeoutMin: b.min, timeoutMax: b.max };
}

export function resolve<T>(ctx: PollContext<T>, m: Pick<MessageRow, "id" | "message_key" | "compaction_rank" | "options">, stored?: MessageOptions | null): ResolvedMessage {
  const opts = stored === undefined ? m.options : stored;
  if (opts === null) {
    const k = (m.message_key !== null ? 1 : 0) + (m.compaction_rank !== null ? 2 : 0);
    let hit = ctx.plain.get(k);
    if (!hit) {
      hit = resolveMessage(ctx.resolution, null, m.message_key !== null, m.compaction_rank !== null).resolved;
      ctx.plain.set(k, hit);
    }
    return hit;
  }
  const r = resolveMessage(ctx.resolution, stored === undefined ? m.options : stored, m.message_key !== null, m.compaction_rank !== null);
  for (const f of r.clamped) {
    ctx.db.events.emit({
      level: "info", code: "SQL0039", message: `produced option ${f} of message ${m.id} was clamped to the group's bounds`,
      stream: ctx.stream, group: ctx.group, field: f, messageId: m.id,
    }, f); // at most once per group and field per minute (docs/guide/configuration.md#resolving-a-messages-options)
  }
  return r.resolved;
}

/** The abort and deadline checks before a start (docs/protocol/poll-cycle.md#dispatch steps 1–2). False means: do not start. */
export function mayStart<T>(ctx: PollContext<T>, timeout: number): boolean {
  if (ctx.stop) return false;
  if (aborted(ctx)) {
    ctx.stop = true;
    return false;
  }
  if (ctx.options.deadline !== undefined && now() + timeout + ctx.options.recordMargin > ctx.options.deadline) {
    ctx.stop = true;
    return false;
  }
  return true;
}

/** A claim or reservation got fewer tokens than it had work for (docs/protocol/poll-cycle.md#rate-limit). */
export function rateLimited<T>(ctx: PollContext<T>, waitMs: number): void {
  ctx.report.rateLimited++;
  ctx.rateWaitMs = ctx.rateWaitMs === null ? waitMs : Math.min(ctx.rateWaitMs, waitMs);
}

export function logNotStarted<T>(ctx: PollContext<T>, n: number): void {
  if (n <= 0) return;
  ctx.report.notStarted += n;
  ctx.db.events.emit({
    level: "warn", code: "SQL0040", message: `${n} message(s) not started because of the deadline or an abort`,
    stream: ctx.stream, group: ctx.group, count: n,
  });
}

export function lostLease<T>(ctx: PollContext<T>, what: string): void {
  ctx.report.leaseLost++;
  ctx.db.events.emit({ level: "warn", code: "SQL0034", message: `lease lost: ${what}; its outcomes were discarded`, stream: ctx.stream, group: ctx.group });
}

export function logDead<T>(ctx: PollContext<T>, id: string, error: string | null): void {
  ctx.db.events.emit({ level: "warn", code: "SQL0037", message: `message ${id} is dead: ${(error ?? "").split("\n")[0]}`, stream: ctx.stream, group: ctx.group, messageId: id }, false);
}

export function message<T>(ctx: PollContext<T>, m: MessageRow, attempt: number, delays: number, payload: unknown = m.payload): RunMessage<T> {
  const tp = (m.options as { traceparent?: unknown } | null)?.traceparent;
  return new RunMessage<T>(m.id, payload as T, m.message_key, attempt, delays, ctx.stream, ctx.group, m.created_at, typeof tp === "string" ? tp : null);
}

