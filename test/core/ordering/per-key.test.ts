// Per-key ordering (docs/protocol/ordering.md#the-predecessor-rule): an ordered message waits only for
// earlier unresolved messages of its own key, never for the group's committed cursor, so one
// unresolved message of a key holds no other ordered key. No timing is asserted: the stuck keys are held for minutes, and a
// test that fails does so because healthy keys stall until the stuck key resolves (never, here).
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { Delay, Permanent, type Message } from "@sqlstreams/core";
import { useFreshDatabase } from "../../support/db.js";
import { checkInvariants } from "../../support/invariants.js";
import { SCHEMA, type TestClient, exceptionRows, groupIdOf, streamIdOf, testClient } from "../../support/streams.js";
import { Ledger } from "../../support/keyed.js";

const url = useFreshDatabase();

type P = { k: string; r: number };

describe("per-key ordering: one slow key cannot block the others", () => {
  it("one key returning Delay, 20 healthy keys × 10 messages all handled while it waits", { timeout: 180_000 }, async () => {
    const t = testClient(url());
    const s = t.client.stream<P>("keys.repro");
    await s.register();
    const g = s.consumer("g");
    await g.register({ concurrencyOverride: "ordered" });
    const healthy = Array.from({ length: 20 }, (_, i) => `h${i}`);
    const items: { payload: P; key: string }[] = [];
    for (let r = 0; r < 10; r++) {
      items.push({ payload: { k: "slow", r }, key: "slow" });
      for (const k of healthy) items.push({ payload: { k, r }, key: k });
    }
    await s.produceBatch(items);
    const n = await streamIdOf(t, "keys.repro");
    const gid = await groupIdOf(t, "g", "keys.repro");
    const done = new Map<string, number[]>();
    const slowRuns: number[] = [];
    const handler = (m: Message<P>) => {
      if (m.payload.k === "slow") {
        slowRuns.push(m.payload.r);
        return Delay(600_000); // ten minutes: far longer than this test may take
      }
      done.set(m.payload.k, [...(done.get(m.payload.k) ?? []), m.payload.r]);
    };
    const healthyDone = () => [...done.values()].reduce((a, v) => a + v.length, 0);
    const end = Date.now() + 120_000;
    let drains = 0;
    while (healthyDone() < 200 && Date.now() < end) {
      await g.drain(handler, { batchLimit: 50, concurrency: 4 });
      drains++;
      if (healthyDone() < 200) await sleep(20);
    }
    console.log(`per-key repro: ${healthyDone()}/200 healthy handled in ${drains} drain(s)`);
    expect(healthyDone()).toBe(200);
    for (const k of healthy) expect(done.get(k), k).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    // The slow key ran its first message once and is still waiting; its later ones never started.
    expect(slowRuns).toEqual([0]);
    const rows = await exceptionRows(t, n, gid);
    expect(rows.filter((r) => r.status === "ready").map((r) => r.message_id)).toEqual(["1"]);
    expect(rows.filter((r) => r.status === "deferred")).toHaveLength(9);
    await checkInvariants(t, n);
  });

  it("soak: 40 keys × 12 messages, two pollers; keys that fail, delay, die and stall keep their own order and never hold the others", { timeout: 240_000 }, async () => {
    const tp = testClient(url());
    const stream = tp.client.stream<P>("keys.soak");
    await stream.register();
    await stream.consumer("g").register({
      concurrencyOverride: "ordered",
      exceptionInitialBackoff: 20,
      message: { timeout: 30_000, retry: { maxRetries: 5, baseDelay: 20, maxDelay: 50 } },
    });
    const n = await streamIdOf(tp, "keys.soak");
    const gid = await groupIdOf(tp, "g", "keys.soak");
    const ROUNDS = 12;
    const special = ["stall", "fail", "delay", "die"];
    const keys = [...special, ...Array.from({ length: 36 }, (_, i) => `k${i}`)];
    const idsByKey = new Map<string, bigint[]>();
    const idOf = new Map<string, bigint>();
    for (let r = 0; r < ROUNDS; r++) {
      // A different key order each round, so ranges mix keys irregularly.
      const order = [...keys].sort((a, b) => ((a.charCodeAt(a.length - 1) * (r + 3)) % 7) - ((b.charCodeAt(b.length - 1) * (r + 3)) % 7));
      const res = await stream.produceBatch(order.map((k) => ({ payload: { k, r }, key: k })));
      order.forEach((k, j) => {
        const id = BigInt(res[j].id);
        idOf.set(`${k}/${r}`, id);
        // The message that dies releases its followers: the ledger must not expect it to succeed.
        if (!(k === "die" && r === 3)) idsByKey.set(k, [...(idsByKey.get(k) ?? []), id]);
      });
    }
    const ledger = new Ledger(idsByKey);
    const stallRuns: number[] = [];
    const handler = (poller: string) => async (m: Message<P>) => {
      const { k, r } = m.payload;
      if (k === "stall") {
        stallRuns.push(r);
        return Delay(600_000);
      }
      ledger.start(m.id, m.key, m.attempt, poller);
      let ok = false;
      try {
        if (r % 3 !== 0) await sleep(r % 4);
        if (k === "fail" && r % 3 === 0 && m.attempt < 2) throw new Error(`injected failure ${k}/${r}`);
        if (k === "delay" && r % 2 === 0 && m.delays === 0) return Delay(30);
        if (k === "die" && r === 3) return Permanent(new Error("injected death"));
        ok = true;
      } finally {
        ledger.end(m.id, m.key, ok, m.attempt, poller);
      }
    };
    const expected = (keys.length - 1) * ROUNDS - 1; // all but the stalled key and the dead message
    const pollers = [testClient(url()), testClient(url())];
    const end = Date.now() + 180_000;
    const poll = async (t: TestClient, name: string) => {
      const g = t.client.stream<P>("keys.soak").consumer("g");
      while (ledger.succeededCount < expected && Date.now() < end) {
        const r = await g.drain(handler(name), { batchLimit: 30, concurrency: 4 });
        if (r.started === 0) await sleep(10);
      }
    };
    await Promise.all([poll(pollers[0], "A"), poll(pollers[1], "B")]);
    console.log(`per-key soak: ${ledger.succeededCount}/${expected} succeeded, ${ledger.events.length} ledger events, overlaps ${ledger.overlaps.length}, order violations ${ledger.orderViolations.length}`);

    // Everything but the stalled key finished while its first message is still delayed.
    expect(ledger.succeededCount).toBe(expected);
    expect(stallRuns).toEqual([0]);
    // Per key: never two runs at once, never a start before every earlier message succeeded (the
    // dead one excepted: it releases its followers), and successes in id order.
    expect(ledger.overlaps).toEqual([]);
    expect(ledger.orderViolations).toEqual([]);
    const oks = ledger.successOrder();
    for (const [k, ids] of idsByKey) if (k !== "stall") expect(oks.get(k), k).toEqual(ids);
    // The dead message started after its predecessors and before its followers.
    const dieId = idOf.get("die/3") as bigint;
    const dieStart = ledger.events.findIndex((e) => e.kind === "start" && e.id === dieId);
    const nextStart = ledger.events.findIndex((e) => e.kind === "start" && e.id === idOf.get("die/4"));
    expect(dieStart).toBeGreaterThanOrEqual(0);
    expect(nextStart).toBeGreaterThan(dieStart);
    // What is left: the stalled key's rows (1 ready, 11 deferred) and the dead letter.
    const rows = await exceptionRows(tp, n, gid);
    const byStatus = (st: string) => rows.filter((r) => r.status === st).map((r) => BigInt(r.message_id));
    expect(byStatus("dead")).toEqual([dieId]);
    expect(byStatus("ready")).toEqual([idOf.get("stall/0")]);
    expect(byStatus("deferred").sort((a, b) => (a < b ? -1 : 1))).toEqual(Array.from({ length: ROUNDS - 1 }, (_, r) => idOf.get(`stall/${r + 1}`)));
    expect(await tp.sql(`SELECT 1 FROM ${SCHEMA}.message_key_lease_${n} WHERE expires_at > now()`)).toEqual([]);
    await checkInvariants(tp, n);
  });
});
