// Maintenance (docs/retention.md): partitions ahead of the producers, retention drops and sweeps, TTLs,
// expired key leases, empty compaction heads. Driven from outside (the maintain Lambda, `sqlstreams
// dev`, stream.maintain()); every step is bounded, independent and safe to run from several
// invocations at once. The statements live in sql/maintain.ts.
import { setTimeout as sleep } from "node:timers/promises";
import type { Runtime } from "../runtime.js";
import { type Db, RETRY_PAUSES, query, transaction } from "../db.js";
import { SqlStreamsError } from "../errors.js";
import {
  BATCH,
  type Floor,
  FloorMoved,
  type MaintainedStream,
  deleteDeliveryLogBatch,
  deleteEmptyHeads,
  deleteExpiredKeyLeases,
  deleteIdempotencyKeys,
  dropPartitionTx,
  expiredAboveFloor,
  floorOf,
  loadStreams,
  partitionExpired,
  partitionState,
  retentionStatus,
  sweepBatchTx,
  sweepWindow,
} from "../sql/maintain.js";
import { ensurePartition } from "../sql/partitions.js";
import * as H from "../sql/history.js";
import { validateStreamName } from "../validate.js";
import { monotonicDeadline, now } from "../clock.js";

export interface MaintainOptions {
  /** Epoch ms. No step or batch starts when less than 2 000 ms remain. */
  deadline?: number;
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
  /** The retention floor (docs/retention.md#the-floor) when retention is on, else null. */
  floor: string | null;
  /**
   * Set when expired messages are kept because a group has not resolved them: the group whose
   * cursor (or oldest unresolved row) holds the floor. Monitoring should alert on it.
   */
  retentionHeldBy: { group: string; committed: string; unresolvedFrom: string | null; paused: boolean } | null;
  /** How long the oldest expired message has been kept past its retention, when held; else null. */
  retentionHeldMs: number | null;
  /** Progress samples written into progress_history_N (one per group; docs/data-model.md#progress-history). */
  progressSampled: number;
  /** True when the deadline stopped a step or a batch loop early. */
  deadlineReached: boolean;
  errors: { step: string; code: string; message: string }[];
}

/** Room a step or batch needs before the deadline (docs/retention.md#maintain). */
const DEADLINE_MARGIN_MS = 2_000;

function emptyReport(stream: string): MaintainReport {
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

const LOCK_FAILURES = new Set(["55P03", "40P01"]);

/** Runs maintenance for every registered stream, or the named ones (all must exist: SQL0009). */
export async function maintainStreams(
  client: Runtime,
  opts: MaintainOptions & { streams?: string[] },
): Promise<Record<string, MaintainReport>> {
  const db = client.db;
  let names: string[] | undefined;
  if (opts.streams !== undefined) {
    if (!Array.isArray(opts.streams)) throw new SqlStreamsError("SQL0015", "maintain({ streams }) takes an array of stream names");
    names = opts.streams.map((n) => validateStreamName(n));
  }
  checkDeadline(opts.deadline);
  await client.ready();
  const streams = await loadStreams(db, names);
  if (names !== undefined) {
    const found = new Set(streams.map((s) => s.name));
    const missing = names.filter((n) => !found.has(n));
    if (missing.length > 0) {
      throw new SqlStreamsError("SQL0009", `stream ${JSON.stringify(missing[0])} is not registered`, { stream: missing[0], missing });
    }
  }
  const out: Record<string, MaintainReport> = {};
  for (const s of streams) out[s.name] = await maintainOne(client, s, opts.deadline);
  return out;
}

/** Runs maintenance for one stream (what `stream.maintain()` calls). */
export async function maintainStream(client: Runtime, streamName: string, opts: MaintainOptions = {}): Promise<MaintainReport> {
  const name = validateStreamName(streamName);
  checkDeadline(opts.deadline);
  await client.ready();
  const [s] = await loadStreams(client.db, [name]);
  if (!s) throw new SqlStreamsError("SQL0009", `stream ${JSON.stringify(name)} is not registered`, { stream: name });
  return maintainOne(client, s, opts.deadline);
}

function checkDeadline(deadline: unknown): void {
  if (deadline !== undefined && (typeof deadline !== "number" || !Number.isFinite(deadline))) {
    throw new SqlStreamsError("SQL0015", "maintain({ deadline }) must be epoch milliseconds (a finite number)", { deadline });
  }
}

async function maintainOne(client: Runtime, s: MaintainedStream, deadline: number | undefined): Promise<MaintainReport> {
  const db = client.db;
  // The deadline moves onto the monotonic clock once (docs/poll-cycle.md#options).
  const run = new MaintainRun(client, s, deadline === undefined ? undefined : monotonicDeadline(deadline));
  await run.step("partitions", () => run.createAhead());
  if (s.retentionMs > 0n && run.stateKnown) {
    await run.step("drop", () => run.dropExpired());
    await run.step("sweep", () => run.sweep());
    await run.step("floor", () => run.noteHeldRetention());
  }
  // 4.–6. TTL and lease sweeps, in batches until a batch comes back short.
  const r = run.report;
  await run.batches("idempotencyKeys", () => deleteIdempotencyKeys(db, s.id, s.idempotencyKeyTtlMs), (n) => (r.idempotencyKeysDeleted += n));
  await run.batches("keyLeases", () => deleteExpiredKeyLeases(db, s.id), (n) => (r.keyLeasesDeleted += n));
  await run.batches("emptyHeads", () => deleteEmptyHeads(db, s.id), (n) => (r.emptyHeadsDeleted += n));
  // 7. A progress sample of every group, with the history's pruning in the same statement
  // (docs/data-model.md#progress-history). A deadlock with another maintain()'s partition DDL is
  // repeated by step(), like every step's.
  await run.step("history", async () => {
    r.progressSampled = (await query(db, db.pool, H.sampleProgress(db.q, s.id), [s.id])).rowCount ?? 0;
  });
  return r;
}

/** One maintain() of one stream: the steps of docs/retention.md#maintain over the state they share. */
class MaintainRun {
  readonly report: MaintainReport;
  private readonly db: Db;
  // Read once (step 1) so that an idle run stays a handful of statements.
  private next = 0n;
  private partitions: bigint[] = [];
  stateKnown = false;
  /** The floor, read by the drop step (or the sweep when the drop step failed). */
  private f: Floor | null = null;
  /**
   * Set when droppable partitions were left for the next run (lock timeout, another maintain()
   * dropping, deadline): the sweep then waits too rather than delete those partitions row by row.
   * A drop that fails with an error (no DDL right, say) does not stop the sweep, which keeps
   * storage bounded without DROP.
   */
  private dropsPending = false;

  constructor(
    private readonly client: Runtime,
    private readonly s: MaintainedStream,
    private readonly deadline: number | undefined,
  ) {
    this.db = client.db;
    this.report = emptyReport(s.name);
  }

  /** The partition the producers last wrote into (holding id next − 1): never dropped or swept, so the visible head survives retention. */
  private get active(): bigint {
    return this.next > 0n ? (this.next - 1n) / this.s.partitionSize : 0n;
  }

  private get activeLow(): bigint {
    return this.active * this.s.partitionSize;
  }

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

  /** 1. Partition create-ahead: K and K+1 of the id the sequence hands out next. */
  async createAhead(): Promise<void> {
    const { db, s } = this;
    const st = await partitionState(db, s.id);
    this.next = st.next;
    this.partitions = st.partitions;
    this.stateKnown = true;
    const k = this.next / s.partitionSize;
    for (const want of [k, k + 1n]) {
      if (this.partitions.includes(want)) continue;
      if (await ensurePartition(db, s.id, s.partitionSize, want)) this.report.partitionsCreated++;
      this.partitions.push(want);
    }
  }

  /** 2. Drop expired partitions that lie wholly at or below the floor. */
  async dropExpired(): Promise<void> {
    const { s, report } = this;
    const f = (this.f = await floorOf(this.db, s.id));
    report.floor = String(f.floor);
    const candidates = this.partitions.filter((j) => j < this.active).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    for (const j of candidates) {
      if ((j + 1n) * s.partitionSize - 1n > f.floor) break; // above the floor: so are the later ones
      if (this.late()) {
        this.dropsPending = true;
        return;
      }
      const expired = await this.expired(j);
      if (expired === "gone") continue; // another maintain() dropped it since step 1 listed it
      if (!expired) break; // later partitions are newer
      const r = await dropPartition(this.client, s, j, this.late, report);
      if (r === "dropped") report.partitionsDropped++;
      else if (r === "skipped" || r === "stop") {
        // Whoever holds the log will likely hold it for the next partition too: next run.
        if (r === "skipped") report.partitionsSkipped++;
        this.dropsPending = true;
        return;
      }
    }
  }

  /** Whether partition j is wholly expired; "gone" when another maintain() dropped it since step 1. */
  private async expired(j: bigint): Promise<boolean | "gone"> {
    try {
      return await partitionExpired(this.db, this.s.id, j, this.s.retentionMs);
    } catch (e) {
      if ((e as { code?: string }).code === "42P01") return "gone";
      throw e;
    }
  }

  /** 3. Sweep expired rows at or below the floor, lowest id first, one batch per transaction. */
  async sweep(): Promise<void> {
    if (this.dropsPending) return;
    const { db, s, report } = this;
    const f = (this.f ??= await floorOf(db, s.id));
    report.floor = String(f.floor);
    const limit = f.floor < this.activeLow - 1n ? f.floor : this.activeLow - 1n;
    let after = 0n;
    while (after < limit) {
      if (this.late()) return;
      const w = await sweepWindow(db, s.id, after, limit, s.retentionMs);
      if (w.last === null || w.expired.length === 0) return;
      const r = await this.sweepBatch(w.expired);
      if (r === null || r.messages === 0) return; // another maintain() is sweeping, or nothing left to take
      report.rowsSwept += r.messages;
      report.exceptionRowsDeleted += r.exceptionRows;
      report.deliveryLogRowsDeleted += r.deliveryLogRows;
      after = w.last;
    }
  }

  /** One sweep transaction; null when a row of the batch stayed locked (the sweep resumes next run). */
  private async sweepBatch(ids: Parameters<typeof sweepBatchTx>[3]): Promise<Awaited<ReturnType<typeof sweepBatchTx>>> {
    const { db, s } = this;
    try {
      return await transaction(db, (c) => sweepBatchTx(db, c, s.id, ids));
    } catch (e) {
      const code = (e as { code?: string }).code ?? "";
      if (!LOCK_FAILURES.has(code)) throw e;
      // Locked for 2 s by a redrive or a producer writing a head.
      db.events.emit({ level: "warn", code: "SQL0041", message: `sweep of ${s.name} paused: ${(e as Error).message}`, stream: s.name });
      return null;
    }
  }

  /**
   * Whether the lowest message above the floor is already expired. The read can be chosen as the
   * victim of a deadlock with another maintain()'s partition drop; it is only a report, so it is
   * then left to the next run instead of failing the step.
   */
  private async expiredAboveFloor(floor: bigint): Promise<boolean> {
    try {
      return await expiredAboveFloor(this.db, this.s.id, floor, this.activeLow, this.s.retentionMs);
    } catch (e) {
      if (LOCK_FAILURES.has((e as { code?: string }).code ?? "")) return false;
      throw e;
    }
  }

  /**
   * Retention held back by a group: the lowest message above the floor is already expired.
   * (Maintenance never moves a cursor, so the floor read in step 2 still holds.)
   */
  async noteHeldRetention(): Promise<void> {
    const f = this.f;
    const held = f?.heldBy;
    if (!f || !held) return;
    if (await this.expiredAboveFloor(f.floor)) {
      this.report.retentionHeldBy = {
        group: held.group,
        committed: String(held.committed),
        unresolvedFrom: held.unresolvedFrom === null ? null : String(held.unresolvedFrom),
        paused: held.paused,
      };
      this.report.retentionHeldMs = (await retentionStatus(this.db, this.s.id)).heldForMs;
    }
  }
}

/**
 * Drops partition j: first the partition's delivery-log rows in batches (audit rows of messages
 * that are expired and resolved by every group), so that the drop transaction, which blocks
 * producers for its duration, only deletes the few rows left; then the drop transaction. A lock
 * it cannot get (timeout) or a deadlock anywhere on the way skips the partition until the next run.
 */
async function dropPartition(
  client: Runtime,
  s: MaintainedStream,
  j: bigint,
  late: () => boolean,
  report: MaintainReport,
): Promise<"dropped" | "skipped" | "gone" | "stop"> {
  const db = client.db;
  const lo = j * s.partitionSize;
  const hi = lo + s.partitionSize;
  try {
    for (;;) {
      if (late()) return "stop";
      const n = await deleteDeliveryLogBatch(db, s.id, lo, hi);
      report.deliveryLogRowsDeleted += n;
      if (n < BATCH) break;
    }
    if (late()) return "stop";
    const r = await transaction(db, (c) => dropPartitionTx(db, c, s.id, s.partitionSize, j));
    if (r.outcome === "dropped") {
      report.exceptionRowsDeleted += r.exceptionRows;
      report.deliveryLogRowsDeleted += r.deliveryLogRows;
      return "dropped";
    }
    if (r.outcome === "gone") return "gone";
    return "stop"; // another maintain() holds the stream's retention lock
  } catch (e) {
    if (e instanceof FloorMoved) return "stop";
    const code = (e as { code?: string }).code ?? "";
    if (LOCK_FAILURES.has(code)) {
      db.events.emit({
        level: "warn",
        code: "SQL0041",
        message: `drop of partition ${j} of ${s.name} skipped: ${(e as Error).message}; retried on the next maintain()`,
        stream: s.name,
        partition: String(j),
      });
      return "skipped";
    }
    throw e;
  }
}
