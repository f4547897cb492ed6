// The poll cycle's clocks (clock.ts, docs/protocol/poll-cycle.md#options): elapsed time is monotonic, and a
// caller's wall-clock deadline is read against the wall clock once and then lives on the monotonic
// clock, so a later wall-clock step cannot move it. No database; the wall clock is stubbed.
import { afterEach, describe, expect, it, vi } from "vitest";
import { after, monotonicDeadline, monotonicOptions, now } from "../../packages/core/src/clock.js";

afterEach(() => {
  vi.restoreAllMocks();
});

describe("monotonic time", () => {
  it("now() never goes back, whatever the wall clock does", () => {
    const a = now();
    vi.spyOn(Date, "now").mockReturnValue(0);
    const b = now();
    expect(b).toBeGreaterThanOrEqual(a);
  });

  it("after() adds milliseconds", () => {
    const t = now();
    expect(after(t, 250) - t).toBeCloseTo(250, 6);
    expect(after(t, -10) - t).toBeCloseTo(-10, 6);
  });
});

describe("a wall-clock deadline on the monotonic clock", () => {
  it("keeps the time left that it had when converted, however the wall clock steps later", () => {
    const wall = Date.now();
    const d = monotonicDeadline(wall + 10_000);
    const left = d - now();
    expect(left).toBeGreaterThan(9_000);
    expect(left).toBeLessThanOrEqual(10_000);
    vi.spyOn(Date, "now").mockReturnValue(wall + 3_600_000); // an hour forward
    expect(d - now()).toBeGreaterThan(9_000);
    vi.spyOn(Date, "now").mockReturnValue(wall - 3_600_000); // an hour back
    expect(d - now()).toBeLessThanOrEqual(10_000);
  });

  it("reads the wall clock once, at conversion: a deadline already past is in the monotonic past", () => {
    const stub = vi.spyOn(Date, "now").mockReturnValue(1_000_000);
    const d = monotonicDeadline(999_000);
    expect(stub).toHaveBeenCalledTimes(1);
    expect(d - now()).toBeLessThanOrEqual(-1_000);
  });

  it("monotonicOptions converts a deadline and leaves options without one as they are", () => {
    const none = { deadline: undefined, batchLimit: 10 };
    expect(monotonicOptions(none)).toBe(none);
    const wall = Date.now();
    const o = { deadline: wall + 5_000, batchLimit: 10 };
    const m = monotonicOptions(o);
    expect(m).not.toBe(o);
    expect(o.deadline).toBe(wall + 5_000); // the caller's object is untouched
    expect(m.batchLimit).toBe(10);
    expect((m.deadline ?? 0) - now()).toBeGreaterThan(4_000);
    expect((m.deadline ?? 0) - now()).toBeLessThanOrEqual(5_000);
  });
});
