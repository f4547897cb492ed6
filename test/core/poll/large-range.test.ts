// Ranges up to batchLimit's ceiling, 10 000 (docs/protocol/poll-cycle.md#options): a range of 5 000
// messages is claimed under one lease, runs whole and records once (cursor at the head, no
// exception rows), unkeyed and keyed alike; 10 001 is refused before anything is written.
import { describe, expect, it } from "vitest";
import type { Consumer, Stream } from "@sqlstreams/core";
import { useFreshDatabase } from "../../support/db.js";
import { type TestClient, codedError, count, cursor, exceptionRows, makeDue, pollPastFence, setupGroup, table, testClient } from "../../support/streams.js";

const url = useFreshDatabase();
const N = 5_000;

/** Produces messages 0..N-1, 1 000 per produceBatch (its own limit); key(i) when given. */
async function produce(s: Stream, key?: (i: number) => string) {
  for (let lo = 0; lo < N; lo += 1_000) {
    await s.produceBatch(Array.from({ length: 1_000 }, (_, j) => ({ payload: { i: lo + j }, ...(key ? { key: key(lo + j) } : {}) })));
  }
}

/** The group's range leases: how many, and the longest one's remaining seconds. */
async function leases(t: TestClient, sid: string) {
  const r = await t.sql<{ n: number; s: number | null }>(
    `SELECT count(*)::int AS n, max(EXTRACT(EPOCH FROM (expires_at - now())))::float8 AS s FROM ${table(sid, "claim_lease")}`,
  );
  return r[0];
}

/** Produces N unkeyed messages and runs them, sampling the range leases at the first handler start. */
async function runSampled(t: TestClient, s: Stream, g: Consumer, sid: string, how: Parameters<typeof pollPastFence>[2]) {
  await produce(s);
  const sampled: { during?: { n: number; s: number | null } } = {};
  const seen = new Set<number>();
  const r = await pollPastFence(g, async (m) => {
    sampled.during ??= await leases(t, sid);
    seen.add((m.payload as { i: number }).i);
  }, how);
  if (sampled.during === undefined) throw new Error("no handler ran");
  return { r, during: sampled.during, seen };
}

describe("ranges of 5 000 messages (real Postgres)", () => {
  it("poll() claims 5 000 under one lease of Tmax × ceil(n / c) + margin, runs all and records once", async () => {
    const { t, s, g, sid, gid } = await setupGroup(t0(), "large.poll");
    const { r, during, seen } = await runSampled(t, s, g, sid, { opts: { batchLimit: N, concurrency: 8 } });
    expect(r.rangesClaimed).toBe(1);
    expect(r.succeeded).toBe(N);
    expect(seen.size).toBe(N);
    // One lease for the whole range: 30 s × ceil(5000 / 8) + 2 s = 18 752 s, less what the machine took.
    expect(during.n).toBe(1);
    expect(during.s).toBeGreaterThan(18_752 - 120);
    expect(during.s).toBeLessThanOrEqual(18_752);
    const c = await cursor(t, sid, gid);
    expect(c.committed).toBe(String(N));
    expect(c.claimed).toBe(String(N));
    expect((await leases(t, sid)).n).toBe(0);
    expect(await count(t, `exception_queue_${sid}`)).toBe(0);
  });

  it("drain() with batchLimit 5 000 takes one range of 5 000 (the explicit size is where it starts) under the 60 s lease bound", async () => {
    const { t, s, g, sid, gid } = await setupGroup(t0(), "large.drain");
    const { r, during, seen } = await runSampled(t, s, g, sid, { drain: true, opts: { batchLimit: N, concurrency: 32 } });
    expect(r.succeeded).toBe(N);
    expect(seen.size).toBe(N);
    expect(r.rangesClaimed).toBe(1);
    expect(during.n).toBe(1);
    expect(during.s).toBeLessThanOrEqual(60);
    const c = await cursor(t, sid, gid);
    expect(c.committed).toBe(String(N));
    expect((await leases(t, sid)).n).toBe(0);
    expect(await count(t, `exception_queue_${sid}`)).toBe(0);
  });

  it("an ordered range of 5 000 messages over 2 500 keys: one range, every key in order, no key lease or exception row left", async () => {
    const { t, s, g, sid, gid } = await setupGroup(t0(), "large.ordered", { group: { concurrencyOverride: "ordered" } });
    await produce(s, (i) => `k${i % 2_500}`);
    const last = new Map<string, number>();
    let outOfOrder = 0;
    let leaseCount = -1;
    const r = await pollPastFence(g, async (m) => {
      if (leaseCount < 0) leaseCount = (await leases(t, sid)).n;
      const i = (m.payload as { i: number }).i;
      if ((last.get(m.key!) ?? -1) > i) outOfOrder++;
      last.set(m.key!, i);
    }, { drain: true, opts: { batchLimit: N, concurrency: 16 } });
    expect(r.succeeded).toBe(N);
    expect(r.rangesClaimed).toBe(1);
    expect(leaseCount).toBe(1);
    expect(last.size).toBe(2_500);
    expect(outOfOrder).toBe(0);
    expect((await cursor(t, sid, gid)).committed).toBe(String(N));
    expect((await leases(t, sid)).n).toBe(0);
    expect(await count(t, `exception_queue_${sid}`)).toBe(0);
    expect(await count(t, `message_key_lease_${sid}`)).toBe(0);
  });

  it("an exclusive poll() of 5 000 distinct keys takes them all in one range", async () => {
    const { t, s, g, sid, gid } = await setupGroup(t0(), "large.exclusive", { group: { concurrencyOverride: "exclusive" } });
    await produce(s, (i) => `key-${i}`);
    const keys = new Set<string>();
    const r = await pollPastFence(g, (m) => {
      keys.add(m.key!);
    }, { opts: { batchLimit: N, concurrency: 64 } });
    expect(r.rangesClaimed).toBe(1);
    expect(r.succeeded).toBe(N);
    expect(keys.size).toBe(N);
    expect((await cursor(t, sid, gid)).committed).toBe(String(N));
    expect(await count(t, `exception_queue_${sid}`)).toBe(0);
    expect(await count(t, `message_key_lease_${sid}`)).toBe(0);
  });

  it("batchLimit 10 001 is SQL0015 before anything is written; 10 000 is taken", async () => {
    const { t, s, g, sid, gid } = await setupGroup(t0(), "large.bounds");
    await s.produce({ i: 0 });
    const before = await cursor(t, sid, gid);
    for (const call of [() => g.poll(() => {}, { batchLimit: 10_001 }), () => g.drain(() => {}, { batchLimit: 10_001 })]) {
      const e = await codedError(call);
      expect(e.code).toBe("SQL0015");
      expect(e.message).toContain("batchLimit = 10001: must be between 1 and 10000");
    }
    expect(await cursor(t, sid, gid)).toEqual(before);
    expect((await leases(t, sid)).n).toBe(0);
    const r = await pollPastFence(g, () => {}, { drain: true, opts: { batchLimit: 10_000 } });
    expect(r.succeeded).toBe(1);
  });
});

function t0() {
  return testClient(url());
}

describe("the exception reservation under a large batchLimit (real Postgres)", () => {
  it("reserves at most 1 000 rows (RESERVATION_MAX) when batchLimit is 5 000", async () => {
    const { t, s, g, sid, gid } = await setupGroup(t0(), "large.retries");
    for (let lo = 0; lo < 1_500; lo += 500) await s.produceBatch(Array.from({ length: 500 }, (_, j) => ({ payload: { i: lo + j } })));
    const first = await pollPastFence(g, () => {
      throw new Error("once");
    }, { opts: { batchLimit: N, concurrency: 32 } });
    expect(first.failed).toBe(1_500);
    await makeDue(t, sid);
    const again = await g.poll(() => {}, { batchLimit: N, concurrency: 32 });
    expect(again.succeeded).toBe(1_000);
    const rows = await exceptionRows(t, sid, gid);
    expect(rows.filter((r) => r.status === "ready")).toHaveLength(500);
  });
});
