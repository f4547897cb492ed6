// The exception phase's round trips, batched (docs/poll-cycle.md#batched-starts-and-records):
// starts and outcomes queue here and go to exception_step_N together, at most one call in flight
// per phase. What arrives while a call is out waits for its answer and goes in the next call, so
// no outcome waits for a slow handler, only for at most one other round trip.
import { queryRetry } from "../db.js";
import * as S from "../sql/cycle.js";
import { type ExceptionRecord, type ExceptionStart, type ExceptionStepRow, decodeExceptionStep } from "../sql/results.js";
import type { Ctx } from "./context.js";

/** A reserved row to start: its key lease token (null: none to take) and run lease length. */
export interface StartRequest {
  id: string;
  key_token: string | null;
  run_ms: number;
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

interface Pending<I, O> {
  item: I;
  resolve: (o: O) => void;
  reject: (e: unknown) => void;
}

export class ExceptionSteps<T> {
  private readonly starts: Pending<StartRequest, ExceptionStart>[] = [];
  private readonly outcomes: Pending<OutcomeWrite, ExceptionRecord>[] = [];
  private busy = false;
  private scheduled = false;

  constructor(
    private readonly ctx: Ctx<T>,
    private readonly token: string,
  ) {}

  /** Starts a reserved row under the reservation token; resolves with what the start decided. */
  start(r: StartRequest): Promise<ExceptionStart> {
    return this.enqueue(this.starts, r);
  }

  /** Records an outcome under the row's lease token (the reservation token). */
  record(w: OutcomeWrite): Promise<ExceptionRecord> {
    return this.enqueue(this.outcomes, w);
  }

  private enqueue<I, O>(q: Pending<I, O>[], item: I): Promise<O> {
    const p = new Promise<O>((resolve, reject) => q.push({ item, resolve, reject }));
    this.schedule();
    return p;
  }

  /** Sends on the next turn of the event loop: requests made in the same turn share the call. */
  private schedule(): void {
    if (this.busy || this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      void this.send();
    });
  }

  private async send(): Promise<void> {
    const outs = this.outcomes.splice(0);
    const starts = this.starts.splice(0);
    if (outs.length + starts.length === 0) return;
    this.busy = true;
    try {
      const { db, t, groupId } = this.ctx;
      const res = await queryRetry<ExceptionStepRow>(db, S.exceptionStep(t), [
        groupId, this.token, JSON.stringify(outs.map((o) => o.item)), JSON.stringify(starts.map((s) => s.item)),
      ]);
      const d = decodeExceptionStep(res.rows);
      settle(outs, d.records);
      settle(starts, d.starts);
    } catch (e) {
      for (const p of [...outs, ...starts]) p.reject(e);
    } finally {
      this.busy = false;
      if (this.outcomes.length + this.starts.length > 0) this.schedule();
    }
  }
}

function settle<I extends { id: string }, O>(ps: Pending<I, O>[], answers: Map<string, O>): void {
  for (const p of ps) {
    const a = answers.get(p.item.id);
    if (a === undefined) p.reject(new Error(`exception_step_N returned no result for message ${p.item.id}`));
    else p.resolve(a);
  }
}
