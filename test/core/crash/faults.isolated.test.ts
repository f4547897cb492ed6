// Database faults under running pollers (docs/protocol/crash-recovery.md#database-errors-inside-a-poll, docs/protocol/crash-recovery.md, G2): connections terminated with
// pg_terminate_backend (what a server restart or failover does to every session), connections
// refused for a while, and idle or checked-out pooled connections dying. A poll either retries
// within its deadline or fails with SQL0033; no recorded outcome is lost or written twice; the
// next invocation continues; the process never crashes. Works against the embedded server and
// against DATABASE_URL alike: every fault is made from a separate connection to the server's
// maintenance database and touches only this file's database.
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { type CycleReport, ERROR_CODES, type Message, Permanent, SqlStreamsError } from "@sqlstreams/core";
import { baseDatabaseUrl, useFreshDatabase } from "../../support/db.js";
import { spawnPoller } from "../../support/processes.js";
import { SCHEMA, type TestClient, cursor, deliveryLogRows, exceptionRows, groupIdOf, makeDue, streamIdOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();

let t: TestClient;
let admin: pg.Client; // on the maintenance database: survives every fault it makes
let dbName: string;

beforeAll(async () => {
  t = testClient(url());
  await t.client.migrate();
  dbName = new URL(url()).pathname.slice(1);
  admin = new pg.Client({ connectionString: baseDatabaseUrl(), application_name: "sqlstreams-fault-maker" });
  admin.on("error", () => {});
  await admin.connect();
});
afterAll(async () => {
  await admin?.query(`ALTER DATABASE ${pg.escapeIdentifier(dbName)} ALLOW_CONNECTIONS true`).catch(() => {});
  await admin?.end().catch(() => {});
});

/** Terminates every session of this file's database except the listed backends; returns how many. */
async function terminateAll(except: number[] = []): Promise<number> {
  const r = await admin.query<{ n: number }>(
    `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
      WHERE datname = $1 AND pid <> pg_backend_pid() AND NOT (pid = ANY($2::int[]))`,
    [dbName, except],
  );
  return r.rows[0].n;
}

async function allowConnections(allow: boolean): Promise<void> {
  await admin.query(`ALTER DATABASE ${pg.escapeIdentifier(dbName)} ALLOW_CONNECTIONS ${allow ? "true" : "false"}`);
}

// ---------------------------------------------------------------------------------------------
// A child process that must survive the death of its pooled connections.
// ---------------------------------------------------------------------------------------------

describe("pooled connections that die", () => {
  it("an idle pooled connection terminated between polls is dropped, logged, and the next poll reconnects (no crash)", async () => {
    const s = t.client.stream<{ i: number }>("idle.error");
    await s.register();
    await s.consumer("g").register();
    await s.produceBatch([{ payload: { i: 1 } }, { payload: { i: 2 } }]);
    const child = spawnPoller(url(), { stream: "idle.error", method: "commands", opts: { batchLimit: 4 }, maxConnections: 4 }, "idle poller");
    await child.waitFor({ event: "ready" });
    child.send("drain");
    const first = await child.waitFor({ event: "report" });
    expect(first.seen).toEqual(["1", "2"]);
    const mark = child.messages.length;

    // Its pool now holds idle connections; kill them all on the server side.
    expect(await terminateAll()).toBeGreaterThan(0);
    await child.waitFor((m) => m.event === "log" && m.code === "SQL0033", { from: mark, timeoutMs: 10_000 });
    await s.produce({ i: 3 });
    child.send("drain");
    const second = await child.waitFor({ event: "report" }, { from: mark });
    expect(second.seen).toEqual(["1", "2", "3"]);
    child.send("exit");
    expect(await child.waitForExit(10_000)).toEqual({ code: 0, signal: null });
  });

  it("a connection checked out for a poll's transaction and terminated mid-statement does not crash the process; the poll retries", async () => {
    const s = t.client.stream<{ i: number }>("txn.error");
    await s.register();
    await s.consumer("g").register({ message: { timeout: 200 } });
    await s.produceBatch([{ payload: { i: 1 } }, { payload: { i: 2 } }]);
    const n = await streamIdOf(t, "txn.error");
    const gid = await groupIdOf(t, "g", "txn.error");
    // An expired range, so that the child's poll opens its reclaim transaction.
    await t.sql(`UPDATE ${SCHEMA}.consumer_group_cursor_${n} SET claimed = 2, settled_head = 2, pending_head = 2 WHERE consumer_group_id = $1`, [gid]);
    await t.sql(`INSERT INTO ${SCHEMA}.claim_lease_${n} (consumer_group_id, token, low, high, expires_at) VALUES ($1, gen_random_uuid(), 0, 2, now() - interval '1 second')`, [gid]);

    const child = spawnPoller(url(), { stream: "txn.error", method: "commands", opts: { batchLimit: 4 }, maxConnections: 4 }, "txn poller");
    await child.waitFor({ event: "ready" });
    // Hold a lock that makes the reclaim's SELECT … FOR UPDATE wait inside its transaction.
    const locker = new pg.Client({ connectionString: url() });
    locker.on("error", () => {});
    await locker.connect();
    const lockerPid = (await locker.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0].pid;
    await locker.query("BEGIN");
    await locker.query(`LOCK TABLE ${SCHEMA}.claim_lease_${n} IN EXCLUSIVE MODE`);
    child.send("poll");
    await vi.waitUntil(
      async () => (await admin.query(`SELECT 1 FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock' AND query LIKE '%FOR UPDATE SKIP LOCKED%'`, [dbName])).rowCount! > 0,
      { timeout: 10_000, interval: 20 },
    );
    expect(await terminateAll([lockerPid])).toBeGreaterThan(0);
    await sleep(150); // the retry is waiting on the lock again, on a new connection
    await locker.query("COMMIT");
    await locker.end();

    const rep = await child.waitFor((m) => m.event === "report" || m.event === "failed" || m.event === "uncaught");
    expect(rep.event).toBe("report");
    expect(rep.report).toMatchObject({ rangesReclaimed: 1, succeeded: 2 });
    child.send("exit");
    expect(await child.waitForExit(10_000)).toEqual({ code: 0, signal: null });
    expect(await t.sql(`SELECT 1 FROM ${SCHEMA}.claim_lease_${n}`)).toEqual([]);
    expect(await cursor(t, n, gid)).toMatchObject({ committed: "2" });
  });
});

// ---------------------------------------------------------------------------------------------
// docs/protocol/crash-recovery.md#database-errors-inside-a-poll: after a database error a poll stops starting handlers, waits for the running ones,
// records what it can, and only then throws SQL0033.
// ---------------------------------------------------------------------------------------------
/** Refuses new connections and kills the open ones; lets them in again after `ms`. */
async function outage(ms: number): Promise<{ over: Promise<void> }> {
  await allowConnections(false);
  await terminateAll();
  return { over: sleep(ms).then(() => allowConnections(true)) };
}

describe("a poll that fails", () => {
  it("range path: no handler starts after the failure; the running one is recorded with the prefix, the rest released", async () => {
    const s = t.client.stream<{ i: number }>("fail.range");
    await s.register();
    const g = s.consumer("g");
    await g.register({ message: { timeout: 3_000, concurrency: "exclusive" } });
    for (const [i, key] of [[1, "a"], [2, "b"], [3, "b"], [4, "a"]] as const) await s.produce({ i }, { key });
    const n = await streamIdOf(t, "fail.range");
    const gid = await groupIdOf(t, "g", "fail.range");
    // Chains: a = [1, 4], b = [2, 3]. 1 runs for 1.8 s; 2 cuts the database off for 1.2 s and
    // runs 300 ms more, so 3's key lease (taken with 2's when the range started) no longer covers
    // 3's run and must be renewed while the database is away (longer than the statement
    // retries): the poll fails while 1 is still running.
    const starts: { id: string; at: number }[] = [];
    let back: Promise<void> | undefined;
    let threwAt = 0;
    // (An idle poll, held back by the snapshot fence while another test's transaction is open,
    // ran nothing and is repeated.)
    const poll = () => g.poll(async (m) => {
      starts.push({ id: m.id, at: Date.now() });
      if (m.id === "1") await sleep(1_800);
      if (m.id === "2") {
        back = (await outage(1_200)).over;
        await sleep(300);
      }
    }, { batchLimit: 4, concurrency: 2 });
    let err: unknown = null;
    for (let i = 0; i < 200 && err === null && starts.length === 0; i++) {
      err = await poll().then((r) => (r.idle ? sleep(50).then(() => null) : new Error("the poll did not fail")), (e: unknown) => {
        threwAt = Date.now();
        return e;
      });
    }
    await back;
    await sleep(600); // anything still running from the failed poll would start by now
    expect(err).toBeInstanceOf(SqlStreamsError);
    expect((err as SqlStreamsError).code).toBe("SQL0033");
    expect(starts.map((x) => x.id).sort()).toEqual(["1", "2"]);
    expect(starts.filter((x) => x.at > threwAt)).toEqual([]);
    // 1 and 2 finished: recorded as the prefix; (2, 4] released for the next poll at once.
    const ls = await t.sql(`SELECT low::text, high::text, released, expires_at <= now() AS lapsed FROM ${SCHEMA}.claim_lease_${n}`);
    expect(ls).toEqual([{ low: "2", high: "4", released: true, lapsed: true }]);
    expect(await t.sql(`SELECT 1 FROM ${SCHEMA}.message_key_lease_${n} WHERE expires_at > now()`)).toEqual([]);
    const again: string[] = [];
    const r = await g.poll((m) => void again.push(m.id), { batchLimit: 4, concurrency: 2 });
    expect(r).toMatchObject({ rangesResumed: 1, succeeded: 2 });
    expect(again.sort()).toEqual(["3", "4"]);
    expect(await cursor(t, n, gid)).toMatchObject({ committed: "4" });
  });

  it("exception path: no row starts after the failure; the running row is recorded and the unstarted reservations released", async () => {
    const s = t.client.stream<{ i: number }>("fail.rows");
    await s.register();
    const g = s.consumer("g");
    await g.register({ message: { timeout: 3_000 } });
    await s.produceBatch([1, 2, 3, 4].map((i) => ({ payload: { i } })));
    await g.drain(() => {
      throw new Error("first failure");
    }, { batchLimit: 4 });
    const n = await streamIdOf(t, "fail.rows");
    await makeDue(t, n);
    const gid = await groupIdOf(t, "g", "fail.rows");
    // Rows 1–4 ready. 1 runs for 1.3 s; 2 cuts the database off for 1 s, so its record fails.
    const starts: { id: string; at: number }[] = [];
    let back: Promise<void> | undefined;
    let threwAt = 0;
    const err = await g.poll(async (m) => {
      starts.push({ id: m.id, at: Date.now() });
      if (m.id === "1") await sleep(1_300);
      if (m.id === "2") back = (await outage(1_000)).over;
    }, { batchLimit: 4, concurrency: 2 }).then(() => null, (e: unknown) => {
      threwAt = Date.now();
      return e;
    });
    await back;
    await sleep(600);
    expect((err as SqlStreamsError).code).toBe("SQL0033");
    expect(starts.map((x) => x.id).sort()).toEqual(["1", "2"]);
    expect(starts.filter((x) => x.at > threwAt)).toEqual([]);
    const rows = await exceptionRows(t, n, gid);
    // 1 succeeded and was recorded; 2 ran but its record failed (its run lease will expire and
    // charge it); 3 and 4 never started: uncharged and released.
    expect(rows.map((e) => [e.message_id, e.status, e.attempts, e.lease_token !== null])).toEqual([
      ["2", "inflight", 1, true], ["3", "ready", 1, false], ["4", "ready", 1, false],
    ]);
  });
});

// ---------------------------------------------------------------------------------------------
// The ledger test: two overlapping invocation loops drain a stream while every connection of
// the database is terminated again and again, and later refused for a while.
// ---------------------------------------------------------------------------------------------
interface Call {
  id: number;
  attempt: number;
  at: number;
  ok: boolean;
}

describe("terminated and refused connections under running drains", () => {
  it("every produced message ends delivered or dead, no recorded outcome is lost or doubled, duplicates only around the faults", async () => {
    const N1 = 2_000;
    const N2 = 60;
    const s = t.client.stream<{ i: number }>("faults");
    await s.register();
    const g = s.consumer("g");
    await g.register({
      message: { timeout: 200, retry: { maxRetries: 10, baseDelay: 1, maxDelay: 20 } },
      exceptionInitialBackoff: 0,
    });
    for (let i = 0; i < N1; i += 500) await s.produceBatch(Array.from({ length: 500 }, (_, k) => ({ payload: { i: i + k + 1 } })));
    const n = await streamIdOf(t, "faults");
    const gid = await groupIdOf(t, "g", "faults");

    const calls: Call[] = [];
    const handler = async (m: Message<{ i: number }>) => {
      const id = Number(m.id);
      await sleep(2);
      if (id % 10 === 7) {
        calls.push({ id, attempt: m.attempt, at: Date.now(), ok: false });
        return Permanent(new Error(`bad message ${id}`));
      }
      if (id % 10 === 3 && m.attempt === 0) {
        calls.push({ id, attempt: m.attempt, at: Date.now(), ok: false });
        throw new Error(`transient ${id}`);
      }
      calls.push({ id, attempt: m.attempt, at: Date.now(), ok: true });
    };
    const opts = () => ({ batchLimit: 10, concurrency: 4, recordMargin: 500, deadline: Date.now() + 2_500 });

    const reports: CycleReport[] = [];
    const failures: unknown[] = [];
    let stop = false;
    const invocations = async () => {
      while (!stop) {
        try {
          const r = await g.drain(handler, opts());
          reports.push(r);
          if (r.idle) await sleep(30);
        } catch (e) {
          failures.push(e);
          await sleep(30);
        }
      }
    };
    const loops = [invocations(), invocations()];

    // Faults: terminate every session every ~60 ms for 1.5 s, refuse connections for 1 s
    // (terminating what is left), then terminate every ~60 ms for another second.
    const faultStart = Date.now();
    let terminated = 0;
    const terminateFor = async (ms: number) => {
      const until = Date.now() + ms;
      while (Date.now() < until) {
        await sleep(60);
        terminated += await terminateAll();
      }
    };
    await terminateFor(1_500);
    await allowConnections(false);
    terminated += await terminateAll();
    await sleep(1_000);
    await allowConnections(true);
    await terminateFor(1_000);
    const faultEnd = Date.now();

    // Recovery: leases of polls that died expire (≤ 1.1 s here), the loops finish the stream.
    await vi.waitUntil(async () => {
      const p = await g.progress();
      return p.committed === String(N1) && p.openLeases === 0 && p.exceptions.ready + p.exceptions.inflight + p.exceptions.deferred === 0;
    }, { timeout: 30_000, interval: 100 });

    // Wave 2, produced after the faults: every message exactly once.
    const wave2From = calls.length;
    await s.produceBatch(Array.from({ length: N2 }, (_, k) => ({ payload: { i: N1 + k + 1 } })));
    await vi.waitUntil(async () => {
      const p = await g.progress();
      return p.committed === String(N1 + N2) && p.openLeases === 0 && p.exceptions.ready + p.exceptions.inflight === 0;
    }, { timeout: 20_000, interval: 100 });
    stop = true;
    await Promise.all(loops);

    // The faults really happened and were reported as SQL0033 when a poll could not retry: each
    // names the drain and its group, says which connection failure it was
    // (docs/guide/operations.md#connection-errors), carries the fix and the pg error as cause.
    // Whether a termination outlasted a poll's retries depends on timing; the refusal does not.
    expect(terminated).toBeGreaterThan(10);
    const cases = { lost: /: the connection to the database failed: /, refused: /: the database refuses new connections now \(/ };
    for (const e of failures) {
      expect(e).toBeInstanceOf(SqlStreamsError);
      const err = e as SqlStreamsError;
      expect(err.code, err.message).toBe("SQL0033");
      expect(err.message).toMatch(/^SQL0033 drain\(\) of faults\/g: /);
      expect(err.message, "a connection failure").toMatch(new RegExp(`${cases.lost.source}|${cases.refused.source}`));
      expect(err.message).toContain(`(fix: ${ERROR_CODES.SQL0033.fix})`);
      expect(err.details).toMatchObject({ stream: "faults", group: "g" });
      expect(err.cause).toBeInstanceOf(Error);
      expect(err.cause).not.toBeInstanceOf(SqlStreamsError);
    }
    expect(failures.some((e) => cases.refused.test((e as Error).message)), "a drain refused a connection").toBe(true);

    // Ledger: every message ended delivered (a successful run, no row) or dead (Permanent).
    const exceptionQueue = await exceptionRows(t, n, gid);
    const dead = new Map(exceptionQueue.map((e) => [Number(e.message_id), e]));
    for (const e of exceptionQueue) expect(e.status, `row ${e.message_id}`).toBe("dead");
    const okIds = new Set(calls.filter((c) => c.ok).map((c) => c.id));
    for (let id = 1; id <= N1 + N2; id++) {
      if (id % 10 === 7) {
        expect(dead.get(id)?.last_error, `id ${id}`).toMatch(/^SQL0026 permanent: Error: bad message/);
      } else {
        expect(dead.has(id), `id ${id} must not be dead`).toBe(false);
        expect(okIds.has(id), `id ${id} never succeeded`).toBe(true);
      }
    }

    // Recorded outcomes are written once: one Permanent failure per dead id, one first-delivery
    // failure per transient id, and no audit row twice.
    const deliveryLog = await deliveryLogRows(t, n, gid);
    const keys = deliveryLog.map((d) => `${d.message_id}/${d.attempt}/${d.status}/${d.error.split("\n")[0]}`);
    expect(keys.length - new Set(keys).size, "duplicated delivery-log rows").toBe(0);
    for (let id = 1; id <= N1 + N2; id++) {
      const mine = deliveryLog.filter((d) => Number(d.message_id) === id);
      if (id % 10 === 7) expect(mine.filter((d) => d.error.startsWith("SQL0026")), `id ${id}`).toHaveLength(1);
      if (id % 10 === 3) expect(mine.filter((d) => d.error.startsWith(`Error: transient ${id}`)), `id ${id}`).toHaveLength(1);
    }
    expect(deliveryLog.filter((d) => d.status === "success")).toEqual([]);

    // Duplicates: none among messages produced after the faults; before, bounded by the work
    // that failed polls and reclaims can repeat.
    const w2 = calls.slice(wave2From).filter((c) => c.id > N1);
    const w2Runs = new Map<number, number>();
    for (const c of w2) if (c.ok || c.id % 10 === 7) w2Runs.set(c.id, (w2Runs.get(c.id) ?? 0) + 1);
    for (let id = N1 + 1; id <= N1 + N2; id++) expect(w2Runs.get(id) ?? 0, `wave 2 id ${id}`).toBe(1);
    const successes = new Map<number, number>();
    for (const c of calls) if (c.ok) successes.set(c.id, (successes.get(c.id) ?? 0) + 1);
    const dupes = [...successes.values()].reduce((a, v) => a + v - 1, 0);
    const sum = (k: keyof CycleReport) => reports.reduce((a, r) => a + (r[k] as number), 0);
    const repeatable = failures.length + sum("rangesReclaimed") + sum("leaseLost") + sum("rangesQuarantined");
    expect(dupes).toBeLessThanOrEqual(repeatable * 10);
    // The first run of a duplicated message happened before the faults ended (the run they undid).
    const firstRun = new Map<number, number>();
    for (const c of calls) if (c.ok && !firstRun.has(c.id)) firstRun.set(c.id, c.at);
    for (const [id, k] of successes) {
      if (k < 2) continue;
      expect(firstRun.get(id), `first run of duplicated ${id}`).toBeGreaterThan(faultStart - 5_000);
      expect(firstRun.get(id), `first run of duplicated ${id}`).toBeLessThan(faultEnd);
    }

    const c = await cursor(t, n, gid);
    expect(c).toMatchObject({ claimed: String(N1 + N2), committed: String(N1 + N2) });
    expect(await t.sql(`SELECT 1 FROM ${SCHEMA}.claim_lease_${n}`)).toEqual([]);
    expect(await t.sql(`SELECT 1 FROM ${SCHEMA}.message_key_lease_${n}`)).toEqual([]);
  });
});
