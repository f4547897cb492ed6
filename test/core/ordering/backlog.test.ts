// A deferred backlog in the exception phase (docs/protocol/poll-cycle.md#the-exception-phase): a key's
// chain runs in groups, each started in one round trip under one key lease, so a backlog drains in
// a few round trips per batch, not one per row; per-key order and exclusivity hold as for any
// start. A group's rows that never ran are put back uncharged when its lease expires (the kill
// backstop charges the lowest), and a group stops before a predecessor outside it.
import { describe, expect, it } from "vitest";
import type { Message } from "@sqlstreams/core";
import { useFreshDatabase } from "../../support/db.js";
import { checkInvariants } from "../../support/invariants.js";
import { SCHEMA, type TestClient, cursor, deliveryLogRows, exceptionRows, expireLeases, groupIdOf, makeDue, streamIdOf, testClient } from "../../support/streams.js";
import { Ledger, keyLeases } from "../../support/keyed.js";

const url = useFreshDatabase();

const calls = (t: TestClient, from: number, fn: string, n: string) => t.statements.slice(from).filter((q) => q.includes(`${fn}_${n}(`)).length;

/** An ordered group whose first message of each of `keys` keys failed once: the rest of each key deferred behind it. */
async function backlog(t: TestClient, name: string, messages: number, keys: number) {
  const s = t.client.stream<{ i: number }>(name);
  await s.register();
  const g = s.consumer("g");
  await g.register({ concurrencyOverride: "ordered", exceptionInitialBackoff: 60_000 });
  const items = Array.from({ length: messages }, (_, i) => ({ payload: { i }, key: `k${i % keys}` }));
  const ids = (await s.produceBatch(items)).map((r) => BigInt(r.id));
  const byKey = new Map<string, bigint[]>();
  items.forEach((it, i) => byKey.set(it.key, [...(byKey.get(it.key) ?? []), ids[i]]));
  const n = await streamIdOf(t, name);
  const gid = await groupIdOf(t, "g", name);
  for (let i = 0; i < 20; i++) {
    const r = await g.drain((m: Message<{ i: number }>) => {
      if (m.payload.i < keys) throw new Error("first of its key fails once");
    }, { batchLimit: 100, concurrency: 10 });
    if (r.idle) break;
  }
  const rows = await exceptionRows(t, n, gid);
  expect(rows.filter((r) => r.status === "ready")).toHaveLength(keys);
  expect(rows.filter((r) => r.status === "deferred")).toHaveLength(messages - keys);
  await makeDue(t, n);
  return { g, n, gid, byKey };
}

describe("a deferred backlog drains in groups", () => {
  it("200 rows of 5 keys: a few round trips per batch of 100 (not one per row), each key in order, no key run twice at once", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const { g, n, gid, byKey } = await backlog(t, "backlog.groups", 200, 5);
    const ledger = new Ledger(byKey);
    const mark = t.statements.length;
    const handled: string[] = [];
    const r = await g.drain((m: Message) => {
      ledger.start(m.id, m.key, m.attempt);
      handled.push(m.id);
      ledger.end(m.id, m.key, true, m.attempt);
    }, { batchLimit: 100, concurrency: 10 });
    expect(r).toMatchObject({ started: 200, succeeded: 200 });
    expect(new Set(handled).size).toBe(200);
    expect(ledger.overlaps).toEqual([]);
    expect(ledger.orderViolations).toEqual([]);
    const reservations = calls(t, mark, "reserve_exceptions", n);
    const steps = calls(t, mark, "exception_step", n);
    const loads = t.statements.slice(mark).filter((q) => q.includes("AS has_cursor")).length;
    // Two batches of 100, in one poll. The first reservation starts the 5 failed heads (charged
    // before: each runs alone); one step records them and starts each key's 19 later rows as one
    // group. Their outcomes travel with the second reservation, which records them, then
    // reserves and starts the next 5 groups of 20; the third records those and finds nothing.
    // Before groups this took a step per row of a chain: about 40; before batches in a row, a
    // load, a step and an advance per batch besides.
    expect(reservations).toBeLessThanOrEqual(3);
    expect(steps).toBeLessThanOrEqual(2);
    expect(loads).toBeLessThanOrEqual(2);
    expect((await cursor(t, n, gid)).committed).toBe(String(Math.max(...[...byKey.values()].flat().map(Number))));
    expect(await exceptionRows(t, n, gid)).toEqual([]);
    expect(await keyLeases(t, n, gid)).toEqual([]);
    await checkInvariants(t, n);
  });

  it("1000 rows of 50 keys: a batch takes 10 whole chains of 10, all started with the reservation, each key in order", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const { g, n, gid, byKey } = await backlog(t, "backlog.wide", 1000, 50);
    // The 50 failed heads made clean (attempts = delays), so that every row may run in a group.
    await t.sql(`UPDATE ${SCHEMA}.exception_queue_${n} SET attempts = delays`);
    const ledger = new Ledger(byKey);
    const mark = t.statements.length;
    const firstBatch: string[] = [];
    const r = await g.drain((m: Message) => {
      ledger.start(m.id, m.key, m.attempt);
      if (firstBatch.length < 100) firstBatch.push(m.key as string);
      ledger.end(m.id, m.key, true, m.attempt);
    }, { batchLimit: 100, concurrency: 10 });
    expect(r).toMatchObject({ started: 1000, succeeded: 1000 });
    expect(ledger.overlaps).toEqual([]);
    expect(ledger.orderViolations).toEqual([]);
    // Each chain gets its share of the batch (100 over 10 workers): 10 keys of 10 rows, not 50 of 2.
    expect(new Set(firstBatch).size).toBe(10);
    // Ten batches: the reservations start every group and record the batch before, one step
    // records the last (no start one key lease per call). Before whole chains: 50 chains of 2 per
    // batch, 40 of them started by steps, about 5 steps a batch.
    expect(calls(t, mark, "reserve_exceptions", n)).toBeLessThanOrEqual(11);
    expect(calls(t, mark, "exception_step", n)).toBeLessThanOrEqual(2);
    expect(t.statements.slice(mark).filter((q) => q.includes("start_exceptions")).length).toBe(0);
    expect(await exceptionRows(t, n, gid)).toEqual([]);
    expect(await keyLeases(t, n, gid)).toEqual([]);
    await checkInvariants(t, n);
  });

  it("two pollers drain one backlog at once: each key in order, never two of a key at once, every message once", async () => {
    const t = testClient(url());
    const t2 = testClient(url());
    await t.client.migrate();
    const { n, gid, byKey } = await backlog(t, "backlog.two", 600, 12);
    const ledger = new Ledger(byKey);
    const seen = new Map<string, number>();
    const handler = (poller: string) => async (m: Message) => {
      ledger.start(m.id, m.key, m.attempt, poller);
      seen.set(m.id, (seen.get(m.id) ?? 0) + 1);
      // Some handlers yield, so the two pollers' batches interleave.
      if (Number(m.id) % 3 === 0) await new Promise((res) => setTimeout(res, 1));
      ledger.end(m.id, m.key, true, m.attempt, poller);
    };
    const g1 = t.client.stream("backlog.two").consumer("g");
    const g2 = t2.client.stream("backlog.two").consumer("g");
    const drainAll = async (g: typeof g1, poller: string) => {
      for (let i = 0; i < 50 && ledger.succeededCount < 600; i++) {
        await g.drain(handler(poller), { batchLimit: 40, concurrency: 4 });
      }
    };
    await Promise.all([drainAll(g1, "a"), drainAll(g2, "b")]);
    expect(ledger.overlaps).toEqual([]);
    expect(ledger.orderViolations).toEqual([]);
    expect(seen.size).toBe(600);
    expect([...seen.values()].every((c) => c === 1)).toBe(true);
    // Both pollers took part.
    expect(new Set(ledger.events.map((e) => e.poller))).toEqual(new Set(["a", "b"]));
    for (const ids of ledger.successOrder().values()) expect(ids).toEqual([...ids].sort((a, b) => (a < b ? -1 : 1)));
    expect(await exceptionRows(t, n, gid)).toEqual([]);
    expect(await keyLeases(t, n, gid)).toEqual([]);
    await checkInvariants(t, n);
  });

  it("a group's lease expires with its rows inflight (a crash): the lowest is charged, the others go back to waiting uncharged, then all run in order", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const { g, n, gid } = await backlog(t, "backlog.crash", 8, 2);
    // Run the failed heads once, so that every row left is clean: 3, 5, 7 of k0 and 4, 6, 8 of k1.
    await g.poll(() => {}, { batchLimit: 2, concurrency: 2 });
    expect((await exceptionRows(t, n, gid)).map((r) => [r.message_id, r.status, r.attempts])).toEqual([
      ["3", "deferred", 0], ["4", "deferred", 0], ["5", "deferred", 0], ["6", "deferred", 0], ["7", "deferred", 0], ["8", "deferred", 0],
    ]);
    // A poller reserves and starts both keys' groups, then dies before running any of them.
    const started = await t.sql<{ message_id: string; kind: string | null }>(
      `SELECT message_id::text, kind FROM ${SCHEMA}.reserve_exceptions_${n}($1, 10, 1000, 1, 900000, 10, 2000, NULL, gen_random_uuid(), 10, NULL, '{}', false)`, [gid]);
    expect(started.map((s) => [s.message_id, s.kind])).toEqual([
      ["3", "started"], ["4", "started"], ["5", "started"], ["6", "started"], ["7", "started"], ["8", "started"],
    ]);
    expect(await keyLeases(t, n, gid)).toHaveLength(2);
    await expireLeases(t, n);
    const ran: string[] = [];
    await g.poll((m: Message) => void ran.push(m.id), { batchLimit: 10, concurrency: 2 });
    // The expiry charged 3 and 4 (expired, attempts 1, due after backoff) and put 5–8 back.
    expect((await deliveryLogRows(t, n, gid)).filter((d) => d.status === "expired").map((d) => d.message_id)).toEqual(["3", "4"]);
    expect((await exceptionRows(t, n, gid)).map((r) => [r.message_id, r.status, r.attempts])).toEqual([
      ["3", "ready", 1], ["4", "ready", 1], ["5", "deferred", 0], ["6", "deferred", 0], ["7", "deferred", 0], ["8", "deferred", 0],
    ]);
    expect(ran).toEqual([]);
    await makeDue(t, n);
    await g.drain((m: Message) => void ran.push(m.id), { batchLimit: 10, concurrency: 2 });
    expect(ran.filter((id) => Number(id) % 2 === 1)).toEqual(["3", "5", "7"]);
    expect(ran.filter((id) => Number(id) % 2 === 0)).toEqual(["4", "6", "8"]);
    expect(await exceptionRows(t, n, gid)).toEqual([]);
    await checkInvariants(t, n);
  });

  it("a group stops before an unresolved predecessor outside it: a later row waits for a row of its key that is not due", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const { g, n, gid } = await backlog(t, "backlog.pred", 4, 1);
    await g.poll(() => {}, { batchLimit: 1, concurrency: 1 });
    // 2, 3, 4 deferred; 3 made a retry that is not due yet: 4 must not run before it.
    await t.sql(`UPDATE ${SCHEMA}.exception_queue_${n} SET status = 'ready', attempts = 1, can_run_after = now() + interval '1 hour' WHERE message_id = 3`);
    const ran: string[] = [];
    await g.drain((m: Message) => void ran.push(m.id), { batchLimit: 10, concurrency: 1 });
    expect(ran).toEqual(["2"]);
    expect((await exceptionRows(t, n, gid)).map((r) => [r.message_id, r.status, r.lease_token])).toEqual([["3", "ready", null], ["4", "deferred", null]]);
    expect(await keyLeases(t, n, gid)).toEqual([]);
    await makeDue(t, n);
    await g.drain((m: Message) => void ran.push(m.id), { batchLimit: 10, concurrency: 1 });
    expect(ran).toEqual(["2", "3", "4"]);
    await checkInvariants(t, n);
  });

  it("an abort inside a group (exclusive key): the group's rows that did not run go back to waiting uncharged, its key lease is released, the next drain runs them", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const name = "backlog.abort";
    const s = t.client.stream<{ i: number }>(name);
    await s.register();
    const g = s.consumer("g");
    await g.register({ concurrencyOverride: "exclusive", exceptionInitialBackoff: 60_000 });
    await s.produceBatch(Array.from({ length: 6 }, (_, i) => ({ payload: { i }, key: "k" })));
    const n = await streamIdOf(t, name);
    const gid = await groupIdOf(t, "g", name);
    // Every first delivery fails, so all six wait as retries; made clean again (attempts = delays)
    // and due, they form one group.
    await g.drain(() => {
      throw new Error("first delivery fails");
    }, { batchLimit: 10 });
    await t.sql(`UPDATE ${SCHEMA}.exception_queue_${n} SET status = 'deferred', attempts = 0, can_run_after = now()`);
    const ac = new AbortController();
    const ran: string[] = [];
    const mark = t.statements.length;
    let during: string[][] = [];
    const r = await g.poll(async (m: Message) => {
      ran.push(m.id);
      if (m.id !== "2") return;
      during = (await exceptionRows(t, n, gid)).map((e) => [e.message_id, e.status]);
      ac.abort();
    }, { batchLimit: 10, concurrency: 1, signal: ac.signal });
    expect(ran).toEqual(["1", "2"]);
    // The group had started whole: its rows were inflight while 2 ran.
    expect(during.filter(([id]) => Number(id) >= 2)).toEqual([["2", "inflight"], ["3", "inflight"], ["4", "inflight"], ["5", "inflight"], ["6", "inflight"]]);
    expect(r).toMatchObject({ started: 2, succeeded: 2 });
    expect(calls(t, mark, "reserve_exceptions", n)).toBe(1);
    expect((await exceptionRows(t, n, gid)).map((e) => [e.message_id, e.status, e.attempts, e.lease_token])).toEqual([
      ["3", "deferred", 0, null], ["4", "deferred", 0, null], ["5", "deferred", 0, null], ["6", "deferred", 0, null],
    ]);
    expect(await keyLeases(t, n, gid)).toEqual([]);
    expect((await deliveryLogRows(t, n, gid)).filter((d) => d.status === "expired")).toEqual([]);
    await g.drain((m: Message) => void ran.push(m.id), { batchLimit: 10 });
    expect(ran).toEqual(["1", "2", "3", "4", "5", "6"]);
    expect(await exceptionRows(t, n, gid)).toEqual([]);
    await checkInvariants(t, n);
  });

  it("the reservation reads from the committed cursor, and from the redrive floor below it: a redriven row runs, and the floor clears once nothing is left below committed", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const name = "backlog.floor";
    const s = t.client.stream<{ i: number }>(name);
    await s.register();
    const g = s.consumer("g");
    await g.register({ exceptionInitialBackoff: 0, message: { retry: { maxRetries: 1, baseDelay: 1 } } });
    await s.produceBatch(Array.from({ length: 3 }, (_, i) => ({ payload: { i } })));
    const n = await streamIdOf(t, name);
    const gid = await groupIdOf(t, "g", name);
    const floor = async () => (await t.sql<{ f: string | null }>(
      `SELECT redrive_floor::text AS f FROM ${SCHEMA}.consumer_group_cursor_${n} WHERE consumer_group_id = $1`, [gid]))[0].f;
    await g.drain((m: Message) => {
      if (m.id === "2") throw new Error("broken");
    });
    expect((await exceptionRows(t, n, gid)).map((e) => [e.message_id, e.status])).toEqual([["2", "dead"]]);
    expect((await cursor(t, n, gid)).committed).toBe("3");
    expect(await floor()).toBeNull();
    expect(await g.redrive({ ids: ["2"] })).toEqual({ redriven: 1, skipped: 0 });
    expect(await floor()).toBe("2");
    const ran: string[] = [];
    await g.drain((m: Message) => void ran.push(m.id));
    expect(ran).toEqual(["2"]);
    expect(await exceptionRows(t, n, gid)).toEqual([]);
    // The next reservation finds nothing left at or below committed and clears the floor.
    await s.produce({ i: 3 });
    await g.drain((m: Message) => {
      if (m.attempt === 0) throw new Error("once");
      ran.push(m.id);
    });
    expect(ran).toEqual(["2", "4"]);
    expect(await floor()).toBeNull();
    await checkInvariants(t, n);
  });
});
