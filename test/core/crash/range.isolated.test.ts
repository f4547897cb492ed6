// Crash recovery of the range path (docs/protocol/crash-recovery.md#a-crash, docs/protocol/poll-cycle.md#the-range-lease, docs/protocol/poll-cycle.md#recording-a-range, docs/protocol/crash-recovery.md#a-crash; C10, C26), proven with
// real child processes: a poller is SIGKILLed mid-range, or frozen past its lease and then let
// go, and the parent test (a second poller) reclaims the range and checks the tables.
import { setTimeout as sleep } from "node:timers/promises";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { beforeAll, describe, expect, it, vi } from "vitest";
import type { CycleReport, Message } from "@sqlstreams/core";
import { useFreshDatabase } from "../../support/db.js";
import { checkInvariants } from "../../support/invariants.js";
import { type NodeChild, type PollerConfig, spawnPoller } from "../../support/processes.js";
import { SCHEMA, type TestClient, count, cursor, didWork, deliveryLogRows, exceptionRows, groupIdOf, pollPastFence, setupProduced, streamIdOf, testClient } from "../../support/streams.js";
import { type ClaimLease, claimLeases } from "../../support/keyed.js";

const url = useFreshDatabase();

// ---------------------------------------------------------------------------------------------
// A poller in a child process. Per message id the handler can: "ok" (default), "fail" (throw),
// "crash" (SIGKILL itself), "hang" (block the event loop until killed), "wait" (await a "go"
// line on stdin), "spin" (block the event loop until cfg.file exists: a frozen process).
// Every start and every settled run is printed as a JSON line, then the poll's report.
// ---------------------------------------------------------------------------------------------


const poller = (cfg: PollerConfig): NodeChild => spawnPoller(url(), cfg);

const started = (c: NodeChild) => c.messages.filter((m) => m.event === "start").map((m) => m.id);
const ended = (c: NodeChild) => c.messages.filter((m) => m.event === "end").map((m) => m.id);
const childEvents = (c: NodeChild) => c.messages.filter((m) => m.event === "log").map((m) => m.code);
const childReport = async (c: NodeChild) => (await c.waitFor({ event: "report" })).report as CycleReport;

/** Resolves once the database clock has passed `at` + ms (the lease clock is the database's). */
async function untilDbTime(t: TestClient, at: Date, ms: number): Promise<void> {
  const [{ wait }] = await t.sql<{ wait: number }>(
    `SELECT (EXTRACT(EPOCH FROM ($1::timestamptz + $2 * interval '1 millisecond' - clock_timestamp())) * 1000)::float8 AS wait`,
    [at, ms],
  );
  if (wait > 0) await sleep(wait);
  await vi.waitUntil(async () => (await t.sql<{ ok: boolean }>(`SELECT clock_timestamp() >= $1::timestamptz + $2 * interval '1 millisecond' AS ok`, [at, ms]))[0].ok, { timeout: 5_000, interval: 10 });
}

let t: TestClient;
beforeAll(async () => {
  t = testClient(url());
  await t.client.migrate();
});

describe("range crash recovery with SIGKILLed pollers", () => {
  it("C10: the lease of a killed poller stays until it expires; the next poll reclaims the same range with a new token and reclaims 1 before fresh work", async () => {
    const { s, g, n, gid } = await setupProduced(t, "c10", { message: { timeout: 200 } }, 4);
    const child = poller({ stream: "c10", group: "g", method: "drain", opts: { batchLimit: 4 }, actions: { "3": "hang" } });
    await child.waitFor({ event: "start", id: "3" });
    expect(ended(child)).toEqual(["1", "2"]);
    expect((await child.kill()).signal).toBe("SIGKILL");

    // What the crash leaves: the whole range under the dead poller's lease, nothing recorded.
    const [l0] = await claimLeases(t, n, gid);
    expect(l0).toMatchObject({ low: "0", high: "4", reclaims: 0, released: false, expired: false });
    expect(l0.lease_ms).toBe(200 * 4 + 2_000); // Tmax × ceil(n / c) + recordMargin, c = 1
    expect(await cursor(t, n, gid)).toMatchObject({ claimed: "4", committed: "0" });
    expect(await count(t, `exception_queue_${n}`)).toBe(0);
    await checkInvariants(t, n);

    // A poll before expiry leaves it alone (and finds no fresh work: the range holds the head).
    const calls: Message<{ i: number }>[] = [];
    const before = await g.poll((m) => void calls.push(m), { batchLimit: 4 });
    expect(before).toMatchObject({ idle: true, rangesReclaimed: 0, rangesClaimed: 0, started: 0 });
    expect(await claimLeases(t, n, gid)).toEqual([l0]);

    // A message produced now lies above the range: the reclaim must come first.
    await s.produce({ i: 5 });
    await t.sql(`UPDATE ${SCHEMA}.claim_lease_${n} SET expires_at = now() - interval '1 millisecond'`);
    t.events.length = 0;
    let during: ClaimLease[] = [];
    let staleRecord: unknown = "not run";
    const r = await g.poll(async (m) => {
      calls.push(m);
      if (calls.length === 1) {
        during = await claimLeases(t, n, gid);
        // The killed poller's token writes nothing any more: neither a lease extension nor a record.
        const ext = await t.pool.query(`UPDATE ${SCHEMA}.claim_lease_${n} SET expires_at = now() + interval '1 hour' WHERE token = $1`, [l0.token]);
        expect(ext.rowCount).toBe(0);
        const exceptionQueue = JSON.stringify([{ message_id: 3, status: "dead", message_key: null, concurrency: "parallel", attempts: 0, delays: 0, run_after_ms: 0, last_error: "late" }]);
        const deliveryLog = JSON.stringify([{ message_id: 3, attempt: 0, status: "failure", error: "late" }]);
        staleRecord = (await t.sql<{ r: string | null }>(`SELECT ${SCHEMA}.record_range_${n}($1, $2, NULL, NULL, $3::jsonb, $4::jsonb, NULL)::text AS r`, [gid, l0.token, exceptionQueue, deliveryLog]))[0].r;
      }
    }, { batchLimit: 4 });
    expect(during).toHaveLength(1);
    expect(during[0]).toMatchObject({ low: "0", high: "4", reclaims: 1, released: false, expired: false });
    expect(during[0].token).not.toBe(l0.token);
    expect(staleRecord).toBeNull();
    expect(r).toMatchObject({ rangesReclaimed: 1, rangesClaimed: 0, succeeded: 4, leaseLost: 0, committedAfter: "4" });
    expect(calls.map((m) => [m.id, m.attempt])).toEqual([["1", 0], ["2", 0], ["3", 0], ["4", 0]]);
    expect(t.events.filter((e) => e.code === "SQL0035")).toHaveLength(1);
    // Ids 1 and 2 ran twice in total (once in the killed process), 3 and 4 once each here; no rows.
    expect(await count(t, `exception_queue_${n}`)).toBe(0);
    expect(await deliveryLogRows(t, n, gid)).toEqual([]);
    expect(await claimLeases(t, n, gid)).toEqual([]);
    await checkInvariants(t, n);

    // Fresh work resumes after the reclaimed range.
    const next = await g.drain((m) => void calls.push(m), { batchLimit: 4 });
    expect(next).toMatchObject({ rangesClaimed: 1, succeeded: 1, committedAfter: "5" });
    expect(calls.map((m) => m.id)).toEqual(["1", "2", "3", "4", "5"]);
  });

  it("a stalled poller whose lease expired and was reclaimed commits nothing late (record guarded by the token)", async () => {
    // Long timeout: the stalled handler is not timed out; the lease is expired by hand (docs/protocol/conformance.md).
    const { g, n, gid } = await setupProduced(t, "late.commit", { message: { timeout: 10_000 } }, 4);
    const child = poller({ stream: "late.commit", group: "g", method: "drain", opts: { batchLimit: 4 }, actions: { "2": "wait", "3": "fail" } });
    await child.waitFor({ event: "start", id: "2" });
    const [l0] = await claimLeases(t, n, gid);
    expect(l0.lease_ms).toBe(10_000 * 4 + 2_000);
    await t.sql(`UPDATE ${SCHEMA}.claim_lease_${n} SET expires_at = now() - interval '1 millisecond'`);

    const seen: string[] = [];
    const r = await g.poll((m) => void seen.push(m.id), { batchLimit: 4 });
    expect(r).toMatchObject({ rangesReclaimed: 1, succeeded: 4, committedAfter: "4" });
    expect(seen).toEqual(["1", "2", "3", "4"]);

    // Let the stalled poller go on: it runs 2, 3 (fails) and 4, then tries to record (0, 4].
    child.send("go");
    const rep = await childReport(child);
    expect(started(child)).toEqual(["1", "2", "3", "4"]);
    expect(rep).toMatchObject({ leaseLost: 1, succeeded: 0, failed: 0, rangesClaimed: 1 });
    expect(childEvents(child)).toContain("SQL0034");
    expect((await child.exited).code).toBe(0);
    // Its failure of 3 was discarded: no exception row, no delivery-log row; the range stays done.
    expect(await count(t, `exception_queue_${n}`)).toBe(0);
    expect(await deliveryLogRows(t, n, gid)).toEqual([]);
    expect(await claimLeases(t, n, gid)).toEqual([]);
    expect(await cursor(t, n, gid)).toMatchObject({ claimed: "4", committed: "4" });
    await checkInvariants(t, n);
  });

  it("a frozen poller that wakes after its lease expired on the real clock starts nothing more (extension guarded by the token)", async () => {
    const { g, n, gid } = await setupProduced(t, "frozen", { message: { timeout: 200 } }, 4);
    const file = join(mkdtempSync(join(tmpdir(), "sqlstreams-frozen-")), "wake");
    const child = poller({ stream: "frozen", group: "g", method: "drain", opts: { batchLimit: 4 }, actions: { "2": "spin" }, file });
    await child.waitFor({ event: "start", id: "2" });
    const [l0] = await t.sql<{ created_at: Date; lease_ms: number }>(
      `SELECT created_at, (EXTRACT(EPOCH FROM (expires_at - created_at)) * 1000)::float8 AS lease_ms FROM ${SCHEMA}.claim_lease_${n}`,
    );
    expect(l0.lease_ms).toBe(2_800);
    await untilDbTime(t, l0.created_at, 2_800);

    const seen: string[] = [];
    const r = await g.poll((m) => void seen.push(m.id), { batchLimit: 4 });
    expect(r).toMatchObject({ rangesReclaimed: 1, succeeded: 4, committedAfter: "4" });
    expect(seen).toEqual(["1", "2", "3", "4"]);

    writeFileSync(file, "wake");
    const rep = await childReport(child);
    // Message 3 needed the lease extended; the token no longer matched, so nothing more started.
    expect(started(child)).toEqual(["1", "2"]);
    expect(rep).toMatchObject({ leaseLost: 1, started: 2, succeeded: 0 });
    expect(childEvents(child)).toContain("SQL0034");
    expect(await count(t, `exception_queue_${n}`)).toBe(0);
    expect(await claimLeases(t, n, gid)).toEqual([]);
    expect(await cursor(t, n, gid)).toMatchObject({ claimed: "4", committed: "4" });
    await checkInvariants(t, n);
  });

  it("C26: with timeout 200 and concurrency 4 the lease is 2 200 ms: not reclaimable 1 500 ms after the claim, reclaimed by 2 500 ms (real clock)", async () => {
    const { g, n, gid } = await setupProduced(t, "c26", { message: { timeout: 200 } }, 4);
    const child = poller({ stream: "c26", group: "g", method: "drain", opts: { batchLimit: 4, concurrency: 4 }, actions: { "3": "hang" } });
    await child.waitFor({ event: "start", id: "3" });
    expect((await child.kill()).signal).toBe("SIGKILL");
    const [l0] = await t.sql<{ created_at: Date; lease_ms: number }>(
      `SELECT created_at, (EXTRACT(EPOCH FROM (expires_at - created_at)) * 1000)::float8 AS lease_ms FROM ${SCHEMA}.claim_lease_${n}`,
    );
    expect(Math.abs(l0.lease_ms - 2_200)).toBeLessThanOrEqual(250);

    const seen: string[] = [];
    await untilDbTime(t, l0.created_at, 1_500);
    const early = await g.poll((m) => void seen.push(m.id), { batchLimit: 4, concurrency: 4 });
    expect(early).toMatchObject({ idle: true, rangesReclaimed: 0 });
    expect(seen).toEqual([]);

    await untilDbTime(t, l0.created_at, 2_500);
    const late = await g.poll((m) => void seen.push(m.id), { batchLimit: 4, concurrency: 4 });
    expect(late).toMatchObject({ rangesReclaimed: 1, succeeded: 4, committedAfter: "4" });
    expect([...seen].sort()).toEqual(["1", "2", "3", "4"]);
    expect(await claimLeases(t, n, gid)).toEqual([]);
    await checkInvariants(t, n);
  });

  it("a crash inside an exclusive chain: when the range lease expires (real clock) its key leases have too, so the reclaim runs the chain without deferring", async () => {
    const s = t.client.stream<{ i: number }>("chain.crash");
    await s.register();
    const g = s.consumer("g");
    await g.register({ message: { timeout: 200, concurrency: "exclusive" } });
    for (let i = 1; i <= 4; i++) await s.produce({ i }, { key: "k" });
    const n = await streamIdOf(t, "chain.crash");
    const gid = await groupIdOf(t, "g", "chain.crash");
    const child = poller({ stream: "chain.crash", group: "g", method: "drain", opts: { batchLimit: 4 }, actions: { "2": "hang" } });
    await child.waitFor({ event: "start", id: "2" });
    expect((await child.kill()).signal).toBe("SIGKILL");
    const [l0] = await t.sql<{ created_at: Date; expires_at: Date }>(`SELECT created_at, expires_at FROM ${SCHEMA}.claim_lease_${n}`);
    // Compared in SQL: a lease capped at the range lease's expiry equals it to the microsecond,
    // which a JavaScript Date (milliseconds) would round below it.
    const keys = await t.sql<{ ok: boolean }>(
      `SELECT k.expires_at <= (SELECT max(l.expires_at) FROM ${SCHEMA}.claim_lease_${n} l) AS ok FROM ${SCHEMA}.message_key_lease_${n} k`,
    );
    expect(keys).toEqual([{ ok: true }]); // the key lease never outlives the range lease

    await untilDbTime(t, l0.expires_at, 1);
    const seen: string[] = [];
    const r = await g.poll((m) => void seen.push(m.id), { batchLimit: 4 });
    expect(r).toMatchObject({ rangesReclaimed: 1, succeeded: 4, deferred: 0, committedAfter: "4" });
    expect(seen).toEqual(["1", "2", "3", "4"]);
    expect(await exceptionRows(t, n, gid)).toEqual([]);
    expect(await t.sql(`SELECT 1 FROM ${SCHEMA}.message_key_lease_${n}`)).toEqual([]);
    await checkInvariants(t, n);
  });

  it("a crash while the next range was claimed ahead: both leases stay until they expire, then the range that never started is resumed, not reclaimed", async () => {
    // docs/protocol/poll-cycle.md#claiming-ahead: ranges of 50, 50 handlers at once, quick handlers, so from
    // the second range on the next one is claimed while one runs. Message 80 hangs the child in
    // (50, 100] while (100, 150] is claimed ahead (early in the drain, well inside the chain's first
    // second even on a loaded machine); the child is SIGKILLed.
    const { s, g, n, gid } = await setupProduced(t, "ahead.crash", { message: { timeout: 2_000 } }, 0);
    await s.produceBatch(Array.from({ length: 300 }, (_, i) => ({ payload: { i: i + 1 } })));
    const child = poller({ stream: "ahead.crash", group: "g", method: "drain", opts: { batchLimit: 50, concurrency: 50 }, actions: { "80": "hang" } });
    await child.waitFor({ event: "start", id: "80" });
    await vi.waitUntil(async () => (await claimLeases(t, n, gid)).length === 2, { timeout: 10_000, interval: 20 });
    expect((await child.kill()).signal).toBe("SIGKILL");
    const leases = await claimLeases(t, n, gid);
    // The range claimed ahead is written `released`: nothing of it was handed out.
    expect(leases.map((l) => [l.low, l.high, l.reclaims, l.released])).toEqual([["50", "100", 0, false], ["100", "150", 0, true]]);
    expect(await cursor(t, n, gid)).toMatchObject({ claimed: "150", committed: "50" });
    const inChild = started(child).map(Number);
    expect(inChild.filter((id) => id > 100)).toEqual([]); // the range claimed ahead never started

    // Nothing is reclaimable before the later lease expires on the database clock; then both are.
    await untilDbTime(t, leases[1].expires_at, 1);
    const seen: number[] = [];
    t.events.length = 0;
    const r = await g.drain((m) => void seen.push(Number(m.id)), { batchLimit: 50 });
    // The running range is charged a reclaim (SQL0035); the one that never started is resumed.
    expect(r).toMatchObject({ rangesReclaimed: 1, rangesResumed: 1, rangesQuarantined: 0 });
    expect(t.events.filter((e) => e.code === "SQL0035").map((e) => [e.low, e.high, e.reclaims])).toEqual([["50", "100", 1]]);
    expect([...new Set(seen)].sort((a, b) => a - b)).toEqual(Array.from({ length: 250 }, (_, i) => 51 + i));
    expect(new Set(ended(child).map(Number).filter((id) => id <= 50)).size).toBe(50);
    expect(await cursor(t, n, gid)).toMatchObject({ claimed: "300", committed: "300" });
    expect(await claimLeases(t, n, gid)).toEqual([]);
    expect(await count(t, `exception_queue_${n}`)).toBe(0);
    await checkInvariants(t, n);
  });

  it("maxRangeReclaims 1: a crash in a started range claimed ahead quarantines it; the range claimed ahead behind it, never started, is delivered", async () => {
    // As above, one range later: message 130 hangs the child in (100, 150], itself claimed ahead
    // and started (the statement sent as it started recorded (50, 100], claimed (150, 200] ahead
    // and marked (100, 150] started). With maxRangeReclaims 1 the first crash reclaim quarantines
    // a range: (100, 150] is, (150, 200] never started and is not.
    const { s, g, n, gid } = await setupProduced(t, "ahead.quarantine", { message: { timeout: 2_000 }, maxRangeReclaims: 1 }, 0);
    await s.produceBatch(Array.from({ length: 300 }, (_, i) => ({ payload: { i: i + 1 } })));
    const child = poller({ stream: "ahead.quarantine", group: "g", method: "drain", opts: { batchLimit: 50, concurrency: 50 }, actions: { "130": "hang" } });
    await child.waitFor({ event: "start", id: "130" });
    // Killed once that statement has committed (its handlers start without waiting for it).
    await vi.waitUntil(async () => (await claimLeases(t, n, gid)).map((l) => l.low).join() === "100,150", { timeout: 10_000, interval: 20 });
    expect((await child.kill()).signal).toBe("SIGKILL");
    const leases = await claimLeases(t, n, gid);
    expect(leases.map((l) => [l.low, l.high, l.reclaims, l.released])).toEqual([["100", "150", 0, false], ["150", "200", 0, true]]);
    expect(await cursor(t, n, gid)).toMatchObject({ claimed: "200", committed: "100" });
    expect(started(child).map(Number).filter((id) => id > 150)).toEqual([]);

    await untilDbTime(t, leases[1].expires_at, 1);
    const seen: number[] = [];
    t.events.length = 0;
    const r = await g.drain((m) => void seen.push(Number(m.id)), { batchLimit: 50 });
    // The quarantine is that range's reclaim (SQL0035, reclaims 1, then SQL0036); the other one is resumed.
    expect(r).toMatchObject({ rangesQuarantined: 1, rangesResumed: 1, rangesReclaimed: 1 });
    expect(t.events.filter((e) => e.code === "SQL0035").map((e) => [e.low, e.high, e.reclaims])).toEqual([["100", "150", 1]]);
    expect(t.events.filter((e) => e.code === "SQL0036")).toHaveLength(1);
    const quarantined = (await deliveryLogRows(t, n, gid)).filter((d) => d.error.startsWith("quarantined")).map((d) => Number(d.message_id));
    expect(quarantined).toEqual(Array.from({ length: 50 }, (_, i) => 101 + i));
    // The range after it ran as claimed, with the rest; the quarantined ones run as exception rows.
    expect([...new Set(seen.filter((id) => id > 150))].sort((a, b) => a - b)).toEqual(Array.from({ length: 150 }, (_, i) => 151 + i));
    expect((await exceptionRows(t, n, gid)).filter((e) => Number(e.message_id) > 150)).toEqual([]);
    expect(await claimLeases(t, n, gid)).toEqual([]);
    await checkInvariants(t, n);
  });

  it("a crash while a keyed range's successor was claimed ahead: the successor holds no key lease and is resumed, not reclaimed; both run in key order", async () => {
    // docs/protocol/poll-cycle.md#keyed-ranges-claimed-ahead: ordered messages over 5 keys, ranges of 50.
    // From the second range on, the next range is claimed while one runs; a range's record goes
    // with the next range's key take. Message 130 hangs the child in (100, 150] (whose keys came
    // with the record of (50, 100]) while (150, 200] is claimed ahead; SIGKILL.
    const { s, g, n, gid } = await setupProduced(t, "ahead.keyed.crash", { concurrencyOverride: "ordered", message: { timeout: 2_000 } }, 0);
    await s.produceBatch(Array.from({ length: 300 }, (_, i) => ({ payload: { i: i + 1 }, key: `k${(i + 1) % 5}` })));
    const child = poller({ stream: "ahead.keyed.crash", group: "g", method: "drain", opts: { batchLimit: 50, concurrency: 50 }, actions: { "130": "hang" } });
    await child.waitFor({ event: "start", id: "130" });
    await vi.waitUntil(async () => (await claimLeases(t, n, gid)).length === 2, { timeout: 10_000, interval: 20 });
    expect((await child.kill()).signal).toBe("SIGKILL");
    const leases = await claimLeases(t, n, gid);
    // (100, 150] was claimed ahead too, and marked started by the statement that took its keys.
    expect(leases.map((l) => [l.low, l.high, l.reclaims, l.released])).toEqual([["100", "150", 0, false], ["150", "200", 0, true]]);
    // (50, 100] was recorded with (100, 150]'s keys; that record does not advance the cursor (the
    // chain's last record would have).
    expect(await cursor(t, n, gid)).toMatchObject({ claimed: "200", committed: "50" });
    // The five key leases are the running range's, under one token; the range claimed ahead took none.
    const keyLease = await t.sql<{ message_key: string; token: string }>(`SELECT message_key, token::text FROM ${SCHEMA}.message_key_lease_${n} ORDER BY message_key`);
    expect(keyLease.map((r) => r.message_key)).toEqual(["k0", "k1", "k2", "k3", "k4"]);
    expect(new Set(keyLease.map((r) => r.token)).size).toBe(1);
    expect(started(child).map(Number).filter((id) => id > 150)).toEqual([]);
    expect(new Set(ended(child).map(Number).filter((id) => id <= 100)).size).toBe(100);

    await untilDbTime(t, leases[1].expires_at, 1);
    const seen: number[] = [];
    const r = await g.drain((m) => void seen.push(Number(m.id)), { batchLimit: 50 });
    // The successor's lease was written `released`: it never started, so it is resumed, not reclaimed.
    expect(r).toMatchObject({ rangesReclaimed: 1, rangesResumed: 1 });
    expect([...new Set(seen)].sort((a, b) => a - b)).toEqual(Array.from({ length: 200 }, (_, i) => 101 + i));
    for (let k = 0; k < 5; k++) {
      const mine = seen.filter((id) => id % 5 === k);
      expect(mine).toEqual([...mine].sort((a, b) => a - b)); // each key in order after the crash
    }
    expect(await cursor(t, n, gid)).toMatchObject({ claimed: "300", committed: "300" });
    expect(await claimLeases(t, n, gid)).toEqual([]);
    expect(await count(t, `exception_queue_${n}`)).toBe(0);
    expect(await count(t, `message_key_lease_${n}`)).toBe(0);
    await checkInvariants(t, n);
  });

  it("a crash after a partial commit: only the released remainder is redelivered, the takeover is no reclaim, and exceptionRows of the prefix survive", async () => {
    // Poller 1 stops at its deadline after message 1 (which fails) and releases (1, 4]; poller 2
    // takes the released range and is SIGKILLed on 3; the next poll reclaims (1, 4] (reclaims 1).
    const { g, n, gid } = await setupProduced(t, "partial.crash", { message: { timeout: 1_000 } }, 4);
    const first = await pollPastFence(g, async (m) => {
      await sleep(400);
      throw new Error("first " + m.id);
    }, { until: didWork, opts: () => ({ batchLimit: 4, deadline: Date.now() + 3_300 }) });
    expect(first).toMatchObject({ rangesPartial: 1, failed: 1, notStarted: 3 });
    expect(await claimLeases(t, n, gid)).toMatchObject([{ low: "1", high: "4", released: true, reclaims: 0, expired: true }]);

    const child = poller({ stream: "partial.crash", group: "g", opts: { batchLimit: 4 }, actions: { "3": "hang" } });
    await child.waitFor({ event: "start", id: "3" });
    expect((await child.kill()).signal).toBe("SIGKILL");
    expect(started(child)).toEqual(["2", "3"]);
    const [l1] = await claimLeases(t, n, gid);
    expect(l1).toMatchObject({ low: "1", high: "4", released: false, reclaims: 0 });

    await t.sql(`UPDATE ${SCHEMA}.claim_lease_${n} SET expires_at = now() - interval '1 millisecond'`);
    const seen: string[] = [];
    t.events.length = 0;
    const r = await g.poll((m) => void seen.push(m.id), { batchLimit: 4 });
    expect(r).toMatchObject({ rangesReclaimed: 1, rangesResumed: 0, succeeded: 3 });
    expect(seen).toEqual(["2", "3", "4"]);
    expect(t.events.filter((e) => e.code === "SQL0035")).toHaveLength(1);
    // Message 1's recorded failure is untouched by the crash and the replay.
    expect((await exceptionRows(t, n, gid)).map((e) => [e.message_id, e.status, e.attempts])).toEqual([["1", "ready", 1]]);
    expect(await claimLeases(t, n, gid)).toEqual([]);
    await checkInvariants(t, n);
  });
});
