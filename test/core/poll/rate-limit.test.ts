// rateLimit (docs/guide/configuration.md#ratelimit, docs/protocol/poll-cycle.md#rate-limit): the group's
// token bucket cuts a claim and a reservation to the tokens it grants; what it holds back waits
// beyond the cursor or stays due, uncharged, and runs once tokens come back or the limit is lifted.
import { beforeAll, describe, expect, it } from "vitest";
import { setTimeout as sleep } from "node:timers/promises";
import { useFreshDatabase } from "../../support/db.js";
import { SCHEMA, type TestClient, codeOf, count, cursor, makeDue, setupProduced, testClient } from "../../support/streams.js";

const url = useFreshDatabase();
let t: TestClient;

beforeAll(async () => {
  t = testClient(url());
  await t.client.migrate();
});

describe("rateLimit", () => {
  it("is validated before anything is written (SQL0013)", async () => {
    const s = t.client.stream("rl-valid");
    await s.register();
    const g = s.consumer("g");
    for (const bad of [{ perSecond: 0 }, { perSecond: -2 }, { perSecond: 5, burst: 0 }, { perSecond: 5, burst: 2.5 }, { burst: 3 }]) {
      expect(await codeOf(g.register({ rateLimit: bad as { perSecond: number } }))).toBe("SQL0013");
    }
    expect(await count(t, `consumer_group_config`, "name = 'g' AND stream_id = (SELECT id FROM sqlstreams.stream_config WHERE name = 'rl-valid')")).toBe(0);
    await g.register({ rateLimit: { perSecond: 2.5 } });
    const p = await g.progress();
    expect(p.rateLimit).toEqual({ perSecond: 2.5, burst: 3, limited: 0, limitedAt: null });
  });

  it("a poll starts no more than the burst; the rest waits beyond the cursor, uncharged", async () => {
    const { g, n, gid } = await setupProduced(t, "rl-poll", { rateLimit: { perSecond: 1, burst: 5 } }, 20);
    const ran: string[] = [];
    const r = await g.poll((m) => void ran.push(m.id), { batchLimit: 100 });
    expect(r).toMatchObject({ started: 5, succeeded: 5, rateLimited: 1, idle: false });
    expect((await cursor(t, n, gid)).claimed).toBe("5");
    // No token left: the next poll claims nothing, says so, and is not idle.
    const again = await g.poll((m) => void ran.push(m.id), { batchLimit: 100 });
    expect(again).toMatchObject({ started: 0, rateLimited: 1, idle: false, rangesClaimed: 0 });
    expect(await count(t, `exception_queue_${n}`)).toBe(0);
    const p = await g.progress();
    expect(p.rateLimit).toMatchObject({ perSecond: 1, burst: 5, limited: 2 });
    expect(p.rateLimit?.limitedAt).toBeInstanceOf(Date);
    // Lifted: everything runs, once each, with no attempt charged.
    await g.register({});
    const d = await g.drain((m) => void ran.push(m.id));
    expect(d.rateLimited).toBe(0);
    expect(ran.map(Number)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    expect(await count(t, `exception_queue_${n}`)).toBe(0);
    expect(await count(t, `delivery_log_${n}`)).toBe(0);
  });

  it("a drain waits for tokens while its deadline allows, then ends and says it was rate-limited", async () => {
    const { g, n } = await setupProduced(t, "rl-drain", { message: { timeout: 200 }, rateLimit: { perSecond: 10, burst: 5 } }, 60);
    const ran: string[] = [];
    const t0 = Date.now();
    const r = await g.drain((m) => void ran.push(m.id), { deadline: Date.now() + 1_500, recordMargin: 100 });
    const ms = Date.now() - t0;
    // burst 5, then 10 a second for at most 1.5 s.
    expect(r.started).toBeLessThanOrEqual(5 + 15 + 1);
    expect(r.started).toBeGreaterThanOrEqual(8);
    expect(r.rateLimited).toBeGreaterThan(0);
    expect(ms).toBeLessThan(1_500 + 500);
    expect(ms).toBeGreaterThan(600); // it waited for tokens instead of ending at once
    expect(await count(t, `exception_queue_${n}`)).toBe(0);
    // A drain without a deadline waits for the tokens it needs and ends when the group is idle.
    await g.register({ rateLimit: { perSecond: 200, burst: 10 } });
    const rest = await g.drain((m) => void ran.push(m.id));
    expect(rest.idle).toBe(true);
    expect(ran.map(Number)).toEqual(Array.from({ length: 60 }, (_, i) => i + 1));
  });

  it("the exception phase reserves no more rows than tokens; the rest stays ready with its attempts", async () => {
    const { g, n } = await setupProduced(t, "rl-exc", {}, 6);
    const failed = await g.drain(() => {
      throw new Error("first attempt fails");
    });
    expect(failed.failed).toBe(6);
    await makeDue(t, n);
    await g.register({ rateLimit: { perSecond: 0.5, burst: 2 } });
    const ran: string[] = [];
    const r = await g.poll((m) => void ran.push(m.id), { batchLimit: 10 });
    expect(r).toMatchObject({ started: 2, succeeded: 2, rateLimited: 1 });
    const rows = await t.sql<{ status: string; attempts: number; lease: boolean }>(
      `SELECT status, attempts, lease_token IS NOT NULL AS lease FROM ${SCHEMA}.exception_queue_${n} WHERE status <> 'superseded' ORDER BY message_id`);
    expect(rows).toHaveLength(4);
    for (const row of rows) expect(row).toEqual({ status: "ready", attempts: 1, lease: false });
    await g.register({});
    await g.drain((m) => void ran.push(m.id));
    expect(ran.map(Number).sort((a, b) => a - b)).toEqual([1, 2, 3, 4, 5, 6]);
    expect(await count(t, `exception_queue_${n}`, "status IN ('ready', 'inflight', 'deferred', 'dead')")).toBe(0);
  });

  it("ordered keys with retries under a rate limit, three drains at once: each message succeeds once, in key order", async () => {
    const s = t.client.stream<{ i: number }>("rl-ordered");
    await s.register();
    const config = {
      exceptionInitialBackoff: 0, rateLimit: { perSecond: 500, burst: 25 },
      message: { timeout: 2_000, concurrency: "ordered" as const, retry: { baseDelay: 1, maxDelay: 1, maxRetries: 10 } },
    };
    await s.consumer("g").register(config);
    const total = 240;
    await s.produceBatch(Array.from({ length: total }, (_, i) => ({ payload: { i }, key: `k${i % 7}` })));
    const attempts = new Map<string, number>();
    const done: { id: number; key: string }[] = [];
    let rateLimited = 0;
    const drainer = async () => {
      const g = t.client.stream<{ i: number }>("rl-ordered").consumer("g");
      for (let round = 0; round < 200 && done.length < total; round++) {
        const r = await g.drain((m) => {
          const n = (attempts.get(m.id) ?? 0) + 1;
          attempts.set(m.id, n);
          if (n === 1 && Number(m.id) % 5 === 0) throw new Error("first attempt fails");
          done.push({ id: Number(m.id), key: m.key as string });
        }, { deadline: Date.now() + 3_000, recordMargin: 100, concurrency: 4, batchLimit: 20 });
        rateLimited += r.rateLimited;
        if (r.idle) await sleep(10);
      }
    };
    await Promise.all([drainer(), drainer(), drainer()]);
    expect(done).toHaveLength(total);
    expect(new Set(done.map((d) => d.id)).size).toBe(total);
    for (let k = 0; k < 7; k++) {
      const ids = done.filter((d) => d.key === `k${k}`).map((d) => d.id);
      expect(ids).toEqual([...ids].sort((a, b) => a - b));
    }
    expect(rateLimited).toBeGreaterThan(0);
    const p = await t.client.stream("rl-ordered").consumer("g").progress();
    expect(p.lag).toBe("0");
    expect(p.exceptions).toMatchObject({ ready: 0, deferred: 0, inflight: 0, dead: 0 });
  }, 60_000);

  it("groups without rateLimit never touch the bucket", async () => {
    const { g } = await setupProduced(t, "rl-none", {}, 3);
    await g.drain(() => {});
    await sleep(1);
    const gid = await t.sql<{ id: string }>(`SELECT id::text FROM ${SCHEMA}.consumer_group_config WHERE name = 'g' AND stream_id = (SELECT id FROM ${SCHEMA}.stream_config WHERE name = 'rl-none')`);
    expect(await count(t, `group_rate`, "group_id = $1", [gid[0].id])).toBe(0);
    expect((await g.progress()).rateLimit).toBeNull();
  });
});
