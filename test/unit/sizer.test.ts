// How a drain sizes its ranges (docs/protocol/poll-cycle.md#range-size-in-a-drain): the rule of
// cycle/sizer.ts as a pure unit, fed samples by hand. No database, no clock.
import { describe, expect, it } from "vitest";
import {
  DRAIN_LEASE_BOUND_MS, RangeSizer, SIZER_CEILING, SIZER_START, emptySample, type RangeSample,
} from "../../packages/core/src/cycle/sizer.js";

const quick = (full: boolean, over: Partial<RangeSample> = {}): RangeSample => ({ ...emptySample(), full, ran: 10, slowest: 0.01, ms: 5, ...over });

describe("RangeSizer", () => {
  it("starts at 10 and doubles after full, quick ranges up to the ceiling", () => {
    const z = new RangeSizer(SIZER_CEILING);
    expect(z.size).toBe(SIZER_START);
    const seen = [z.size];
    for (let i = 0; i < 9; i++) seen.push(z.observe(quick(true)));
    expect(seen).toEqual([10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000]);
  });

  it("an explicit batchLimit is the start and the ceiling", () => {
    const z = new RangeSizer(50, 50);
    expect(z.size).toBe(50);
    expect(z.observe(quick(true))).toBe(50);
    expect(new RangeSizer(4).size).toBe(4); // a ceiling below the start wins
  });

  it("holds on a partial range (caught up), whatever the handlers did", () => {
    const z = new RangeSizer(1000, 80);
    expect(z.observe(quick(false))).toBe(80);
    expect(z.observe(emptySample())).toBe(80); // a poll that claimed nothing
  });

  it("grows only while the slowest handler used at most a quarter of its timeout", () => {
    const z = new RangeSizer(1000, 80);
    expect(z.observe(quick(true, { slowest: 0.25 }))).toBe(160);
    expect(z.observe(quick(true, { slowest: 0.3 }))).toBe(160); // between a quarter and a half: hold
    expect(z.observe(quick(true, { slowest: 0.51 }))).toBe(80); // past half: halve
    expect(z.observe(quick(false, { slowest: 1 }))).toBe(40); // a timeout halves even on a partial range
  });

  it("keeps a range's run short against the lease bound: no growth past a quarter, halves past a half", () => {
    const z = new RangeSizer(1000, 100);
    expect(z.observe(quick(true, { ms: DRAIN_LEASE_BOUND_MS / 8 }))).toBe(200); // twice fits in a quarter
    expect(z.observe(quick(true, { ms: DRAIN_LEASE_BOUND_MS / 8 + 1 }))).toBe(200);
    expect(z.observe(quick(true, { ms: DRAIN_LEASE_BOUND_MS / 2 + 1 }))).toBe(100);
  });

  it("never goes below 1", () => {
    const z = new RangeSizer(1000, 1);
    expect(z.observe(quick(true, { slowest: 0.9 }))).toBe(1);
    expect(z.observe(quick(true))).toBe(2);
  });
});

describe("RangeSizer at its edges", () => {
  it("a handler at exactly half its timeout holds; just past it halves", () => {
    const z = new RangeSizer(1000, 80);
    expect(z.observe(quick(true, { slowest: 0.5 }))).toBe(80);
    expect(z.observe(quick(true, { slowest: 0.5001 }))).toBe(40);
  });

  it("a range that ran exactly half the lease bound holds; one that ran longer halves even when partial", () => {
    const z = new RangeSizer(1000, 80);
    expect(z.observe(quick(true, { ms: DRAIN_LEASE_BOUND_MS / 2 }))).toBe(80);
    expect(z.observe(quick(false, { ms: DRAIN_LEASE_BOUND_MS / 2 + 1 }))).toBe(40);
  });

  it("failures alone change nothing: a full range of quick failures grows like quick successes", () => {
    const z = new RangeSizer(1000, 10);
    expect(z.observe({ full: true, ran: 10, slowest: 0, ms: 3 })).toBe(20);
  });

  it("a start below 1 is 1, a start above the ceiling is the ceiling, and the lease bound is the one given", () => {
    expect(new RangeSizer(1000, 0).size).toBe(1);
    expect(new RangeSizer(30, 500).size).toBe(30);
    const z = new RangeSizer(1000, 10, 1_000);
    expect(z.leaseBoundMs).toBe(1_000);
    expect(new RangeSizer(1000).leaseBoundMs).toBe(DRAIN_LEASE_BOUND_MS);
    expect(z.observe(quick(true, { ms: 126 }))).toBe(10); // twice 126 ms is past a quarter of 1 s
    expect(z.observe(quick(true, { ms: 501 }))).toBe(5); // past half of 1 s
  });
});
