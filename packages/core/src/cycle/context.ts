// What one poll knows and shares between its phases, and the small helpers every phase uses.
import type { Runtime } from "../runtime.js";
import {
  type ConsumerConfig, type DeliveryLogMode, type GroupResolution, type MessageOptions, type ResolvedMessage,
  type ResolvedPollOptions, resolveMessage,
} from "../config.js";
import type { Db } from "../db.js";
import { compareIds } from "../ids.js";
import type * as S from "../sql/cycle.js";
import { RunMessage } from "./run.js";
import type { LastRun, RangeSample, RangeSizer } from "./sizer.js";
import type { CycleReport, Handler } from "./types.js";
import { now } from "../clock.js";

export interface RawMessage {
  id: string;
  message_key: string | null;
  compaction_rank: string | null;
  payload: unknown;
  options: MessageOptions | null;
  /** A Date, or epoch milliseconds where claim_N returns it so. */
  created_at: Date | number;
}
export interface RangeMessage extends RawMessage {
  resolved: ResolvedMessage;
}
export interface LoadRow {
  group_id: string;
  config: ConsumerConfig;
  paused: boolean;
  mode: DeliveryLogMode;
  claimed: string;
  committed: string;
  settled_head: string;
  pending_head: string;
  head: string;
  has_cursor: boolean;
  reclaimable: boolean;
  expirable: boolean;
  reservable: boolean;
  target: string;
  obs: string;
}

export interface Ctx<T> {
  client: Runtime;
  db: Db;
  t: S.Tables;
  stream: string;
  group: string;
  groupId: string;
  g: GroupResolution;
  mode: DeliveryLogMode;
  handler: Handler<T>;
  o: ResolvedPollOptions;
  report: CycleReport;
  /** Set once no further handler may start in this poll (abort, deadline, lost lease). */
  stop: boolean;
  /** Something this poll did or saw can move the committed cursor: advance it at the end. */
  advance: boolean;
  /** The fence could not prove visible ids yet (an older write transaction is still open). */
  fenceBlocked: boolean;
  /** Resolutions of messages produced without options, by (has key, compacted). */
  plain: Map<number, ResolvedMessage>;
  /** Filled by the range phase when a drain sizes its ranges (docs/poll-cycle.md#range-size-in-a-drain). */
  sample: RangeSample | undefined;
  /** A drain's poll state: its sizer, and the sample of the range run last (docs/poll-cycle.md#the-steady-state). */
  state: { sizer?: RangeSizer; sample?: RangeSample; lastRun?: LastRun } | undefined;
  /** Monotonic ms after which no range is recorded together with the next claim. */
  chainUntil: number;
  /** Exception rows to expire / due to reserve, as the load or a later record said. */
  expirable: boolean;
  reservable: boolean;
}

export const big = (s: string) => BigInt(s);

/** Orders rows by id (they usually arrive in order from the index scan: then this is one pass). */
export function byId<R extends { id: string }>(rows: R[]): R[] {
  for (let i = 1; i < rows.length; i++) {
    if (compareIds(rows[i - 1].id, rows[i].id) > 0) return rows.sort((x, y) => compareIds(x.id, y.id));
  }
  return rows;
}

export function aborted<T>(ctx: Ctx<T>): boolean {
  return ctx.o.signal?.aborted === true;
}

export function leaseCap<T>(ctx: Ctx<T>): number | null {
  return ctx.o.deadline === undefined ? null : Math.max(1, Math.floor(ctx.o.deadline - now()) + ctx.o.recordMargin);
}

export function resolve<T>(ctx: Ctx<T>, m: RawMessage, stored?: MessageOptions | null): ResolvedMessage {
  const opts = stored === undefined ? m.options : stored;
  if (opts === null) {
    const k = (m.message_key !== null ? 1 : 0) + (m.compaction_rank !== null ? 2 : 0);
    let hit = ctx.plain.get(k);
    if (!hit) {
      hit = resolveMessage(ctx.g, null, m.message_key !== null, m.compaction_rank !== null).resolved;
      ctx.plain.set(k, hit);
    }
    return hit;
  }
  const r = resolveMessage(ctx.g, stored === undefined ? m.options : stored, m.message_key !== null, m.compaction_rank !== null);
  for (const f of r.clamped) {
    ctx.db.events.emit({
      level: "info", code: "SQL0039", message: `produced option ${f} of message ${m.id} was clamped to the group's bounds`,
      stream: ctx.stream, group: ctx.group, field: f, messageId: m.id,
    }, f); // at most once per group and field per minute (docs/configuration.md#resolving-a-messages-options)
  }
  return r.resolved;
}

/** The abort and deadline checks before a start (docs/poll-cycle.md#dispatch steps 1–2). False means: do not start. */
export function mayStart<T>(ctx: Ctx<T>, timeout: number): boolean {
  if (ctx.stop) return false;
  if (aborted(ctx)) {
    ctx.stop = true;
    return false;
  }
  if (ctx.o.deadline !== undefined && now() + timeout + ctx.o.recordMargin > ctx.o.deadline) {
    ctx.stop = true;
    return false;
  }
  return true;
}

export function logNotStarted<T>(ctx: Ctx<T>, n: number): void {
  if (n <= 0) return;
  ctx.report.notStarted += n;
  ctx.db.events.emit({
    level: "warn", code: "SQL0040", message: `${n} message(s) not started because of the deadline or an abort`,
    stream: ctx.stream, group: ctx.group, count: n,
  });
}

export function lostLease<T>(ctx: Ctx<T>, what: string): void {
  ctx.report.leaseLost++;
  ctx.db.events.emit({ level: "warn", code: "SQL0034", message: `lease lost: ${what}; its outcomes were discarded`, stream: ctx.stream, group: ctx.group });
}

export function logDead<T>(ctx: Ctx<T>, id: string, error: string | null): void {
  ctx.db.events.emit({ level: "warn", code: "SQL0037", message: `message ${id} is dead: ${(error ?? "").split("\n")[0]}`, stream: ctx.stream, group: ctx.group, messageId: id }, false);
}

export function message<T>(ctx: Ctx<T>, m: RawMessage, attempt: number, delays: number, payload: unknown = m.payload): RunMessage<T> {
  const tp = (m.options as { traceparent?: unknown } | null)?.traceparent;
  return new RunMessage<T>(m.id, payload as T, m.message_key, attempt, delays, ctx.stream, ctx.group, m.created_at, typeof tp === "string" ? tp : null);
}

