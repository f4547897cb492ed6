// rateLimit across processes (docs/guide/configuration.md#ratelimit): two pollers, separate Node
// processes draining one group under { perSecond: 20, burst: 20 }, start at most the burst plus 20 a
// second between them; once the limit is lifted every message is delivered, once, and none was
// charged an attempt. Isolated: the bound is on the database clock, the lower bound needs the CPU.
import { beforeAll, describe, expect, it } from "vitest";
import { useFreshDatabase } from "../../support/db.js";
import { spawnNode } from "../../support/processes.js";
import { type TestClient, count, streamIdOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();
let t: TestClient;

beforeAll(async () => {
  t = testClient(url());
  await t.client.migrate();
  await t.sql(`CREATE TABLE starts (n BIGSERIAL PRIMARY KEY, pid INT NOT NULL, id TEXT NOT NULL, at TIMESTAMPTZ NOT NULL)`);
});

// One poller: drains with a one-second deadline, again and again, for RUN_MS; each handler run
// records its start with the database clock.
const CHILD = `
import pg from "pg";
import { SqlStreams } from "@sqlstreams/core";
const url = process.env.DATABASE_URL, runMs = Number(process.env.RUN_MS);
const out = (o) => process.stdout.write(JSON.stringify(o) + "\\n");
const client = new SqlStreams({ connectionString: url });
const pool = new pg.Pool({ connectionString: url, max: 4 });
const g = client.stream("rl").consumer("g");
const handler = async (m) => {
  await pool.query("INSERT INTO starts (pid, id, at) VALUES ($1, $2, clock_timestamp())", [process.pid, m.id]);
};
out({ event: "ready" });
const end = Date.now() + runMs;
let started = 0, rateLimited = 0, drains = 0;
while (end - Date.now() > 400) {
  const r = await g.drain(handler, { deadline: Math.min(end, Date.now() + 1_000), recordMargin: 100, concurrency: 4 });
  started += r.started; rateLimited += r.rateLimited; drains++;
  if (r.idle) await new Promise((res) => setTimeout(res, 20));
}
out({ event: "done", started, rateLimited, drains });
await client.close();
await pool.end();
`;

describe("rateLimit with two processes", () => {
  it("two pollers under { perSecond: 20, burst: 20 } start at most 140 messages in 6 s; lifted, everything is delivered once, uncharged", async () => {
    const total = 400;
    const s = t.client.stream<{ i: number }>("rl");
    await s.register();
    const g = s.consumer("g");
    await g.register({ message: { timeout: 200 }, rateLimit: { perSecond: 20, burst: 20 } });
    await s.produceBatch(Array.from({ length: total }, (_, i) => ({ payload: { i } })));
    const kids = [0, 1].map((i) => spawnNode({ source: CHILD, env: { DATABASE_URL: url(), RUN_MS: "8000" }, name: `poller ${i}` }));
    await Promise.all(kids.map((k) => k.waitFor({ event: "ready" }, { timeoutMs: 30_000 })));
    const done = await Promise.all(kids.map((k) => k.waitFor({ event: "done" }, { timeoutMs: 60_000 })));
    await Promise.all(kids.map((k) => k.waitForExit()));

    // Starts in the first 6 s after the first one: the burst, then 20 a second (140), plus the
    // tokens taken between the first claim and its first start.
    const [w] = await t.sql<{ in6: number; all: number; pids: number; span_ms: number }>(
      `SELECT count(*) FILTER (WHERE at <= f.first + interval '6 seconds')::int AS in6, count(*)::int AS all,
              count(DISTINCT pid)::int AS pids, (extract(epoch FROM max(at) - f.first) * 1000)::float8 AS span_ms
         FROM starts, (SELECT min(at) AS first FROM starts) f GROUP BY f.first`);
    console.log(`rate limit 20/s burst 20, two processes: ${w.in6} starts in the first 6 s, ${w.all} in ${Math.round(w.span_ms)} ms; reports ${JSON.stringify(done)}`);
    expect(w.in6).toBeLessThanOrEqual(142);
    expect(w.all).toBeLessThanOrEqual(20 + Math.ceil((w.span_ms / 1000) * 20) + 2);
    expect(w.in6).toBeGreaterThan(80);
    expect(w.pids).toBe(2);
    expect(done.reduce((a, d) => a + (d.rateLimited as number), 0)).toBeGreaterThan(0);
    expect((await g.progress()).rateLimit?.limited).toBeGreaterThan(0);

    // Lifted: the rest runs at once; every message ran exactly once, nothing was charged.
    await g.register({ message: { timeout: 200 } });
    const handler = async (m: { id: string }) => {
      await t.sql("INSERT INTO starts (pid, id, at) VALUES ($1, $2, clock_timestamp())", [process.pid, m.id]);
    };
    const rest = await g.drain(handler);
    expect(rest.rateLimited).toBe(0);
    const [runs] = await t.sql<{ n: number; ids: number }>(`SELECT count(*)::int AS n, count(DISTINCT id)::int AS ids FROM starts`);
    expect(runs).toEqual({ n: total, ids: total });
    const n = await streamIdOf(t, "rl");
    expect(await count(t, `exception_queue_${n}`)).toBe(0);
    expect(await count(t, `delivery_log_${n}`)).toBe(0);
    expect((await g.progress()).lag).toBe("0");
  }, 120_000);
});
