// The exception phase of a poll (docs/protocol/poll-cycle.md#the-exception-phase): charge or kill expired runs, reserve due rows, start
// each under its own lease, run it, record its outcome, release what did not start. Starts and
// outcomes travel in batches (docs/protocol/poll-cycle.md#batched-starts-and-records).
import { randomUUID } from "node:crypto";
import { resolveMessage } from "../config.js";
import { type RetryState, transactionRetry } from "../db.js";
import * as statements from "../sql/cycle.js";
import { type ExceptionRecord, type ExceptionStart, decodeExceptionStep, decodeRecord, decodeStart, deferredReason } from "../sql/results.js";
import {
  type PollContext, aborted, big, isKeyed, leaseCap, leaseParams, logDead, logNotStarted, lostLease, mayStart, message, rateLimited,
  resolve, runLeaseMs, timeoutParams,
} from "./context.js";
import { type Plan, type RunOutcome, plan, planExpired } from "./plan.js";
import { runHandler } from "./run.js";
import { abandonedKeys, keyAbandoned, watchRun } from "./abandoned.js";
import { now } from "../clock.js";
import { ExceptionSteps, type OutcomeWrite, type Queued, settleRecords } from "./exception-steps.js";

/** What an exception step did: took work (rows expired, or reserved), and whether the cursor may move. */
export interface ExceptionFacts {
  took: boolean;
  advance: boolean;
  /** A reservation that filled its batch, every row of it started and resolved: the next may follow in the same poll. */
  full?: boolean;
  /** A full batch's last outcomes, not sent yet: they go with the next reservation, or alone (flushCarry). */
  carry?: Carry;
}

/**
 * The outcomes a full batch left queued when its last row finished, under its reservation token:
 * sent with the next reservation of the poll, which records them before it reserves
 * (docs/protocol/poll-cycle.md#the-exception-phase, batches in a row), or alone by flushCarry.
 */
export interface Carry {
  token: string;
  outs: Queued<OutcomeWrite, ExceptionRecord>[];
  /** Waits until the batch's outcomes were handled; throws what failed in the batch. */
  done: () => Promise<void>;
}

/** Sends a carry's outcomes alone (the poll reserves no further batch). */
export async function flushCarry<T>(ctx: PollContext<T>, carry: Carry): Promise<void> {
  const state: RetryState = { retried: false };
  try {
    const res = await statements.exceptionStep.retry(ctx.db, ctx.tables, {
      groupId: ctx.groupId, token: carry.token, outcomes: JSON.stringify(carry.outs.map((o) => o.item)), starts: "[]",
    }, state);
    settleRecords(carry.outs, decodeExceptionStep(res.rows).records, state.retried);
  } catch (e) {
    for (const o of carry.outs) o.reject(e);
  }
  await carry.done();
}

/** docs/protocol/crash-recovery.md#the-kill-backstop: charge or kill inflight rows whose run lease expired. */
export async function expirePhase<T>(ctx: PollContext<T>): Promise<ExceptionFacts> {
  const { db, tables: t, groupId } = ctx;
  const counts = await transactionRetry(db, async (c) => {
    const rows = (await statements.lockExpiredRuns.query(db, c, t, { groupId })).rows;
    if (rows.length === 0) return { charged: 0, killed: 0, killedIds: [] as string[] };
    const updates: unknown[] = [];
    const logs: unknown[] = [];
    let charged = 0;
    const killedIds: string[] = [];
    for (const r of rows) {
      // A group's later row never ran while a lower row of its group was still inflight (they run
      // in id order): it goes back to waiting, uncharged; the lowest is charged.
      if (r.chained) {
        updates.push({ message_id: r.message_id, status: "deferred", attempts: r.attempts, run_after_ms: null, last_error: r.last_error });
        continue;
      }
      const resolved = resolveMessage(ctx.resolution, r.options, r.message_key !== null, r.compacted === true).resolved;
      const e = planExpired(r.attempts, r.delays, r.last_error, resolved, ctx.resolution.exceptionInitialBackoff);
      updates.push({ message_id: r.message_id, status: e.status, attempts: e.attempts, run_after_ms: e.runAfterMs, last_error: e.lastError });
      if (ctx.mode !== "off") logs.push({ message_id: r.message_id, ...e.log });
      if (e.status === "dead") killedIds.push(r.message_id);
      else charged++;
    }
    await statements.applyExpired.query(db, c, t, { groupId, rows: JSON.stringify(updates) });
    if (logs.length) await statements.insertDeliveryLog.query(db, c, t, { groupId, rows: JSON.stringify(logs) });
    return { charged, killed: killedIds.length, killedIds };
  });
  ctx.report.leaseExpired += counts.charged;
  ctx.report.killed += counts.killed;
  ctx.report.dead += counts.killed;
  for (const id of counts.killedIds) {
    db.events.emit({ level: "warn", code: "SQL0038", message: `kill backstop: message ${id} crash-looped until its budget ran out; now dead`, stream: ctx.stream, group: ctx.group, messageId: id }, false);
  }
  const took = counts.charged + counts.killed > 0;
  return { took, advance: took };
}

/** A row's start: what it decided and the key lease token its run holds (a group's later rows: the lead's). */
interface Prestart {
  start: ExceptionStart;
  keyToken: string | null;
  /** When its run lease can expire at the earliest, on the monotonic clock. */
  leaseUntil: number;
}

/**
 * The most rows one exception reservation takes, whatever batchLimit says (docs/protocol/poll-cycle.md#options):
 * a reservation reads up to four times its size of waiting rows and starts each row with a run
 * lease of its own, so ranges larger than this gain nothing there and would only widen that scan.
 */
export const RESERVATION_MAX = 1_000;

/**
 * docs/protocol/poll-cycle.md#the-exception-phase: reserve due rows and start the first `concurrency` of
 * them in one round trip, run, start the rest and record, in batches; release what did not start.
 */
export async function exceptionPhase<T>(ctx: PollContext<T>, carryIn: Carry | null = null, mayCarry: () => boolean = () => false): Promise<ExceptionFacts> {
  const { db, tables: t, options: o } = ctx;
  const token = randomUUID();
  const params: statements.ReserveParams = {
    groupId: ctx.groupId, batchLimit: Math.min(o.batchLimit, RESERVATION_MAX), ...timeoutParams(ctx), ...leaseParams(ctx, leaseCap(ctx)), token,
    // The abort and deadline checks of docs/protocol/poll-cycle.md#dispatch, made in SQL for the rows started with the reservation.
    startNow: ctx.stop || aborted(ctx) ? 0 : o.concurrency,
    budgetMs: o.deadline === undefined ? null : Math.floor(o.deadline - now()),
    abandonedKeys: abandonedKeys(ctx), repeat: false, rate: ctx.rate,
    recordToken: carryIn?.token ?? null, outcomes: carryIn === null ? null : JSON.stringify(carryIn.outs.map((o) => o.item)),
  };
  // A repeat (the reply may have been lost after the commit) looks for its own reservation first
  // (docs/protocol/crash-recovery.md#unknown-commits): the same statement, sent with `repeat` true.
  const repeat: RetryState = {
    retried: false,
    recover: () => {
      params.repeat = true;
      return Promise.resolve(null);
    },
  };
  const sentBefore = now();
  let res;
  try {
    res = await statements.reserveExceptions.retry(db, t, params, repeat);
  } catch (e) {
    if (carryIn !== null) {
      for (const o of carryIn.outs) o.reject(e);
      await carryIn.done().catch(() => {});
    }
    throw e;
  }
  // The batch before's outcomes, recorded first by the same statement.
  let before: { e: unknown } | null = null;
  if (carryIn !== null) {
    const records = new Map<string, ExceptionRecord>();
    for (const r of res.rows) if (r.step === "record") records.set(r.message_id, decodeRecord(r));
    settleRecords(carryIn.outs, records, repeat.retried);
    before = await carryIn.done().then(() => null, (e: unknown) => ({ e }));
  }
  // The rate limit's row (docs/protocol/poll-cycle.md#rate-limit): no message, the wait for the next token.
  const limit = res.rows.find((r) => r.message_id === null);
  if (limit !== undefined) rateLimited(ctx, Number(limit.ref));
  const rows = res.rows
    .filter((r) => r.message_id !== null && r.step === null)
    .map((r) => ({ ...r, id: r.message_id }))
    .sort((a, b) => (big(a.id) < big(b.id) ? -1 : 1));
  if (before !== null) ctx.stop = true;
  if (rows.length === 0) {
    if (before !== null) throw before.e;
    return { took: false, advance: false };
  }
  const pre = new Map<string, Prestart>();
  for (const r of rows) {
    if (r.kind === null) continue;
    pre.set(r.id, { start: decodeStart({ kind: r.kind, reason: r.reason, ref: r.ref }), keyToken: r.key_token, leaseUntil: sentBefore + (r.run_ms ?? 0) });
  }
  const run = new ExceptionRun(ctx, token, rows, pre);
  const full = rows.length >= params.batchLimit;
  const carry = await run.run(() => full && before === null && mayCarry());
  if (before !== null) throw before.e;
  return { took: true, advance: run.advance, full: full && run.whole, ...(carry === null ? {} : { carry }) };
}

type Row = statements.ReservedRow;

/** A row of a started group, with its start. */
interface Started {
  row: Row;
  pre: Prestart;
}

/** Never charged a failure or an expiry, not compacted: may run in a group behind another row. */
function clean(r: Row): boolean {
  return r.attempts === r.delays && r.compaction_rank === null;
}

/** Whether runs adding up to `ms` still fit before the deadline, with recordMargin to record. */
function fits<T>(ctx: PollContext<T>, ms: number): boolean {
  return ctx.options.deadline === undefined || now() + ms + ctx.options.recordMargin <= ctx.options.deadline;
}

/**
 * A reservation's rows as units: the rows of one exclusive/ordered key form a chain, in id order,
 * run one after another on one worker (docs/protocol/poll-cycle.md#the-exception-phase); every other row
 * runs alone.
 */
function chains(rows: Row[]): Row[][] {
  const units: Row[][] = [];
  const byKey = new Map<string, Row[]>();
  for (const r of rows) {
    if (r.concurrency === "parallel" || r.message_key === null) {
      units.push([r]);
      continue;
    }
    const unit = byKey.get(r.message_key);
    if (unit !== undefined) unit.push(r);
    else {
      const u = [r];
      byKey.set(r.message_key, u);
      units.push(u);
    }
  }
  return units;
}

/** One reservation batch of the exception phase: its rows, the batched round trips, what became of them. */
class ExceptionRun<T> {
  private next = 0;
  private readonly units: Row[][];
  private unstarted = 0;
  private skipped = 0;
  private failure: { e: unknown } | null = null;
  /** A row started (or was resolved at its start): the cursor may move. */
  advance = false;

  /** Every row of the batch started, nothing was left unstarted or skipped, and nothing failed. */
  get whole(): boolean {
    return this.unstarted + this.skipped === 0 && this.failure === null;
  }
  private readonly steps: ExceptionSteps<T>;
  /** Outcomes sent but not answered yet; each settles (never rejects) once its answer was handled. */
  private readonly recording: Promise<void>[] = [];

  constructor(
    private readonly ctx: PollContext<T>,
    private readonly token: string,
    private readonly rows: Row[],
    private readonly pre: Map<string, Prestart>,
  ) {
    this.steps = new ExceptionSteps(ctx, token);
    this.units = chains(rows);
  }

  /**
   * Runs the batch. When it ran whole and `mayCarry` says so, the outcomes still queued at its end
   * are handed back instead of sent (Carry): the next reservation records them.
   */
  async run(mayCarry: () => boolean): Promise<Carry | null> {
    const { ctx, units } = this;
    await Promise.all(Array.from({ length: Math.min(ctx.options.concurrency, units.length) }, () => this.worker()));
    if (this.whole && mayCarry()) {
      const outs = await this.steps.takeOutcomes();
      if (outs !== null) return { token: this.token, outs, done: () => this.finish() };
    }
    await this.finish();
    return null;
  }

  /** Waits for every outcome's record; on a failure releases what is left reserved and throws it. */
  private async finish(): Promise<void> {
    const { ctx } = this;
    await Promise.all(this.recording);
    if (this.failure) {
      // Best effort: rows left reserved become selectable when the reservation expires, uncharged.
      await statements.releaseReservations.retry(ctx.db, ctx.tables, { groupId: ctx.groupId, token: this.token }).catch(() => {});
      throw this.failure.e;
    }
    if (this.unstarted > 0) logNotStarted(ctx, this.unstarted);
    if (this.unstarted + this.skipped > 0) await statements.releaseReservations.retry(ctx.db, ctx.tables, { groupId: ctx.groupId, token: this.token });
  }

  // A database error in one row stops new starts; running rows finish and record, the unstarted
  // reservations are released, then the error is thrown (docs/protocol/crash-recovery.md#database-errors-inside-a-poll).
  private fail(e: unknown): void {
    this.failure ??= { e };
    this.ctx.stop = true;
  }

  private async worker(): Promise<void> {
    while (this.next < this.units.length) {
      const unit = this.units[this.next++];
      try {
        await this.runUnit(unit);
      } catch (e) {
        this.fail(e);
      }
    }
  }

  /**
   * A row alone, or a key's chain, run group by group (docs/protocol/poll-cycle.md#the-exception-phase):
   * a group starts in one round trip (with the record of the row before it, so its start sees that
   * row resolved) and its rows run one after another under its key lease; the next group starts
   * only after a row that resolved its message (success, dead, superseded or expired). Otherwise the
   * group's rows that started and did not run go back to waiting, and the rest of the chain is
   * released unstarted, with nothing written.
   */
  private async runUnit(unit: Row[]): Promise<void> {
    for (let i = 0; i < unit.length; ) {
      const group = await this.startGroup(unit, i);
      if (group === null) {
        this.skipped += unit.length - i - 1;
        return;
      }
      const ran = await this.runGroup(group, i > 0);
      if (ran < group.length) {
        this.skipped += unit.length - i - group.length;
        return;
      }
      i += group.length;
    }
  }

  /**
   * Starts unit[i] and, when it is a clean keyed row, the clean rows after it that fit the time
   * left, as one group under one key lease. Rows the reservation started come as they are. Null:
   * unit[i] may not start (counted here).
   */
  private async startGroup(unit: Row[], i: number): Promise<Started[] | null> {
    const { ctx } = this;
    const head = unit[i];
    const pre = this.pre.get(head.id);
    if (pre !== undefined) {
      const out: Started[] = [{ row: head, pre }];
      for (let j = i + 1; j < unit.length; j++) {
        const p = this.pre.get(unit[j].id);
        if (p === undefined) break;
        out.push({ row: unit[j], pre: { ...p, keyToken: pre.keyToken } });
      }
      return out;
    }
    const timeout = resolve(ctx, head).timeout;
    if (!mayStart(ctx, timeout)) {
      this.unstarted++;
      return null;
    }
    const key = isKeyed(head.concurrency, head.message_key) ? head.message_key : null;
    // An abandoned run of the key, still running here, keeps it (docs/protocol/ordering.md#key-leases).
    if (key !== null && keyAbandoned(ctx, key)) {
      this.skipped++;
      return null;
    }
    const rows = [head];
    let total = timeout;
    if (key !== null && clean(head)) {
      for (let j = i + 1; j < unit.length && clean(unit[j]); j++) {
        const t = resolve(ctx, unit[j]).timeout;
        if (!fits(ctx, total + t)) break;
        rows.push(unit[j]);
        total += t;
      }
    }
    const keyToken = key !== null ? randomUUID() : null;
    const runMs = runLeaseMs(ctx, total);
    const answers = await Promise.all(rows.map((r, j) =>
      this.steps.start({ id: r.id, key_token: j === 0 ? keyToken : null, run_ms: runMs, lead: j === 0 ? null : head.id })));
    return rows.map((row, j) => ({ row, pre: { ...answers[j], keyToken } }));
  }

  /** Runs a group's rows in order; returns how many ran and resolved their message. */
  private async runGroup(group: Started[], follower: boolean): Promise<number> {
    let last = -1;
    group.forEach((g, j) => {
      if (g.pre.start.kind === "started") last = j;
    });
    for (let j = 0; j < group.length; j++) {
      if (j > 0 && j <= last && (this.ctx.stop || aborted(this.ctx))) {
        // Nothing recorded so far released the group's key lease: the first row put back does.
        this.putBack(group.slice(j, last + 1), group[0].pre.keyToken);
        this.skipped += group.length - 1 - last;
        return j;
      }
      if (!(await this.runRow(group[j].row, group[j].pre, follower || j > 0, j === last))) {
        this.putBack(group.slice(j + 1, last + 1), null);
        this.skipped += group.length - 1 - Math.max(j, last);
        return j;
      }
    }
    return group.length;
  }

  /** A group's started rows that will not run: back to waiting, uncharged, nothing logged. */
  private putBack(rows: Started[], keyToken: string | null): void {
    rows.forEach(({ row, pre }, j) => {
      const w: OutcomeWrite = {
        id: row.id, key: row.message_key, key_token: j === 0 ? keyToken : null, status: "deferred",
        attempts: row.attempts, delays: row.delays, run_after_ms: null, last_error: null, dl_status: null, dl_attempt: null, dl_error: null,
      };
      this.recording.push(this.steps.record(w, pre.leaseUntil).then(
        (rec) => {
          if (rec.kind === "lost") lostLease(this.ctx, `exception row ${row.id}`);
        },
        (e: unknown) => this.fail(e),
      ));
    });
  }

  /**
   * Runs one started (or resolved-at-start) row; true when it resolved its message, so the next
   * row of its chain may run. Its record releases the key lease when it is the group's last
   * started row or ends the chain.
   */
  private async runRow(row: Row, pre: Prestart, follower: boolean, last: boolean): Promise<boolean> {
    const { ctx } = this;
    const resolved = resolve(ctx, row);
    const key = isKeyed(row.concurrency, row.message_key) ? row.message_key : null;
    const { start: s, keyToken, leaseUntil } = pre;
    if (s.kind === "lost") {
      lostLease(ctx, `exception row ${row.id}`);
      return false;
    }
    if (follower && s.kind === "deferred") {
      // A chain's later row still blocked at its start (its key, or a predecessor outside the
      // chain): released unstarted with the rest of the chain, nothing written.
      this.skipped++;
      return false;
    }
    this.advance = true;
    if (s.kind !== "started") {
      // Resolved at start, nothing written yet: recorded under the reservation token like an outcome.
      // (The reservation's expiry is not tracked here: a lost reply on this record is "unknown".)
      this.record(row, plan(resolvedAtStart(s), row.attempts, row.delays, resolved, ctx.resolution.exceptionInitialBackoff, ctx.mode), null, -Infinity);
      return s.kind === "superseded" || s.kind === "expired";
    }
    ctx.report.started++;
    const w = watchRun(ctx, key, keyToken, row.id, resolved.timeout);
    const outcome = await runHandler(ctx.handler, message(ctx, row, row.attempts, row.delays), resolved.timeout, w.onAbandon);
    const p = plan(outcome, row.attempts, row.delays, resolved, ctx.resolution.exceptionInitialBackoff, ctx.mode);
    const ok = !w.abandoned && (p.row.status === "delete" || p.row.status === "dead");
    // An abandoned run's key lease is not released here but when the run settles.
    this.record(row, p, w.abandoned || (ok && !last) ? null : keyToken, leaseUntil);
    return ok;
  }

  /** Queues the outcome; the worker goes on to its next row meanwhile. */
  private record(row: Row, p: Plan, keyToken: string | null, leaseUntil: number): void {
    this.recording.push(this.steps.record(outcomeWrite(row, p, keyToken), leaseUntil).then(
      (rec) => this.recorded(row, p, rec),
      (e: unknown) => this.fail(e),
    ));
  }

  private recorded(row: Row, p: Plan, rec: ExceptionRecord): void {
    const { ctx } = this;
    if (rec.kind === "lost") return lostLease(ctx, `exception row ${row.id}`);
    if (rec.kind === "unknown") {
      ctx.db.events.emit({
        level: "warn", code: "SQL0044",
        message: `the reply to recording the outcome of exception row ${row.id} was lost and its lease may have expired since: ` +
          "whether the outcome was recorded is unknown (if not, the row runs again)",
        stream: ctx.stream, group: ctx.group, messageId: row.id,
      });
      return;
    }
    if (rec.keyTakenOver) {
      ctx.db.events.emit({ level: "warn", code: "SQL0034", message: `key lease of message ${row.id} expired during its run and was taken over`, stream: ctx.stream, group: ctx.group, messageId: row.id });
    }
    ctx.report[p.counter]++;
    if (p.row.status === "dead") logDead(ctx, row.id, p.row.lastError);
  }
}

function resolvedAtStart(s: Exclude<ExceptionStart, { kind: "started" } | { kind: "lost" }>): RunOutcome {
  if (s.kind === "superseded" || s.kind === "expired") return s;
  return { kind: "deferred", reason: deferredReason(s.blocked) };
}

function outcomeWrite(row: Row, p: Plan, keyToken: string | null): OutcomeWrite {
  return {
    id: row.id, key: row.message_key, key_token: keyToken, status: p.row.status === "delete" ? "deleted" : p.row.status,
    attempts: p.row.attempts, delays: p.row.delays, run_after_ms: p.row.runAfterMs, last_error: p.row.lastError,
    dl_status: p.log?.status ?? null, dl_attempt: p.log?.attempt ?? null, dl_error: p.log?.error ?? null,
  };
}
