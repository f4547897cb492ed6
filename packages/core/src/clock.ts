// Elapsed time for the poll cycle comes from a monotonic clock, so a wall-clock step (NTP, a VM
// resume, a manual change) can neither stretch nor shrink a run's lease estimate or the time left
// before a deadline (docs/poll-cycle.md). Stored times come from the database's now().
import { performance } from "node:perf_hooks";

/** Milliseconds on a monotonic clock with an arbitrary origin: only differences mean anything. */
export function now(): number {
  return performance.now();
}

/**
 * A wall-clock deadline (epoch ms, as callers pass it) moved onto the monotonic clock: read the
 * wall clock once, here, and measure everything after from now().
 */
export function monotonicDeadline(epochMs: number): number {
  return now() + (epochMs - Date.now());
}

/** Poll options with their deadline moved onto the monotonic clock (once per poll or drain). */
export function monotonicOptions<O extends { deadline: number | undefined }>(o: O): O {
  return o.deadline === undefined ? o : { ...o, deadline: monotonicDeadline(o.deadline) };
}
