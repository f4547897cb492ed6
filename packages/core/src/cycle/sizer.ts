// How big a drain's next fresh range is (docs/protocol/poll-cycle.md#range-size-in-a-drain). Pure: fed one
// sample per claimed range, it answers the batchLimit of the next poll. No clock, no database.

/** Where a drain without `batchLimit` starts: poll()'s default, safe for slow handlers. */
export const SIZER_START = 10;
/**
 * The most a drain without `batchLimit` grows to. Below the option's own ceiling (10 000): a larger
 * range is for a caller who asked for it, since a crash runs all of it again.
 */
export const SIZER_CEILING = 1_000;
/**
 * A drain's range lease is at most this (or one run, `timeout + recordMargin`, when that is
 * longer); a longer range extends its lease before each start that would not fit. So a crashed
 * drain's range comes back within about a minute whatever its size.
 */
export const DRAIN_LEASE_BOUND_MS = 60_000;
/** Grow only while the slowest handler of the range used at most this share of its timeout. */
export const GROW_TIMEOUT_SHARE = 0.25;
/** Shrink when the slowest handler used more than this share of its timeout. */
export const SHRINK_TIMEOUT_SHARE = 0.5;
/** Grow only while twice the range would still run within this share of the lease bound. */
export const GROW_LEASE_SHARE = 0.25;
/** Shrink when a range ran longer than this share of the lease bound. */
export const SHRINK_LEASE_SHARE = 0.5;

/** What one claimed range showed; filled by the range phase of a poll. */
export interface RangeSample {
  /** The range spanned the full batchLimit of ids (more work is probably behind it). */
  full: boolean;
  /** Messages run in the range. */
  ran: number;
  /** The largest handler time / timeout of the range (0 when nothing ran). */
  slowest: number;
  /** Monotonic ms from sending the claim to the recorded outcome. */
  ms: number;
}

/** A drain's last range, as claiming ahead judges it: monotonic ms it ran, and its `slowest`. */
export interface LastRun {
  ms: number;
  slowest: number;
}

/** What a drain keeps across its polls for sizing its ranges (docs/protocol/poll-cycle.md#the-steady-state). */
export interface DrainSizing {
  /**
   * With a sizer, a range run whole that came back full is recorded in the statement that claims
   * the next one, and the sizer sees each range before the next is claimed.
   */
  sizer?: RangeSizer;
  /** The range phase fills it for the sizer (left untouched without a range); the last range's. */
  sample?: RangeSample;
  /** The drain's last range (docs/protocol/poll-cycle.md#claiming-ahead). */
  lastRun?: LastRun;
}

export function emptySample(): RangeSample {
  return { full: false, ran: 0, slowest: 0, ms: 0 };
}

/**
 * The rule: start at `start`; after a range that spanned the full size, whose slowest handler
 * finished within a quarter of its timeout (a timed-out handler counts as 1), and that ran short enough that twice
 * the range would fit in a quarter of the lease bound, double (up to the ceiling). After a range
 * whose slowest handler used more than half of its timeout, or that ran longer than half the lease
 * bound, halve (down to 1). A handler that throws quickly is quick: failures alone change nothing. Anything else keeps the size: a partial range only means the drain
 * caught up, which says nothing about the handlers.
 */
export class RangeSizer {
  private n: number;

  constructor(
    readonly ceiling: number,
    start: number = Math.min(SIZER_START, ceiling),
    readonly leaseBoundMs: number = DRAIN_LEASE_BOUND_MS,
  ) {
    this.n = Math.max(1, Math.min(start, ceiling));
  }

  /** The batchLimit of the next poll. */
  get size(): number {
    return this.n;
  }

  observe(s: RangeSample): number {
    const slow = s.slowest > SHRINK_TIMEOUT_SHARE || s.ms > SHRINK_LEASE_SHARE * this.leaseBoundMs;
    if (slow) {
      this.n = Math.max(1, Math.floor(this.n / 2));
    } else if (s.full && s.slowest <= GROW_TIMEOUT_SHARE && 2 * s.ms <= GROW_LEASE_SHARE * this.leaseBoundMs) {
      this.n = Math.min(this.ceiling, this.n * 2);
    }
    return this.n;
  }
}
