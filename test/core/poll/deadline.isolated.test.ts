// The end-of-invocation protocol (docs/protocol/poll-cycle.md#the-range-lease, docs/protocol/poll-cycle.md#dispatch, docs/protocol/poll-cycle.md#recording-a-range, docs/protocol/poll-cycle.md#the-exception-phase, docs/protocol/crash-recovery.md#the-end-of-an-invocation; C25, C12 part 2):
// no handler starts that could not finish before the deadline; a partly done range commits its
// resolved prefix and releases the rest at once (no reclaim counted); unstarted reservations are
// released; every lease is capped at deadline + recordMargin.
import { setTimeout as sleep } from "node:timers/promises";
import { beforeAll, describe, expect, it } from "vitest";
import type { Message } from "@sqlstreams/core";
import { useFreshDatabase } from "../../support/db.js";
import { checkInvariants } from "../../support/invariants.js";
import { SCHEMA, type TestClient, count, cursor, didWork, deliveryLogRows, exceptionRows, groupIdOf, makeDue, pollPastFence, streamIdOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();

interface Lease {
  low: string;
  high: string;
  reclaims: number;
  released: boolean;
  lapsed: boolean;
  lease_ms: number;
}
const leases = (t: TestClient, n: string) =>
  t.sql<Lease>(
    `SELECT low::text, high::text, reclaims, released, expires_at <= now() AS lapsed,
            (EXTRACT(EPOCH FROM (expires_at - created_at)) * 1000)::float8 AS lease_ms
       FROM ${SCHEMA}.claim_lease_${n} ORDER BY low`,
  );

async function setup(t: TestClient, name: string, config: Record<string, unknown>, k: number) {
  const s = t.client.stream<{ i: number }>(name);
  await s.register();
  const g = s.consumer("g");
  await g.register(config);
  if (k > 0) await s.produceBatch(Array.from({ length: k }, (_, i) => ({ payload: { i: i + 1 } })));
  return { s, g, n: await streamIdOf(t, name), gid: await groupIdOf(t, "g", name) };
}

let t: TestClient;
beforeAll(async () => {
  t = testClient(url());
  await t.client.migrate();
});

describe("deadline and partial commit", () => {
  it("C25: at the deadline the resolved prefix commits, the rest is released at once and the next poll resumes it without a reclaim", async () => {
    const { g, n, gid } = await setup(t, "c25", { message: { timeout: 1_000 } }, 4);
    const seen: string[] = [];
    const slow = async (m: Message<{ i: number }>) => {
      seen.push(m.id);
      await sleep(800);
    };
    const r = await pollPastFence(g, slow, { until: didWork, opts: () => ({ batchLimit: 4, concurrency: 1, deadline: Date.now() + 4_500 }) });
    // 1 starts at ~0 (ends by 0 + 1 000 + 2 000), 2 at ~800 (3 800); 3 at ~1 600 would need 4 600.
    expect(seen).toEqual(["1", "2"]);
    expect(r).toMatchObject({ rangesClaimed: 1, rangesPartial: 1, succeeded: 2, notStarted: 2, leaseLost: 0, committedAfter: "2" });
    expect(t.events.filter((e) => e.code === "SQL0040")).toHaveLength(1);
    expect(await leases(t, n)).toMatchObject([{ low: "2", high: "4", released: true, lapsed: true, reclaims: 0 }]);
    expect(await cursor(t, n, gid)).toMatchObject({ claimed: "4", committed: "2" });
    await checkInvariants(t, n);

    t.events.length = 0;
    const next = await g.poll(slow, { batchLimit: 4, concurrency: 1 });
    expect(next).toMatchObject({ rangesResumed: 1, rangesReclaimed: 0, rangesClaimed: 0, succeeded: 2, committedAfter: "4" });
    expect(t.events.filter((e) => e.code === "SQL0035")).toEqual([]);
    expect(seen).toEqual(["1", "2", "3", "4"]); // concurrency 1: nothing ran twice
    expect(await leases(t, n)).toEqual([]);
    await checkInvariants(t, n);
  });

  it("the prefix keeps its recorded outcomes; a released range at the reclaim limit is resumed, not quarantined", async () => {
    const { g, n, gid } = await setup(t, "prefix", { message: { timeout: 1_000 }, maxRangeReclaims: 3 }, 4);
    const r = await pollPastFence(g, async (m) => {
      await sleep(400);
      if (m.id === "1") throw new Error("one fails");
    }, { until: didWork, opts: () => ({ batchLimit: 4, deadline: Date.now() + 3_700 }) });
    expect(r).toMatchObject({ failed: 1, succeeded: 1, notStarted: 2, rangesPartial: 1 });
    expect((await exceptionRows(t, n, gid)).map((e) => [e.message_id, e.status, e.attempts])).toEqual([["1", "ready", 1]]);
    expect((await deliveryLogRows(t, n, gid)).map((d) => [d.message_id, d.attempt, d.status])).toEqual([["1", 0, "failure"]]);
    // As if this range had already been crash-reclaimed twice: taking back a released range adds none.
    await t.sql(`UPDATE ${SCHEMA}.claim_lease_${n} SET reclaims = 2`);
    const seen: string[] = [];
    const next = await g.poll((m) => void seen.push(m.id), { batchLimit: 4 });
    expect(next).toMatchObject({ rangesResumed: 1, rangesQuarantined: 0, succeeded: 2 });
    expect(seen).toEqual(["3", "4"]);
    expect(await leases(t, n)).toEqual([]);
    expect((await exceptionRows(t, n, gid)).map((e) => e.message_id)).toEqual(["1"]);
    await checkInvariants(t, n);
  });

  it("an abort mid-range follows the same prefix rule", async () => {
    const { g, n } = await setup(t, "abort", {}, 4);
    const ac = new AbortController();
    const seen: string[] = [];
    const r = await pollPastFence(g, (m) => {
      seen.push(m.id);
      if (m.id === "2") ac.abort();
    }, { until: didWork, opts: () => ({ batchLimit: 4, signal: ac.signal }) });
    expect(seen).toEqual(["1", "2"]);
    expect(r).toMatchObject({ succeeded: 2, notStarted: 2, rangesPartial: 1, committedAfter: "2" });
    expect(await leases(t, n)).toMatchObject([{ low: "2", high: "4", released: true, lapsed: true, reclaims: 0 }]);
    await g.poll((m) => void seen.push(m.id), { batchLimit: 4 });
    expect(seen).toEqual(["1", "2", "3", "4"]);
    await checkInvariants(t, n);
  });

  it("the range lease is capped at deadline + recordMargin", async () => {
    const { g, n } = await setup(t, "cap", { message: { timeout: 1_500 } }, 4);
    let during: Lease[] = [];
    await pollPastFence(g, async (m) => {
      if (m.id === "1") during = await leases(t, n);
    }, { until: didWork, opts: () => ({ batchLimit: 4, deadline: Date.now() + 4_000 }) });
    // Uncapped: 1 500 × 4 + 2 000 = 8 000. Capped: (deadline − now) + 2 000 ≈ 6 000.
    expect(during).toHaveLength(1);
    expect(Math.abs(during[0].lease_ms - 6_000)).toBeLessThanOrEqual(250);
  });

  it("a poll too close to its deadline claims nothing; drain stops 2 × recordMargin before it", async () => {
    const { g, n } = await setup(t, "close", {}, 2);
    const seen: string[] = [];
    const r = await g.poll((m) => void seen.push(m.id), { deadline: Date.now() + 1_000 });
    expect(r).toMatchObject({ idle: true, rangesClaimed: 0 });
    const d = await g.drain((m) => void seen.push(m.id), { deadline: Date.now() + 3_000 });
    expect(d.polls).toBe(0);
    expect(seen).toEqual([]);
    expect(await count(t, `claim_lease_${n}`)).toBe(0);
  });

  it("C12 part 2: a poll whose deadline lets only row 1 start releases the reservations of rows 2 and 3, uncharged", async () => {
    const { g, n, gid } = await setup(t, "c12.deadline", { message: { timeout: 1_000 } }, 3);
    await g.drain(() => {
      throw new Error("first failure");
    });
    await makeDue(t, n);
    const deliveryLogBefore = (await deliveryLogRows(t, n, gid)).length;
    const seen: string[] = [];
    const r = await g.poll(async (m) => {
      seen.push(m.id);
      await sleep(300);
    }, { batchLimit: 3, concurrency: 1, recordMargin: 100, deadline: Date.now() + 1_000 + 100 + 150 });
    expect(seen).toEqual(["1"]);
    expect(r).toMatchObject({ started: 1, succeeded: 1, notStarted: 2 });
    expect(t.events.some((e) => e.code === "SQL0040")).toBe(true);
    const rows = await exceptionRows(t, n, gid);
    expect(rows.map((e) => [e.message_id, e.status, e.attempts, e.lease_token])).toEqual([["2", "ready", 1, null], ["3", "ready", 1, null]]);
    expect((await deliveryLogRows(t, n, gid)).length).toBe(deliveryLogBefore);
    // Released at once: the next poll takes them without waiting for a reservation to expire.
    const next = await g.poll((m) => void seen.push(m.id), { batchLimit: 3 });
    expect(next).toMatchObject({ succeeded: 2 });
    expect(seen).toEqual(["1", "2", "3"]);
    await checkInvariants(t, n);
  });

  it("a drain under a deadline leaves no live lease or reservation behind, and the next invocation continues at once", async () => {
    const { g, n, gid } = await setup(t, "invocations", { message: { timeout: 500 } }, 30);
    const calls = new Map<string, number>();
    const h = async (m: Message<{ i: number }>) => {
      calls.set(m.id, (calls.get(m.id) ?? 0) + 1);
      await sleep(60);
      if (Number(m.id) % 7 === 0 && m.attempt === 0) throw new Error("retry me");
    };
    let invocations = 0;
    for (;;) {
      invocations++;
      const r = await g.drain(h, { batchLimit: 8, concurrency: 2, recordMargin: 200, deadline: Date.now() + 1_200 });
      // Between invocations: no range lease or reservation that a next invocation would wait for.
      expect((await leases(t, n)).filter((l) => !l.lapsed)).toEqual([]);
      expect(await count(t, `exception_queue_${n}`, "lease_token IS NOT NULL")).toBe(0);
      expect(r.leaseLost).toBe(0);
      expect(r.rangesReclaimed).toBe(0);
      await makeDue(t, n);
      const p = await g.progress();
      if (p.committed === "30" && p.exceptions.ready === 0) break;
      expect(invocations).toBeLessThan(20);
    }
    expect(invocations).toBeGreaterThan(1);
    for (let i = 1; i <= 30; i++) expect(calls.get(String(i)), `id ${i}`).toBe(i % 7 === 0 ? 2 : 1);
    expect(await exceptionRows(t, n, gid)).toEqual([]);
    await checkInvariants(t, n);
  });
});
