// docs/protocol/ordering.md ordering and concurrency: the docs/protocol/ordering.md#worked-example-one-group-four-messages walkthrough (C19) with its dead, Delay and
// cross-range variants, exclusivity (C18), ordered + compaction (C21), and concurrency > 1
// inside one poll (ordered keys serial, different keys in parallel).
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { Delay, Permanent, type Message } from "@sqlstreams/core";
import { useFreshDatabase } from "../../support/db.js";
import { checkInvariants } from "../../support/invariants.js";
import { SCHEMA, type TestClient, count, cursor, deliveryLogRows, exceptionRows, groupIdOf, latch, makeDue, pollPastFence, streamIdOf, testClient } from "../../support/streams.js";
import { Ledger, claimLeases, keyLeases, snapshot, until } from "../../support/keyed.js";

const url = useFreshDatabase();

/**
 * Polls with `handler` (batchLimit 1) until the fence has proven the head `head` for the group,
 * so a claim that hands out nothing was held back by another poll's open range
 * (docs/protocol/ordering.md#ranges-of-several-pollers), not by the fence. Returns the last report.
 */
async function heldBack(t: TestClient, n: string, gid: string, g: Parameters<typeof pollPastFence>[0], handler: (m: Message) => unknown, head: string) {
  return pollPastFence(g, handler as never, {
    opts: { batchLimit: 1 },
    until: async () => (await cursor(t, n, gid)).settled_head === head,
  });
}

const KEY = "acct-42";
const GROUP = "apply-balance";

/**
 * docs/protocol/ordering.md#worked-example-one-group-four-messages setup: stream `name`, group apply-balance with concurrencyOverride 'ordered', 100 unrelated
 * messages already consumed (so CUR = (100, 100, 100, 100)), then 101–104 with key acct-42.
 * Optionally a second group on the same stream, registered at the head before 101–104.
 */
async function ledgerStream(t: TestClient, name: string, opts: { otherGroup?: string } = {}) {
  const s = t.client.stream<{ n: number }>(name);
  await s.register();
  const g = s.consumer(GROUP);
  await g.register({ concurrencyOverride: "ordered" });
  await s.produceBatch(Array.from({ length: 100 }, (_, i) => ({ payload: { n: i + 1 } })));
  await g.drain(() => {});
  const other = opts.otherGroup ? s.consumer(opts.otherGroup) : null;
  if (other) await other.register({ start: "head" });
  const ids = (await s.produceBatch([101, 102, 103, 104].map((n) => ({ payload: { n }, key: KEY })))).map((r) => r.id);
  expect(ids).toEqual(["101", "102", "103", "104"]);
  const n = await streamIdOf(t, name);
  const gid = await groupIdOf(t, GROUP, name);
  return { s, g, other, n, gid };
}

type Row = Awaited<ReturnType<typeof exceptionRows>>[number];
const brief = (r: Row) => [r.message_id, r.status, r.message_key, r.concurrency, r.attempts, r.delays];

/**
 * An exclusive group whose key K has `k` due rows ahead of key L's 3, every one failed once and
 * `ready`: the start of the scenarios on how an exception batch shares itself between keys.
 */
async function crowdedKey(name: string, k: number) {
  const t = testClient(url());
  const s = t.client.stream<{ k: string }>(name);
  await s.register();
  const g = s.consumer("excl");
  await g.register({ concurrencyOverride: "exclusive", exceptionInitialBackoff: 0 });
  await s.produceBatch([
    ...Array.from({ length: k }, () => ({ payload: { k: "K" }, key: "K" })),
    ...Array.from({ length: 3 }, () => ({ payload: { k: "L" }, key: "L" })),
  ]);
  const n = await streamIdOf(t, name);
  const gid = await groupIdOf(t, "excl", name);
  await pollPastFence(g, () => {
    throw new Error("first delivery fails");
  }, { opts: { batchLimit: k + 3 } });
  expect((await exceptionRows(t, n, gid)).filter((r) => r.status === "ready")).toHaveLength(k + 3);
  return { t, g, n, gid };
}

describe("C19 ordered: the docs/protocol/ordering.md#worked-example-one-group-four-messages walkthrough", () => {
  it("poll 1 fails 101 and defers 102–104 without running them; poll 3 runs 101–104 in order", async () => {
    const t = testClient(url());
    const { g, other, n, gid } = await ledgerStream(t, "ledger.adjustments", { otherGroup: "audit" });
    expect(await cursor(t, n, gid)).toEqual({ claimed: "100", committed: "100", settled_head: "100", pending_head: "100", pending_xid: expect.any(String) });
    await checkInvariants(t, n);

    // Poll 1: claim (100, 104]; 101 runs under the key lease and throws; 102–104 never run.
    const calls: string[] = [];
    let during: { lease: unknown; groupCursor: unknown; keys: unknown } | null = null;
    const r1 = await pollPastFence(g, async (m: Message) => {
      calls.push(`${m.id}@${m.attempt}`);
      if (m.id === "101") {
        during = { lease: await claimLeases(t, n, gid), groupCursor: await cursor(t, n, gid), keys: await keyLeases(t, n, gid) };
        throw new Error("ledger unavailable");
      }
    });
    expect(calls).toEqual(["101@0"]);
    const d = during as unknown as { lease: Awaited<ReturnType<typeof claimLeases>>; groupCursor: unknown; keys: Awaited<ReturnType<typeof keyLeases>> };
    expect(d.groupCursor).toMatchObject({ claimed: "104", committed: "100", settled_head: "104", pending_head: "104" });
    expect(d.lease).toHaveLength(1);
    expect(d.lease[0]).toMatchObject({ low: "100", high: "104", reclaims: 0, released: false });
    expect(d.lease[0].lease_ms).toBeCloseTo(30_000 * 4 + 2_000, -1);
    expect(d.keys).toHaveLength(1);
    expect(d.keys[0].message_key).toBe(KEY);
    expect(d.keys[0].ttl_ms).toBeGreaterThan(32_000 - 1_000);
    expect(d.keys[0].ttl_ms).toBeLessThanOrEqual(32_000);
    expect(r1).toMatchObject({ rangesClaimed: 1, started: 1, failed: 1, deferred: 3, succeeded: 0, committedAfter: "100" });

    const eq1 = await exceptionRows(t, n, gid);
    expect(eq1.map(brief)).toEqual([
      ["101", "ready", KEY, "ordered", 1, 0],
      ["102", "deferred", KEY, "ordered", 0, 0],
      ["103", "deferred", KEY, "ordered", 0, 0],
      ["104", "deferred", KEY, "ordered", 0, 0],
    ]);
    expect(eq1[0].gap_ms).toBeCloseTo(5_000, 0);
    expect(eq1[0].last_error?.startsWith("Error: ledger unavailable\n")).toBe(true);
    for (const r of eq1) expect(r.lease_token).toBeNull();
    for (const r of eq1.slice(1)) {
      expect(r.gap_ms).toBe(0); // can_run_after = t1
      expect(r.last_error).toBeNull();
      expect(r.can_run_after.getTime()).toBe(eq1[0].updated_at.getTime()); // all written at t1
    }
    const dl1 = await deliveryLogRows(t, n, gid);
    expect(dl1.map((r) => [r.message_id, r.attempt, r.status])).toEqual([
      ["101", 0, "failure"], ["102", 0, "deferred"], ["103", 0, "deferred"], ["104", 0, "deferred"],
    ]);
    expect(dl1[0].error.startsWith("Error: ledger unavailable\n")).toBe(true);
    for (const r of dl1.slice(1)) expect(r.error).toBe("deferred: earlier message 101 of this key in the range did not complete");
    expect(await claimLeases(t, n, gid)).toEqual([]);
    expect(await keyLeases(t, n, gid)).toEqual([]);
    expect(await cursor(t, n, gid)).toMatchObject({ claimed: "104", committed: "100", settled_head: "104", pending_head: "104" });
    await checkInvariants(t, n);

    // Poll 2 (before 101 is due): nothing reservable, nothing written.
    const before2 = await snapshot(t, n, gid);
    const r2 = await g.poll(() => {
      throw new Error("no handler may run in poll 2");
    });
    expect(r2).toMatchObject({ idle: true, started: 0, deferred: 0 });
    expect(await snapshot(t, n, gid)).toEqual(before2);

    // Poll 3 (101 due): 101 is claimed inflight under its own lease and the key lease, succeeds,
    // row deleted; 102–104, reserved with it as the key's chain, follow one after another in the
    // same poll, at attempt 0: 101 failed before, so it runs alone, and 102–104 (never failed)
    // start together as one group, in the round trip that records 101, under one key lease.
    await makeDue(t, n);
    const r3calls: string[] = [];
    const left: string[][] = [];
    const r3 = await g.poll(async (m: Message) => {
      r3calls.push(`${m.id}@${m.attempt}`);
      const rows = await exceptionRows(t, n, gid);
      // The rows at and after this one (a later row's record may still be on its way).
      left.push(rows.filter((x) => BigInt(x.message_id) >= BigInt(m.id)).map((x) => `${x.message_id}:${x.status}`));
      if (m.id !== "101") expect(rows.map((x) => x.message_id)).not.toContain("101");
      const row = rows.find((r) => r.message_id === m.id);
      expect(row).toMatchObject({ status: "inflight", attempts: m.id === "101" ? 1 : 0, delays: 0 });
      expect(row?.lease_token).not.toBeNull();
      if (m.id === "101") {
        const lease = await t.sql<{ ms: number }>(
          `SELECT (EXTRACT(EPOCH FROM (lease_expires_at - updated_at)) * 1000)::float8 AS ms FROM ${SCHEMA}.exception_queue_${n}
            WHERE consumer_group_id = $1 AND message_id = 101`, [gid]);
        expect(lease[0].ms).toBeCloseTo(32_000, 0);
      }
      expect((await keyLeases(t, n, gid)).map((k) => k.message_key)).toEqual([KEY]);
    });
    expect(r3calls).toEqual(["101@1", "102@0", "103@0", "104@0"]);
    // 102 started after 101 was recorded (its row gone, above); 103 and 104 were inflight already.
    expect(left).toEqual([
      ["101:inflight", "102:deferred", "103:deferred", "104:deferred"],
      ["102:inflight", "103:inflight", "104:inflight"], ["103:inflight", "104:inflight"], ["104:inflight"],
    ]);
    expect(r3).toMatchObject({ started: 4, succeeded: 4, committedAfter: "104" });
    expect(await keyLeases(t, n, gid)).toEqual([]);
    await checkInvariants(t, n);
    expect((await cursor(t, n, gid)).committed).toBe("104");
    expect(await count(t, `exception_queue_${n}`, "consumer_group_id = $1", [gid])).toBe(0);
    expect((await deliveryLogRows(t, n, gid)).map((r) => [r.message_id, r.status])).toEqual([
      ["101", "failure"], ["102", "deferred"], ["103", "deferred"], ["104", "deferred"],
    ]);

    // Group 8 (default policy, same stream) has its own state: 101–104 run, nothing for it in the tables.
    const gid8 = await groupIdOf(t, "audit", "ledger.adjustments");
    const seen8: string[] = [];
    await other!.drain((m: Message) => void seen8.push(m.id));
    expect(seen8).toEqual(["101", "102", "103", "104"]);
    expect(await exceptionRows(t, n, gid8)).toEqual([]);
    expect(await deliveryLogRows(t, n, gid8)).toEqual([]);
    expect((await cursor(t, n, gid8)).committed).toBe("104");
  });

  it("a drain() performs polls 3–6 in one invocation once 101 is due", async () => {
    const t = testClient(url());
    const { g, n, gid } = await ledgerStream(t, "ledger.drain");
    await pollPastFence(g, (m: Message) => {
      if (m.id === "101") throw new Error("ledger unavailable");
    });
    await makeDue(t, n);
    const seen: string[] = [];
    const r = await g.drain((m: Message) => void seen.push(`${m.id}@${m.attempt}`));
    expect(seen).toEqual(["101@1", "102@0", "103@0", "104@0"]);
    expect(r.succeeded).toBe(4);
    expect((await cursor(t, n, gid)).committed).toBe("104");
    expect(await exceptionRows(t, n, gid)).toEqual([]);
    await checkInvariants(t, n);
  });

  it("dead variant: a Permanent retry releases 102–104 and the cursor passes 101 (C34 views)", async () => {
    const t = testClient(url());
    const { g, n, gid } = await ledgerStream(t, "ledger.dead");
    await pollPastFence(g, (m: Message) => {
      if (m.id === "101") throw new Error("ledger unavailable");
    });
    await makeDue(t, n);
    const seen: string[] = [];
    const r3 = await g.poll((m: Message) => {
      seen.push(m.id);
      if (m.id === "101") return Permanent(new Error("account closed"));
    });
    // 101 dead resolves it: its chain, 102–104, runs in the same poll.
    expect(seen).toEqual(["101", "102", "103", "104"]);
    expect(r3).toMatchObject({ dead: 1, succeeded: 3, committedAfter: "104" });
    const exceptionQueue = await exceptionRows(t, n, gid);
    expect(exceptionQueue.map(brief)[0]).toEqual(["101", "dead", KEY, "ordered", 1, 0]);
    expect(exceptionQueue[0].last_error?.startsWith("SQL0026 permanent: Error: account closed")).toBe(true);
    expect(exceptionQueue[0].lease_token).toBeNull();
    const deliveryLog = await deliveryLogRows(t, n, gid, "101");
    expect(deliveryLog.map((r) => [r.attempt, r.status])).toEqual([[0, "failure"], [1, "failure"]]);
    expect(deliveryLog[1].error).toBe(exceptionQueue[0].last_error);
    await checkInvariants(t, n);

    expect((await cursor(t, n, gid)).committed).toBe("104");
    expect((await exceptionRows(t, n, gid)).map(brief)).toEqual([["101", "dead", KEY, "ordered", 1, 0]]);
    await checkInvariants(t, n);

    // C34: progress shows lag 0 with one dead row; failures() and the docs/guide/operations.md#operator-sql query return 101.
    const p = await g.progress();
    expect(p.lag).toBe("0");
    expect(p.exceptions).toMatchObject({ dead: 1, ready: 0, deferred: 0, inflight: 0 });
    const f = await g.failures();
    expect(f).toHaveLength(1);
    expect(f[0]).toMatchObject({ messageId: "101", key: KEY, status: "dead", payload: { n: 101 }, attempts: 1 });
    expect(f[0].lastError).toBe(exceptionQueue[0].last_error);
    const op = await t.sql<{ message_id: string; payload: unknown; attempts: number; last_error: string }>(
      `SELECT d.message_id::text, m.payload, d.attempts, d.last_error, d.updated_at
         FROM sqlstreams.exception_queue_${n} d
         JOIN sqlstreams.message_log_${n} m ON m.id = d.message_id
         JOIN sqlstreams.consumer_group_config g ON g.id = d.consumer_group_id
        WHERE g.name = '${GROUP}' AND g.stream_id = ${n} AND d.status = 'dead'
        ORDER BY d.updated_at DESC`,
    );
    expect(op.map((r) => [r.message_id, r.payload, r.attempts, r.last_error])).toEqual([["101", { n: 101 }, 1, exceptionQueue[0].last_error]]);
  });

  it("dead variant with the default budget: a handler that keeps throwing ends 101 dead at attempts 3, then 102–104 run", async () => {
    const t = testClient(url());
    const { g, n, gid } = await ledgerStream(t, "ledger.exhaust");
    const seen: string[] = [];
    const handler = (m: Message) => {
      seen.push(`${m.id}@${m.attempt}`);
      if (m.id === "101") throw new Error("ledger unavailable");
    };
    await pollPastFence(g, handler);
    for (let i = 0; i < 3; i++) {
      await makeDue(t, n);
      await g.poll(handler);
      await checkInvariants(t, n);
      if (i < 2) {
        expect((await exceptionRows(t, n, gid)).map((r) => r.status)).toEqual(["ready", "deferred", "deferred", "deferred"]);
        expect((await cursor(t, n, gid)).committed).toBe("100");
      }
    }
    // The poll that ends 101 dead runs its chain, 102–104, too.
    expect(seen).toEqual(["101@0", "101@1", "101@2", "101@3", "102@0", "103@0", "104@0"]);
    expect((await exceptionRows(t, n, gid)).map(brief)[0]).toEqual(["101", "dead", KEY, "ordered", 3, 0]);
    await g.drain(handler);
    expect(seen.slice(4)).toEqual(["102@0", "103@0", "104@0"]);
    expect((await cursor(t, n, gid)).committed).toBe("104");
    await checkInvariants(t, n);
  });

  it("Delay variant: 101 stays ready with a future can_run_after and 102–104 keep waiting", async () => {
    const t = testClient(url());
    const { g, n, gid } = await ledgerStream(t, "ledger.delay");
    await pollPastFence(g, (m: Message) => {
      if (m.id === "101") throw new Error("ledger unavailable");
    });
    await makeDue(t, n);
    const seen: string[] = [];
    const r3 = await g.poll((m: Message) => {
      seen.push(`${m.id}@${m.attempt}`);
      return Delay(60_000);
    });
    expect(seen).toEqual(["101@1"]);
    expect(r3).toMatchObject({ delayed: 1, committedAfter: "100" });
    const exceptionQueue = await exceptionRows(t, n, gid);
    expect(exceptionQueue.map(brief)).toEqual([
      ["101", "ready", KEY, "ordered", 2, 1],
      ["102", "deferred", KEY, "ordered", 0, 0],
      ["103", "deferred", KEY, "ordered", 0, 0],
      ["104", "deferred", KEY, "ordered", 0, 0],
    ]);
    expect(exceptionQueue[0].gap_ms).toBeCloseTo(60_000, 0);
    expect(exceptionQueue[0].last_error).toBe("SQL0025 delayed: run again in 60000 ms");
    expect((await deliveryLogRows(t, n, gid, "101")).map((r) => [r.attempt, r.status])).toEqual([[0, "failure"], [1, "delayed"]]);
    await checkInvariants(t, n);

    // While 101 waits, polls run nothing and write nothing.
    const before = await snapshot(t, n, gid);
    const r4 = await g.drain(() => {
      throw new Error("nothing may run while 101 is delayed");
    });
    expect(r4.started).toBe(0);
    expect(await snapshot(t, n, gid)).toEqual(before);

    // Once due, 101 runs (attempt 2, delays 1) and the rest follow in order.
    await makeDue(t, n);
    const rest: string[] = [];
    await g.drain((m: Message) => void rest.push(`${m.id}@${m.attempt}/${m.delays}`));
    expect(rest).toEqual(["101@2/1", "102@0/0", "103@0/0", "104@0/0"]);
    expect((await cursor(t, n, gid)).committed).toBe("104");
    expect(await exceptionRows(t, n, gid)).toEqual([]);
  });

  it("cross-range: 102 is not claimed by poll B while 101 is in poll A's open range; it runs after A commits, nothing deferred", async () => {
    const t = testClient(url());
    const { g, n, gid } = await ledgerStream(t, "ledger.cross");
    const hold = latch();
    const started = latch();
    const seen: string[] = [];
    const pollA = pollPastFence(
      g,
      async (m: Message) => {
        seen.push(`A:${m.id}`);
        started.open();
        await hold.promise;
      },
      { opts: { batchLimit: 1 } },
    );
    await started.promise;
    expect(await claimLeases(t, n, gid)).toMatchObject([{ low: "100", high: "101" }]);

    // B's claim ends before 102, whose key has 101 in A's range: it claims nothing and writes nothing.
    const rB = await heldBack(t, n, gid, g, (m: Message) => void seen.push(`B:${m.id}`), "104");
    expect(rB).toMatchObject({ rangesClaimed: 0, started: 0, deferred: 0 });
    expect(seen).toEqual(["A:101"]);
    expect((await cursor(t, n, gid)).claimed).toBe("101");
    expect(await exceptionRows(t, n, gid)).toEqual([]);
    expect(await deliveryLogRows(t, n, gid, "102")).toEqual([]);
    expect(await claimLeases(t, n, gid)).toMatchObject([{ low: "100", high: "101" }]);
    await checkInvariants(t, n);

    // Another poll while A still holds 101 does not run 102 either.
    const rC = await g.poll((m: Message) => void seen.push(`C:${m.id}`), { batchLimit: 1 });
    expect(rC.started).toBe(0);

    hold.open();
    const rA = await pollA;
    expect(rA).toMatchObject({ succeeded: 1, committedAfter: "101" });
    expect((await cursor(t, n, gid)).committed).toBe("101");
    await checkInvariants(t, n);

    await g.drain((m: Message) => void seen.push(`D:${m.id}@${m.attempt}`), { batchLimit: 1 });
    expect(seen).toEqual(["A:101", "D:102@0", "D:103@0", "D:104@0"]);
    expect((await cursor(t, n, gid)).committed).toBe("104");
    expect(await exceptionRows(t, n, gid)).toEqual([]);
    await checkInvariants(t, n);
  });

  it("inside one range: a dead first delivery releases the chain at once; a Delay defers the rest", async () => {
    const t = testClient(url());
    const { g, n, gid } = await ledgerStream(t, "ledger.chain");
    const seen: string[] = [];
    const r = await pollPastFence(g, (m: Message) => {
      seen.push(m.id);
      if (m.id === "101") return Permanent(new Error("account closed"));
      if (m.id === "102") return Delay(1_000);
    });
    expect(seen).toEqual(["101", "102"]);
    expect(r).toMatchObject({ dead: 1, delayed: 1, deferred: 2 });
    expect((await exceptionRows(t, n, gid)).map(brief)).toEqual([
      ["101", "dead", KEY, "ordered", 0, 0],
      ["102", "ready", KEY, "ordered", 1, 1],
      ["103", "deferred", KEY, "ordered", 0, 0],
      ["104", "deferred", KEY, "ordered", 0, 0],
    ]);
    expect((await deliveryLogRows(t, n, gid)).map((x) => [x.message_id, x.status, x.error.split("\n")[0]])).toEqual([
      ["101", "failure", "SQL0026 permanent: Error: account closed"],
      ["102", "delayed", "SQL0025 delayed: run again in 1000 ms"],
      ["103", "deferred", "deferred: earlier message 102 of this key in the range did not complete"],
      ["104", "deferred", "deferred: earlier message 102 of this key in the range did not complete"],
    ]);
    expect((await cursor(t, n, gid)).committed).toBe("101");
    await checkInvariants(t, n);
    await makeDue(t, n);
    await g.drain((m: Message) => void seen.push(m.id));
    expect(seen).toEqual(["101", "102", "102", "103", "104"]);
    expect((await cursor(t, n, gid)).committed).toBe("104");
  });

  it("one stuck key does not hold back other keys: in its range, and for keys with nothing unresolved below them", async () => {
    const t = testClient(url());
    const s = t.client.stream<{ k: string; i: number }>("ledger.keys");
    await s.register();
    const g = s.consumer(GROUP);
    await g.register({ concurrencyOverride: "ordered", exceptionInitialBackoff: 600_000 });
    const items = [];
    for (let i = 0; i < 6; i++) for (const k of ["stuck", "a", "b"]) items.push({ payload: { k, i }, key: k });
    await s.produceBatch(items); // ids 1–18: stuck0 = 1, a0 = 2, b0 = 3, stuck1 = 4, …
    const n = await streamIdOf(t, "ledger.keys");
    const gid = await groupIdOf(t, GROUP, "ledger.keys");
    const seen: string[] = [];
    const handler = (m: Message<{ k: string; i: number }>) => {
      seen.push(`${m.payload.k}${m.payload.i}`);
      if (m.payload.k === "stuck" && m.payload.i === 0) {
        if (m.attempt === 0) throw new Error("stuck");
        return Permanent(new Error("gave up"));
      }
    };
    await g.drain(handler, { batchLimit: 18, concurrency: 3 });
    expect(seen.filter((x) => x.startsWith("a"))).toEqual(["a0", "a1", "a2", "a3", "a4", "a5"]);
    expect(seen.filter((x) => x.startsWith("b"))).toEqual(["b0", "b1", "b2", "b3", "b4", "b5"]);
    expect(seen.filter((x) => x.startsWith("stuck"))).toEqual(["stuck0"]);
    // (exceptionRows orders by the text form of the id)
    expect((await exceptionRows(t, n, gid)).map((r) => [r.message_id, r.status]).sort((x, y) => Number(x[0]) - Number(y[0]))).toEqual([
      ["1", "ready"], ["4", "deferred"], ["7", "deferred"], ["10", "deferred"], ["13", "deferred"], ["16", "deferred"],
    ]);
    expect((await cursor(t, n, gid)).committed).toBe("0");
    await checkInvariants(t, n);

    // Later messages: a new key runs at once, and so does a later message of key a: the rule is
    // per key (docs/protocol/ordering.md#the-predecessor-rule), so the stuck row, which holds the group's
    // committed cursor at 0, does not hold a6.
    seen.length = 0;
    await s.produceBatch([{ payload: { k: "c", i: 0 }, key: "c" }, { payload: { k: "a", i: 6 }, key: "a" }, { payload: { k: "c", i: 1 }, key: "c" }]);
    await g.drain(handler, { batchLimit: 18, concurrency: 3 });
    // Different keys start in no set order (a lone member whose key was answered up front starts
    // without waiting a turn): all three ran, c's in order.
    expect([...seen].sort()).toEqual(["a6", "c0", "c1"]);
    expect(seen.filter((x) => x.startsWith("c"))).toEqual(["c0", "c1"]);
    expect(await deliveryLogRows(t, n, gid, "20")).toEqual([]);
    expect((await cursor(t, n, gid)).committed).toBe("0");
    await checkInvariants(t, n);

    // The stuck message ends dead: its followers and a6 are released, in order, and the cursor passes.
    await makeDue(t, n);
    seen.length = 0;
    await g.drain(handler, { batchLimit: 18, concurrency: 3 });
    expect(seen[0]).toBe("stuck0");
    expect(seen.filter((x) => x.startsWith("stuck"))).toEqual(["stuck0", "stuck1", "stuck2", "stuck3", "stuck4", "stuck5"]);
    expect(seen).not.toContain("a6");
    expect((await cursor(t, n, gid)).committed).toBe("21");
    expect((await exceptionRows(t, n, gid)).map((r) => [r.message_id, r.status])).toEqual([["1", "dead"]]);
    await checkInvariants(t, n);
  });
});

describe("C18 exclusive", () => {
  async function exclusiveStream(t: TestClient, name: string, config: Record<string, unknown> = {}) {
    const s = t.client.stream<{ n: number }>(name);
    await s.register();
    const g = s.consumer("excl");
    await g.register({ concurrencyOverride: "exclusive", ...config });
    await s.produceBatch(Array.from({ length: 100 }, (_, i) => ({ payload: { n: i + 1 } })));
    await g.drain(() => {});
    await s.produceBatch([{ payload: { n: 101 }, key: "K" }, { payload: { n: 102 }, key: "K" }]);
    return { s, g, n: await streamIdOf(t, name), gid: await groupIdOf(t, "excl", name) };
  }

  it("while 101 runs, another poll does not claim 102 (its key is in the open range); 102 runs after 101 ends, nothing deferred", async () => {
    const t = testClient(url());
    const { g, n, gid } = await exclusiveStream(t, "excl.busy");
    const ledger = new Ledger();
    const hold = latch();
    const started = latch();
    const handler = (who: string) => async (m: Message) => {
      ledger.start(m.id, m.key, m.attempt, who);
      try {
        if (m.id === "101") {
          started.open();
          await hold.promise;
        }
      } finally {
        ledger.end(m.id, m.key, true, m.attempt, who);
      }
    };
    const pollA = pollPastFence(g, handler("A"), { opts: { batchLimit: 1 } });
    await started.promise;
    const rB = await heldBack(t, n, gid, g, handler("B"), "102");
    expect(rB).toMatchObject({ rangesClaimed: 0, started: 0, deferred: 0 });
    expect(await exceptionRows(t, n, gid)).toEqual([]);
    expect(await deliveryLogRows(t, n, gid, "102")).toEqual([]);
    // Another poll while the key is held does not start 102 either.
    expect((await g.poll(handler("C"), { batchLimit: 1 })).started).toBe(0);
    await checkInvariants(t, n);
    hold.open();
    await pollA;
    await g.drain(handler("D"), { batchLimit: 1 });
    expect(ledger.events.filter((e) => e.kind === "start").map((e) => `${e.poller}:${e.id}`)).toEqual(["A:101", "D:102"]);
    expect(ledger.overlaps).toEqual([]);
    expect(await exceptionRows(t, n, gid)).toEqual([]);
    expect((await cursor(t, n, gid)).committed).toBe("102");
  });

  it("if 101 fails, 102 may run before 101's retry (exclusive has no order)", async () => {
    const t = testClient(url());
    const { g, n, gid } = await exclusiveStream(t, "excl.fail");
    const hold = latch();
    const started = latch();
    const seen: string[] = [];
    const pollA = pollPastFence(
      g,
      async (m: Message) => {
        seen.push(`${m.id}@${m.attempt}`);
        started.open();
        await hold.promise;
        throw new Error("boom");
      },
      { opts: { batchLimit: 1 } },
    );
    await started.promise;
    // Held back while 101 runs (its key is in A's open range).
    await heldBack(t, n, gid, g, (m: Message) => void seen.push(`${m.id}@${m.attempt}`), "102");
    hold.open();
    await pollA;
    expect((await exceptionRows(t, n, gid)).map((r) => [r.message_id, r.status])).toEqual([["101", "ready"]]);
    await g.drain((m: Message) => void seen.push(`${m.id}@${m.attempt}`));
    expect(seen).toEqual(["101@0", "102@0"]); // 101 is not due yet; 102 did not wait for it
    await makeDue(t, n);
    await g.drain((m: Message) => void seen.push(`${m.id}@${m.attempt}`));
    expect(seen).toEqual(["101@0", "102@0", "101@1"]);
    expect((await cursor(t, n, gid)).committed).toBe("102");
    await checkInvariants(t, n);
  });

  it("an exclusive chain in one range runs every member whatever the earlier ones returned", async () => {
    const t = testClient(url());
    const { g, n, gid } = await exclusiveStream(t, "excl.chain");
    const seen: string[] = [];
    const r = await pollPastFence(g, (m: Message) => {
      seen.push(m.id);
      if (m.id === "101") throw new Error("first fails");
    });
    expect(seen).toEqual(["101", "102"]);
    expect(r).toMatchObject({ failed: 1, succeeded: 1, deferred: 0 });
    expect((await exceptionRows(t, n, gid)).map(brief)).toEqual([["101", "ready", "K", "exclusive", 1, 0]]);
  });

  it("a key lease left by a crashed poll blocks the key until it expires, then is taken over", async () => {
    const t = testClient(url());
    const { g, n, gid } = await exclusiveStream(t, "excl.stale");
    await t.sql(
      `INSERT INTO ${SCHEMA}.message_key_lease_${n} (consumer_group_id, message_key, token, expires_at)
       VALUES ($1, 'K', gen_random_uuid(), now() + interval '1 hour')`, [gid]);
    const seen: string[] = [];
    const r1 = await g.drain((m: Message) => void seen.push(m.id));
    expect(seen).toEqual([]);
    expect(r1.deferred).toBe(2);
    expect((await exceptionRows(t, n, gid)).map((x) => [x.message_id, x.status])).toEqual([["101", "deferred"], ["102", "deferred"]]);
    // Deferred rows are not reserved while the key lease is live.
    const before = await snapshot(t, n, gid);
    expect((await g.poll((m: Message) => void seen.push(m.id))).idle).toBe(true);
    expect(await snapshot(t, n, gid)).toEqual(before);
    await t.sql(`UPDATE ${SCHEMA}.message_key_lease_${n} SET expires_at = now() - interval '1 millisecond'`);
    await g.drain((m: Message) => void seen.push(m.id));
    expect(seen).toEqual(["101", "102"]);
    expect(await exceptionRows(t, n, gid)).toEqual([]);
    expect(await keyLeases(t, n, gid)).toEqual([]);
    expect((await cursor(t, n, gid)).committed).toBe("102");
  });

  it("a key with many due rows does not crowd other keys out of an exception batch", async () => {
    const { t, g, n, gid } = await crowdedKey("excl.crowd", 12);
    const ran: string[] = [];
    const r = await g.poll((m: Message) => void ran.push(m.id), { batchLimit: 10, concurrency: 2 });
    // The lowest due row of each key first: K's 12 rows must not fill the batch and shut L out.
    // Each key's chain takes its share of the batch (10 over 2 workers: 5 rows), L's whole chain
    // (13–15) fits in it, and K reads on into the rows left: K's 1–7 and L's 13–15.
    expect(ran.sort((a, b) => Number(a) - Number(b))).toEqual(["1", "2", "3", "4", "5", "6", "7", "13", "14", "15"]);
    expect(r.deferred).toBe(0);
    await g.drain((m: Message) => void ran.push(m.id), { batchLimit: 10, concurrency: 2 });
    expect(ran).toHaveLength(15);
    expect((await cursor(t, n, gid)).committed).toBe("15");
    await checkInvariants(t, n);
  });

  it("a key whose many due rows fill the rows the reservation reads first still leaves a worker to a key after them", async () => {
    const { t, g, n, gid } = await crowdedKey("excl.beyond", 60);
    const ran: string[] = [];
    await g.poll((m: Message) => void ran.push(m.id), { batchLimit: 10, concurrency: 2 });
    // The reservation reads K's first 40 rows (4 × batchLimit): K's chain alone could fill the
    // batch, but it runs on one worker, so the key index is searched for more keys: L's chain
    // runs beside K's (K's share 1–5 and the rows left, 6–7; L's 61–63).
    expect(ran.sort((a, b) => Number(a) - Number(b))).toEqual(["1", "2", "3", "4", "5", "6", "7", "61", "62", "63"]);
    await g.drain((m: Message) => void ran.push(m.id), { batchLimit: 10, concurrency: 2 });
    expect(ran).toHaveLength(63);
    expect((await cursor(t, n, gid)).committed).toBe("63");
    await checkInvariants(t, n);
  });

  it("an in-handler counter never sees two handlers of one key at once: two concurrent drains, concurrency 4", async () => {
    const t = testClient(url());
    const t2 = testClient(url());
    const s = t.client.stream<{ i: number }>("excl.stress");
    await s.register();
    const g = s.consumer("excl");
    await g.register({ concurrencyOverride: "exclusive", exceptionInitialBackoff: 10, message: { retry: { baseDelay: 10, maxDelay: 50, maxRetries: 5 } } });
    const keys = ["k0", "k1", "k2", "k3", "k4"];
    await s.produceBatch(Array.from({ length: 300 }, (_, i) => ({ payload: { i }, key: keys[i % keys.length] })));
    const n = await streamIdOf(t, "excl.stress");
    const gid = await groupIdOf(t, "excl", "excl.stress");
    const ledger = new Ledger();
    const failedOnce = new Set<string>();
    const handler = (who: string) => async (m: Message) => {
      ledger.start(m.id, m.key, m.attempt, who);
      let ok = false;
      try {
        await sleep(1 + (Number(m.id) % 3));
        if (Number(m.id) % 17 === 0 && !failedOnce.has(m.id)) {
          failedOnce.add(m.id);
          throw new Error("injected");
        }
        ok = true;
      } finally {
        ledger.end(m.id, m.key, ok, m.attempt, who);
      }
    };
    const loop = async (c: TestClient, who: string) => {
      const gg = c.client.stream("excl.stress").consumer("excl");
      const end = Date.now() + 50_000;
      while (ledger.succeededCount < 300 && Date.now() < end) {
        const r = await gg.poll(handler(who), { batchLimit: 20, concurrency: 4 });
        if (r.idle) await sleep(5);
      }
    };
    await Promise.all([loop(t, "A"), loop(t2, "B")]);
    expect(ledger.succeededCount).toBe(300);
    expect(ledger.overlaps).toEqual([]);
    expect(ledger.maxRunningAll).toBeGreaterThan(1);
    await until(async () => (await cursor(t, n, gid)).committed === "300" || (await g.poll(() => {})).idle, "cursor");
    await g.drain(() => {});
    expect((await cursor(t, n, gid)).committed).toBe("300");
    expect(await count(t, `exception_queue_${n}`, "consumer_group_id = $1", [gid])).toBe(0);
    await checkInvariants(t, n);
  });
});

describe("C21 ordered and compaction", () => {
  it("a produce asking for ordered with compaction is rejected with SQL0021 and writes nothing", async () => {
    const t = testClient(url());
    const s = t.client.stream("ordered.compaction");
    await s.register();
    const n = await streamIdOf(t, "ordered.compaction");
    await expect(s.produce({ a: 1 }, { key: "K", compaction: {}, message: { concurrency: "ordered" } })).rejects.toMatchObject({ code: "SQL0021" });
    await expect(s.produceBatch([{ payload: 1, key: "K", compaction: { rank: 2 }, message: { concurrency: "ordered" } }])).rejects.toMatchObject({ code: "SQL0021" });
    await expect(s.produce({ a: 1 }, { message: { concurrency: "ordered" } })).rejects.toMatchObject({ code: "SQL0019" });
    await expect(s.produce({ a: 1 }, { message: { concurrency: "exclusive" } })).rejects.toMatchObject({ code: "SQL0019" });
    expect(await count(t, `message_log_${n}`)).toBe(0);
    expect(await count(t, `compaction_head_${n}`)).toBe(0);
  });

  it("override ordered with compacted keyed messages: their rows store exclusive (and uncompacted ones ordered)", async () => {
    const t = testClient(url());
    const s = t.client.stream<{ v: string }>("ordered.override");
    await s.register();
    const g = s.consumer("ord");
    await g.register({ concurrencyOverride: "ordered" });
    await s.produce({ v: "c1" }, { key: "C1", compaction: {} });
    await s.produce({ v: "c2" }, { key: "C2", compaction: { rank: 3 } });
    await s.produce({ v: "u" }, { key: "U" });
    await s.produce({ v: "p" }); // keyless: parallel
    const n = await streamIdOf(t, "ordered.override");
    const gid = await groupIdOf(t, "ord", "ordered.override");
    await pollPastFence(g, () => {
      throw new Error("fail all");
    });
    expect((await exceptionRows(t, n, gid)).map((r) => [r.message_id, r.message_key, r.concurrency, r.status])).toEqual([
      ["1", "C1", "exclusive", "ready"],
      ["2", "C2", "exclusive", "ready"],
      ["3", "U", "ordered", "ready"],
      ["4", null, "parallel", "ready"],
    ]);
    await checkInvariants(t, n);
  });
});

describe("concurrency > 1 inside one poll", () => {
  it("ordered keys stay serial while different keys run in parallel", async () => {
    const t = testClient(url());
    const s = t.client.stream<{ i: number }>("ordered.concurrent");
    await s.register();
    const g = s.consumer("ord");
    await g.register({ concurrencyOverride: "ordered" });
    const keys = ["a", "b", "c", "d"];
    const items = Array.from({ length: 24 }, (_, i) => ({ payload: { i }, key: keys[i % 4] }));
    const ids = (await s.produceBatch(items)).map((r) => BigInt(r.id));
    const byKey = new Map<string, bigint[]>();
    items.forEach((it, i) => byKey.set(it.key, [...(byKey.get(it.key) ?? []), ids[i]]));
    const n = await streamIdOf(t, "ordered.concurrent");
    const gid = await groupIdOf(t, "ord", "ordered.concurrent");
    const ledger = new Ledger(byKey);
    const r = await pollPastFence(g, async (m: Message) => {
      ledger.start(m.id, m.key, m.attempt);
      await sleep(20);
      ledger.end(m.id, m.key, true, m.attempt);
    }, { opts: { batchLimit: 24, concurrency: 4 } });
    expect(r).toMatchObject({ rangesClaimed: 1, succeeded: 24, deferred: 0 });
    expect(ledger.overlaps).toEqual([]);
    expect(ledger.orderViolations).toEqual([]);
    for (const [k, order] of ledger.firstStartOrder()) expect(order, k).toEqual(byKey.get(k));
    expect(ledger.maxRunningAll).toBe(4);
    expect(ledger.differentKeysOverlapped()).toBe(true);
    expect((await cursor(t, n, gid)).committed).toBe("24");
    await checkInvariants(t, n);
  });

  it("in the exception phase too: a key's due and deferred rows run as one chain per poll, in order, other keys alongside", async () => {
    const t = testClient(url());
    const s = t.client.stream<{ i: number }>("ordered.concurrent.exceptions");
    await s.register();
    const g = s.consumer("ord");
    await g.register({ concurrencyOverride: "ordered", exceptionInitialBackoff: 0 });
    const keys = ["a", "b", "c"];
    const items = Array.from({ length: 9 }, (_, i) => ({ payload: { i }, key: keys[i % 3] }));
    const ids = (await s.produceBatch(items)).map((r) => BigInt(r.id));
    const byKey = new Map<string, bigint[]>();
    items.forEach((it, i) => byKey.set(it.key, [...(byKey.get(it.key) ?? []), ids[i]]));
    const n = await streamIdOf(t, "ordered.concurrent.exceptions");
    const gid = await groupIdOf(t, "ord", "ordered.concurrent.exceptions");
    // First delivery: the first message of every key fails, so each key's chain defers the rest.
    await pollPastFence(g, (m: Message) => {
      if (m.attempt === 0 && ["1", "2", "3"].includes(m.id)) throw new Error("first fails");
    }, { opts: { batchLimit: 9, concurrency: 3 } });
    expect((await exceptionRows(t, n, gid)).map((r) => [r.message_id, r.status])).toEqual([
      ["1", "ready"], ["2", "ready"], ["3", "ready"],
      ["4", "deferred"], ["5", "deferred"], ["6", "deferred"], ["7", "deferred"], ["8", "deferred"], ["9", "deferred"],
    ]);
    const ledger = new Ledger(new Map([...byKey].map(([k, v]) => [k, v.slice(1)])));
    const perPoll: string[][] = [];
    for (let i = 0; i < 5; i++) {
      const ran: string[] = [];
      await g.poll(async (m: Message) => {
        ran.push(m.id);
        ledger.start(m.id, m.key, m.attempt);
        await sleep(20);
        ledger.end(m.id, m.key, true, m.attempt);
      }, { batchLimit: 10, concurrency: 3 });
      perPoll.push(ran.sort((a, b) => Number(a) - Number(b)));
      await checkInvariants(t, n);
    }
    expect(perPoll).toEqual([["1", "2", "3", "4", "5", "6", "7", "8", "9"], [], [], [], []]);
    expect(ledger.overlaps).toEqual([]);
    expect(ledger.orderViolations).toEqual([]);
    expect(ledger.differentKeysOverlapped()).toBe(true);
    expect((await cursor(t, n, gid)).committed).toBe("9");
  });
  it("keyed ranges claimed ahead: a failure recorded with the next range's key take defers that range's later messages of the key", async () => {
    // docs/protocol/poll-cycle.md#keyed-ranges-claimed-ahead: ranges of 100, quick handlers, so from the
    // second range on the next is claimed while one runs, and a range's record goes with the next
    // range's keys. Every 50th message fails once; its retry waits 300 ms, so no due row ends the
    // chain and the later messages of its key in the next range must be deferred behind it.
    const t = testClient(url());
    const s = t.client.stream<{ i: number }>("ordered.ahead");
    await s.register();
    const g = s.consumer("ord");
    await g.register({ concurrencyOverride: "ordered", exceptionInitialBackoff: 0, message: { retry: { baseDelay: 300 } } });
    await s.produce({ i: -1 }, { key: "warm" });
    await g.drain(() => {}); // warms the client's stream cache
    const keys = Array.from({ length: 7 }, (_, k) => `k${k}`);
    const items = Array.from({ length: 400 }, (_, i) => ({ payload: { i }, key: keys[i % 7] }));
    const ids = (await s.produceBatch(items)).map((r) => BigInt(r.id));
    const byKey = new Map<string, bigint[]>();
    items.forEach((it, i) => byKey.set(it.key, [...(byKey.get(it.key) ?? []), ids[i]]));
    const n = await streamIdOf(t, "ordered.ahead");
    const gid = await groupIdOf(t, "ord", "ordered.ahead");
    const ledger = new Ledger(byKey);
    const handler = (m: Message<{ i: number }>) => {
      ledger.start(m.id, m.key, m.attempt);
      const fail = m.payload.i % 50 === 0 && m.attempt === 0;
      ledger.end(m.id, m.key, !fail, m.attempt);
      if (fail) throw new Error("once");
    };
    t.statements.length = 0;
    const first = await g.drain(handler, { batchLimit: 100 });
    expect(t.statements.filter((q) => q.includes(`record_take_keys_${n}(`)).length).toBeGreaterThan(0);
    expect(first.failed).toBe(8);
    expect(first.deferred).toBeGreaterThan(0);
    let total = first.succeeded;
    for (let i = 0; i < 50 && total < 400; i++) {
      await sleep(100);
      total += (await g.drain(handler, { batchLimit: 100 })).succeeded;
    }
    expect(total).toBe(400);
    expect(ledger.overlaps).toEqual([]);
    expect(ledger.orderViolations).toEqual([]);
    expect((await cursor(t, n, gid)).committed).toBe(String(ids[399]));
    expect(await count(t, `message_key_lease_${n}`)).toBe(0);
    await checkInvariants(t, n);
  });
  it("a drain's chain of keyed ranges passes its key leases on: each key's lease is written once for the chain, not once per range, and released at its end", async () => {
    // docs/protocol/ordering.md#key-leases: 8 ranges of 50 over 7 keys in one drain. Before leases were
    // passed on, every range inserted its 7 leases and its record deleted them: 56 of each. Now
    // the first range (run before anything is claimed ahead) takes and releases its own, and the
    // chain that starts with the second takes each key once and releases it at its end: 14.
    const t = testClient(url());
    const s = t.client.stream<{ i: number }>("ordered.pass");
    await s.register();
    const g = s.consumer("ord");
    await g.register({ concurrencyOverride: "ordered" });
    await s.produce({ i: -1 }, { key: "warm" });
    await g.drain(() => {}); // warms the client's stream cache
    const n = await streamIdOf(t, "ordered.pass");
    const keys = Array.from({ length: 7 }, (_, k) => `k${k}`);
    const items = Array.from({ length: 400 }, (_, i) => ({ payload: { i }, key: keys[i % 7] }));
    const ids = (await s.produceBatch(items)).map((r) => BigInt(r.id));
    const byKey = new Map<string, bigint[]>();
    items.forEach((it, i) => byKey.set(it.key, [...(byKey.get(it.key) ?? []), ids[i]]));
    // Every write to the lease table, counted by a trigger of the test's own.
    await t.sql(`CREATE TABLE ${SCHEMA}.lease_writes_${n} (op TEXT NOT NULL, k TEXT NOT NULL)`);
    await t.sql(`CREATE FUNCTION ${SCHEMA}.lease_writes_${n}() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        INSERT INTO ${SCHEMA}.lease_writes_${n} VALUES (TG_OP, COALESCE(NEW.message_key, OLD.message_key));
        RETURN NULL;
      END $$`);
    await t.sql(`CREATE TRIGGER lease_writes AFTER INSERT OR UPDATE OR DELETE ON ${SCHEMA}.message_key_lease_${n}
      FOR EACH ROW EXECUTE FUNCTION ${SCHEMA}.lease_writes_${n}()`);
    const ledger = new Ledger(byKey);
    t.statements.length = 0;
    const r = await g.drain((m: Message<{ i: number }>) => {
      ledger.start(m.id, m.key, m.attempt);
      ledger.end(m.id, m.key, true, m.attempt);
    }, { batchLimit: 50 });
    expect(r.succeeded).toBe(400);
    expect(r.rangesClaimed).toBe(8);
    expect(t.statements.filter((q) => q.includes(`record_take_keys_${n}(`)).length).toBeGreaterThan(0);
    const writes = await t.sql<{ op: string; n: number }>(`SELECT op, count(*)::int AS n FROM ${SCHEMA}.lease_writes_${n} GROUP BY op ORDER BY op`);
    expect(writes).toEqual([{ op: "DELETE", n: 14 }, { op: "INSERT", n: 14 }]);
    expect(ledger.overlaps).toEqual([]);
    expect(ledger.orderViolations).toEqual([]);
    expect(await count(t, `message_key_lease_${n}`)).toBe(0);
    await t.sql(`DROP TABLE ${SCHEMA}.lease_writes_${n}`);
    await checkInvariants(t, n);
  });
});
