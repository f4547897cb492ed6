// Abandoned runs keep their key (docs/protocol/ordering.md#key-leases). A handler that ignores msg.signal
// is abandoned at its timeout and its outcome recorded as a timeout, but the function is still
// running. Until it settles, this process starts no other run of its (group, key), and the key
// lease it ran under is renewed in the database, so no other process can start the key either,
// for at most ABANDON_BOUND × timeout; then SQL0048 says the key is no longer protected.
import type { Db } from "../db.js";
import { outsideBudget } from "../db.js";
import { now } from "../clock.js";
import * as statements from "../sql/cycle.js";
import type { PollContext } from "./context.js";

/** How long, in multiples of the run's timeout from its start, a key lease is renewed for it. */
export const ABANDON_BOUND = 10;

/** Unsettled abandoned runs per client, by stream, group and key: how many. */
const unsettled = new WeakMap<Db, Map<string, number>>();

function id(stream: string, group: string, key: string): string {
  return `${stream}\u0000${group}\u0000${key}`;
}

/** True while an abandoned run of this key, started by this client, has not settled. */
export function keyAbandoned<T>(ctx: PollContext<T>, key: string): boolean {
  return (unsettled.get(ctx.db)?.get(id(ctx.stream, ctx.group, key)) ?? 0) > 0;
}

/** The keys of this poll's group with an unsettled abandoned run started by this client. */
export function abandonedKeys<T>(ctx: PollContext<T>): string[] {
  const byKey = unsettled.get(ctx.db);
  if (byKey === undefined || byKey.size === 0) return [];
  const prefix = id(ctx.stream, ctx.group, "");
  const out: string[] = [];
  for (const [k, n] of byKey) if (n > 0 && k.startsWith(prefix)) out.push(k.slice(prefix.length));
  return out;
}

export interface AbandonedRun {
  key: string;
  /** The key lease's token, or null when it is not this run's to renew and release. */
  token: string | null;
  messageId: string;
  timeoutMs: number;
  /** performance.now() at the run's start. */
  startedAt: number;
  /** Resolves (never rejects) when the handler finally settles. */
  settled: Promise<void>;
}

/**
 * Registers an abandoned run: the key counts as busy in this process until `settled`, and its key
 * lease (when it has a token) is renewed every third of a lease length meanwhile, then released.
 */
export function abandon<T>(ctx: PollContext<T>, run: AbandonedRun): void {
  const { db, tables: t, groupId, stream, group } = ctx;
  const k = id(stream, group, run.key);
  let byKey = unsettled.get(db);
  if (!byKey) unsettled.set(db, (byKey = new Map()));
  byKey.set(k, (byKey.get(k) ?? 0) + 1);
  const leaseMs = run.timeoutMs + ctx.options.recordMargin;
  const until = run.startedAt + ABANDON_BOUND * run.timeoutMs;
  db.events.emit({
    level: "warn", code: "SQL0047",
    message: `handler of message ${run.messageId} ignored its signal past its ${run.timeoutMs} ms timeout and was abandoned; its key stays held until it settles (at most ${ABANDON_BOUND} × the timeout in the database)`,
    stream, group, messageId: run.messageId,
  });
  let done = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const stopWarn = (why: string) => {
    db.events.emit({
      level: "warn", code: "SQL0048",
      message: `abandoned run of message ${run.messageId} ${why}; its key lease is no longer renewed and another process may start the key once it expires`,
      stream, group, messageId: run.messageId,
    });
  };
  // Background work outlives the poll: it must not inherit the poll's deadline budget.
  const renew = () =>
    outsideBudget(async () => {
      timer = undefined;
      if (done || db.closed || run.token === null) return;
      if (now() >= until) {
        stopWarn(`is still unsettled at ${ABANDON_BOUND} × its timeout`);
        return;
      }
      try {
        const ms = Math.ceil(Math.min(leaseMs, until - now() + ctx.options.recordMargin));
        const r = await statements.renewKeyLease.retry(db, t, { groupId, key: run.key, keyToken: run.token, ms });
        if (r.rowCount === 0) {
          if (!done) stopWarn("lost its key lease (it expired and was taken over)");
          return;
        }
      } catch {
        if (db.closed) return;
        // A failed renewal is retried at the next tick; the lease still has two thirds to run.
      }
      if (!done) schedule();
    });
  const schedule = () => {
    timer = setTimeout(() => void renew(), Math.max(20, Math.floor(leaseMs / 3)));
    timer.unref();
  };
  // Renew at once: the lease taken for the run has only about recordMargin left at the timeout.
  if (run.token !== null) void renew();
  void run.settled.then(() =>
    outsideBudget(async () => {
      done = true;
      if (timer !== undefined) clearTimeout(timer);
      const left = (byKey.get(k) ?? 1) - 1;
      if (left > 0) byKey.set(k, left);
      else byKey.delete(k);
      // Another unsettled abandoned run of the key (one per chain of the key, with keyConcurrency)
      // still holds the lease: the last one to settle releases it.
      if (run.token === null || db.closed || left > 0) return;
      try {
        await statements.releaseKeyLease.retry(db, t, { groupId, key: run.key, keyToken: run.token });
      } catch {
        // The lease expires on its own.
      }
    }),
  );
}

/** Watches one run for abandonment: pass `onAbandon` to runHandler, read `abandoned` after. */
export interface Watch {
  abandoned: boolean;
  onAbandon: ((settled: Promise<void>) => void) | undefined;
}

const UNWATCHED: Watch = Object.freeze({ abandoned: false, onAbandon: undefined });

/** A watch for a run about to start; keyless (or parallel) runs have no key to keep. */
export function watchRun<T>(ctx: PollContext<T>, key: string | null, token: string | null, messageId: string, timeoutMs: number): Watch {
  if (key === null) return UNWATCHED; // never written: without onAbandon nothing sets `abandoned`
  const w: Watch = { abandoned: false, onAbandon: undefined };
  const startedAt = now();
  w.onAbandon = (settled) => {
    w.abandoned = true;
    abandon(ctx, { key, token, messageId, timeoutMs, startedAt, settled });
  };
  return w;
}
