// Elapsed time for the poll cycle comes from a monotonic clock, so a wall-clock step (NTP, a VM
// resume, a manual change) can neither stretch nor shrink a run's lease estimate or the time left
// before a deadline (docs/protocol/poll-cycle.md). Stored times come from the database's now().
import { performance } from "node:perf_hooks";

/**
 * Milliseconds on the monotonic clock (arbitrary origin): only differences, and comparisons with
 * now(), mean anything. A distinct type so an epoch time is never taken for one.
 */
export type MonotonicMs = number & { readonly __clock: "monotonic" };

/** Milliseconds on a monotonic clock with an arbitrary origin: only differences mean anything. */
export function now(): MonotonicMs {
  return performance.now() as MonotonicMs;
}

/** The instant `ms` after `at` on the monotonic clock. */
export function after(at: MonotonicMs, ms: number): MonotonicMs {
  return (at + ms) as MonotonicMs;
}

/**
 * A wall-clock deadline (epoch ms, as callers pass it) moved onto the monotonic clock: read the
 * wall clock once, here, and measure everything after from now().
 */
export function monotonicDeadline(epochMs: number): MonotonicMs {
  return (now() + (epochMs - Date.now())) as MonotonicMs;
}

/** Options whose deadline was moved onto the monotonic clock. */
export type OnMonotonicClock<O extends { deadline: number | undefined }> = Omit<O, "deadline"> & { deadline: MonotonicMs | undefined };

/** Poll options with their deadline moved onto the monotonic clock (once per poll or drain). */
export function monotonicOptions<O extends { deadline: number | undefined }>(o: O): OnMonotonicClock<O> {
  return o.deadline === undefined ? (o as OnMonotonicClock<O>) : { ...o, deadline: monotonicDeadline(o.deadline) };
}
