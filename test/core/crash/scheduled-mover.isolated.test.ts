// Crashes of the scheduled-message mover (docs/protocol/data-model.md#scheduled-messages): its backend
// terminated mid-move, the poller process that runs it SIGKILLed mid-move, and two movers at once.
// The mover is held mid-move by a lock on a compaction head it must upsert after it has already
// deleted and appended the rows due before it; whatever happens to it then, every scheduled
// message ends up in the log once and reaches the group once.
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import { beforeAll, describe, expect, it, vi } from "vitest";
import type { Consumer } from "@sqlstreams/core";
import { useFreshDatabase } from "../../support/db.js";
import { checkInvariants } from "../../support/invariants.js";
import { spawnPoller } from "../../support/processes.js";
import { SCHEMA, type TestClient, count, streamIdOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();
let t: TestClient;

beforeAll(async () => {
  t = testClient(url());
  await t.client.migrate();
});

type P = { i: number };

/**
 * A stream with group "g", an ordinary compacted message of key "c" (so its head row exists), and
 * seven scheduled messages, all due now, in due order i = 1, 2, 3, 4 (key "c", compacted), 5, 6, 7.
 */
async function setup(name: string) {
  const s = t.client.stream<P>(name);
  await s.register();
  const g = s.consumer("g");
  await g.register();
  const n = await streamIdOf(t, name);
  await s.produce({ i: 0 }, { key: "c", compaction: {} });
  for (let i = 1; i <= 7; i++) await s.produce({ i }, i === 4 ? { key: "c", compaction: { rank: 1 }, delay: 3_600_000 } : { delay: 3_600_000 });
  await t.sql(`UPDATE ${SCHEMA}.scheduled_message_${n} SET due_at = now() - interval '1 minute' + (payload->>'i')::int * interval '1 second'`);
  return { s, g, n };
}

/** A transaction holding the compaction head row of key "c": a mover blocks on it mid-move. */
async function holdHead(n: string): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: url() });
  await c.connect();
  await c.query("BEGIN");
  await c.query(`SELECT 1 FROM ${SCHEMA}.compaction_head_${n} WHERE compaction_key = 'c' FOR UPDATE`);
  return c;
}

/** The backend pids running move_scheduled_N and waiting for a lock. */
async function blockedMovers(n: string): Promise<number[]> {
  const r = await t.sql<{ pid: number }>(
    `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1`,
    [`%move_scheduled_${n}(%`],
  );
  return r.map((x) => x.pid);
}

/** Polls until the group has seen `k` messages, then a few more times; returns the payloads' i in delivery order. */
async function deliverAll(g: Consumer<P>, k: number): Promise<number[]> {
  const seen: number[] = [];
  const end = Date.now() + 20_000;
  while (seen.length < k) {
    if (Date.now() > end) throw new Error(`only ${JSON.stringify(seen)} delivered`);
    await g.poll((m) => void seen.push(m.payload.i));
    await sleep(20);
  }
  for (let j = 0; j < 3; j++) await g.poll((m) => void seen.push(m.payload.i));
  return seen;
}

async function expectAllOnce(n: string, g: Consumer<P>): Promise<void> {
  // i = 0 is compacted away by i = 4 (same key, higher rank) before the group reads it.
  const seen = await deliverAll(g, 7);
  expect([...seen].sort((a, b) => a - b)).toEqual([1, 2, 3, 4, 5, 6, 7]);
  expect(await count(t, `scheduled_message_${n}`)).toBe(0);
  expect(await count(t, `message_log_${n}`)).toBe(8);
  const [head] = await t.sql<{ i: number }>(
    `SELECT (m.payload->>'i')::int AS i FROM ${SCHEMA}.compaction_head_${n} h JOIN ${SCHEMA}.message_log_${n} m ON m.id = h.message_id WHERE h.compaction_key = 'c'`,
  );
  expect(head.i).toBe(4);
  await checkInvariants(t, n);
}

describe("the scheduled-message mover under crashes", () => {
  it("pg_terminate_backend of the mover mid-move rolls the whole move back; the next poll moves every row once", async () => {
    const { g, n } = await setup("mover.terminate");
    const lock = await holdHead(n);
    const mover = new pg.Client({ connectionString: url() });
    mover.on("error", () => {});
    await mover.connect();
    const moving = mover.query(`SELECT ${SCHEMA}.move_scheduled_${n}(1000)`).then(
      () => "committed",
      (e: Error) => e.message,
    );
    await vi.waitUntil(async () => (await blockedMovers(n)).length === 1, { timeout: 10_000, interval: 20 });
    // Mid-move: rows 1–3 deleted and appended in its transaction, invisible to everyone else.
    const [{ moved }] = await t.sql<{ moved: number }>(`SELECT count(*)::int AS moved FROM ${SCHEMA}.message_log_${n} WHERE (payload->>'i')::int BETWEEN 1 AND 3`);
    expect(moved).toBe(0);
    // …yet drawn: log ids 2–5 went to rows 1–4 (id 1 is i = 0), the mover waits on row 4's head.
    const [seq] = await t.sql<{ last: string }>(`SELECT last_value::text AS last FROM ${SCHEMA}.message_log_${n}_id_seq`);
    expect(seq.last).toBe("5");
    const [pid] = await blockedMovers(n);
    await t.sql("SELECT pg_terminate_backend($1)", [pid]);
    expect(await moving).toMatch(/terminat/);
    await lock.query("ROLLBACK");
    await lock.end();
    expect(await count(t, `scheduled_message_${n}`)).toBe(7);
    expect(await count(t, `message_log_${n}`)).toBe(1);
    await expectAllOnce(n, g);
  });

  it("a poller SIGKILLed while its poll runs the mover loses and duplicates nothing", async () => {
    const { g, n } = await setup("mover.sigkill");
    const lock = await holdHead(n);
    const child = spawnPoller(url(), { stream: "mover.sigkill", method: "poll" });
    await vi.waitUntil(async () => (await blockedMovers(n)).length === 1, { timeout: 20_000, interval: 20 });
    expect((await child.kill()).signal).toBe("SIGKILL");
    // The orphaned backend finishes the move (or is rolled back) once the lock goes.
    await lock.query("ROLLBACK");
    await lock.end();
    await vi.waitUntil(async () => (await blockedMovers(n)).length === 0, { timeout: 10_000, interval: 20 });
    const inLog = await count(t, `message_log_${n}`);
    const waiting = await count(t, `scheduled_message_${n}`);
    expect(inLog - 1 + waiting).toBe(7);
    await expectAllOnce(n, g);
  });

  it("two movers at once move each row once (SKIP LOCKED); the blocked one's rows commit after it", async () => {
    const { g, n } = await setup("mover.concurrent");
    const lock = await holdHead(n);
    const first = new pg.Client({ connectionString: url() });
    await first.connect();
    const moving = first.query<{ moved: number }>(`SELECT ${SCHEMA}.move_scheduled_${n}(1000) AS moved`);
    await vi.waitUntil(async () => (await blockedMovers(n)).length === 1, { timeout: 10_000, interval: 20 });
    const [second] = await t.sql<{ moved: number }>(`SELECT ${SCHEMA}.move_scheduled_${n}(1000) AS moved`);
    await lock.query("ROLLBACK");
    await lock.end();
    const firstMoved = (await moving).rows[0].moved;
    await first.end();
    expect(firstMoved + second.moved).toBe(7);
    expect(firstMoved).toBeGreaterThanOrEqual(4);
    await expectAllOnce(n, g);
  });
});
