// `sqlstreams dev` wakes a stream's groups when its earliest scheduled message comes due (packages/cli/src/dev/due.ts).
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { DueWakes } from "../../packages/cli/src/dev/due.js";

describe("DueWakes", () => {
  beforeEach(() => void vi.useFakeTimers());
  afterEach(() => void vi.useRealTimers());

  it("wakes the stream once at its due time, re-arms on a new earliest due time, and clears on null", () => {
    const woke: string[] = [];
    const d = new DueWakes((s) => woke.push(s));
    const now = Date.now();
    d.arm("a", new Date(now + 1_000));
    d.arm("a", new Date(now + 1_000)); // the same due time: one timer
    d.arm("b", new Date(now + 500));
    vi.advanceTimersByTime(400);
    expect(woke).toEqual([]);
    vi.advanceTimersByTime(200);
    expect(woke).toEqual(["b"]);
    d.arm("a", new Date(now + 2_000)); // a later earliest (the first was cancelled)
    vi.advanceTimersByTime(1_000);
    expect(woke).toEqual(["b"]);
    vi.advanceTimersByTime(1_000);
    expect(woke).toEqual(["b", "a"]);
    d.arm("c", new Date(now - 10)); // overdue: at once
    d.arm("e", new Date(Date.now() + 100));
    d.arm("e", null);
    vi.advanceTimersByTime(200);
    expect(woke).toEqual(["b", "a", "c"]);
    d.arm("f", new Date(Date.now() + 100));
    d.stop();
    vi.advanceTimersByTime(200);
    expect(woke).toEqual(["b", "a", "c"]);
  });
});
