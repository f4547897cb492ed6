// maxConcurrency (docs/guide/configuration.md#maxconcurrency), proven with real processes: three pollers
// of a group capped at one drain never run handlers at the same time and deliver everything; a
// drain SIGKILLed while holding the slot frees it when its lease ends; a capped poll claims nothing.
import { beforeAll, describe, expect, it } from "vitest";
import { setTimeout as sleep } from "node:timers/promises";
import { useFreshDatabase } from "../../support/db.js";
import { spawnNode } from "../../support/processes.js";
import { SCHEMA, type TestClient, codeOf, groupIdOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();
let t: TestClient;

beforeAll(async () => {
  t = testClient(url());
  await t.client.migrate();
  await t.sql(`CREATE TABLE runs (n BIGSERIAL PRIMARY KEY, pid INT NOT NULL, stream TEXT NOT NULL, id TEXT NOT NULL,
    started TIMESTAMPTZ NOT NULL, ended TIMESTAMPTZ NULL)`);
});

// One process: polls and drains (alternately) until every message of the stream has a finished
// run, recording each handler run's interval with the database clock.
const CHILD = `
import pg from "pg";
import { SqlStreams } from "@sqlstreams/core";
const url = process.env.DATABASE_URL, stream = process.env.STREAM, total = Number(process.env.TOTAL), hang = process.env.HANG === "1";
const out = (o) => process.stdout.write(JSON.stringify(o) + "\\n");
const client = new SqlStreams({ connectionString: url });
const pool = new pg.Pool({ connectionString: url, max: 2 });
const g = client.stream(stream).consumer("g");
const handler = async (m) => {
  const r = await pool.query("INSERT INTO runs (pid, stream, id, started) VALUES ($1, $2, $3, clock_timestamp()) RETURNING n", [process.pid, stream, m.id]);
  out({ event: "start", id: m.id });
  if (hang) await new Promise(() => {});
  await new Promise((res) => setTimeout(res, 15));
  await pool.query("UPDATE runs SET ended = clock_timestamp() WHERE n = $1", [r.rows[0].n]);
};
let capped = 0, started = 0;
for (let i = 0; ; i++) {
  const done = await pool.query("SELECT count(DISTINCT id)::int AS n FROM runs WHERE stream = $1 AND ended IS NOT NULL", [stream]);
  if (done.rows[0].n >= total) break;
  const r = i % 2 === 0
    ? await g.poll(handler, { batchLimit: 3, concurrency: 1 })
    : await g.drain(handler, { batchLimit: 3, concurrency: 1, deadline: Date.now() + 400, recordMargin: 100 });
  capped += r.capped; started += r.started;
  if (r.capped > 0 || r.idle) await new Promise((res) => setTimeout(res, 5));
}
out({ event: "done", capped, started });
await client.close();
await pool.end();
`;

function child(stream: string, total: number, hang = false) {
  return spawnNode({ source: CHILD, env: { DATABASE_URL: url(), STREAM: stream, TOTAL: String(total), HANG: hang ? "1" : "0" }, name: `child ${stream}` });
}

async function setup(stream: string, total: number, config: Record<string, unknown>) {
  const s = t.client.stream<{ i: number }>(stream);
  await s.register();
  const g = s.consumer("g");
  await g.register(config);
  await s.produceBatch(Array.from({ length: total }, (_, i) => ({ payload: { i } })));
  return { s, g };
}

/** Pairs of handler runs of `stream` whose intervals overlap. */
async function overlaps(stream: string): Promise<number> {
  const [r] = await t.sql<{ n: number }>(`SELECT count(*)::int AS n FROM runs a JOIN runs b ON a.n < b.n
    WHERE a.stream = $1 AND b.stream = $1 AND a.started < b.ended AND b.started < a.ended`, [stream]);
  return r.n;
}

describe("maxConcurrency", () => {
  it("is validated: an integer of at least 1", async () => {
    const g = t.client.stream("mc-valid").consumer("g");
    await t.client.stream("mc-valid").register();
    for (const bad of [0, -1, 1.5, "2", 1_001]) expect(await codeOf(g.register({ maxConcurrency: bad as number }))).toBe("SQL0013");
    await g.register({ maxConcurrency: 1 });
  });

  it("three processes under maxConcurrency 1 never run handlers at the same time, and deliver every message", async () => {
    const total = 60;
    await setup("mc1", total, { maxConcurrency: 1 });
    const kids = [child("mc1", total), child("mc1", total), child("mc1", total)];
    const done = await Promise.all(kids.map((k) => k.waitFor({ event: "done" }, { timeoutMs: 90_000 })));
    await Promise.all(kids.map((k) => k.waitForExit()));
    const [runs] = await t.sql<{ ids: number; ended: number; pids: number }>(
      `SELECT count(DISTINCT id)::int AS ids, count(ended)::int AS ended, count(DISTINCT pid)::int AS pids FROM runs WHERE stream = 'mc1'`);
    expect(runs.ids).toBe(total);
    expect(await overlaps("mc1")).toBe(0);
    // The processes took turns: more than one ran handlers, and polls found the group capped.
    expect(runs.pids).toBeGreaterThan(1);
    expect(done.reduce((a, d) => a + (d.capped as number), 0)).toBeGreaterThan(0);
    const [flow] = await t.sql<{ capped: string }>(`SELECT capped::text FROM ${SCHEMA}.group_flow WHERE group_id = $1`, [await groupIdOf(t, "g", "mc1")]);
    expect(Number(flow.capped)).toBeGreaterThan(0);
    // Every slot was released at its drain's end; progress() shows the limit and the capped polls.
    expect(await t.sql(`SELECT slot FROM ${SCHEMA}.group_slot WHERE token IS NOT NULL`)).toEqual([]);
    const p = await t.client.stream("mc1").consumer("g").progress();
    expect(p.concurrency).toEqual({ max: 1, running: 0, capped: Number(flow.capped), perKey: 1 });
  }, 120_000);

  it("a drain SIGKILLed while holding the slot frees it when its lease ends; until then polls are capped and claim nothing", async () => {
    const { g } = await setup("mc-kill", 3, { maxConcurrency: 1 });
    const k = child("mc-kill", 3, true);
    await k.waitFor({ event: "start" }, { timeoutMs: 30_000 });
    expect((await k.kill()).signal).toBe("SIGKILL");
    const gid = await groupIdOf(t, "g", "mc-kill");
    const [slot] = await t.sql<{ lease_ms: number }>(
      `SELECT (extract(epoch FROM expires_at - taken_at) * 1000)::int AS lease_ms FROM ${SCHEMA}.group_slot WHERE group_id = $1 AND token IS NOT NULL`, [gid]);
    expect(slot.lease_ms).toBeLessThanOrEqual(15_000);
    const ran: string[] = [];
    const handler = (m: { id: string }) => void ran.push(m.id);
    const first = await g.poll(handler);
    expect(first).toMatchObject({ capped: 1, started: 0, rangesClaimed: 0 });
    // Poll until the slot is free again (its lease passed on the database clock).
    for (;;) {
      const [{ live }] = await t.sql<{ live: boolean }>(`SELECT expires_at > clock_timestamp() AS live FROM ${SCHEMA}.group_slot WHERE group_id = $1 AND slot = 1`, [gid]);
      const r = await g.poll(handler);
      if (live) {
        expect(r.capped).toBe(1);
        await sleep(500);
        continue;
      }
      expect(r.capped).toBe(0);
      break;
    }
    // The killed drain's range lease is the range's own business; the slot is free for everyone.
    const d = await g.drain(handler);
    expect(d.capped).toBe(0);
  }, 60_000);
});
