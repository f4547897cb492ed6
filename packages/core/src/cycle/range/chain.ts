// The range phase's chain (docs/protocol/poll-cycle.md#the-steady-state): in a drain, while ranges come back
// full, each range run whole is recorded by the statement that claims the next one (or, for a
// keyed range claimed ahead, by the one that takes its first keys). The only place a record is
// paired with the next claim or key take.
import { randomUUID } from "node:crypto";
import * as statements from "../../sql/cycle.js";
import { type PollContext, aborted, big, byId } from "../context.js";
import { type DrainSizing, GROW_TIMEOUT_SHARE, type RangeSample, emptySample } from "../sizer.js";
import { type Claimed, claimAhead, claimParams, freshClaim, sendClaim, warnFenceHolders } from "./claim.js";
import { CHAIN_KEY_HEADROOM_MS, releaseJson } from "./keys.js";
import { type Facts, NO_FACTS, type RangeRecord, countRecorded, mergeFacts, recordParams, recordRowFacts, rowsJson } from "./record.js";
import { RangeRun } from "./run.js";
import { type MonotonicMs, now } from "../../clock.js";

/** A drain's poll records a range with the next claim while it keeps finding full ranges, for a while. */
export const STEADY_CHAIN_MS = 1_000;

/** What the range phase leaves for the rest of the poll. */
export interface RangeFacts extends Facts {
  /** A range was claimed, reclaimed or quarantined. */
  took: boolean;
  /** The fence could not prove visible ids yet (an older write transaction is still open). */
  fenceBlocked: boolean;
}

/** A range run whole whose record is still to send: with the next claim or key take, or alone. */
interface UnsentRecord<T> {
  run: RangeRun<T>;
  rec: RangeRecord;
}

/** What a range's run leaves for the next: the next claimed range, and the record still to send. */
interface Step<T> {
  next: Claimed | null;
  /** Only with `next`: its record is sent by the claim that runs ahead of `next`, or alone before it. */
  unsent: UnsentRecord<T> | null;
}

type Settled<V> = { ok: true; value: V } | { ok: false; error: unknown };

/** A promise that never rejects, so one left pending while handlers run is never an unhandled rejection. */
function settled<V>(p: Promise<V>): Promise<Settled<V>> {
  return p.then((value) => ({ ok: true as const, value }), (error: unknown) => ({ ok: false as const, error }));
}

/**
 * A poll's chain of ranges: the drain's sizing (its sizer, the sample of the range being run, its
 * last range), how long the chain may go on, and what its records said.
 */
export class Chain<T> {
  /** Filled for the drain's RangeSizer while a range runs (docs/protocol/poll-cycle.md#range-size-in-a-drain). */
  sample: RangeSample | undefined;
  private facts: Facts = NO_FACTS;

  constructor(
    private readonly ctx: PollContext<T>,
    private readonly drain: DrainSizing | undefined,
    /** After this, no range is recorded together with the next claim. */
    private until: MonotonicMs,
  ) {
    this.sample = drain?.sample;
  }

  /** Facts learnt so far (records that landed with the next claim or take, empty ranges). */
  note(f: Facts): void {
    this.facts = mergeFacts(this.facts, f);
  }

  get learnt(): Facts {
    return this.facts;
  }

  /**
   * Whether the range just run (whole, without a failure) may be recorded together with the next
   * claim: in a drain, after a full range, with no stop, abort or near deadline, and for at most
   * STEADY_CHAIN_MS of the poll, after which the next poll's load looks at the group again
   * (docs/protocol/poll-cycle.md#the-steady-state).
   */
  mayChain(): boolean {
    const { ctx } = this;
    if (this.drain?.sizer === undefined || this.sample?.full !== true || ctx.stop || aborted(ctx)) return false;
    if (now() >= this.until) return false;
    return ctx.options.deadline === undefined || ctx.options.deadline - now() >= 2 * ctx.options.recordMargin;
  }

  /** How long beyond its run a first key lease lasts: a chain's leases pass from range to range (docs/protocol/ordering.md#key-leases). */
  headroom(passed: boolean): number {
    return passed || this.mayChain() ? CHAIN_KEY_HEADROOM_MS : 0;
  }

  /**
   * Whether the next range may be claimed while this one runs (docs/protocol/poll-cycle.md#claiming-ahead):
   * when the range could be recorded with the next claim (mayChain) and the drain's last range was
   * quick (a keyed range claimed ahead takes its keys only with this range's record:
   * docs/protocol/poll-cycle.md#keyed-ranges-claimed-ahead): its slowest handler used at most a quarter of
   * its timeout (as for growing the range) and it ran within a quarter of this range's lease, so
   * the range claimed ahead, sized before this one ran, does not wait long for its turn. A range
   * that does wait longer extends its lease before a start that would not fit, as any range does.
   */
  mayClaimAhead(run: RangeRun<T>): boolean {
    if (!this.mayChain()) return false;
    const last = this.drain?.lastRun;
    return last !== undefined && last.slowest <= GROW_TIMEOUT_SHARE && 4 * last.ms <= run.range.leaseMs;
  }

  /** The drain's sizer sees the range just run before the next is claimed (docs/protocol/poll-cycle.md#range-size-in-a-drain). */
  nextRangeSize(): void {
    const { drain } = this;
    if (drain?.sizer === undefined || this.sample === undefined) return;
    drain.sizer.observe(this.sample);
    this.ctx.options.batchLimit = drain.sizer.size;
    this.sample = drain.sample = emptySample();
  }

  /** A range ran for `ms`: the sample's, and the drain's last range for claiming ahead. */
  ran(ms: number): void {
    if (this.sample === undefined) return;
    this.sample.ms = ms;
    if (this.drain) this.drain.lastRun = { ms, slowest: this.sample.slowest };
  }

  /** Nothing more is recorded together with a claim in this poll. */
  end(): void {
    this.until = 0 as MonotonicMs;
  }
}

/**
 * A fresh range, and in a drain the ranges after it: a range that came back full and was run
 * whole is recorded in the same statement that claims the next (docs/protocol/poll-cycle.md#the-steady-state).
 * While ranges of unkeyed messages keep coming back full and quick, the next range is claimed
 * while this one runs (docs/protocol/poll-cycle.md#claiming-ahead); its record then travels with the claim
 * after that.
 */
export async function claimPhase<T>(ctx: PollContext<T>, chain: Chain<T>, load: { head: string; obs: string }): Promise<RangeFacts> {
  const first = await freshClaim(ctx, load);
  if (first.claim === null) return { ...NO_FACTS, took: false, fenceBlocked: first.fenceBlocked };
  let step: Step<T> = { next: first.claim, unsent: null };
  while (step.next !== null) step = await runClaimed(ctx, chain, step.next, step.unsent);
  return { ...chain.learnt, took: true, fenceBlocked: false };
}

/** The range a claim answered, or null for an empty one. */
function rangeOf<T>(ctx: PollContext<T>, chain: Chain<T>, claim: Claimed): RangeRun<T> | null {
  const { low, high, leaseMs, msgs } = claim.range;
  if (msgs.length === 0) return null;
  return new RangeRun(ctx, { token: claim.token, low, high, leaseMs, msgs: byId(msgs) }, claim.sentAt, chain.sample, true);
}

/**
 * Runs one claimed range and records it; answers the next range when the record claimed one, or
 * when it was claimed ahead while this one ran (with this range's record still to send).
 */
async function runClaimed<T>(ctx: PollContext<T>, chain: Chain<T>, claim: Claimed, unsent: UnsentRecord<T> | null): Promise<Step<T>> {
  ctx.report.rangesClaimed++;
  if (chain.sample) chain.sample.full = big(claim.range.high) - big(claim.range.low) >= BigInt(ctx.options.batchLimit);
  const run = rangeOf(ctx, chain, claim);
  if (run === null) {
    if (unsent !== null) chain.note(await unsent.run.record(false));
    chain.note({ ...NO_FACTS, advance: true }); // an empty range: no lease, the advance passes its ids
    return { next: null, unsent: null };
  }
  const t0 = now();
  const { ahead, taking } = await sendAlongside(ctx, chain, run, unsent);
  const took = taking === null ? null : await taking;
  if (took !== null && !took.ok) {
    // Nothing of this range ran: a range claimed ahead behind it is released unstarted too.
    const next = ahead === null ? null : await ahead;
    if (next?.ok && next.value !== null) await releaseUnstarted(ctx, chain, next.value);
    throw took.error;
  }
  const failure = await run.dispatch();
  chain.ran(now() - t0);
  if (ahead === null) return recordThenNext(ctx, chain, run, failure);
  return afterAhead(ctx, chain, run, failure, await ahead);
}

/** What goes out as a range starts: its first key take (with the unsent record) and the claim ahead. */
interface Alongside {
  ahead: Promise<Settled<Claimed | null>> | null;
  taking: Promise<Settled<void>> | null;
}

async function sendAlongside<T>(ctx: PollContext<T>, chain: Chain<T>, run: RangeRun<T>, unsent: UnsentRecord<T> | null): Promise<Alongside> {
  const out: Alongside = { ahead: null, taking: null };
  if (run.takesKeys) {
    // A keyed range takes its first keys with the unsent record (docs/protocol/poll-cycle.md#keyed-ranges-claimed-ahead);
    // the claim ahead carries no record, and goes out at the same time (after the take, so on a
    // single connection it runs while the handlers do, not before them).
    const own = unsent === null ? [run.range.token] : [run.range.token, unsent.rec.token];
    out.taking = settled(takeFirstKeys(ctx, chain, run, unsent));
    if (chain.mayClaimAhead(run)) out.ahead = settled(claimAhead(ctx, own));
  } else if (chain.mayClaimAhead(run)) {
    // The claim ahead carries the unsent record; without it, the unsent record goes first, alone.
    // The record (with the claim, or alone) marks this range, claimed ahead, started.
    const own = [run.range.token];
    out.ahead = settled(unsent ? recordAndClaim(ctx, chain, unsent, false, own) : claimAhead(ctx, own));
  } else if (unsent !== null) chain.note(await unsent.run.record(false, starting(ctx, run.range.token)));
  // One turn of the event loop puts the statements on the wire before handlers that return
  // synchronously hold the thread for the whole range.
  if (out.ahead !== null || out.taking !== null) await new Promise(setImmediate);
  return out;
}

/** After a range with nothing claimed ahead: recorded with the next claim when the chain goes on, else alone. */
async function recordThenNext<T>(ctx: PollContext<T>, chain: Chain<T>, run: RangeRun<T>, failure: { e: unknown } | null): Promise<Step<T>> {
  const whole = failure === null && chain.mayChain() ? run.whole() : null;
  if (whole !== null) return { next: await recordAndClaim(ctx, chain, { run, rec: whole }, true, []), unsent: null };
  chain.note(await run.record(failure !== null));
  if (failure) throw failure.e;
  return { next: null, unsent: null };
}

/**
 * After a range whose successor was claimed ahead: the range's record goes with the claim after
 * that when the chain goes on, else it is sent alone now. A range claimed ahead behind a failed
 * one is released unstarted (its lease would otherwise have to expire).
 */
async function afterAhead<T>(
  ctx: PollContext<T>, chain: Chain<T>, run: RangeRun<T>, failure: { e: unknown } | null, ahead: Settled<Claimed | null>,
): Promise<Step<T>> {
  const next = ahead.ok ? ahead.value : null;
  const whole = failure === null && next !== null && chain.mayChain() ? run.whole() : null;
  chain.nextRangeSize(); // this range's sample; the range claimed ahead was sized before it ran
  if (whole !== null) return { next, unsent: { run, rec: whole } };
  chain.note(await run.record(failure !== null, failure === null && next !== null ? starting(ctx, next.token) : null));
  if (failure) {
    if (next !== null) await releaseUnstarted(ctx, chain, next);
    throw failure.e;
  }
  if (!ahead.ok) throw ahead.error;
  return { next, unsent: null };
}

/**
 * The token of a range claimed ahead that starts after the record about to be sent, which marks it
 * started (docs/protocol/poll-cycle.md#claiming-ahead); null when a stop or an abort means nothing of
 * it will start.
 */
function starting<T>(ctx: PollContext<T>, token: string): string | null {
  return ctx.stop || aborted(ctx) ? null : token;
}

/** Releases a range claimed ahead that will not run: recorded with no outcome, so any poll resumes it at once. */
async function releaseUnstarted<T>(ctx: PollContext<T>, chain: Chain<T>, claim: Claimed): Promise<void> {
  try {
    const run = rangeOf(ctx, chain, claim);
    if (run !== null) await run.record(true);
  } catch {
    // Already failing: the lease expires and the range is reclaimed then.
  }
}

/**
 * The record of a range run whole and the next claim in one statement, one transaction
 * (docs/protocol/poll-cycle.md#the-steady-state). Its first row says whether the range was recorded and,
 * if so, what the load would say: anything to reclaim, expire or reserve, or a pause, and no
 * range was claimed; the exception phase of this poll (or the next poll's load) sees to it.
 * `own`: for a claim ahead, the range starting as it goes out (docs/protocol/poll-cycle.md#claiming-ahead).
 */
async function recordAndClaim<T>(
  ctx: PollContext<T>, chain: Chain<T>, unsent: UnsentRecord<T>, resize: boolean, own: string[],
): Promise<Claimed | null> {
  const { run, rec } = unsent;
  if (resize) chain.nextRangeSize();
  const token = randomUUID();
  const sentAt = now();
  const { answer, retried } = await sendClaim(ctx, claimParams(ctx, token, null, recordParams(rec), rec.pastDue, own));
  if (answer.record === null) {
    // The recovery found the lease the lost attempt took: it committed, and the record with it.
    chain.note({ ...NO_FACTS, advance: true });
    countRecorded(ctx, rec.rows);
    return answer.range === null ? null : { token, sentAt, range: answer.range };
  }
  const facts = await recordRowFacts(ctx, run.recorded, answer.record, rec.rows, { retried });
  chain.note(facts);
  if (!facts.landed) return null;
  ctx.report.committedAfter = answer.record.committed as string;
  if (answer.range !== null) return { token, sentAt, range: answer.range };
  warnFenceHolders(ctx, answer.fenceHolders);
  return null;
}

/**
 * A keyed range's first key leases (not the compacted members': their head is checked at their
 * start). After a range run whole in a drain's chain, that range's record goes with this take
 * (docs/protocol/poll-cycle.md#keyed-ranges-claimed-ahead) and its key leases pass on to this range
 * (KeyLeases.adopt), taken with headroom for the ranges after it; so are a chain's first range's.
 */
async function takeFirstKeys<T>(ctx: PollContext<T>, chain: Chain<T>, run: RangeRun<T>, unsent: UnsentRecord<T> | null): Promise<void> {
  if (unsent === null) return run.takeFirstKeys(chain.headroom(false));
  if (ctx.stop || aborted(ctx)) {
    chain.note(await unsent.run.record(false));
    return;
  }
  const { rec } = unsent;
  const passed = run.keys.adopt(unsent.run.keys);
  const take = run.keys.firstTake(run.units, chain.headroom(passed), run.outlives);
  const retry = { retried: false };
  const r = await statements.recordTakeKeys.retry(ctx.db, ctx.tables, {
    recordToken: rec.token, ...rowsJson(rec.rows), recordKeyToken: rec.keys.token, releasedKeys: passed ? null : releaseJson(rec.keys),
    ...run.keys.takeParams(take, run.range.low, run.range.high), start: run.range.token,
  }, retry);
  // No cursor advance here: the chain's last record (or the poll's advance) moves the cursor.
  const row = r.rows[0];
  const facts = await recordRowFacts(ctx, unsent.run.recorded, row, rec.rows, retry);
  chain.note(facts);
  // Anything to reclaim or expire, a pause, or due rows after a keyed range ends the chain, as
  // after a record that claims, so the poll's exception phase (or the next poll's load) sees to
  // it once the ranges already claimed have run.
  if (statements.recordEndsChain(row, rec.pastDue)) chain.end();
  run.keys.took(take, r.rows.slice(1), run.expiry);
}
