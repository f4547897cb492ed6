// Elapsed time in the poll cycle comes from a monotonic clock
// (docs/protocol/poll-cycle.md#options). A wall-clock step while handlers run — simulated by moving
// Date.now() an hour forward or back — must neither end a poll early (the deadline looks passed)
// nor produce negative durations; the deadline is read from the wall clock once, when passed in.
import { setTimeout as sleep } from "node:timers/promises";
import { afterEach, describe, expect, it, vi } from "vitest";
import { useFreshDatabase } from "../../support/db.js";
import { didWork, pollPastFence, setupGroup, testClient } from "../../support/streams.js";

const url = useFreshDatabase();
const HOUR = 3_600_000;

afterEach(() => {
  vi.restoreAllMocks();
});

/** Moves the wall clock by `ms` from now on (Date.now only; performance.now is untouched). */
function stepWallClock(ms: number): void {
  const real = Date.now.bind(Date);
  vi.spyOn(Date, "now").mockImplementation(() => real() + ms);
}

describe("durations come from a monotonic clock", () => {
  for (const [name, step] of [["forward", HOUR], ["back", -HOUR]] as const) {
    it(`a wall-clock step ${name} during a poll changes nothing it decides`, async () => {
      const { g, s } = await setupGroup(testClient(url()), `clock.${name}`, { group: { message: { timeout: 5_000 } } });
      for (let i = 0; i < 3; i++) await s.produce({ i });
      const handled: number[] = [];
      let stepped = false;
      const handler = (m: { payload: unknown }) => {
        handled.push((m.payload as { i: number }).i);
        if (!stepped) {
          stepped = true;
          stepWallClock(step);
        }
      };
      // A deadline a minute away. Read from the wall clock on every check, a forward step would
      // make it look passed after the first message (2 not started); a backward one would give a
      // negative duration.
      const r = await pollPastFence(g, handler, { until: didWork, opts: () => ({ deadline: Date.now() + 60_000, batchLimit: 10 }) });
      expect(r.notStarted).toBe(0);
      expect(handled).toEqual([0, 1, 2]);
      expect(r.succeeded).toBe(3);
      expect(r.durationMs).toBeGreaterThanOrEqual(0);
      expect(r.durationMs).toBeLessThan(HOUR / 2);
      vi.restoreAllMocks();
    });
  }

  it("drain() keeps its deadline budget across a wall-clock step", async () => {
    const { g, s } = await setupGroup(testClient(url()), "clock.drain", { group: { message: { timeout: 5_000 } } });
    for (let i = 0; i < 6; i++) await s.produce({ i });
    let n = 0;
    const handler = () => {
      if (n++ === 0) stepWallClock(HOUR);
    };
    // Everything produced is handled although the wall clock says the deadline passed long ago.
    const deadline = Date.now() + 120_000;
    let total = 0;
    for (let i = 0; i < 200 && total < 6; i++) {
      const r = await g.drain(handler, { deadline, batchLimit: 2 });
      total += r.succeeded;
      expect(r.notStarted).toBe(0);
      expect(r.durationMs).toBeGreaterThanOrEqual(0);
      vi.restoreAllMocks();
      if (total < 6) await sleep(20);
    }
    expect(total).toBe(6);
  });
});
