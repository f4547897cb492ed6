// Soak for docs/protocol/ordering.md (G5, G6, I5, I8): two pollers with their own clients and pools run the same
// ordered group at the same time while a producer appends a few thousand keyed messages, and about
// 5 % of the messages fail once. A ledger of handler starts and ends must show, per key, no two
// handlers at once and every start after all earlier ids of its key have succeeded.
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import type { CycleReport, Message } from "@sqlstreams/core";
import { useFreshDatabase } from "../../support/db.js";
import { checkInvariants } from "../../support/invariants.js";
import { SCHEMA, type TestClient, count, cursor, groupIdOf, streamIdOf, testClient } from "../../support/streams.js";
import { Ledger, ascending } from "../../support/keyed.js";

const url = useFreshDatabase();

const MESSAGES = 3_000;
const KEYS = 100;
const BATCH = 100;
const STREAM = "soak.ordered";
const GROUP = "soak";

/** Deterministic key of message id i (ids are 1…MESSAGES: one producer, sequential batches). */
function keyOf(i: number): string {
  // A multiplicative hash so that keys interleave irregularly; some keys get long same-key runs.
  const h = Math.imul(i, 2654435761) >>> 0;
  return `acct-${(h >>> 7) % KEYS}`;
}

/** About 5 % of the messages fail at their first delivery (attempt 0) and succeed on retry. */
function failsOnce(i: number): boolean {
  return (Math.imul(i ^ 0x5bd1e995, 0x27d4eb2d) >>> 0) % 100 < 5;
}

describe("ordered soak: two concurrent pollers", () => {
  it(`${MESSAGES} messages over ${KEYS} keys with ~5% failing once: zero per-key order or exclusivity violations`, { timeout: 240_000 }, async () => {
    const tp = testClient(url());
    const ta = testClient(url());
    const tb = testClient(url());
    const stream = tp.client.stream<{ i: number; key: string }>(STREAM);
    await stream.register();
    await stream.consumer(GROUP).register({
      concurrencyOverride: "ordered",
      exceptionInitialBackoff: 20,
      message: { timeout: 30_000, retry: { maxRetries: 3, baseDelay: 20, maxDelay: 50 } },
    });
    const n = await streamIdOf(tp, STREAM);
    const gid = await groupIdOf(tp, GROUP, STREAM);

    const idsByKey = new Map<string, bigint[]>();
    const failing = new Set<number>();
    for (let i = 1; i <= MESSAGES; i++) {
      idsByKey.set(keyOf(i), [...(idsByKey.get(keyOf(i)) ?? []), BigInt(i)]);
      if (failsOnce(i)) failing.add(i);
    }
    const ledger = new Ledger(idsByKey);
    const failedSeen = new Set<number>();
    const bad: string[] = [];

    const handler = (poller: string) => async (m: Message<{ i: number; key: string }>) => {
      const i = Number(m.id);
      ledger.start(m.id, m.key, m.attempt, poller);
      let ok = false;
      try {
        if (m.payload.i !== i || m.key !== keyOf(i)) bad.push(`message ${m.id} carries ${JSON.stringify(m.payload)} key ${m.key}`);
        if (i % 3 !== 0) await sleep(i % 4);
        if (m.attempt === 0 && failing.has(i)) {
          failedSeen.add(i);
          throw new Error(`injected failure of ${i}`);
        }
        ok = true;
      } finally {
        ledger.end(m.id, m.key, ok, m.attempt, poller);
      }
    };

    const started = Date.now();
    let produced = 0;
    const producer = (async () => {
      for (let b = 0; b < MESSAGES / BATCH; b++) {
        const items = Array.from({ length: BATCH }, (_, j) => {
          const i = b * BATCH + j + 1;
          return { payload: { i, key: keyOf(i) }, key: keyOf(i) };
        });
        const ids = (await stream.produceBatch(items)).map((r) => Number(r.id));
        expect(ids[0]).toBe(b * BATCH + 1);
        expect(ids[BATCH - 1]).toBe((b + 1) * BATCH);
        produced += BATCH;
        await sleep(5);
      }
    })();

    const totals: Record<string, CycleReport[]> = { A: [], B: [] };
    const poller = async (t: TestClient, name: string, concurrency: number) => {
      const g = t.client.stream<{ i: number; key: string }>(STREAM).consumer(GROUP);
      const end = Date.now() + 200_000;
      while ((produced < MESSAGES || ledger.succeededCount < MESSAGES) && Date.now() < end) {
        const r = await g.drain(handler(name), { batchLimit: 25, concurrency });
        totals[name].push(r);
        if (r.started === 0) await sleep(5);
      }
    };
    await Promise.all([producer, poller(ta, "A", 4), poller(tb, "B", 4)]);
    const durationMs = Date.now() - started;

    // Let the cursor catch up with the last recorded outcomes.
    const g = tp.client.stream(STREAM).consumer(GROUP);
    await g.drain(() => {
      throw new Error("every message already succeeded");
    });

    const sum = (k: keyof CycleReport) => [...totals.A, ...totals.B].reduce((a, r) => a + (r[k] as number), 0);
    const figures = {
      messages: MESSAGES, keys: KEYS, durationMs, polls: sum("polls"), starts: ledger.events.filter((e) => e.kind === "start").length,
      injectedFailures: failedSeen.size, deferred: sum("deferred"), rangesClaimed: sum("rangesClaimed"),
      startsA: ledger.events.filter((e) => e.kind === "start" && e.poller === "A").length,
      startsB: ledger.events.filter((e) => e.kind === "start" && e.poller === "B").length,
      maxConcurrentHandlers: ledger.maxRunningAll, overlaps: ledger.overlaps.length, orderViolations: ledger.orderViolations.length,
      leaseLost: sum("leaseLost"), reclaims: sum("rangesReclaimed"),
    };
    console.log(`ordered soak: ${JSON.stringify(figures)}`);

    expect(bad).toEqual([]);
    // Every message succeeded exactly once; every injected failure happened exactly once.
    expect(ledger.succeededCount).toBe(MESSAGES);
    const successes = ledger.events.filter((e) => e.kind === "end" && e.ok).length;
    expect(successes).toBe(MESSAGES);
    expect(failedSeen).toEqual(failing);
    expect(failing.size).toBeGreaterThan(MESSAGES * 0.03);
    expect(ledger.events.filter((e) => e.kind === "end" && !e.ok).length).toBe(failing.size);
    // G5 / I5: never two handlers of one key at once.
    expect(ledger.overlaps).toEqual([]);
    // G6: no start before every earlier id of the key had succeeded.
    expect(ledger.orderViolations).toEqual([]);
    // I8: per key, first starts and successes follow id order.
    const firsts = ledger.firstStartOrder();
    const oks = ledger.successOrder();
    for (const [k, ids] of idsByKey) {
      expect(ascending(firsts.get(k) ?? []), `first starts of ${k}`).toBe(true);
      expect(firsts.get(k), `first starts of ${k}`).toEqual(ids);
      expect(oks.get(k), `successes of ${k}`).toEqual(ids);
    }
    // Both pollers worked, and handlers of different keys ran at the same time.
    expect(figures.startsA).toBeGreaterThan(0);
    expect(figures.startsB).toBeGreaterThan(0);
    expect(ledger.maxRunningAll).toBeGreaterThan(1);
    expect(ledger.differentKeysOverlapped()).toBe(true);
    // I7: no faults injected besides handler failures ⇒ no reclaims and no lost leases.
    expect(figures.reclaims).toBe(0);
    expect(figures.leaseLost).toBe(0);
    // The group is fully resolved.
    expect((await cursor(tp, n, gid)).committed).toBe(String(MESSAGES));
    expect(await count(tp, `exception_queue_${n}`, "consumer_group_id = $1", [gid])).toBe(0);
    expect(await count(tp, `claim_lease_${n}`, "consumer_group_id = $1", [gid])).toBe(0);
    expect(await tp.sql(`SELECT 1 FROM ${SCHEMA}.message_key_lease_${n} WHERE expires_at > now()`)).toEqual([]);
    await checkInvariants(tp, n);
  });
});
