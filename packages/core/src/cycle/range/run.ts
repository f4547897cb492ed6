// One claimed range being run (docs/protocol/poll-cycle.md#dispatch): its chains on `concurrency` workers,
// the range lease and its extension, the members' key leases (keys.ts), and the outcomes its
// record writes (record.ts).
import type { ClaimedMessageRow, MessageRow } from "../../sql/cycle.js";
import * as statements from "../../sql/cycle.js";
import { type PollContext, type RangeMessage, aborted, mayStart, message, resolve, runLeaseMs } from "../context.js";
import { type RunOutcome, plan } from "../plan.js";
import { runHandler } from "../run.js";
import { watchRun } from "../abandoned.js";
import type { RangeSample } from "../sizer.js";
import { KeyLeases, keyTakeOutcome, keyedMember } from "./keys.js";
import { type Facts, type RangeRecord, type RecordedRange, plainRows, recordAlone, recordLost, recordedPrefix, rowsOf } from "./record.js";
import { type MonotonicMs, after, now } from "../../clock.js";

/** A range leased by a claim or a takeover: token, bounds, the lease's length (ms, from when it was asked for) and messages. */
export interface LeasedRange {
  token: string;
  low: string;
  high: string;
  leaseMs: number;
  msgs: MessageRow[] | ClaimedMessageRow[];
}

/**
 * Same-key exclusive/ordered messages form serial chains; everything else runs alone
 * (docs/protocol/ordering.md#chains-inside-a-range). With keyConcurrency n > 1 an exclusive key's
 * members are dealt round-robin to up to n chains that run side by side under the key's one lease
 * (docs/protocol/ordering.md#key-concurrency); a key with an ordered member in the range keeps one chain.
 */
export function chains(msgs: RangeMessage[], n = 1): RangeMessage[][] {
  const units: RangeMessage[][] = [];
  const byKey = new Map<string, { chains: RangeMessage[][]; dealt: number }>();
  const single = n > 1 ? orderedKeys(msgs) : null;
  for (const m of msgs) {
    if (!keyedMember(m)) {
      units.push([m]);
      continue;
    }
    let key = byKey.get(m.message_key);
    if (key === undefined) byKey.set(m.message_key, (key = { chains: [], dealt: 0 }));
    const width = single === null || single.has(m.message_key) ? 1 : n;
    if (key.chains.length < width) {
      const fresh = [m];
      key.chains.push(fresh);
      units.push(fresh);
    } else key.chains[key.dealt++ % width].push(m);
  }
  return units;
}

/** The keys with an ordered member: their chain is never split, so the chain orders them. */
function orderedKeys(msgs: RangeMessage[]): Set<string> {
  const out = new Set<string>();
  for (const m of msgs) if (m.message_key !== null && m.resolved.concurrency === "ordered") out.add(m.message_key);
  return out;
}

export class RangeRun<T> {
  readonly msgs: RangeMessage[];
  /** The chains of a range with keyed members (chains()); empty without: every member runs alone. */
  readonly units: RangeMessage[][];
  readonly keys: KeyLeases<T>;
  /** Members with an outcome (RangeMessage.outcome). */
  private settled = 0;
  /** Outcomes other than success set so far: with none, a record writes no row (plainRows). */
  private unplain = 0;
  /** When the range lease expires at the earliest. */
  private leaseExpiry: MonotonicMs;
  /**
   * A lease sized for exactly one run (n <= c) is always a few ms short of timeout + margin by
   * the time its messages start; that slack comes out of the recording margin, not a round trip.
   */
  private readonly slack: number;
  private lost = false;
  private extending: Promise<boolean> | null = null;

  constructor(
    private readonly ctx: PollContext<T>,
    readonly range: LeasedRange,
    sentAt: MonotonicMs,
    /** Filled while the range runs when a drain sizes its ranges (docs/protocol/poll-cycle.md#range-size-in-a-drain). */
    private readonly sample: RangeSample | undefined,
    /**
     * The payloads came as JSON text, as a claim answers (it counted their bytes); each is parsed
     * when its message starts, and the range lets go of it then (runMember).
     */
    private readonly payloadsAsText = false,
  ) {
    this.msgs = range.msgs as RangeMessage[];
    for (const m of this.msgs) {
      m.resolved = resolve(ctx, m);
      // Measured from before the claim was sent: never later than the database's expiry, at most a round trip early.
      m.expiry = m.expires_in === null || m.expires_in === undefined ? null : after(sentAt, m.expires_in);
      m.outcome = undefined;
    }
    this.keys = new KeyLeases(ctx, this.msgs.some(keyedMember));
    this.units = this.keys.takesKeys ? chains(this.msgs, ctx.resolution.keyConcurrency) : [];
    this.leaseExpiry = after(sentAt, range.leaseMs);
    this.slack = Math.min(250, ctx.options.recordMargin / 4);
  }

  /** Whether any member is keyed (exclusive or ordered with a key): its chains take key leases. */
  get takesKeys(): boolean {
    return this.keys.takesKeys;
  }

  get expiry(): MonotonicMs {
    return this.leaseExpiry;
  }

  /** The range as a record names it. */
  get recorded(): RecordedRange {
    const { token, low, high } = this.range;
    return { token, low, high, leaseExpiry: this.leaseExpiry };
  }

  /** Whether a run of `timeout` started at `at` (now by default) would end after `expiry`. */
  outlives = (timeout: number, expiry: MonotonicMs, at = now()): boolean => at + timeout + this.ctx.options.recordMargin - this.slack > expiry;

  /**
   * The key leases of the chains' first members in one round trip, each covering one run (+
   * `headroom` in a drain's chain). Released when the range records, or passed on with the record
   * to the next range of a drain's chain (chain.ts).
   */
  async takeFirstKeys(headroom: number): Promise<void> {
    const { ctx } = this;
    if (!this.takesKeys || ctx.stop || aborted(ctx)) return;
    const take = this.keys.firstTake(this.units, headroom, this.outlives);
    if (take.wanted.length > 0) {
      const r = await statements.takeKeys.retry(ctx.db, ctx.tables, this.keys.takeParams(take, this.range.low, this.range.high));
      this.keys.took(take, r.rows, this.leaseExpiry);
    }
    this.keys.asked = true;
  }

  /** Extends the range lease until a run of `timeout` fits; false when the lease was lost. */
  private async fits(timeout: number): Promise<boolean> {
    const { ctx } = this;
    while (this.outlives(timeout, this.leaseExpiry)) {
      if (this.extending) {
        if (!(await this.extending)) return false;
        continue;
      }
      const ms = runLeaseMs(ctx, timeout);
      const at = now();
      this.extending = statements.extendRange.retry(ctx.db, ctx.tables, { groupId: ctx.groupId, token: this.range.token, ms }).then((r) => {
        if (r.rowCount === 0) return false;
        this.leaseExpiry = Math.max(this.leaseExpiry, at + ms) as MonotonicMs;
        return true;
      });
      const ok = await this.extending;
      this.extending = null;
      if (!ok) return false;
      if (at + ms < now() + timeout + ctx.options.recordMargin) return true; // capped by the deadline: nothing more to gain
    }
    return true;
  }

  /**
   * Runs the chains on `concurrency` workers. A database error in one unit stops new starts; the
   * running handlers finish and the prefix they resolved is recorded before the error is thrown
   * (docs/protocol/crash-recovery.md#database-errors-inside-a-poll).
   */
  async dispatch(): Promise<{ e: unknown } | null> {
    const { ctx, units, msgs } = this;
    // Without keyed members every member is a unit of its own: no chain arrays are built.
    const lone = !this.takesKeys;
    const n = lone ? msgs.length : units.length;
    let next = 0;
    let failure = null as { e: unknown } | null;
    const worker = async () => {
      while (!ctx.stop && next < n) {
        try {
          // A lone unkeyed member whose handler returned synchronously settles without a promise.
          const running = lone ? this.runLone(msgs[next++]) : this.runUnit(units[next++]);
          if (running !== undefined) await running;
        } catch (e) {
          failure ??= { e };
          ctx.stop = true;
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(ctx.options.concurrency, n) }, worker));
    return failure;
  }

  /**
   * A lone message (the hot path: unkeyed, or keyed with its key answered up front), else a chain;
   * undefined when it settled synchronously.
   */
  private runUnit(unit: RangeMessage[]): Promise<void> | undefined {
    return unit.length !== 1 ? this.runChain(unit) : this.runLone(unit[0]);
  }

  /** A member that is a unit of its own: run at once unless its lease or key needs a chain's care. */
  private runLone(m: RangeMessage): Promise<void> | undefined {
    if (this.expired(m)) return undefined;
    if (!mayStart(this.ctx, m.resolved.timeout)) return undefined;
    const at = now();
    if (this.outlives(m.resolved.timeout, this.leaseExpiry, at)) return this.runChain([m]);
    if (this.takesKeys && keyedMember(m)) {
      const held = this.keys.heldOutcome(m, true, this.outlives);
      if (held === undefined) return this.runChain([m]);
      if (held !== null) {
        this.settle(m, held);
        return undefined;
      }
    }
    const outcome = this.runMember(m, at);
    if (outcome instanceof Promise) return outcome.then((o) => this.settle(m, o));
    this.settle(m, outcome);
    return undefined;
  }

  private settle(m: RangeMessage, o: RunOutcome): void {
    if (m.outcome === undefined) this.settled++;
    m.outcome = o;
    if (o.kind !== "success") this.unplain++;
  }

  /** One chain (or a lone message): its members in order; an ordered member after one that did not complete waits. */
  private async runChain(unit: RangeMessage[]): Promise<void> {
    let blockedBy: string | null = null;
    for (const m of unit) {
      // An expired member never runs and never holds its key: the chain goes on past it.
      if (this.expired(m)) continue;
      if (blockedBy !== null && m.resolved.concurrency === "ordered") {
        this.settle(m, { kind: "deferred", reason: `deferred: earlier message ${blockedBy} of this key in the range did not complete` });
        continue;
      }
      if (!mayStart(this.ctx, m.resolved.timeout)) return;
      if (this.outlives(m.resolved.timeout, this.leaseExpiry) && !(await this.fits(m.resolved.timeout))) {
        this.lost = true;
        this.ctx.stop = true;
        return;
      }
      // Unkeyed members and handlers that return synchronously cost no await (the hot path).
      const held = keyedMember(m) ? await this.keyOutcome(m, m === unit[0]) : null;
      let outcome = held ?? this.runMember(m);
      if (outcome instanceof Promise) outcome = await outcome;
      this.settle(m, outcome);
      if (outcome.kind === "success" || outcome.kind === "superseded") continue;
      const p = plan(outcome, 0, 0, m.resolved, this.ctx.resolution.exceptionInitialBackoff, this.ctx.mode);
      if (p.row.status !== "dead") blockedBy ??= m.id;
    }
  }

  /**
   * docs/protocol/poll-cycle.md#dispatch step 4: null when a keyed member may run, else its outcome without
   * running. The chain's first member usually has its key lease already (taken for the whole range
   * up front); a member whose lease would not cover its run, a later member without the lease, and
   * a compacted member (whose head is checked at its start) take or renew it now, under the range's
   * key token. An abandoned run of the key still running in this process keeps the key
   * (docs/protocol/ordering.md#key-leases): the member waits as deferred.
   */
  private async keyOutcome(m: RangeMessage, first: boolean): Promise<RunOutcome | null> {
    const held = this.keys.heldOutcome(m, first, this.outlives);
    if (held !== undefined) return held;
    return keyTakeOutcome(await this.keys.take(m, this.range.low, this.range.high, this.leaseExpiry));
  }

  /**
   * A member not started before its expiry (docs/guide/producing.md#expiry) gets the outcome expired
   * instead of a run: true when it did. Never once the poll has stopped starting.
   */
  private expired(m: RangeMessage): boolean {
    if (m.expiry === null || this.ctx.stop || now() < m.expiry) return false;
    this.settle(m, { kind: "expired" });
    return true;
  }

  /** Runs the handler of one member (first delivery, attempt 0), started at `at`. */
  private runMember(m: RangeMessage, at = now()): RunOutcome | Promise<RunOutcome> {
    const { ctx } = this;
    ctx.report.started++;
    const w = watchRun(ctx, this.takesKeys && keyedMember(m) ? m.message_key : null, this.keys.token, m.id, m.resolved.timeout);
    // Parsed at its start and then held by the run alone: a range's parsed payloads are not all
    // alive at once, so most die young (a scavenge copies only the few in flight).
    const payload = this.payloadsAsText ? JSON.parse(m.payload as string) : m.payload;
    m.payload = null;
    const outcome = runHandler(ctx.handler, message(ctx, m, 0, 0, payload), m.resolved.timeout, w.onAbandon);
    if (outcome instanceof Promise) return outcome.then((o) => this.ran(m, w, at, o));
    return this.ran(m, w, at, outcome);
  }

  /** After a member's run: its key if the run was abandoned, the drain's sample. */
  private ran(m: RangeMessage, w: { abandoned: boolean }, t0: number, outcome: RunOutcome): RunOutcome {
    if (w.abandoned) this.keys.abandoned.add(m.message_key as string);
    const sample = this.sample;
    if (sample) {
      sample.ran++;
      sample.slowest = Math.max(sample.slowest, (now() - t0) / m.resolved.timeout);
    }
    return outcome;
  }

  /**
   * The record of a range run whole (every member has an outcome, the lease was never lost), to be
   * sent with the next claim or key take; null when it must be recorded on its own.
   */
  whole(): RangeRecord | null {
    if (this.lost || this.settled !== this.msgs.length) return null;
    return this.recordOf(this.msgs);
  }

  private recordOf(recorded: RangeMessage[]): RangeRecord {
    const rows = this.unplain === 0 && this.ctx.mode !== "all" ? plainRows(recorded.length) : rowsOf(this.ctx, recorded);
    return { token: this.range.token, rows, keys: this.keys.release(), pastDue: !this.takesKeys };
  }

  /**
   * docs/protocol/poll-cycle.md#recording-a-range, in a statement of its own: the contiguous prefix of
   * messages with an outcome is recorded; the rest is released at once (the key leases as
   * KeyLeases.release says). `start`: the token of the poll's range claimed ahead that starts
   * after this record (docs/protocol/poll-cycle.md#claiming-ahead).
   */
  async record(failed: boolean, start: string | null = null): Promise<Facts> {
    if (this.lost) return recordLost(this.ctx, this.recorded, this.keys.release(), start);
    const { recorded, keepFrom } = recordedPrefix(this.ctx, this.msgs, failed);
    return recordAlone(this.ctx, this.recorded, this.recordOf(recorded), keepFrom, start);
  }
}
