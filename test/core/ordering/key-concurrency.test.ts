// keyConcurrency (docs/guide/configuration.md#keyconcurrency, docs/protocol/ordering.md#key-concurrency),
// proven with real processes: two pollers drain an exclusive group with one hot key and ten quiet
// ones; every handler run records its interval with the database clock. Under keyConcurrency 2 no
// key ever has three runs at once, the hot key does reach two, and the quiet keys run while the hot
// key's burst is still going; under keyConcurrency 1 (the default) no key ever has two.
import { beforeAll, describe, expect, it } from "vitest";
import { useFreshDatabase } from "../../support/db.js";
import { spawnNode } from "../../support/processes.js";
import { type TestClient, codeOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();
let t: TestClient;

beforeAll(async () => {
  t = testClient(url());
  await t.client.migrate();
  await t.sql(`CREATE TABLE runs (n BIGSERIAL PRIMARY KEY, stream TEXT NOT NULL, id TEXT NOT NULL, key TEXT NOT NULL,
    attempt INT NOT NULL, started TIMESTAMPTZ NOT NULL, ended TIMESTAMPTZ NULL)`);
});

// One process: drains until every message of the stream has a successful run. A hot message whose
// id ends in 7 fails its first attempt, so its retry runs on the exception path while the range
// path goes on with the key.
const CHILD = `
import pg from "pg";
import { SqlStreams } from "@sqlstreams/core";
const url = process.env.DATABASE_URL, stream = process.env.STREAM, total = Number(process.env.TOTAL);
const client = new SqlStreams({ connectionString: url });
const pool = new pg.Pool({ connectionString: url, max: 8 });
const g = client.stream(stream).consumer("g");
const handler = async (m) => {
  const r = await pool.query("INSERT INTO runs (stream, id, key, attempt, started) VALUES ($1, $2, $3, $4, clock_timestamp()) RETURNING n",
    [stream, m.id, m.key, m.attempt]);
  await new Promise((res) => setTimeout(res, 40));
  await pool.query("UPDATE runs SET ended = clock_timestamp() WHERE n = $1", [r.rows[0].n]);
  if (m.key === "hot" && m.attempt === 0 && m.id.endsWith("7")) throw new Error("first attempt fails");
};
for (;;) {
  const done = await pool.query("SELECT count(DISTINCT id)::int AS n FROM runs WHERE stream = $1 AND ended IS NOT NULL AND NOT (key = 'hot' AND attempt = 0 AND id LIKE '%7')", [stream]);
  if (done.rows[0].n >= total) break;
  const r = await g.drain(handler, { batchLimit: 40, concurrency: 8, deadline: Date.now() + 3000, recordMargin: 200 });
  if (r.idle) await new Promise((res) => setTimeout(res, 20));
}
process.stdout.write(JSON.stringify({ event: "done" }) + "\\n");
await client.close();
await pool.end();
`;

const HOT = 40;
const QUIET = 10;

async function setup(stream: string, config: Record<string, unknown>): Promise<number> {
  const s = t.client.stream<{ i: number }>(stream);
  await s.register();
  await s.consumer("g").register(config);
  const items: { payload: { i: number }; key: string }[] = [];
  // The hot key's burst, with a quiet key's message after every fourth of it: each range holds both.
  for (let i = 0; i < HOT; i++) {
    items.push({ payload: { i }, key: "hot" });
    if (i % 4 === 3) for (let r = 0; r < 3; r++) items.push({ payload: { i: r }, key: `q${(i >> 2) % QUIET}` });
  }
  await s.produceBatch(items);
  return items.length;
}

async function drainWithTwoProcesses(stream: string, total: number): Promise<void> {
  const kids = [0, 1].map((i) =>
    spawnNode({ source: CHILD, env: { DATABASE_URL: url(), STREAM: stream, TOTAL: String(total) }, name: `poller ${i} ${stream}` }),
  );
  for (const k of kids) await k.waitFor({ event: "done" }, { timeoutMs: 120_000 });
  for (const k of kids) await k.waitForExit();
}

/** The most runs of one key that were running at one moment, per key. */
async function maxOverlap(stream: string): Promise<Map<string, number>> {
  const rows = await t.sql<{ key: string; n: number }>(`
    SELECT a.key, max((SELECT count(*) FROM runs b WHERE b.stream = a.stream AND b.key = a.key
                        AND b.started <= a.started AND b.ended > a.started))::int AS n
      FROM runs a WHERE a.stream = $1 GROUP BY a.key`, [stream]);
  return new Map(rows.map((r) => [r.key, r.n]));
}

/** Quiet-key runs that started while the hot key's burst was still running (before its last run ended). */
async function quietDuringBurst(stream: string): Promise<number> {
  const [r] = await t.sql<{ n: number }>(`SELECT count(*)::int AS n FROM runs q WHERE q.stream = $1 AND q.key <> 'hot'
    AND q.started < (SELECT max(ended) FROM runs h WHERE h.stream = $1 AND h.key = 'hot')`, [stream]);
  return r.n;
}

/** Runs of a retry (the exception path). */
async function retried(stream: string): Promise<number> {
  const [r] = await t.sql<{ n: number }>(`SELECT count(*)::int AS n FROM runs WHERE stream = $1 AND attempt > 0`, [stream]);
  return r.n;
}

async function unfinished(stream: string): Promise<number> {
  const [r] = await t.sql<{ n: number }>(`SELECT count(*)::int AS n FROM runs WHERE stream = $1 AND ended IS NULL`, [stream]);
  return r.n;
}

describe("keyConcurrency", () => {
  it("is validated: an integer of at least 1, above 1 only for an exclusive group", async () => {
    const s = t.client.stream("kc-valid");
    await s.register();
    const g = s.consumer("g");
    for (const bad of [0, -1, 1.5, "2", 1_001]) {
      expect(await codeOf(g.register({ concurrencyOverride: "exclusive", keyConcurrency: bad as number }))).toBe("SQL0013");
    }
    expect(await codeOf(g.register({ concurrencyOverride: "ordered", keyConcurrency: 2 }))).toBe("SQL0014");
    expect(await codeOf(g.register({ keyConcurrency: 2 }))).toBe("SQL0014"); // parallel by default
    expect(await codeOf(g.register({ message: { concurrency: "exclusive" }, concurrencyOverride: "parallel", keyConcurrency: 2 }))).toBe("SQL0014");
    const err = await g.register({ concurrencyOverride: "ordered", keyConcurrency: 3 }).catch((e: Error) => e);
    expect(String((err as Error).message)).toMatch(/concurrencyOverride: "exclusive"/);
    await g.register({ concurrencyOverride: "ordered", keyConcurrency: 1 });
    await g.register({ message: { concurrency: "exclusive" }, keyConcurrency: 2 });
    await g.register({ concurrencyOverride: "exclusive", keyConcurrency: 4 });
  });

  it("keyConcurrency 2: two processes never run three of one key at once, reach two, and the other keys keep moving", { timeout: 180_000 }, async () => {
    const total = await setup("kc2", { concurrencyOverride: "exclusive", keyConcurrency: 2, exceptionInitialBackoff: 0, message: { timeout: 1_000, retry: { baseDelay: 50 } } });
    await drainWithTwoProcesses("kc2", total);
    expect(await unfinished("kc2")).toBe(0);
    const max = await maxOverlap("kc2");
    console.log(`keyConcurrency 2: max overlap per key ${JSON.stringify(Object.fromEntries(max))}`);
    expect(max.size).toBe(1 + QUIET);
    for (const [, n] of max) expect(n).toBeLessThanOrEqual(2);
    expect(max.get("hot")).toBe(2);
    expect(await quietDuringBurst("kc2")).toBeGreaterThan(0);
    expect(await retried("kc2")).toBeGreaterThan(0); // the exception path ran too, under the same bound
  });

  it("keyConcurrency 1 (the default): never two of one key at once", { timeout: 180_000 }, async () => {
    const total = await setup("kc1", { concurrencyOverride: "exclusive", exceptionInitialBackoff: 0, message: { timeout: 1_000, retry: { baseDelay: 50 } } });
    await drainWithTwoProcesses("kc1", total);
    expect(await unfinished("kc1")).toBe(0);
    const max = await maxOverlap("kc1");
    console.log(`keyConcurrency 1: max overlap per key ${JSON.stringify(Object.fromEntries(max))}`);
    for (const [, n] of max) expect(n).toBe(1);
    expect(await quietDuringBurst("kc1")).toBeGreaterThan(0);
    expect(await retried("kc1")).toBeGreaterThan(0);
  });
});
