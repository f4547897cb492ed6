// The exception phase's round trips, batched (docs/protocol/poll-cycle.md#batched-starts-and-records):
// starts and outcomes queue here and go to exception_step_N together, at most one call in flight
// per phase. What arrives while a call is out waits for its answer and goes in the next call, so
// no outcome waits for a slow handler, only for at most one other round trip.
import type { RetryState } from "../db.js";
import { now } from "../clock.js";
import * as statements from "../sql/cycle.js";
import { type ExceptionRecord, type ExceptionStart, decodeExceptionStep } from "../sql/results.js";
import type { PollContext } from "./context.js";

/**
 * A reserved row to start: its key lease token (null: none to take), run lease length, and for a
 * group's later row the group's first row (start_exceptions_N).
 */
export interface StartRequest {
  id: string;
  key_token: string | null;
  run_ms: number;
  lead: string | null;
}

/** An outcome to record (record_exceptions_N's input row). */
export interface OutcomeWrite {
  id: string;
  key: string | null;
  key_token: string | null;
  status: string;
  attempts: number;
  delays: number;
  run_after_ms: number | null;
  last_error: string | null;
  dl_status: string | null;
  dl_attempt: number | null;
  dl_error: string | null;
}

export interface Queued<I, O> {
  item: I;
  resolve: (o: O) => void;
  reject: (e: unknown) => void;
  /** Outcomes: when the row's lease can expire at the earliest, on this process's monotonic clock. */
  leaseUntil: number;
}

/** What a start decided, and when the row's run lease can expire at the earliest (measured from before the call was sent). */
export interface StartAnswer {
  start: ExceptionStart;
  leaseUntil: number;
}

export class ExceptionSteps<T> {
  private readonly starts: Queued<StartRequest, StartAnswer>[] = [];
  private readonly outcomes: Queued<OutcomeWrite, ExceptionRecord>[] = [];
  private busy = false;
  private scheduled = false;
  /** The call out, settled (never rejected) when its answer was handled. */
  private out: Promise<void> = Promise.resolve();

  constructor(
    private readonly ctx: PollContext<T>,
    private readonly token: string,
  ) {}

  /** Starts a reserved row under the reservation token. */
  start(r: StartRequest): Promise<StartAnswer> {
    return this.enqueue(this.starts, r, -Infinity);
  }

  /**
   * Records an outcome under the row's lease token (the reservation token). `leaseUntil`: when
   * that lease can expire at the earliest (-Infinity: unknown).
   */
  record(w: OutcomeWrite, leaseUntil: number): Promise<ExceptionRecord> {
    return this.enqueue(this.outcomes, w, leaseUntil);
  }

  private enqueue<I, O>(q: Queued<I, O>[], item: I, leaseUntil: number): Promise<O> {
    const p = new Promise<O>((resolve, reject) => q.push({ item, resolve, reject, leaseUntil }));
    this.schedule();
    return p;
  }

  /**
   * The outcomes queued and not sent yet, taken out of the queue to travel with the next
   * reservation (docs/protocol/poll-cycle.md#the-exception-phase, batches in a row), once no call is
   * out; null when starts are queued too (they go their own way) or nothing is queued. The caller
   * sends them, then settles them with `settleRecords`.
   */
  async takeOutcomes(): Promise<Queued<OutcomeWrite, ExceptionRecord>[] | null> {
    while (this.busy) await this.out;
    if (this.starts.length > 0 || this.outcomes.length === 0) return null;
    return this.outcomes.splice(0);
  }

  /** Sends on the next turn of the event loop: requests made in the same turn share the call. */
  private schedule(): void {
    if (this.busy || this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.out = this.send();
    });
  }

  private async send(): Promise<void> {
    const outs = this.outcomes.splice(0);
    const starts = this.starts.splice(0);
    if (outs.length + starts.length === 0) return;
    this.busy = true;
    const sentBefore = now();
    try {
      const { db, tables: t, groupId } = this.ctx;
      const state: RetryState = { retried: false };
      const res = await statements.exceptionStep.retry(db, t, {
        groupId, token: this.token, outcomes: JSON.stringify(outs.map((o) => o.item)), starts: JSON.stringify(starts.map((s) => s.item)),
      }, state);
      const d = decodeExceptionStep(res.rows);
      settleRecords(outs, d.records, state.retried);
      settle(starts, d.starts, (start, p) => ({ start, leaseUntil: sentBefore + p.item.run_ms }));
    } catch (e) {
      for (const p of [...outs, ...starts]) p.reject(e);
    } finally {
      this.busy = false;
      if (this.outcomes.length + this.starts.length > 0) this.schedule();
    }
  }
}

/** Settles queued outcomes with their call's answers; `retried`: the call was repeated after a lost reply. */
export function settleRecords(outs: Queued<OutcomeWrite, ExceptionRecord>[], answers: Map<string, ExceptionRecord>, retried: boolean): void {
  if (retried) ownRecords(outs, answers);
  settle(outs, answers, (r) => r);
}

/**
 * A repeat after a lost reply finds the rows its first attempt recorded no longer under the token.
 * While a row's lease had not expired nobody else could have taken it, so "lost" is our own
 * record; after that nobody can tell (docs/protocol/crash-recovery.md#unknown-commits).
 */
function ownRecords(outs: Queued<OutcomeWrite, ExceptionRecord>[], answers: Map<string, ExceptionRecord>): void {
  const answeredAt = now();
  for (const o of outs) {
    if (answers.get(o.item.id)?.kind !== "lost") continue;
    answers.set(o.item.id, answeredAt < o.leaseUntil ? { kind: "recorded", keyTakenOver: false } : { kind: "unknown" });
  }
}

function settle<I extends { id: string }, A, O>(ps: Queued<I, O>[], answers: Map<string, A>, wrap: (a: A, p: Queued<I, O>) => O): void {
  for (const p of ps) {
    const a = answers.get(p.item.id);
    if (a === undefined) p.reject(new Error(`exception_step_N returned no result for message ${p.item.id}`));
    else p.resolve(wrap(a, p));
  }
}
