// Scheduled delivery (docs/guide/producing.md#scheduled-delivery): deliverAt / delay park a message
// in scheduled_message_N until its due time on the database clock; the poll moves it to the log
// and every group sees it once, never before.
import { setTimeout as sleep } from "node:timers/promises";
import { beforeAll, describe, expect, it } from "vitest";
import pg from "pg";
import { SqlStreams, type Consumer, type Message } from "@sqlstreams/core";
import { useFreshDatabase } from "../../support/db.js";
import { SCHEMA, type TestClient, codedError, count, streamIdOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();
let t: TestClient;

beforeAll(async () => {
  t = testClient(url());
  await t.client.migrate();
});

async function setup(name: string, groups: string[] = ["a", "b"]) {
  const s = t.client.stream<{ i: number }>(name);
  await s.register();
  const gs: Consumer<{ i: number }>[] = [];
  for (const g of groups) {
    const c = s.consumer(g);
    await c.register();
    gs.push(c);
  }
  return { s, gs, n: await streamIdOf(t, name) };
}

/** The database clock now, in epoch ms. */
async function dbNow(): Promise<number> {
  const [r] = await t.sql<{ ms: number }>("SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::float8 AS ms");
  return r.ms;
}

/** A handler recording each delivery with the database clock at its start. */
function recorder(into: { i: number; id: string; at: number }[]) {
  return async (m: Message<{ i: number }>) => {
    into.push({ i: m.payload.i, id: m.id, at: await dbNow() });
  };
}

async function pollUntil(gs: Consumer<{ i: number }>[], seen: { i: number; id: string; at: number }[][], done: () => boolean, ms = 15_000): Promise<void> {
  const end = Date.now() + ms;
  while (!done()) {
    if (Date.now() > end) throw new Error(`not delivered within ${ms} ms: ${JSON.stringify(seen)}`);
    for (let k = 0; k < gs.length; k++) await gs[k].poll(recorder(seen[k]));
    await sleep(25);
  }
}

describe("scheduled delivery", () => {
  it("deliverAt and delay reach two groups once each, never before their due time", async () => {
    const { s, gs, n } = await setup("sched.basic");
    const base = Math.round(await dbNow());
    const a = await s.produce({ i: 1 }, { delay: 1_200 });
    const b = await s.produce({ i: 2 }, { deliverAt: new Date(base + 1_500) });
    const c = await s.produce({ i: 3 }, { deliverAt: base + 900 });
    await s.produce({ i: 0 }); // an ordinary message goes straight to the log
    for (const r of [a, b, c]) expect(r).toMatchObject({ duplicate: false, scheduled: true });
    expect(b.deliverAt?.getTime()).toBe(base + 1_500);
    expect(c.deliverAt?.getTime()).toBe(base + 900);
    expect(await count(t, `scheduled_message_${n}`)).toBe(3);
    expect((await gs[0].progress()).scheduled).toMatchObject({ waiting: 3, overdue: 0 });

    const seen: { i: number; id: string; at: number }[][] = [[], []];
    await pollUntil(gs, seen, () => seen.every((x) => x.length === 4));
    // A few more polls after everything was due deliver nothing more.
    await sleep(200);
    for (let k = 0; k < 2; k++) for (let j = 0; j < 3; j++) await gs[k].poll(recorder(seen[k]));

    const due = new Map([[1, a.deliverAt!.getTime()], [2, b.deliverAt!.getTime()], [3, c.deliverAt!.getTime()]]);
    for (const got of seen) {
      expect(got.map((x) => x.i).sort()).toEqual([0, 1, 2, 3]);
      for (const x of got) if (x.i > 0) expect(x.at).toBeGreaterThanOrEqual(due.get(x.i)!);
      // Moved in due order: c (900 ms), a (1 200 ms), b (1 500 ms), each with a new log id.
      const ids = got.filter((x) => x.i > 0).sort((p, q) => Number(p.id) - Number(q.id)).map((x) => x.i);
      expect(ids).toEqual([3, 1, 2]);
    }
    expect(await count(t, `scheduled_message_${n}`)).toBe(0);
    expect(await count(t, `message_log_${n}`)).toBe(4);
    expect((await gs[1].progress()).scheduled).toEqual({ waiting: 0, overdue: 0, nextDueAt: null });
  });

  it("a far horizon waits; a past deliverAt and delay 0 are delivered by the next poll", async () => {
    const { s, gs, n } = await setup("sched.horizon", ["a"]);
    const far = await s.produce({ i: 1 }, { delay: 90 * 24 * 3600 * 1000 });
    const past = await s.produce({ i: 2 }, { deliverAt: new Date(Date.now() - 60_000) });
    const zero = await s.produce({ i: 3 }, { delay: 0 });
    expect(far.deliverAt!.getTime() - Date.now()).toBeGreaterThan(89 * 24 * 3600 * 1000);
    expect([past.scheduled, zero.scheduled]).toEqual([true, true]);
    const seen: { i: number; id: string; at: number }[][] = [[]];
    await pollUntil(gs, seen, () => seen[0].length === 2);
    expect(seen[0].map((x) => x.i).sort()).toEqual([2, 3]);
    const [row] = await t.sql<{ id: string }>(`SELECT id::text FROM ${SCHEMA}.scheduled_message_${n}`);
    expect(row.id).toBe(far.id);
    const p = await gs[0].progress();
    expect(p.scheduled.waiting).toBe(1);
    expect(p.scheduled.nextDueAt?.getTime()).toBe(far.deliverAt!.getTime());
  });

  it("cancelScheduled removes a waiting message; a delivered, cancelled or unknown id is SQL0071", async () => {
    const { s, gs, n } = await setup("sched.cancel", ["a"]);
    const keep = await s.produce({ i: 1 }, { delay: 300 });
    const drop = await s.produce({ i: 2 }, { delay: 300, idempotencyKey: "drop-me" });
    const cancelled = await s.cancelScheduled(drop.id);
    expect(cancelled).toEqual({ id: drop.id, deliverAt: drop.deliverAt });
    expect(await count(t, `idempotency_key_${n}`)).toBe(0);
    const again = await codedError(s.cancelScheduled(drop.id));
    expect(again.code).toBe("SQL0071");
    expect(again.details).toMatchObject({ reason: "gone" });
    const unknown = await codedError(s.cancelScheduled(BigInt(drop.id) + 1000n));
    expect(unknown.code).toBe("SQL0071");
    expect(unknown.details).toMatchObject({ reason: "unknown" });
    expect((await codedError(s.cancelScheduled("abc"))).code).toBe("SQL0015");

    const seen: { i: number; id: string; at: number }[][] = [[]];
    await pollUntil(gs, seen, () => seen[0].length === 1);
    await sleep(400);
    await gs[0].poll(recorder(seen[0]));
    expect(seen[0].map((x) => x.i)).toEqual([1]);
    const delivered = await codedError(s.cancelScheduled(keep.id));
    expect(delivered.code).toBe("SQL0071");
    expect(delivered.message).toContain("delivered");
  });

  it("idempotency keys: a retry while waiting answers the scheduled id, after the move the log id", async () => {
    const { s, gs, n } = await setup("sched.idem", ["a"]);
    await s.register({ idempotencyKeyTtl: 1_000 });
    const first = await s.produce({ i: 1 }, { delay: 700, idempotencyKey: "order-1" });
    const retry = await s.produce({ i: 99 }, { delay: 700, idempotencyKey: "order-1" });
    expect(retry).toEqual({ id: first.id, duplicate: true, scheduled: true, deliverAt: first.deliverAt });
    // An immediate produce with the same key is the same message too.
    const plain = await s.produce({ i: 98 }, { idempotencyKey: "order-1" });
    expect(plain).toEqual({ id: first.id, duplicate: true, scheduled: true });
    // Concurrent first uses of one key park one message.
    const many = await Promise.all(Array.from({ length: 8 }, (_, i) => s.produce({ i: 10 + i }, { delay: 60_000, idempotencyKey: "order-2" })));
    expect(new Set(many.map((m) => m.id)).size).toBe(1);
    expect(many.filter((m) => !m.duplicate)).toHaveLength(1);
    expect(many.every((m) => m.scheduled)).toBe(true);
    await s.cancelScheduled(many[0].id);
    // The key's TTL does not run while the message waits.
    await t.sql(`UPDATE ${SCHEMA}.idempotency_key_${n} SET created_at = now() - interval '1 hour'`);
    await s.maintain();
    expect(await count(t, `idempotency_key_${n}`)).toBe(1);

    const seen: { i: number; id: string; at: number }[][] = [[]];
    await pollUntil(gs, seen, () => seen[0].length === 1);
    const after = await s.produce({ i: 97 }, { delay: 700, idempotencyKey: "order-1" });
    expect(after).toEqual({ id: seen[0][0].id, duplicate: true });
    expect(seen[0].map((x) => x.i)).toEqual([1]);
    expect(await count(t, `message_log_${n}`)).toBe(1);
  });

  it("produceBatch mixes scheduled and immediate items; produceInTx schedules with the caller's transaction", async () => {
    const { s, gs, n } = await setup("sched.batch", ["a"]);
    const rs = await s.produceBatch([{ payload: { i: 1 } }, { payload: { i: 2 }, delay: 300 }, { payload: { i: 3 } }, { payload: { i: 4 }, delay: 200 }]);
    expect(rs.map((r) => r.scheduled ?? false)).toEqual([false, true, false, true]);
    expect(Number(rs[0].id)).toBeLessThan(Number(rs[2].id));
    expect(Number(rs[1].id)).toBeLessThan(Number(rs[3].id));
    expect(rs[3].deliverAt!.getTime()).toBeLessThan(rs[1].deliverAt!.getTime());
    const c = await t.pool.connect();
    try {
      await c.query("BEGIN");
      const r = await s.produceInTx(c, { i: 5 }, { delay: 100 });
      expect(r.scheduled).toBe(true);
      await c.query("ROLLBACK");
      await c.query("BEGIN");
      await s.produceInTx(c, { i: 6 }, { delay: 100 });
      await s.produceBatchInTx(c, [{ payload: { i: 7 }, deliverAt: Date.now() + 100 }]);
      await c.query("COMMIT");
    } finally {
      c.release();
    }
    expect(await count(t, `scheduled_message_${n}`)).toBe(4);
    const seen: { i: number; id: string; at: number }[][] = [[]];
    await pollUntil(gs, seen, () => seen[0].length === 6);
    expect(seen[0].map((x) => x.i).sort()).toEqual([1, 2, 3, 4, 6, 7]);
  });

  it("a scheduled message takes its place in its key's order at its due time; compaction is judged then", async () => {
    const { s, gs, n } = await setup("sched.order", ["a"]);
    await s.produce({ i: 1 }, { key: "k", delay: 400 });
    await s.produce({ i: 2 }, { key: "k" });
    // Compaction: the waiting message is not the key's head until it is moved.
    await s.produce({ i: 3 }, { key: "c", compaction: {}, delay: 400 });
    await s.produce({ i: 4 }, { key: "c", compaction: {} });
    const [head] = await t.sql<{ id: string }>(`SELECT message_id::text AS id FROM ${SCHEMA}.compaction_head_${n} WHERE compaction_key = 'c'`);
    expect(head.id).not.toBeNull();
    const seen: { i: number; id: string; at: number }[][] = [[]];
    await pollUntil(gs, seen, () => seen[0].some((x) => x.i === 1) && seen[0].some((x) => x.i === 3));
    const order = seen[0].map((x) => x.i);
    expect(order.indexOf(2)).toBeLessThan(order.indexOf(1));
    expect(order.indexOf(4)).toBeLessThan(order.indexOf(3));
  });

  it("inspect shows waiting messages by scheduled id and among a key's; maintain() moves due ones", async () => {
    const { s, n } = await setup("sched.inspect", ["a"]);
    const r = await s.produce({ i: 1 }, { key: "k", delay: 60_000 });
    await s.produce({ i: 2 }, { key: "k" });
    const [one] = await s.inspect({ scheduled: r.id });
    expect(one).toMatchObject({ id: r.id, key: "k", payload: { i: 1 }, groups: [], scheduled: { deliverAt: r.deliverAt } });
    const byKey = await s.inspect({ key: "k" });
    expect(byKey.map((m) => [m.payload, m.scheduled !== undefined])).toEqual([[{ i: 1 }, true], [{ i: 2 }, false]]);
    expect((await codedError(s.inspect({ scheduled: "999" }))).code).toBe("SQL0058");
    await t.sql(`UPDATE ${SCHEMA}.scheduled_message_${n} SET due_at = now() - interval '1 second'`);
    expect((await s.consumer("a").progress()).scheduled).toMatchObject({ waiting: 1, overdue: 1 });
    const report = await s.maintain();
    expect(report.scheduledMoved).toBe(1);
    expect(await count(t, `message_log_${n}`)).toBe(2);
  });

  it("bad deliverAt / delay are SQL0015 before anything is written", async () => {
    const { s, n } = await setup("sched.bad", []);
    const bad: Record<string, unknown>[] = [
      { delay: 10, deliverAt: Date.now() }, { delay: -1 }, { delay: Number.NaN }, { delay: Infinity }, { delay: "5" },
      { deliverAt: new Date("nope") }, { deliverAt: "2030-01-01" }, { deliverAt: -5 }, { deliverAt: 1e17 },
      { deliverAt: Date.now() + 60_000, expiresAt: Date.now() + 30_000 },
    ];
    for (const o of bad) {
      const e = await codedError(s.produce({ i: 0 }, o as never));
      expect(e.code, JSON.stringify(o)).toBe("SQL0015");
    }
    expect((await codedError(s.produceBatch([{ payload: { i: 0 }, delay: -3 }]))).message).toContain("items[0].delay");
    expect(await count(t, `scheduled_message_${n}`)).toBe(0);
    expect(await count(t, `message_log_${n}`)).toBe(0);
  });

  it("SQL produce() and produce_batch() take deliverAt / delay in options and return the scheduled id negated", async () => {
    const { s, gs, n } = await setup("sched.sql", ["a"]);
    const [one] = await t.sql<{ id: string }>(`SELECT ${SCHEMA}.produce('sched.sql', '{"i": 1}', options => '{"delay": 300}')::text AS id`);
    expect(one.id).toBe("-1");
    const [dup] = await t.sql<{ id: string }>(
      `SELECT ${SCHEMA}.produce('sched.sql', '{"i": 2}', idempotency_key => 'x', options => jsonb_build_object('deliverAt', (EXTRACT(EPOCH FROM now()) * 1000 + 300)::bigint))::text AS id`,
    );
    expect(dup.id).toBe("-2");
    const [again] = await t.sql<{ id: string }>(`SELECT ${SCHEMA}.produce('sched.sql', '{"i": 3}', idempotency_key => 'x')::text AS id`);
    expect(again.id).toBe("-2");
    const batch = await t.sql<{ id: string }>(`SELECT id::text FROM ${SCHEMA}.produce_batch('sched.sql', '[{"payload": {"i": 4}, "options": {"delay": 100}}, {"payload": {"i": 5}}]') AS id`);
    expect(batch[0].id).toBe("-3"); // the key check above drew (and left unused) a log id
    expect(Number(batch[1].id)).toBeGreaterThan(0);
    const late = Date.now() + 60_000;
    const neverDue = JSON.stringify({ deliverAt: late, expiresAt: late - 1 });
    for (const opts of ['{"delay": -1}', '{"delay": "1"}', '{"delay": 1, "deliverAt": 1}', '{"deliverAt": 1e17}', neverDue, '{"delay": 60000, "expiresAt": 1}']) {
      await expect(t.sql(`SELECT ${SCHEMA}.produce('sched.sql', '{}', options => $1::jsonb)`, [opts])).rejects.toThrow(/SQL0015/);
    }
    expect(await count(t, `scheduled_message_${n}`)).toBe(3);
    const seen: { i: number; id: string; at: number }[][] = [[]];
    await pollUntil(gs, seen, () => seen[0].length === 4);
    expect(seen[0].map((x) => x.i).sort()).toEqual([1, 2, 4, 5]);
    expect((await s.inspect({ id: seen[0].find((x) => x.i === 2)!.id }))[0].payload).toEqual({ i: 2 });
  });

  it("a delay counts from the database's now(), the clock retries' can_run_after uses too", async () => {
    const { s } = await setup("sched.clock", []);
    const c = await t.pool.connect();
    try {
      await c.query("BEGIN");
      const [{ now }] = (await c.query<{ now: Date }>("SELECT now()")).rows;
      const r = await s.produceInTx(c, { i: 1 }, { delay: 5_000 });
      expect(r.deliverAt!.getTime()).toBe(now.getTime() + 5_000);
      await c.query("COMMIT");
    } finally {
      c.release();
    }
  });

  it("a move that reaches the end of a partition continues in the next one, created by the poll when missing", async () => {
    const s = t.client.stream<{ i: number }>("sched.partitions");
    await s.register({ partitionSize: 10 });
    const g = s.consumer("a");
    await g.register();
    const n = await streamIdOf(t, "sched.partitions");
    await s.produceBatch(Array.from({ length: 25 }, (_, i) => ({ payload: { i: i + 1 }, delay: 100 })));
    const [{ parts }] = await t.sql<{ parts: number }>(`SELECT count(*)::int AS parts FROM pg_inherits WHERE inhparent = $1::regclass`, [`${SCHEMA}.message_log_${n}`]);
    expect(parts).toBe(1);
    const seen: { i: number; id: string; at: number }[][] = [[]];
    await pollUntil([g], seen, () => seen[0].length === 25);
    expect(seen[0].map((x) => x.i).sort((a, b) => a - b)).toEqual(Array.from({ length: 25 }, (_, i) => i + 1));
    expect(await count(t, `scheduled_message_${n}`)).toBe(0);
    const [{ after }] = await t.sql<{ after: number }>(`SELECT count(*)::int AS after FROM pg_inherits WHERE inhparent = $1::regclass`, [`${SCHEMA}.message_log_${n}`]);
    expect(after).toBeGreaterThanOrEqual(3);
  });

  it("with a waker, a scheduled produce wakes nobody; the poll that moves it wakes the stream's groups", async () => {
    await setup("sched.wake");
    const pool = new pg.Pool({ connectionString: url(), max: 2 });
    const wakes: { stream: string; group: string }[] = [];
    const c = new SqlStreams({ pool, wakeWindow: 100, waker: { wake: (w) => void wakes.push(w) } });
    try {
      await c.stream("sched.wake").produce({ i: 1 }, { delay: 300 });
      expect(wakes).toEqual([]);
      const g = c.stream<{ i: number }>("sched.wake").consumer("a");
      const got: number[] = [];
      const end = Date.now() + 10_000;
      while (got.length === 0 && Date.now() < end) {
        await g.poll((m) => void got.push(m.payload.i));
        await sleep(25);
      }
      expect(got).toEqual([1]);
      expect(wakes.map((w) => w.group).sort()).toEqual(["a", "b"]);
    } finally {
      await c.close();
      await pool.end();
    }
  });

  it("destroy() counts waiting messages as messages: refused without force, dropped with it", async () => {
    const { s, n } = await setup("sched.destroy", []);
    await s.produce({ i: 1 }, { delay: 60_000 });
    expect((await codedError(s.destroy())).code).toBe("SQL0042");
    await s.destroy({ force: true });
    const [{ left }] = await t.sql<{ left: string | null }>("SELECT to_regclass($1)::text AS left", [`${SCHEMA}.scheduled_message_${n}`]);
    expect(left).toBeNull();
  });

  it("a poll without scheduled messages sends no mover statement", async () => {
    const { s, gs } = await setup("sched.quiet", ["a"]);
    await s.produce({ i: 1 });
    t.statements.length = 0;
    await gs[0].poll(() => {});
    expect(t.statements.some((x) => x.includes("move_scheduled"))).toBe(false);
    await s.produce({ i: 2 }, { delay: 0 });
    t.statements.length = 0;
    await gs[0].poll(() => {});
    expect(t.statements.filter((x) => x.includes("move_scheduled"))).toHaveLength(1);
  });
});

