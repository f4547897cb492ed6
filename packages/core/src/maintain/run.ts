// One maintain() of one stream (docs/protocol/retention.md#maintain): its report, the state its steps share,
// and how a step runs (deadline, deadlock retries, errors into the report).
import { setTimeout as sleep } from "node:timers/promises";
import type { Runtime } from "../runtime.js";
import { type Db, RETRY_PAUSES } from "../db.js";
import { SqlStreamsError } from "../errors.js";
import { now } from "../clock.js";
import { BATCH } from "../sql/maintain.js";
import type { Floor } from "./floor.js";

/** Rows per batch of every deleting step (docs/protocol/retention.md#maintain): defined beside the statements. */
export { BATCH };
/** Lock timeout of the drop and sweep transactions (docs/protocol/retention.md#maintain step 2). */
export const LOCK_TIMEOUT = "2000ms";
/** A lock not had within LOCK_TIMEOUT, or a deadlock: the work is left to the next run. */
export const LOCK_FAILURES = new Set(["55P03", "40P01"]);

export interface MaintainedStream {
  id: string;
  name: string;
  partitionSize: bigint;
  retentionMs: bigint;
  idempotencyKeyTtlMs: bigint;
}

export interface MaintainReport {
  stream: string;
  partitionsCreated: number;
  partitionsDropped: number;
  /** Expired partitions left for a later run because a lock could not be had within 2 s (SQL0041). */
  partitionsSkipped: number;
  /** Message rows deleted by the row sweep (step 3). */
  rowsSwept: number;
  /** exception_queue_N rows removed with their messages (dropped partitions and sweeps). */
  exceptionRowsDeleted: number;
  /** delivery_log_N rows removed with their messages. */
  deliveryLogRowsDeleted: number;
  idempotencyKeysDeleted: number;
  keyLeasesDeleted: number;
  emptyHeadsDeleted: number;
  /** Scheduled messages moved to the log because they were due (docs/guide/producing.md#scheduled-delivery). */
  scheduledMoved: number;
  /** The retention floor (docs/protocol/retention.md#the-floor) when retention is on, else null. */
  floor: string | null;
  /**
   * Set when expired messages are kept because a group has not resolved them: the group whose
   * cursor (or oldest unresolved row) holds the floor. Monitoring should alert on it.
   */
  retentionHeldBy: { group: string; committed: string; unresolvedFrom: string | null; paused: boolean } | null;
  /** How long the oldest expired message has been kept past its retention, when held; else null. */
  retentionHeldMs: number | null;
  /** Progress samples written into progress_history_N (one per group; docs/protocol/data-model.md#progress-history). */
  progressSampled: number;
  /** True when the deadline stopped a step or a batch loop early. */
  deadlineReached: boolean;
  errors: { step: string; code: string; message: string }[];
}

/** Room a step or batch needs before the deadline (docs/protocol/retention.md#maintain). */
const DEADLINE_MARGIN_MS = 2_000;

function emptyMaintainReport(stream: string): MaintainReport {
  return {
    stream,
    partitionsCreated: 0,
    partitionsDropped: 0,
    partitionsSkipped: 0,
    rowsSwept: 0,
    exceptionRowsDeleted: 0,
    deliveryLogRowsDeleted: 0,
    idempotencyKeysDeleted: 0,
    keyLeasesDeleted: 0,
    emptyHeadsDeleted: 0,
    scheduledMoved: 0,
    floor: null,
    retentionHeldBy: null,
    retentionHeldMs: null,
    progressSampled: 0,
    deadlineReached: false,
    errors: [],
  };
}

function errorCode(e: unknown): { code: string; message: string } {
  if (e instanceof SqlStreamsError) return { code: e.code, message: e.message };
  const err = e as { code?: string; message?: string };
  if (err?.code === "42501") return { code: "SQL0005", message: `the role lacks a privilege: ${err.message}` };
  return { code: "SQL0033", message: `${err?.code ? `[${err.code}] ` : ""}${err?.message ?? String(e)}` };
}

/** One maintain() of one stream: the state its steps share (maintain/*.ts) and how each runs. */
export class MaintainRun {
  readonly report: MaintainReport;
  readonly db: Db;
  /** The id the sequence hands out next, read once (step 1) so that an idle run stays a handful of statements. */
  next = 0n;
  /** Indexes of the existing partitions, as step 1 listed them. */
  partitions: bigint[] = [];
  stateKnown = false;
  /** The floor, read by the drop step (or the sweep when the drop step failed). */
  floor: Floor | null = null;
  /**
   * Set when droppable partitions were left for the next run (lock timeout, another maintain()
   * dropping, deadline): the sweep then waits too rather than delete those partitions row by row.
   * A drop that fails with an error (no DDL right, say) does not stop the sweep, which keeps
   * storage bounded without DROP.
   */
  dropsPending = false;

  constructor(
    readonly client: Runtime,
    readonly s: MaintainedStream,
    private readonly deadline: number | undefined,
  ) {
    this.db = client.db;
    this.report = emptyMaintainReport(s.name);
  }

  /** The partition the producers last wrote into (holding id next − 1): never dropped or swept, so the visible head survives retention. */
  get active(): bigint {
    return this.next > 0n ? (this.next - 1n) / this.s.partitionSize : 0n;
  }

  get activeLow(): bigint {
    return this.active * this.s.partitionSize;
  }

  /** True (and noted in the report) when less than DEADLINE_MARGIN_MS remain. */
  readonly late = (): boolean => {
    if (this.deadline !== undefined && this.deadline - now() < DEADLINE_MARGIN_MS) {
      this.report.deadlineReached = true;
      return true;
    }
    return false;
  };

  /**
   * Runs a step unless the deadline is near; its error is reported and the next step runs. A step
   * whose statement Postgres picked as a deadlock's victim (the reads of every partition against
   * another maintain()'s partition DDL) runs again: every step is safe to repeat, as the next
   * maintain() would repeat it.
   */
  async step(name: string, fn: () => Promise<void>): Promise<void> {
    if (this.late()) return;
    try {
      for (let attempt = 0; ; attempt++) {
        try {
          return await fn();
        } catch (e) {
          if ((e as { code?: string })?.code !== "40P01" || attempt >= RETRY_PAUSES.length || this.late()) throw e;
          await sleep(RETRY_PAUSES[attempt]);
        }
      }
    } catch (e) {
      const { code, message } = errorCode(e);
      this.report.errors.push({ step: name, code, message });
      this.db.events.emit({ level: "error", code, message: `maintain ${name} failed: ${message}`, stream: this.s.name, step: name });
    }
  }

  /** A step that deletes in batches until a batch comes back short. */
  async batches(name: string, fn: () => Promise<number>, add: (n: number) => void): Promise<void> {
    await this.step(name, async () => {
      for (;;) {
        const n = await fn();
        add(n);
        if (n < BATCH || this.late()) return;
      }
    });
  }
}
