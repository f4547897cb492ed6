// The exception phase of a poll (docs/poll-cycle.md#the-exception-phase): charge or kill expired runs, reserve due rows, start
// each under its own lease, run it, record its outcome, release what did not start.
import { randomUUID } from "node:crypto";
import { type MessageOptions, resolveMessage, timeoutBounds } from "../config.js";
import { query, queryRetry, transactionRetry } from "../db.js";
import * as S from "../sql/cycle.js";
import { decodeExceptionRecord, decodeExceptionStart } from "../sql/results.js";
import { type Ctx, type RawMessage, big, leaseCap, logDead, logNotStarted, lostLease, mayStart, message, resolve } from "./context.js";
import { plan, planExpired } from "./plan.js";
import { runHandler } from "./run.js";
import { keyAbandoned, watchRun } from "./abandoned.js";

// ---------------------------------------------------------------------------------------------
// Exception phase
// ---------------------------------------------------------------------------------------------

/** docs/crash-recovery.md#the-kill-backstop: charge or kill inflight rows whose run lease expired. */
export async function expirePhase<T>(ctx: Ctx<T>): Promise<boolean> {
  const { db, t } = ctx;
  const counts = await transactionRetry(db, async (c) => {
    const rows = (await query<{ message_id: string; attempts: number; delays: number; last_error: string | null; message_key: string | null; options: MessageOptions | null; compacted: boolean | null }>(db, c, S.lockExpiredRuns(t), [ctx.groupId])).rows;
    if (rows.length === 0) return { expired: 0, killed: 0, killedIds: [] as string[] };
    const updates: unknown[] = [];
    const logs: unknown[] = [];
    let expired = 0;
    const killedIds: string[] = [];
    for (const r of rows) {
      const resolved = resolveMessage(ctx.g, r.options, r.message_key !== null, r.compacted === true).resolved;
      const e = planExpired(r.attempts, r.delays, r.last_error, resolved, ctx.g.exceptionInitialBackoff);
      updates.push({ message_id: r.message_id, status: e.status, attempts: e.attempts, run_after_ms: e.runAfterMs, last_error: e.lastError });
      if (ctx.mode !== "off") logs.push({ message_id: r.message_id, ...e.log });
      if (e.status === "dead") killedIds.push(r.message_id);
      else expired++;
    }
    await query(db, c, S.applyExpired(t), [ctx.groupId, JSON.stringify(updates)]);
    if (logs.length) await query(db, c, S.insertDeliveryLog(t), [ctx.groupId, JSON.stringify(logs)]);
    return { expired, killed: killedIds.length, killedIds };
  });
  ctx.report.expired += counts.expired;
  ctx.report.killed += counts.killed;
  ctx.report.dead += counts.killed;
  for (const id of counts.killedIds) {
    db.events.emit({ level: "warn", code: "SQL0038", message: `kill backstop: message ${id} crash-looped until its budget ran out; now dead`, stream: ctx.stream, group: ctx.group, messageId: id }, false);
  }
  if (counts.expired + counts.killed > 0) ctx.advance = true;
  return counts.expired + counts.killed > 0;
}

interface ReservedRow extends RawMessage {
  message_id: string;
  status: string;
  concurrency: string;
  attempts: number;
  delays: number;
}

/** docs/poll-cycle.md#the-exception-phase: reserve due rows, start each under its own lease, run, record, release the rest. */
export async function exceptionPhase<T>(ctx: Ctx<T>): Promise<boolean> {
  const { db, t, o } = ctx;
  const tb = timeoutBounds(ctx.g);
  const token = randomUUID();
  const res = await queryRetry<ReservedRow>(db, S.reserve(t), [
    ctx.groupId, o.batchLimit, tb.def, tb.min, tb.max, o.concurrency, o.recordMargin, leaseCap(ctx), token,
  ]);
  const rows = res.rows
    .map((r) => ({ ...r, id: r.message_id }))
    .sort((a, b) => (big(a.id) < big(b.id) ? -1 : 1));
  if (rows.length === 0) return false;
  let unstarted = 0;
  let skipped = 0;
  let next = 0;
  const runRow = async (row: ReservedRow & { id: string }) => {
    const resolved = resolve(ctx, row);
    if (!mayStart(ctx, resolved.timeout)) {
      unstarted++;
      return;
    }
    const keyed = row.concurrency !== "parallel" && row.message_key !== null;
    // An abandoned run of the key, still running here, keeps it (docs/ordering.md#key-leases).
    if (keyed && keyAbandoned(ctx, row.message_key as string)) return void skipped++;
    const keyToken = keyed ? randomUUID() : null;
    const cap = leaseCap(ctx);
    const runMs = cap === null ? resolved.timeout + o.recordMargin : Math.min(resolved.timeout + o.recordMargin, cap);
    const s = decodeExceptionStart(
      (await queryRetry<{ result: string }>(db, S.startException(t), [ctx.groupId, row.id, token, keyToken, runMs, ctx.mode !== "off"])).rows[0].result,
    );
    if (s.kind === "lost") {
      lostLease(ctx, `exception row ${row.id}`);
      return;
    }
    ctx.advance = true;
    if (s.kind === "superseded" || s.kind === "deferred") {
      ctx.report[s.kind]++;
      return;
    }
    ctx.report.started++;
    const w = watchRun(ctx, keyed ? row.message_key : null, keyToken, row.id, resolved.timeout);
    const outcome = await runHandler(ctx.handler, message(ctx, row, row.attempts, row.delays), resolved.timeout, w.onAbandon);
    const p = plan(outcome, row.attempts, row.delays, resolved, ctx.g.exceptionInitialBackoff, ctx.mode);
    const rec = decodeExceptionRecord((await queryRetry<{ result: number }>(db, S.recordException(t), [
      // An abandoned run's key lease is not released here but when the run settles.
      ctx.groupId, row.id, token, row.message_key, w.abandoned ? null : keyToken, p.row.status === "delete" ? "deleted" : p.row.status,
      p.row.attempts, p.row.delays, p.row.runAfterMs, p.row.lastError,
      p.log?.status ?? null, p.log?.attempt ?? null, p.log?.error ?? null,
    ])).rows[0].result);
    if (rec.kind === "lost") {
      lostLease(ctx, `exception row ${row.id}`);
      return;
    }
    if (rec.keyTakenOver) {
      db.events.emit({ level: "warn", code: "SQL0034", message: `key lease of message ${row.id} expired during its run and was taken over`, stream: ctx.stream, group: ctx.group, messageId: row.id });
    }
    ctx.report[p.counter]++;
    if (p.row.status === "dead") logDead(ctx, row.id, p.row.lastError);
  };
  // A database error in one row stops new starts; running rows finish and record, the unstarted
  // reservations are released, then the error is thrown (docs/crash-recovery.md#database-errors-inside-a-poll).
  let failure = null as { e: unknown } | null;
  const worker = async () => {
    while (next < rows.length) {
      try {
        await runRow(rows[next++]);
      } catch (e) {
        failure ??= { e };
        ctx.stop = true;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(o.concurrency, rows.length) }, worker));
  if (failure) {
    // Best effort: rows left reserved become selectable when the reservation expires, uncharged.
    await queryRetry(db, S.releaseReservations(t), [ctx.groupId, token]).catch(() => {});
    throw failure.e;
  }
  if (unstarted > 0) logNotStarted(ctx, unstarted);
  if (unstarted + skipped > 0) await queryRetry(db, S.releaseReservations(t), [ctx.groupId, token]);
  return true;
}

