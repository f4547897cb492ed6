// The exception phase of a poll (docs/protocol/poll-cycle.md#the-exception-phase): charge or kill expired runs, reserve due rows, start
// each under its own lease, run it, record its outcome, release what did not start. Starts and
// outcomes travel in batches (docs/protocol/poll-cycle.md#batched-starts-and-records).
import { randomUUID } from "node:crypto";
import { resolveMessage } from "../config.js";
import { type RetryState, transactionRetry } from "../db.js";
import * as statements from "../sql/cycle.js";
import { type ExceptionRecord, type ExceptionStart, decodeStart, deferredReason } from "../sql/results.js";
import {
  type PollContext, aborted, big, isKeyed, leaseCap, leaseParams, logDead, logNotStarted, lostLease, mayStart, message, rateLimited,
  resolve, runLeaseMs, timeoutParams,
} from "./context.js";
import { type Plan, type RunOutcome, plan, planExpired } from "./plan.js";
import { runHandler } from "./run.js";
import { abandonedKeys, keyAbandoned, watchRun } from "./abandoned.js";
import { now } from "../clock.js";
import { ExceptionSteps, type OutcomeWrite } from "./exception-steps.js";

/** What an exception step did: took work (rows expired, or reserved), and whether the cursor may move. */
export interface ExceptionFacts {
  took: boolean;
  advance: boolean;
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

/** A row reserve_exceptions_N started: what the start decided and the key lease token its run holds. */
interface Prestart {
  start: ExceptionStart;
  keyToken: string | null;
  /** When its run lease can expire at the earliest, on the monotonic clock. */
  leaseUntil: number;
}

/**
 * docs/protocol/poll-cycle.md#the-exception-phase: reserve due rows and start the first `concurrency` of
 * them in one round trip, run, start the rest and record, in batches; release what did not start.
 */
export async function exceptionPhase<T>(ctx: PollContext<T>): Promise<ExceptionFacts> {
  const { db, tables: t, options: o } = ctx;
  const token = randomUUID();
  const params: statements.ReserveParams = {
    groupId: ctx.groupId, batchLimit: o.batchLimit, ...timeoutParams(ctx), ...leaseParams(ctx, leaseCap(ctx)), token,
    // The abort and deadline checks of docs/protocol/poll-cycle.md#dispatch, made in SQL for the rows started with the reservation.
    startNow: ctx.stop || aborted(ctx) ? 0 : o.concurrency,
    budgetMs: o.deadline === undefined ? null : Math.floor(o.deadline - now()),
    abandonedKeys: abandonedKeys(ctx), repeat: false, rate: ctx.rate,
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
  const res = await statements.reserveExceptions.retry(db, t, params, repeat);
  // The rate limit's row (docs/protocol/poll-cycle.md#rate-limit): no message, the wait for the next token.
  const limit = res.rows.find((r) => r.message_id === null);
  if (limit !== undefined) rateLimited(ctx, Number(limit.ref));
  const rows = res.rows
    .filter((r) => r.message_id !== null)
    .map((r) => ({ ...r, id: r.message_id }))
    .sort((a, b) => (big(a.id) < big(b.id) ? -1 : 1));
  if (rows.length === 0) return { took: false, advance: false };
  const pre = new Map<string, Prestart>();
  for (const r of rows) {
    if (r.kind === null) continue;
    pre.set(r.id, { start: decodeStart({ kind: r.kind, reason: r.reason, ref: r.ref }), keyToken: r.key_token, leaseUntil: sentBefore + (r.run_ms ?? 0) });
  }
  const run = new ExceptionRun(ctx, token, rows, pre);
  await run.run();
  return { took: true, advance: run.advance };
}

type Row = statements.ReservedRow;

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

  async run(): Promise<void> {
    const { ctx, units } = this;
    await Promise.all(Array.from({ length: Math.min(ctx.options.concurrency, units.length) }, () => this.worker()));
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
   * A row alone, or a key's chain: each later row is started in the round trip that records the
   * one before (its start then sees that row resolved), and only after a row that resolved its
   * message (success, dead, superseded or expired); else the rest of the chain is released unstarted.
   */
  private async runUnit(unit: Row[]): Promise<void> {
    for (let i = 0; i < unit.length; i++) {
      if (!(await this.runRow(unit[i], i > 0))) {
        this.skipped += unit.length - i - 1;
        return;
      }
    }
  }

  /** Runs one row; true when it resolved its message, so the next row of its chain may start. */
  private async runRow(row: Row, follower = false): Promise<boolean> {
    const { ctx } = this;
    const resolved = resolve(ctx, row);
    const key = isKeyed(row.concurrency, row.message_key) ? row.message_key : null;
    let pre = this.pre.get(row.id);
    if (pre === undefined) {
      if (!mayStart(ctx, resolved.timeout)) {
        this.unstarted++;
        return false;
      }
      // An abandoned run of the key, still running here, keeps it (docs/protocol/ordering.md#key-leases).
      if (key !== null && keyAbandoned(ctx, key)) {
        this.skipped++;
        return false;
      }
      const keyToken = key !== null ? randomUUID() : null;
      pre = { ...(await this.steps.start({ id: row.id, key_token: keyToken, run_ms: runLeaseMs(ctx, resolved.timeout) })), keyToken };
    }
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
    // An abandoned run's key lease is not released here but when the run settles.
    this.record(row, p, w.abandoned ? null : keyToken, leaseUntil);
    return !w.abandoned && (p.row.status === "delete" || p.row.status === "dead");
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
