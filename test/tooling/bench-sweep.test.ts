// The bench's choice of a sweeping arm's point (PgQ): every point runs in every repetition, the
// point with the best median is chosen and its median reported, never the best point of each
// repetition (bench/README.md, "Method"). Pure: no database.
import { describe, expect, it } from "vitest";
// @ts-expect-error: the bench is plain JavaScript without types
import { aggregate, sweepChoice } from "../../bench/run.mjs";

const point = (tickMs: number) => ({ tickMs, maxCount: 20_000, fetch: "events" });
const run = (a: number, b: number, pa = 10, pb = 10) => ({
  check: { ok: true, expected: 100 },
  metrics: { consume: Math.max(a, b), produce: Math.max(pa, pb) },
  sweepPoints: [
    { point: point(20), ok: true, consume: a, produce: pa, where: { wallMs: 1, tag: `a${a}` } },
    { point: point(100), ok: true, consume: b, produce: pb, where: { wallMs: 1, tag: `b${b}` } },
  ],
});

describe("a sweeping arm's reported point", () => {
  it("is the point with the best median, at its median: not the median of each repetition's best", () => {
    // Point A: 100, 100, 300 (median 100). Point B: 150, 150, 150 (median 150). Best-of-each-rep
    // would say median(150, 150, 300) = 150 with A's lucky 300 in it; here B wins at 150 and
    // A's 300 is never reported.
    const runs = [run(100, 150), run(300, 150), run(100, 150)];
    const c = sweepChoice(runs, "consume");
    expect(c.best.point.tickMs).toBe(100);
    expect(c.best.median).toBe(150);
    const agg = aggregate("pgq", runs);
    expect(agg.metrics.consume).toMatchObject({ median: 150, min: 150, max: 150, runs: [150, 150, 150] });
    expect(agg.settings.best_consume).toEqual(point(100));
    expect(agg.where.sweep.map((p: { tickMs: number; consume: number; ok: boolean }) => [p.tickMs, p.consume, p.ok])).toEqual([[20, 100, true], [100, 150, true]]);
    expect(agg.where.tag).toBe("b150");
  });

  it("chooses produce apart from consume, and passes over a point that failed in any repetition", () => {
    const runs = [run(100, 150, 50, 40), run(120, 150, 50, 40), run(130, 150, 50, 40)];
    runs[1].sweepPoints[1].ok = false;
    const agg = aggregate("pgq", runs);
    expect(agg.metrics.consume.median).toBe(120); // point B failed once: A (median 120)
    expect(agg.metrics.produce.median).toBe(50);
    expect(agg.where.sweep.map((p: { ok: boolean }) => p.ok)).toEqual([true, false]);
  });
});
