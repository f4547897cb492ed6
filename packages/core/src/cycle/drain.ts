// A drain (docs/protocol/poll-cycle.md#the-report-and-drain): polls one after another until the group is idle or paused,
// the signal aborts, or the deadline is near; the range size adapts to the handlers between them.
import type { Runtime } from "../runtime.js";
import { tracedPoll } from "../otel.js";
import { setTimeout as sleep } from "node:timers/promises";
import { now } from "../clock.js";
import type { PollOptions } from "./context.js";
import { type PollState, pollOnce } from "./poll.js";
import { RangeSizer, SIZER_CEILING, SIZER_START, emptySample } from "./sizer.js";
import { type CycleReport, type Handler, emptyCycleReport, mergeReports } from "./types.js";

/** How long a drain keeps asking while the snapshot fence waits for an open write transaction. */
const FENCE_PATIENCE_MS = 2_000;
/**
 * The least a rate-limited drain waits before its next poll, however soon the next token: a few
 * tokens of a fast limit go in one claim instead of a load and a claim each.
 */
export const RATE_MIN_WAIT_MS = 20;

/**
 * Repeats pollOnce() until the group is idle or paused, the signal aborts, or the deadline is
 * near. `o` are the validated options with a monotonic deadline; `batchLimitGiven` whether the
 * caller set batchLimit (docs/protocol/poll-cycle.md#range-size-in-a-drain); `sizerStart` the range size
 * a drain without it starts at (a batch drain starts at its maxBatch).
 */
export async function drainGroup<T>(
  client: Runtime, stream: string, group: string, handler: Handler<T>, o: PollOptions, batchLimitGiven: boolean,
  sizerStart: number = SIZER_START,
): Promise<CycleReport> {
  const started = now();
  // Without a batchLimit the range size starts at 10 and may grow to 1 000; an explicit
  // batchLimit (up to 10 000) is where it starts and the most it takes. Range leases are bounded so a crash is
  // recovered promptly.
  const sizer = new RangeSizer(batchLimitGiven ? o.batchLimit : SIZER_CEILING, batchLimitGiven ? o.batchLimit : sizerStart);
  o.rangeLeaseBound = sizer.leaseBoundMs;
  const state: PollState = { fenceBlocked: false, sizer };
  try {
    const total = await polls(client, stream, group, handler, o, state, sizer);
    total.durationMs = Math.round(now() - started);
    return total;
  } finally {
    // The drain's concurrency slot, when its group has maxConcurrency (docs/guide/configuration.md#maxconcurrency).
    await state.slot?.release();
  }
}

/**
 * Waits for the group's next token; false when the signal aborts, or when after the wait a run of
 * the group's default timeout (and its record margin) would no longer fit before the deadline: the
 * tokens a claim took then would go to messages the deadline refuses to start.
 */
async function rateWait(o: PollOptions, waitMs: number, runMs: number): Promise<boolean> {
  const ms = Math.max(waitMs, RATE_MIN_WAIT_MS);
  if (o.deadline !== undefined && now() + ms + Math.max(runMs, o.recordMargin) + o.recordMargin > o.deadline) return false;
  try {
    await sleep(ms, undefined, o.signal ? { signal: o.signal } : undefined);
    return true;
  } catch {
    return false; // aborted
  }
}

async function polls<T>(
  client: Runtime, stream: string, group: string, handler: Handler<T>, o: PollOptions, state: PollState, sizer: RangeSizer,
): Promise<CycleReport> {
  let total = emptyCycleReport(stream, group);
  let blockedSince: number | null = null;
  for (;;) {
    if (o.signal?.aborted) break;
    if (o.deadline !== undefined && o.deadline - now() < 2 * o.recordMargin) break;
    o.batchLimit = sizer.size;
    state.sample = emptySample();
    const r = await tracedPoll(stream, group, () => pollOnce(client, stream, group, handler, o, state));
    // The sample of the poll's last range (the poll's range phase fed the sizer the ones before it).
    sizer.observe(state.sample);
    total = mergeReports(total, r);
    // Capped: another drain holds every slot; lost: this drain's slot expired and was taken.
    if (r.paused || r.capped > 0 || state.slot?.lost === true) break;
    if (r.idle && state.fenceBlocked) {
      // Messages are visible but not yet provably complete: an older write transaction is still
      // open. Keep asking for a while (it usually ends within milliseconds) instead of leaving
      // them to the next invocation; a long transaction ends the drain after FENCE_PATIENCE_MS.
      blockedSince ??= now();
      if (now() - blockedSince < FENCE_PATIENCE_MS) {
        await sleep(50);
        continue;
      }
    }
    if (r.idle) break;
    blockedSince = null;
    // The deadline (or an abort) refused to start a message: later polls would refuse it too.
    if (r.notStarted > 0) break;
    // docs/protocol/poll-cycle.md#rate-limit: wait for the next token when the deadline allows, else end.
    if (r.rateLimited > 0) {
      if (await rateWait(o, state.rateWaitMs ?? 0, state.rateRunMs ?? 0)) continue;
      break;
    }
    // A poll that only deferred or lost what it reserved made no progress: stop instead of spinning.
    const moved = r.rangesClaimed + r.rangesReclaimed + r.rangesResumed + r.rangesQuarantined + r.started + r.superseded + r.expired + r.leaseExpired + r.killed;
    if (moved === 0) break;
  }
  return total;
}
