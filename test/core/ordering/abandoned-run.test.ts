// docs/protocol/ordering.md#key-leases: a handler that ignores msg.signal is abandoned at
// its timeout but keeps running. Until it settles, no other run of its key may start: not in this
// process (the rest of its range, later polls) and not in another process (its key lease is
// renewed past the timeout, up to 10 × the timeout). Runs are recorded with wall-clock stamps by
// the handlers of both processes (same machine, same clock) and must never overlap.
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import type { Message } from "@sqlstreams/core";
import { useFreshDatabase } from "../../support/db.js";
import { checkInvariants } from "../../support/invariants.js";
import { type NodeChild, type PollerConfig, spawnPoller } from "../../support/processes.js";
import { SCHEMA, setupGroup, testClient } from "../../support/streams.js";

const url = useFreshDatabase();

// A second process polling the same group (the typed poller child in loop mode): after a "go"
// line it drains every 20 ms until "stop", each run sleeping 20 ms; its start and end events carry
// the wall clock, and each drain is reported.
const SECOND_POLLER: PollerConfig = {
  stream: "abandon.excl",
  group: "g",
  method: "loop",
  waitForGo: true,
  defaultAction: "sleep",
  sleepMs: 20,
  opts: { recordMargin: 100, batchLimit: 10 },
};

/** The child's completed runs, from its start and end events. */
function childRuns(child: NodeChild): Run[] {
  const starts = new Map<string, number>();
  const runs: Run[] = [];
  for (const x of child.messages) {
    const k = `${x.id as string}/${x.attempt as number}`;
    if (x.event === "start") starts.set(k, x.at as number);
    if (x.event === "end" && x.ok === true) runs.push({ id: x.id as string, who: "child", start: starts.get(k) as number, end: x.at as number });
  }
  return runs;
}

interface Run {
  id: string;
  who: string;
  start: number;
  end: number;
}

describe("an abandoned run keeps its key until it settles", () => {
  it("exclusive key, timeout 300 ms, first run sleeps 2.5 s ignoring its signal: no two runs of the key overlap, in this process or another", { timeout: 120_000 }, async () => {
    const t = testClient(url());
    const { s, g, sid } = await setupGroup(t, "abandon.excl", {
      group: { concurrencyOverride: "exclusive", exceptionInitialBackoff: 50, message: { timeout: 300, retry: { maxRetries: 5, baseDelay: 20, maxDelay: 50 } } },
    });
    await s.produceBatch([1, 2, 3].map((i) => ({ payload: { i }, key: "K" })));
    const child = spawnPoller(url(), SECOND_POLLER, "second poller");
    await child.waitFor({ event: "ready" });

    const runs: Run[] = [];
    let first = true;
    let abandonedSettled = false;
    let abandonedStart = 0;
    const handler = async (m: Message) => {
      const start = Date.now();
      if (first) {
        first = false;
        abandonedStart = start;
        await sleep(2_500); // ignores m.signal
        runs.push({ id: m.id, who: "parent (abandoned)", start, end: Date.now() });
        abandonedSettled = true;
        return;
      }
      await sleep(20);
      runs.push({ id: m.id, who: "parent", start, end: Date.now() });
    };

    // Poll 1 claims 1–3: 1 runs and is abandoned at 300 ms; 2 and 3 must not start beside it.
    let r = await g.poll(handler, { batchLimit: 10, recordMargin: 100 });
    for (let i = 0; r.rangesClaimed === 0 && i < 200; i++) {
      await sleep(20);
      r = await g.poll(handler, { batchLimit: 10, recordMargin: 100 });
    }
    expect(r.started).toBe(1);
    expect(r.failed).toBe(1); // the timeout, recorded
    expect(r.deferred).toBe(2);
    expect(abandonedSettled).toBe(false);
    expect(t.events.some((e) => e.code === "SQL0047")).toBe(true);

    // The second process polls while the abandoned run is still going.
    child.send("go");
    // Past the lease the run was started under (timeout + recordMargin = 400 ms), the key's lease
    // is still live in the database, renewed for the unsettled run.
    while (Date.now() < abandonedStart + 900) await sleep(20);
    const live = await t.sql<{ n: number }>(`SELECT count(*)::int AS n FROM ${SCHEMA}.message_key_lease_${sid} WHERE message_key = 'K' AND expires_at > now()`);
    const stillRunning = !abandonedSettled;
    expect(stillRunning, "the abandoned run settled before the check: the machine stalled for over a second").toBe(true);
    expect(live[0].n).toBe(1);

    // This process keeps polling too; everything ends once every message has a successful run.
    const end = Date.now() + 60_000;
    const done = () => {
      const ok = new Set([...runs.filter((x) => x.who !== "parent (abandoned)").map((x) => x.id), ...childRuns(child).map((x) => x.id)]);
      return ok.has("1") && ok.has("2") && ok.has("3");
    };
    while (!done() && Date.now() < end) {
      await g.drain(handler, { batchLimit: 10, recordMargin: 100 });
      await sleep(20);
    }
    child.send("stop");
    await child.waitFor({ event: "done" });
    expect(done()).toBe(true);

    const all: Run[] = [
      ...runs,
      ...childRuns(child),
    ].sort((a, b) => a.start - b.start);
    console.log(`abandoned run: ${JSON.stringify(all.map((x) => ({ id: x.id, who: x.who, start: x.start - abandonedStart, end: x.end - abandonedStart })))}`);
    // No two runs of the key overlap (the abandoned one included).
    for (let i = 1; i < all.length; i++) {
      expect(all[i].start, `${all[i].who} run of ${all[i].id} started before ${all[i - 1].who} run of ${all[i - 1].id} ended`).toBeGreaterThanOrEqual(all[i - 1].end);
    }
    // The second process did try while the key was held, and started nothing then.
    const abandonedEnd = (all.find((x) => x.who === "parent (abandoned)") as Run).end;
    const childDrains = child.messages.filter((x) => x.event === "drain" && (x.doneAt as number) < abandonedEnd);
    expect(childDrains.length).toBeGreaterThan(0);
    expect(childDrains.every((x) => x.started === 0)).toBe(true);
    // Once settled, the lease was released (not left to expire).
    const leases = await t.sql(`SELECT 1 FROM ${SCHEMA}.message_key_lease_${sid} WHERE expires_at > now()`);
    expect(leases).toEqual([]);
    await checkInvariants(t, sid);
  });

  it("the lease is renewed for at most 10 × the timeout; then SQL0048 says the key is no longer protected", { timeout: 60_000 }, async () => {
    const t = testClient(url());
    const { s, g, sid } = await setupGroup(t, "abandon.bound", {
      group: { concurrencyOverride: "exclusive", message: { timeout: 200 } },
    });
    await s.produce({ i: 1 }, { key: "B" });
    let settled = false;
    let started = 0;
    const handler = async () => {
      started = performance.now();
      await sleep(4_000); // 20 × the timeout, ignoring the signal
      settled = true;
    };
    let r = await g.poll(handler, { recordMargin: 100 });
    for (let i = 0; r.rangesClaimed === 0 && i < 200; i++) {
      await sleep(20);
      r = await g.poll(handler, { recordMargin: 100 });
    }
    expect(r.failed).toBe(1);
    const deadline = Date.now() + 30_000;
    while (!t.events.some((e) => e.code === "SQL0048") && Date.now() < deadline) await sleep(20);
    const warned = t.events.find((e) => e.code === "SQL0048");
    expect(warned?.message).toMatch(/still unsettled at 10 × its timeout/);
    // It came after 10 × 200 ms from the start, while the run was still going.
    expect(settled).toBe(false);
    expect(performance.now() - started).toBeGreaterThanOrEqual(2_000);
    // The lease then lapses (≤ timeout + recordMargin later) although the run has not settled.
    while (!settled) {
      const live = await t.sql(`SELECT 1 FROM ${SCHEMA}.message_key_lease_${sid} WHERE message_key = 'B' AND expires_at > now()`);
      if (live.length === 0) break;
      await sleep(20);
    }
    expect(settled).toBe(false);
    while (!settled) await sleep(20);
  });
});
