// A drain sizes its ranges (docs/protocol/poll-cycle.md#range-size-in-a-drain): real drains whose range
// counts prove the rule (unit-tested in test/unit/sizer.test.ts) is applied. Counts only, never
// timings.
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { useFreshDatabase } from "../../support/db.js";
import { SCHEMA, cursor, groupIdOf, streamIdOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();

describe("drain sizes its ranges (real Postgres)", () => {
  it("a default drain of 3,000 quick messages grows its ranges: 10, 20, …, 1000 → 9 ranges, not 300", async () => {
    const t = testClient(url());
    const s = t.client.stream<{ n: number }>("sized.default");
    await s.register();
    const g = s.consumer("g");
    await g.register();
    const N = 3_000;
    for (let i = 0; i < N; i += 500) await s.produceBatch(Array.from({ length: 500 }, (_, j) => ({ payload: { n: i + j } })));
    const seen = new Set<number>();
    const r = await g.drain((m) => {
      seen.add(m.payload.n);
    });
    expect(seen.size).toBe(N);
    expect(r.succeeded).toBe(N);
    // 10 + 20 + 40 + 80 + 160 + 320 + 640 = 1270 ids in 7 ranges, then 1000 + 730: 9 ranges.
    // A slow machine cannot change this: the handlers are synchronous no-ops (slowest ≈ 0 of
    // the 30 s timeout) and no range runs anywhere near 7.5 s... unless the machine stalls for
    // seconds, which would only hold the size, so allow a few more ranges, never the 300 of
    // fixed ranges of 10.
    expect(r.rangesClaimed).toBeGreaterThanOrEqual(9);
    expect(r.rangesClaimed).toBeLessThanOrEqual(14);
    const c = await cursor(t, await streamIdOf(t, "sized.default"), await groupIdOf(t, "g", "sized.default"));
    expect(c.committed).toBe(String(N));
    expect((await t.sql<{ n: number }>(`SELECT count(*)::int AS n FROM ${SCHEMA}.claim_lease_${await streamIdOf(t, "sized.default")}`))[0].n).toBe(0);
  });

  it("an explicit batchLimit caps it, and poll() keeps its fixed batchLimit", async () => {
    const t = testClient(url());
    const s = t.client.stream("sized.capped");
    await s.register();
    const g = s.consumer("g");
    await g.register();
    await s.produceBatch(Array.from({ length: 600 }, (_, i) => ({ payload: i })));
    const one = await g.poll(() => {});
    expect(one.succeeded).toBe(10); // the default batchLimit of a single poll
    const r = await g.drain(() => {}, { batchLimit: 50 });
    expect(r.succeeded).toBe(590);
    expect(r.rangesClaimed).toBe(12); // 590 / 50, rounded up: never larger than 50
  });

  it("a slow handler (over half its timeout) shrinks the range to one message", async () => {
    const t = testClient(url());
    const s = t.client.stream("sized.slow");
    await s.register();
    const g = s.consumer("g");
    await g.register({ message: { timeout: 40 } });
    await s.produceBatch(Array.from({ length: 15 }, (_, i) => ({ payload: i })));
    // Each handler sleeps 30 ms of a 40 ms timeout (≥ 0.75 of it: slow on any machine; a
    // loaded machine only makes it slower, and a timeout is a failure that is retried later).
    const r = await g.drain(async () => {
      await sleep(30);
    }, { batchLimit: 8 });
    // 8 → 4 → 2 → 1 → 1 … : the ranges cover 8 + 4 + 2 + 1 = 15 ids: 4 ranges.
    expect(r.rangesClaimed).toBe(4);
  });

  it("a drain's range lease is bounded (60 s), not Tmax × n / c (302 s for 10 × 30 s); poll() keeps the formula", async () => {
    const t = testClient(url());
    const s = t.client.stream("sized.lease");
    await s.register();
    const g = s.consumer("g");
    await g.register();
    const n = await streamIdOf(t, "sized.lease");
    await s.produceBatch(Array.from({ length: 20 }, (_, i) => ({ payload: i })));
    const leaseLeft = async () =>
      (await t.sql<{ s: number }>(`SELECT EXTRACT(EPOCH FROM (expires_at - now()))::float8 AS s FROM ${SCHEMA}.claim_lease_${n}`))[0].s;
    let polled = 0;
    await g.poll(async () => {
      polled = polled || (await leaseLeft());
    });
    expect(polled).toBeGreaterThan(240); // 10 × 30 s + 2 s, minus however long the machine took
    expect(polled).toBeLessThanOrEqual(302);
    let drained = 0;
    await g.drain(async () => {
      drained = drained || (await leaseLeft());
    });
    expect(drained).toBeGreaterThan(32); // never shorter than one run: timeout + recordMargin
    expect(drained).toBeLessThanOrEqual(60);
  });
});
