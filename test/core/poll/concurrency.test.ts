// C15: concurrent polls of one group take disjoint ranges; many concurrent drains handle every
// id exactly once with no reclaim and no lost lease.
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { useFreshDatabase } from "../../support/db.js";
import { SCHEMA, cursor, groupIdOf, latch, streamIdOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();

describe("disjoint claims (C15)", () => {
  it("two concurrent polls with batchLimit 100 over head 200 lease (0,100] and (100,200]", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream("disjoint");
    await s.register();
    const g = s.consumer("g");
    await g.register();
    const n = await streamIdOf(t, "disjoint");
    await s.produceBatch(Array.from({ length: 200 }, (_, i) => ({ payload: { i } })));
    const gate = latch();
    let entered = 0;
    const handler = async () => {
      entered++;
      await gate.promise;
    };
    const polls = [g.poll(handler, { batchLimit: 100, concurrency: 50 }), g.poll(handler, { batchLimit: 100, concurrency: 50 })];
    while (entered < 100) await sleep(10);
    const leases = await t.sql(`SELECT low::text, high::text, reclaims FROM ${SCHEMA}.claim_lease_${n} ORDER BY low`);
    expect(leases).toEqual([{ low: "0", high: "100", reclaims: 0 }, { low: "100", high: "200", reclaims: 0 }]);
    gate.open();
    const reports = await Promise.all(polls);
    expect(reports.map((r) => r.succeeded).sort()).toEqual([100, 100]);
    // Each record advanced the cursor as far as it could see; with both recording at the same
    // moment each still saw the other's lease, so the next poll (here an idle one) finishes it.
    await g.poll(handler);
    expect((await cursor(t, n, await groupIdOf(t, "g", "disjoint"))).committed).toBe("200");
  });

  it("twenty concurrent drains over 10,000 messages handle each id exactly once", async () => {
    const t = testClient(url());
    const s = t.client.stream("twenty.drains");
    await s.register();
    const g = s.consumer("g");
    await g.register();
    const n = await streamIdOf(t, "twenty.drains");
    for (let b = 0; b < 10; b++) await s.produceBatch(Array.from({ length: 1000 }, (_, i) => ({ payload: { i: b * 1000 + i } })));
    const seen = new Map<string, number>();
    const handler = (m: { id: string }) => void seen.set(m.id, (seen.get(m.id) ?? 0) + 1);
    const reports = await Promise.all(Array.from({ length: 20 }, () => g.drain(handler, { batchLimit: 50 })));
    // A drain that ended while others still held ranges leaves nothing behind: finish the tail.
    await g.drain(handler, { batchLimit: 50 });
    expect(seen.size).toBe(10_000);
    expect([...seen.values()].every((v) => v === 1)).toBe(true);
    const sum = (k: "rangesReclaimed" | "leaseLost" | "rangesResumed") => reports.reduce((a, r) => a + r[k], 0);
    expect(sum("rangesReclaimed")).toBe(0);
    expect(sum("leaseLost")).toBe(0);
    expect((await cursor(t, n, await groupIdOf(t, "g", "twenty.drains"))).committed).toBe("10000");
    expect(t.events.filter((e) => e.level !== "info")).toEqual([]);
  });
});
