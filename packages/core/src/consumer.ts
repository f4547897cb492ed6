import type { PoolClient } from "pg";
import { releaseWake } from "./wake.js";
import type { Runtime } from "./runtime.js";
import {
  type ConsumerConfig, type MessageOptions, type PollOptions, groupResolution, resolveMessage,
  validateConsumerConfig, validatePollOptions,
} from "./config.js";
import { type PollState, pollOnce } from "./cycle/poll.js";
import { RangeSizer, SIZER_CEILING, SIZER_START, emptySample } from "./cycle/sizer.js";
import { type CycleReport, type Handler, type Message, emptyCycleReport, mergeReports } from "./cycle/types.js";
import { type SchemaIssue, type StandardSchema, schemaMismatch } from "./typed.js";
import { Permanent } from "./outcome.js";
import { query, queryRetry, transaction } from "./db.js";
import { type DestroyGroupResult, destroyGroup } from "./destroy.js";
import { retentionStatus } from "./sql/maintain.js";
import { tracedHandler, tracedPoll } from "./otel.js";
import { SqlStreamsError, groupNotRegistered } from "./errors.js";
import * as A from "./sql/admin.js";
import * as H from "./sql/history.js";
import { HISTORY_MAX_ROWS } from "./sql/history.js";
import * as O from "./sql/operator.js";
import { type Tables, insertDeliveryLog, tables } from "./sql/cycle.js";
import { setTimeout as sleep } from "node:timers/promises";
import { monotonicOptions, now } from "./clock.js";

export type ExceptionStatus = "ready" | "deferred" | "inflight" | "dead" | "superseded";

export interface Progress {
  stream: string;
  group: string;
  paused: boolean;
  head: string;
  claimed: string;
  committed: string;
  /** head − committed, in ids. Lag 0 does not prove success: read exceptions.dead too. */
  lag: string;
  openLeases: number;
  expiredLeases: number;
  exceptions: Record<ExceptionStatus, number>;
  oldestUnresolvedAgeMs: number | null;
  /**
   * Retention of the whole stream: nothing above `floor` is removed. `heldBy` names the group
   * whose position holds expired messages back (this one or another), `heldForMs` for how long.
   */
  retention: { floor: string; heldBy: string | null; held: boolean; heldForMs: number | null };
}

/** One sample of progress_history_N (docs/data-model.md#progress-history). */
export interface ProgressSample {
  sampledAt: Date;
  head: string;
  committed: string;
  lag: string;
  exceptions: Record<ExceptionStatus, number>;
  oldestUnresolvedAgeMs: number | null;
}

export interface FailureRow<T = unknown> {
  messageId: string;
  key: string | null;
  status: ExceptionStatus;
  payload: T;
  attempts: number;
  delays: number;
  lastError: string | null;
  canRunAfter: Date;
  createdAt: Date;
  updatedAt: Date;
}

/**
 * Which dead rows redrive() and discard() act on: ids, or a filter (every criterion given must
 * match; `all: true` when there is none). `limit` caps a filter (default 1000; unlimited with a rate).
 */
export type RedriveSelector =
  | { ids: (string | number | bigint)[] }
  | {
      errorContains?: string; key?: string; payloadContains?: unknown; deadSince?: Date | string | number;
      deadBefore?: Date | string | number; all?: boolean; limit?: number;
    };
export type DeadSelector = RedriveSelector;

/** Filters of failures() (docs/operations.md#failures): each one given must match. */
export interface FailureFilter {
  status?: "dead" | "ready" | "deferred" | "inflight";
  /** 1 … 1000 rows (default 100), from `offset` (default 0) in newest-first order. */
  limit?: number;
  offset?: number;
  /** The last error contains this text (case-insensitive). */
  errorContains?: string;
  key?: string;
  /** Rows last updated at or after / before. */
  since?: Date | string | number;
  before?: Date | string | number;
  /** jsonb containment: the payload contains this JSON (an object or array, e.g. { customer: 7 }). */
  payloadContains?: unknown;
}

/** How redrive() and discard() run: one transaction, or batches at a rate (docs/operations.md#redrive). */
export interface BatchOptions {
  /** Recorded in the delivery log. */
  reason?: string;
  /** Rows per second: small transactions of `batchSize` rows, paced; each batch commits on its own. */
  rate?: number;
  /** Rows per transaction with a rate (default min(rate, 100)). */
  batchSize?: number;
  /** Stops between batches (what committed stays committed). */
  signal?: AbortSignal;
  /** Called after every committed batch with the running totals. */
  onBatch?: (progress: { done: number; skipped: number; batches: number }) => void;
}

export interface SeekTarget {
  id?: string | number | bigint;
  time?: Date | string | number;
}

const ID = /^-?[0-9]{1,19}$/;
/** How long a drain keeps asking while the snapshot fence waits for an open write transaction. */
const FENCE_PATIENCE_MS = 2_000;

function asId(v: unknown, what: string, code: "SQL0015" | "SQL0030" | "SQL0059"): string {
  const s = typeof v === "bigint" || typeof v === "number" ? String(v) : v;
  if (typeof s !== "string" || !ID.test(s)) throw new SqlStreamsError(code, `${what} must be a message id (decimal string, integer or bigint), got ${String(v)}`);
  return s;
}

function asTime(v: unknown, what: string, code: "SQL0015" | "SQL0030" | "SQL0059"): Date {
  const d = v instanceof Date ? v : typeof v === "string" || typeof v === "number" ? new Date(v) : null;
  if (!d || Number.isNaN(d.getTime())) throw new SqlStreamsError(code, `${what} must be a Date, an ISO string or epoch ms, got ${String(v)}`);
  return d;
}

export class Consumer<T = unknown> {
  constructor(
    private readonly client: Runtime,
    readonly stream: string,
    readonly name: string,
    private readonly schema?: StandardSchema<T>,
  ) {}

  /**
   * With a typed stream's schema, the handler sees only payloads that pass it, as the schema's
   * output; a payload that fails is Permanent with SQL0068 (docs/producing.md#typed-streams).
   */
  private checked(handler: Handler<T>): Handler<T> {
    const schema = this.schema;
    if (!schema) return handler;
    const stream = this.stream;
    const fail = (msg: Message<T>, issues: ReadonlyArray<SchemaIssue>) =>
      Permanent(schemaMismatch(schema as StandardSchema<unknown>, issues, { stream, id: msg.id }));
    return (msg) => {
      const r = schema["~standard"].validate(msg.payload);
      const go = (res: Awaited<typeof r>) => {
        if (res.issues !== undefined) return fail(msg, res.issues);
        msg.payload = res.value;
        return handler(msg);
      };
      return r instanceof Promise ? r.then(go) : go(r);
    };
  }

  private async ctx(): Promise<{ id: string; t: Tables }> {
    const info = await this.client.streamInfo(this.stream);
    return { id: info.id, t: tables(this.client.db.q, info.id) };
  }

  private async groupId(): Promise<{ streamId: string; t: Tables; groupId: string; config: ConsumerConfig }> {
    const { id, t } = await this.ctx();
    const r = await query<{ id: string; config: ConsumerConfig }>(this.client.db, this.client.db.pool, A.groupId(this.client.db.q), [id, this.name]);
    if (r.rowCount === 0) throw groupNotRegistered(this.stream, this.name);
    return { streamId: id, t, groupId: r.rows[0].id, config: r.rows[0].config };
  }

  /** Creates the group or replaces its config as a whole; the cursor is created once and never moved here. */
  async register(config: ConsumerConfig = {}): Promise<void> {
    const cfg = validateConsumerConfig(config);
    const db = this.client.db;
    const { id, t } = await this.ctx();
    await transaction(db, async (c) => {
      const g = await query<{ id: string }>(db, c, A.upsertGroup(db.q), [id, this.name, JSON.stringify(cfg)]);
      await query(db, c, A.createCursor(t), [g.rows[0].id, cfg.start === "head"]);
    });
  }

  /**
   * The group's poller is idle: releases its wake so the next produce wakes it again, and returns
   * true when a produce asked for another drain meanwhile (docs/producing.md#wake-on-produce).
   * Pollers that can be woken call it after an idle drain, and drain again when it returns true.
   */
  async releaseWake(): Promise<boolean> {
    await this.client.ready();
    return releaseWake(this.client.db, this.stream, this.name);
  }

  /** One bounded claim cycle (docs/poll-cycle.md). */
  async poll(handler: Handler<T>, opts: PollOptions = {}): Promise<CycleReport> {
    if (typeof handler !== "function") throw new SqlStreamsError("SQL0015", "handler must be a function (msg) => …");
    const o = monotonicOptions(validatePollOptions(opts));
    const h = tracedHandler(this.checked(handler), this.stream, this.name);
    return tracedPoll(this.stream, this.name, () => pollOnce(this.client, this.stream, this.name, h, o));
  }

  /** Repeats poll() until the group is idle or paused, the signal aborts, or the deadline is near. */
  async drain(handler: Handler<T>, opts: PollOptions = {}): Promise<CycleReport> {
    if (typeof handler !== "function") throw new SqlStreamsError("SQL0015", "handler must be a function (msg) => …");
    const o = monotonicOptions(validatePollOptions(opts));
    const h = tracedHandler(this.checked(handler), this.stream, this.name);
    const started = now();
    let total = emptyCycleReport(this.stream, this.name);
    // The range size adapts to the handlers (docs/poll-cycle.md#range-size-in-a-drain): without a
    // batchLimit it starts at 10 and may grow to 1 000; an explicit batchLimit is where it starts
    // and the most it takes. Range leases are bounded so a crash is recovered promptly.
    const sizer = new RangeSizer(
      opts.batchLimit === undefined ? SIZER_CEILING : o.batchLimit,
      opts.batchLimit === undefined ? SIZER_START : o.batchLimit,
    );
    o.rangeLeaseBound = sizer.leaseBoundMs;
    const state: PollState = { fenceBlocked: false, sizer };
    let blockedSince: number | null = null;
    for (;;) {
      if (o.signal?.aborted) break;
      if (o.deadline !== undefined && o.deadline - now() < 2 * o.recordMargin) break;
      o.batchLimit = sizer.size;
      state.sample = emptySample();
      const r = await tracedPoll(this.stream, this.name, () => pollOnce(this.client, this.stream, this.name, h, o, state));
      // The sample of the poll's last range (the poll's range phase fed the sizer the ones before it).
      sizer.observe(state.sample);
      total = mergeReports(total, r);
      if (r.paused) break;
      if (r.idle && state.fenceBlocked) {
        // Messages are visible but not yet provably complete: an older write transaction is still
        // open. Keep asking for a while (it usually ends within milliseconds) instead of leaving
        // them to the next invocation; a long transaction ends the drain after FENCE_PATIENCE_MS.
        blockedSince ??= now();
        if (now() - blockedSince < FENCE_PATIENCE_MS) {
          await sleep(50);
          continue;
        }
      }
      if (r.idle) break;
      blockedSince = null;
      // The deadline (or an abort) refused to start a message: later polls would refuse it too.
      if (r.notStarted > 0) break;
      // A poll that only deferred or lost what it reserved made no progress: stop instead of spinning.
      const moved = r.rangesClaimed + r.rangesReclaimed + r.rangesResumed + r.rangesQuarantined + r.started + r.superseded + r.expired + r.killed;
      if (moved === 0) break;
    }
    total.durationMs = Math.round(now() - started);
    return total;
  }

  async progress(): Promise<Progress> {
    const db = this.client.db;
    const { id, t } = await this.ctx();
    const r = await queryRetry<{
      paused: boolean; claimed: string; committed: string; head: string; open_leases: number; expired_leases: number;
      counts: Partial<Record<ExceptionStatus, number>>; oldest_ms: number | null;
    }>(db, A.progress(db.q, t), [id, this.name]);
    if (r.rowCount === 0) throw groupNotRegistered(this.stream, this.name);
    const x = r.rows[0];
    const ret = await retentionStatus(db, id);
    const lag = BigInt(x.head) - BigInt(x.committed);
    return {
      stream: this.stream, group: this.name, paused: x.paused, head: x.head, claimed: x.claimed, committed: x.committed,
      lag: (lag < 0n ? 0n : lag).toString(), openLeases: x.open_leases, expiredLeases: x.expired_leases,
      exceptions: { ready: 0, deferred: 0, inflight: 0, dead: 0, superseded: 0, ...x.counts },
      oldestUnresolvedAgeMs: x.oldest_ms === null ? null : Math.max(0, Math.round(x.oldest_ms)),
      retention: { floor: ret.floor.toString(), heldBy: ret.held ? ret.heldBy?.group ?? null : null, held: ret.held, heldForMs: ret.heldForMs },
    };
  }

  /**
   * The group's progress samples written by maintain() (docs/data-model.md#progress-history),
   * oldest first: the newest `limit` (default 288, one day of 5-minute runs) since `since`.
   */
  async history(opts: { since?: Date | string | number; limit?: number } = {}): Promise<ProgressSample[]> {
    if (typeof opts !== "object" || opts === null) throw new SqlStreamsError("SQL0015", "history(options): options must be an object");
    const limit = opts.limit ?? 288;
    if (!Number.isInteger(limit) || limit < 1 || limit > HISTORY_MAX_ROWS) {
      throw new SqlStreamsError("SQL0015", `history({ limit }) must be an integer between 1 and ${HISTORY_MAX_ROWS}, got ${String(limit)}`, { path: "limit" });
    }
    let since: Date | null = null;
    if (opts.since !== undefined) {
      since = opts.since instanceof Date ? opts.since : new Date(opts.since);
      if (Number.isNaN(since.getTime())) throw new SqlStreamsError("SQL0015", `history({ since }) must be a Date, an ISO time or epoch ms, got ${String(opts.since)}`, { path: "since" });
    }
    const { streamId, groupId } = await this.groupId();
    const db = this.client.db;
    const r = await query<{
      sampled_at: Date; head: string; committed: string; lag: string; ready: number; deferred: number; inflight: number;
      dead: number; superseded: number; oldest_unresolved_ms: number | null;
    }>(db, db.pool, H.readProgress(db.q, streamId), [groupId, since, limit]);
    return r.rows.map((x) => ({
      sampledAt: x.sampled_at, head: x.head, committed: x.committed, lag: x.lag,
      exceptions: { ready: x.ready, deferred: x.deferred, inflight: x.inflight, dead: x.dead, superseded: x.superseded },
      oldestUnresolvedAgeMs: x.oldest_unresolved_ms === null ? null : Math.max(0, Math.round(x.oldest_unresolved_ms)),
    }));
  }

  async failures(opts: FailureFilter = {}): Promise<FailureRow<T>[]> {
    const f = validateFailureFilter(opts);
    const { t, groupId } = await this.groupId();
    const r = await queryRetry<{
      message_id: string; message_key: string | null; status: ExceptionStatus; payload: T; attempts: number; delays: number;
      last_error: string | null; can_run_after: Date; created_at: Date; updated_at: Date;
    }>(this.client.db, O.filteredRows(t), [groupId, f.status, f.limit, f.errorContains, f.key, f.since, f.before, f.payload, f.offset]);
    return r.rows.map((x) => ({
      messageId: x.message_id, key: x.message_key, status: x.status, payload: x.payload, attempts: x.attempts, delays: x.delays,
      lastError: x.last_error, canRunAfter: x.can_run_after, createdAt: x.created_at, updatedAt: x.updated_at,
    }));
  }

  /** How many rows failures() with the same filter would page through. */
  async countFailures(opts: Omit<FailureFilter, "limit" | "offset"> = {}): Promise<number> {
    const f = validateFailureFilter(opts);
    const { t, groupId } = await this.groupId();
    const r = await queryRetry<{ n: number }>(this.client.db, O.countRows(t), [groupId, f.status, f.errorContains, f.key, f.since, f.before, f.payload]);
    return r.rows[0].n;
  }

  /** While paused, every poll returns at once with paused: true and writes nothing. */
  async pause(): Promise<void> {
    await this.setPaused(true);
  }

  async resume(): Promise<void> {
    await this.setPaused(false);
  }

  private async setPaused(paused: boolean): Promise<void> {
    const { id } = await this.ctx();
    const r = await query(this.client.db, this.client.db.pool, A.setPaused(this.client.db.q), [id, this.name, paused]);
    if (r.rowCount === 0) throw groupNotRegistered(this.stream, this.name);
  }

  /**
   * Moves the group's position (docs/operations.md#seek): the next delivered message is the first existing id
   * ≥ `to.id`, or the first created at or after `to.time`. Refused while leases are open unless forced.
   */
  async seek(to: SeekTarget, opts: { force?: boolean } = {}): Promise<{ claimed: string; committed: string; previous: { claimed: string; committed: string }; deletedRows: number }> {
    if (typeof to !== "object" || to === null || (to.id === undefined) === (to.time === undefined)) {
      throw new SqlStreamsError("SQL0015", "seek() takes exactly one of { id } or { time }");
    }
    const byId = to.id !== undefined ? asId(to.id, "seek id", "SQL0015") : null;
    const byTime = to.time !== undefined ? asTime(to.time, "seek time", "SQL0015") : null;
    const db = this.client.db;
    const { t, groupId } = await this.groupId();
    const out = await transaction(db, async (c) => {
      const cur = await query<{ claimed: string; committed: string }>(db, c, A.lockCursor(t), [groupId]);
      const head = BigInt((await query<{ head: string }>(db, c, A.visibleHead(t))).rows[0].head);
      let p: bigint;
      if (byId !== null) {
        const want = BigInt(byId);
        if (want < 0n || want > head) throw new SqlStreamsError("SQL0029", `seek id ${want} is outside the log (0 … head ${head})`, { id: byId, head: head.toString() });
        const f = (await query<{ id: string | null }>(db, c, A.firstIdAtOrAfter(t), [byId])).rows[0].id;
        p = f === null ? head : BigInt(f) - 1n;
      } else {
        const f = (await query<{ id: string | null }>(db, c, A.firstIdAtOrAfterTime(t), [byTime])).rows[0].id;
        p = f === null ? head : BigInt(f) - 1n;
      }
      if (p < 0n || p > head) throw new SqlStreamsError("SQL0029", `seek position ${p} is outside the log (0 … head ${head})`, { head: head.toString() });
      const open = (await query<{ ranges: boolean; rows: boolean }>(db, c, A.openLeases(t), [groupId])).rows[0];
      if ((open.ranges || open.rows) && !opts.force) {
        throw new SqlStreamsError("SQL0028", `seek of ${this.stream}/${this.name} refused: the group has open leases; pause it and wait for them to end, or pass { force: true }`, { ranges: open.ranges, rows: open.rows });
      }
      if (opts.force) for (const s of A.forceRelease(t)) await query(db, c, s, [groupId]);
      const del = await query(db, c, A.deleteRowsAbove(t), [groupId, p.toString()]);
      const r = await query<{ claimed: string; committed: string }>(db, c, A.seekCursor(t), [groupId, p.toString()]);
      return { ...r.rows[0], previous: cur.rows[0], deletedRows: del.rowCount ?? 0 };
    });
    db.events.emit({
      level: "info", code: "SEEK", message: `seek moved ${this.stream}/${this.name} from claimed ${out.previous.claimed}/committed ${out.previous.committed} to claimed ${out.claimed}/committed ${out.committed}; ${out.deletedRows} exception row(s) deleted`,
      stream: this.stream, group: this.name, ...out,
    }, false);
    return out;
  }

  /**
   * Puts dead rows back to work with a fresh budget (docs/operations.md#redrive); with `rate`, in
   * small paced transactions that can be stopped and run again (redriven rows are no longer dead).
   */
  async redrive(selector: RedriveSelector, opts: BatchOptions = {}): Promise<{ redriven: number; skipped: number; batches?: number }> {
    const b = validateBatch(opts, "SQL0030", "redrive");
    const sel = validateSelector(selector, "SQL0030", "redrive", b.rate !== null);
    const db = this.client.db;
    const { t, groupId, config, streamId } = await this.groupId();
    const g = groupResolution(config ?? {});
    const modeRow = await query<{ mode: string }>(db, db.pool, `SELECT delivery_log_mode AS mode FROM ${db.q}.stream_config WHERE id = $1`, [streamId]);
    const mode = modeRow.rows[0].mode;
    const r = await this.onDead(t, groupId, sel, b, async (c, rows) => {
      const live = rows.filter((x) => x.exists);
      if (live.length > 0) {
        const upd = live.map((x) => ({
          message_id: x.message_id,
          concurrency: resolveMessage(g, x.options, x.message_key !== null, x.compacted === true).resolved.concurrency,
        }));
        await query(db, c, A.redriveRows(t), [groupId, JSON.stringify(upd)]);
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
   * Throws dead rows away (docs/operations.md#discarding-dead-messages): each row is deleted and a
   * `discarded: <reason>` row is written to the delivery log, whatever its mode, as the audit trail.
   * The message stays in the log (retention removes it); the group will not run it again.
   */
  async discard(selector: DeadSelector, opts: BatchOptions = {}): Promise<{ discarded: number; skipped: number; batches?: number }> {
    const b = validateBatch(opts, "SQL0059", "discard");
    const sel = validateSelector(selector, "SQL0059", "discard", b.rate !== null);
    const db = this.client.db;
    const { t, groupId } = await this.groupId();
    const r = await this.onDead(t, groupId, sel, b, async (c, rows) => {
      const gone = await query(db, c, O.discardRows(t), [groupId, rows.map((x) => x.message_id), b.reason]);
      return gone.rowCount ?? 0;
    });
    return { discarded: r.done, skipped: r.skipped, ...(b.rate === null ? {} : { batches: r.batches }) };
  }

  /** Selects dead rows (all at once, or in paced batches walking up the ids) and applies `apply` to each selection in its transaction. */
  private async onDead(
    t: Tables, groupId: string, sel: Selector, b: Batch,
    apply: (c: PoolClient, rows: DeadRow[]) => Promise<number>,
  ): Promise<{ done: number; skipped: number; batches: number }> {
    const db = this.client.db;
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
          ? (await query<DeadRow>(db, c, O.selectDead(t, true), [groupId, chunks[i]])).rows
          : (await query<DeadRow>(db, c, O.selectDead(t, false), [groupId, sel.errorContains, sel.deadSince, sel.deadBefore, want, sel.key, sel.payload, after])).rows;
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

  /** Deletes the group with its cursor and rows; refused while it has live work unless forced. */
  async destroy(opts: { force?: boolean } = {}): Promise<DestroyGroupResult> {
    return destroyGroup(this.client, this.stream, this.name, opts);
  }
}

interface DeadRow {
  message_id: string;
  attempts: number;
  message_key: string | null;
  exists: boolean;
  options: MessageOptions | null;
  compacted: boolean | null;
}

interface Selector {
  ids: string[] | null;
  errorContains: string | null;
  key: string | null;
  payload: string | null;
  deadSince: Date | null;
  deadBefore: Date | null;
  limit: number;
}

interface Batch {
  reason: string;
  rate: number | null;
  batchSize: number;
  signal: AbortSignal | undefined;
  onBatch: BatchOptions["onBatch"];
}

function validateBatch(o: BatchOptions, code: "SQL0030" | "SQL0059", what: string): Batch {
  if (typeof o !== "object" || o === null) throw new SqlStreamsError(code, `${what}() options must be an object`);
  const reason = o.reason ?? "no reason given";
  if (typeof reason !== "string") throw new SqlStreamsError(code, `${what} reason must be a string`);
  if (o.rate !== undefined && (typeof o.rate !== "number" || !Number.isFinite(o.rate) || o.rate <= 0 || o.rate > 100_000)) {
    throw new SqlStreamsError(code, `${what} rate must be a number of rows per second, above 0 and at most 100000, got ${String(o.rate)}`);
  }
  const rate = o.rate ?? null;
  const batchSize = o.batchSize ?? Math.max(1, Math.min(100, Math.floor(rate ?? 100)));
  if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > 10_000) throw new SqlStreamsError(code, `${what} batchSize must be an integer 1 … 10000, got ${String(o.batchSize)}`);
  if (o.onBatch !== undefined && typeof o.onBatch !== "function") throw new SqlStreamsError(code, `${what} onBatch must be a function`);
  return { reason, rate, batchSize, signal: o.signal, onBatch: o.onBatch };
}

/** A JSON object or array for jsonb containment, as text; `what` names it in the error. */
function containment(v: unknown, code: "SQL0015" | "SQL0030" | "SQL0059", what: string): string | null {
  if (v === undefined) return null;
  let text: string | undefined;
  try {
    text = typeof v === "object" && v !== null ? JSON.stringify(v) : undefined;
  } catch {
    text = undefined;
  }
  if (text === undefined) throw new SqlStreamsError(code, `${what} must be a JSON object or array (jsonb containment, e.g. { "customer": 7 }), got ${String(v)}`);
  return text;
}

function optionalText(v: unknown, code: "SQL0015" | "SQL0030" | "SQL0059", what: string): string | null {
  if (v === undefined) return null;
  if (typeof v !== "string" || v.length === 0) throw new SqlStreamsError(code, `${what} must be a non-empty string`);
  return v;
}

interface Filter {
  status: string;
  limit: number;
  offset: number;
  errorContains: string | null;
  key: string | null;
  since: Date | null;
  before: Date | null;
  payload: string | null;
}

function validateFailureFilter(o: FailureFilter): Filter {
  if (typeof o !== "object" || o === null) throw new SqlStreamsError("SQL0015", "failures() takes an options object");
  const allowed = ["status", "limit", "offset", "errorContains", "key", "since", "before", "payloadContains"];
  for (const k of Object.keys(o)) if (!allowed.includes(k)) throw new SqlStreamsError("SQL0015", `failures(): unknown option ${k}; allowed: ${allowed.join(", ")}`);
  const status = o.status ?? "dead";
  if (!["dead", "ready", "deferred", "inflight"].includes(status)) throw new SqlStreamsError("SQL0015", `failures() status must be dead, ready, deferred or inflight, got ${String(status)}`);
  const limit = o.limit ?? 100;
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new SqlStreamsError("SQL0015", `failures() limit must be an integer 1 … 1000, got ${String(limit)}`);
  const offset = o.offset ?? 0;
  if (!Number.isInteger(offset) || offset < 0 || offset > 10_000_000) throw new SqlStreamsError("SQL0015", `failures() offset must be an integer 0 … 10000000, got ${String(offset)}`);
  return {
    status, limit, offset,
    errorContains: optionalText(o.errorContains, "SQL0015", "failures() errorContains"),
    key: optionalText(o.key, "SQL0015", "failures() key"),
    since: o.since === undefined ? null : asTime(o.since, "failures() since", "SQL0015"),
    before: o.before === undefined ? null : asTime(o.before, "failures() before", "SQL0015"),
    payload: containment(o.payloadContains, "SQL0015", "failures() payloadContains"),
  };
}

function validateSelector(s: unknown, code: "SQL0030" | "SQL0059", what: string, paced: boolean): Selector {
  if (typeof s !== "object" || s === null || Array.isArray(s)) throw new SqlStreamsError(code, `${what}() takes { ids } or a filter { errorContains?, key?, payloadContains?, deadSince?, deadBefore?, all?, limit? }`);
  const o = s as Record<string, unknown>;
  const none = { errorContains: null, key: null, payload: null, deadSince: null, deadBefore: null };
  if ("ids" in o) {
    if (Object.keys(o).length !== 1) throw new SqlStreamsError(code, `${what}({ ids }) takes no other criteria`);
    const max = paced ? 1_000_000 : 10_000;
    if (!Array.isArray(o.ids) || o.ids.length < 1 || o.ids.length > max) throw new SqlStreamsError(code, `${what} ids must be an array of 1 … ${max} message ids`);
    const ids = [...new Set(o.ids.map((v) => asId(v, `${what} id`, code)))];
    return { ids, ...none, limit: ids.length };
  }
  const allowed = ["errorContains", "key", "payloadContains", "deadSince", "deadBefore", "all", "limit"];
  for (const k of Object.keys(o)) if (!allowed.includes(k)) throw new SqlStreamsError(code, `${what} filter: unknown key ${k}; allowed: ids or ${allowed.join(", ")}`);
  if (o.all !== undefined && o.all !== true) throw new SqlStreamsError(code, `${what} filter: all must be true when given`);
  const errorContains = optionalText(o.errorContains, code, `${what} filter: errorContains`);
  const key = optionalText(o.key, code, `${what} filter: key`);
  const payload = containment(o.payloadContains, code, `${what} filter: payloadContains`);
  const hasCriterion = errorContains !== null || key !== null || payload !== null || o.deadSince !== undefined || o.deadBefore !== undefined;
  if (!hasCriterion && o.all !== true) throw new SqlStreamsError(code, `${what} filter needs errorContains, key, payloadContains, deadSince, deadBefore, or all: true`);
  const maxLimit = paced ? 1_000_000_000 : 10_000;
  const limit = o.limit ?? (paced ? maxLimit : 1_000);
  if (typeof limit !== "number" || !Number.isInteger(limit) || limit < 1 || limit > maxLimit) throw new SqlStreamsError(code, `${what} filter: limit must be an integer 1 … ${maxLimit}`);
  return {
    ids: null, errorContains, key, payload,
    deadSince: o.deadSince === undefined ? null : asTime(o.deadSince, "deadSince", code),
    deadBefore: o.deadBefore === undefined ? null : asTime(o.deadBefore, "deadBefore", code),
    limit,
  };
}
