// Message expiry (docs/guide/producing.md#expiry): a message produced with expiresAt or ttl that a
// group has not started by then is never delivered to it; it ends in the group's exception row with
// status 'expired' (counted, listed, redrivable), never holds the cursor or an ordered key, and the
// poll's report counts it (the EMF metric Expired).
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import type { Message } from "@sqlstreams/core";
import { pollDocument } from "@sqlstreams/aws";
import { useFreshDatabase } from "../../support/db.js";
import { spawnNode } from "../../support/processes.js";
import { checkInvariants } from "../../support/invariants.js";
import { SCHEMA, codeOf, committed, deliveryLogRows, exceptionRows, makeDue, pollPastFence, setupGroup, testClient, type TestClient } from "../../support/streams.js";

const url = useFreshDatabase();
let shared: TestClient | undefined;
const T = () => (shared ??= testClient(url()));

/** Sleeps until `ms` have passed since `from` (performance.now() at the produce: elapsed time, monotonic). */
const until = async (from: number, ms: number) => {
  const left = from + ms - performance.now();
  if (left > 0) await sleep(left);
};

describe("expiry on first delivery", () => {
  it("a message with ttl 1000 left 1.5 s is not delivered; the group's lag returns to 0 and the row says expired", async () => {
    const { t, s, g, sid, gid } = await setupGroup(T(), "expiry.ttl");
    const at = performance.now();
    const short = await s.produce({ n: "short" }, { ttl: 1000 });
    await s.produce({ n: "long" }, { ttl: 600_000 });
    const plain = await s.produce({ n: "plain" });
    const stored = await t.sql<{ options: unknown }>(`SELECT options FROM ${SCHEMA}.message_log_${sid} ORDER BY id`);
    expect(stored.map((r) => r.options)).toEqual([{ ttl: 1000 }, { ttl: 600_000 }, null]);
    await until(at, 1_500);

    const ran: unknown[] = [];
    const r = await pollPastFence(g, (m: Message) => void ran.push(m.payload), { until: committed(plain.id), drain: true });
    expect(ran).toEqual([{ n: "long" }, { n: "plain" }]);
    expect(r).toMatchObject({ expired: 1, started: 2, succeeded: 2, leaseExpired: 0 });

    const p = await g.progress();
    expect(p.lag).toBe("0");
    expect(p.exceptions).toMatchObject({ expired: 1, dead: 0, ready: 0 });
    const rows = await exceptionRows(t, sid, gid);
    expect(rows.map((x) => [x.message_id, x.status, x.attempts, x.lease_token])).toEqual([[short.id, "expired", 0, null]]);
    expect(rows[0].last_error).toMatch(/^expired: not started/);
    // Not an attempt: nothing in the delivery log (mode failures).
    expect(await deliveryLogRows(t, sid, gid)).toEqual([]);
    const listed = await g.failures({ status: "expired" });
    expect(listed.map((f) => [f.messageId, f.status, f.payload])).toEqual([[short.id, "expired", { n: "short" }]]);
    expect(await g.failures()).toEqual([]);
    await s.maintain();
    expect((await g.history({})).at(-1)?.exceptions).toMatchObject({ expired: 1, dead: 0 });
    await checkInvariants(t, sid);

    // Nothing left to do: the expired row is terminal.
    const again = await g.poll(() => void ran.push("again"));
    expect(again).toMatchObject({ idle: true, started: 0 });
    expect(ran).toHaveLength(2);
  });

  it("expiresAt as a Date or epoch ms; produceBatch, produceInTx and SQL produce() store it the same way", async () => {
    const { t, s, g, sid } = await setupGroup(T(), "expiry.forms");
    const past = Date.now() - 1;
    await s.produce({ n: 1 }, { expiresAt: new Date(past) });
    await s.produceBatch([{ payload: { n: 2 }, expiresAt: past }, { payload: { n: 3 }, ttl: 600_000 }, { payload: { n: 4 } }]);
    await t.sql(`SELECT ${SCHEMA}.produce('expiry.forms', '{"n": 5}', options => $1::jsonb)`, [JSON.stringify({ ttl: 1, message: { timeout: 5000 } })]);
    await t.sql(`SELECT * FROM ${SCHEMA}.produce_batch('expiry.forms', $1::jsonb)`, [JSON.stringify([{ payload: { n: 6 }, options: { expiresAt: past } }])]);
    const tx = await t.pool.connect();
    try {
      await tx.query("BEGIN");
      await s.produceInTx(tx, { n: 7 }, { expiresAt: past, key: "k" });
      await tx.query("COMMIT");
    } finally {
      tx.release();
    }
    const stored = await t.sql<{ options: unknown }>(`SELECT options FROM ${SCHEMA}.message_log_${sid} ORDER BY id`);
    expect(stored.map((r) => r.options)).toEqual([
      { expiresAt: past }, { expiresAt: past }, { ttl: 600_000 }, null, { ttl: 1, timeout: 5000 }, { expiresAt: past }, { expiresAt: past },
    ]);
    await sleep(5);
    const ran: unknown[] = [];
    const r = await pollPastFence(g, (m: Message) => void ran.push(m.payload), { until: committed("7"), drain: true });
    expect(ran).toEqual([{ n: 3 }, { n: 4 }]);
    expect(r.expired).toBe(5);
    expect((await g.progress()).lag).toBe("0");
  });

  it("validation: expiresAt and ttl are exclusive, finite, ttl > 0 (SQL0015), in the library and in SQL", async () => {
    const { t, s } = await setupGroup(T(), "expiry.bad");
    for (const opts of [{ ttl: 0 }, { ttl: -5 }, { ttl: Number.NaN }, { ttl: Infinity }, { ttl: "1000" }, { expiresAt: Number.NaN },
      { expiresAt: new Date("nope") }, { expiresAt: "2030-01-01" }, { ttl: 1000, expiresAt: Date.now() + 1000 }]) {
      expect(await codeOf(s.produce({}, opts as never)), JSON.stringify(opts)).toBe("SQL0015");
    }
    expect(await codeOf(s.produceBatch([{ payload: {}, ttl: 0 }]))).toBe("SQL0015");
    for (const o of [{ ttl: 0 }, { ttl: "5" }, { ttl: 5, expiresAt: 5 }, { expiresAt: "soon" }]) {
      const e = await t.sql(`SELECT ${SCHEMA}.produce('expiry.bad', '{}', options => $1::jsonb)`, [JSON.stringify(o)]).then(() => null, (x: Error) => x);
      expect(e?.message, JSON.stringify(o)).toMatch(/^SQL0015 /);
    }
    expect(await t.sql(`SELECT count(*)::int AS n FROM ${SCHEMA}.message_log_${(await t.sql<{ id: string }>(`SELECT id::text FROM ${SCHEMA}.stream_config WHERE name = 'expiry.bad'`))[0].id}`)).toEqual([{ n: 0 }]);
  });
});

describe("a reclaimed range", () => {
  it("checks expiry as a fresh claim does: a range left unstarted and taken over after the ttl expires its message", async () => {
    const { t, s, g, sid, gid } = await setupGroup(T(), "expiry.reclaim");
    const at = performance.now();
    const first = await s.produce({ n: 1 }, { ttl: 1000 });
    const second = await s.produce({ n: 2 });
    const ran: unknown[] = [];
    const h = (m: Message) => void ran.push(m.payload);
    // A deadline too near for a 30 s timeout: the range is claimed, nothing starts, and it is released for a reclaim.
    const r1 = await pollPastFence(g, h, { opts: () => ({ deadline: Date.now() + 5_000 }) });
    expect(r1).toMatchObject({ started: 0, notStarted: 2, expired: 0 });
    expect(performance.now() - at, "the claim came before the ttl").toBeLessThan(1_000);
    await until(at, 1_500);
    const r2 = await pollPastFence(g, h, { until: committed(second.id) });
    expect(r2.rangesReclaimed + r2.rangesResumed).toBe(1);
    expect(r2).toMatchObject({ expired: 1, started: 1 });
    expect(ran).toEqual([{ n: 2 }]);
    expect((await exceptionRows(t, sid, gid)).map((x) => [x.message_id, x.status])).toEqual([[first.id, "expired"]]);
  });
});

describe("ordered keys pass an expired message", () => {
  it("a range: the expired first message of an ordered key does not hold the next one", async () => {
    const { t, s, g, sid, gid } = await setupGroup(T(), "expiry.ordered", { group: { message: { concurrency: "ordered" } } });
    const at = performance.now();
    const first = await s.produce({ n: 1 }, { key: "k", ttl: 1000 });
    const second = await s.produce({ n: 2 }, { key: "k" });
    await until(at, 1_500);
    const ran: unknown[] = [];
    await pollPastFence(g, (m: Message) => void ran.push(m.payload), { until: committed(second.id), drain: true });
    expect(ran).toEqual([{ n: 2 }]);
    expect((await exceptionRows(t, sid, gid)).map((x) => [x.message_id, x.status])).toEqual([[first.id, "expired"]]);
    expect(await g.blockedKeys()).toEqual([]);
    await checkInvariants(t, sid);
  });

  it("a retry row whose message expires ends expired instead of running, and the key's deferred message runs", async () => {
    const { t, s, g, sid, gid } = await setupGroup(T(), "expiry.retry", { group: { message: { concurrency: "ordered" } } });
    const at = performance.now();
    const first = await s.produce({ n: 1 }, { key: "k", ttl: 3_000 });
    const second = await s.produce({ n: 2 }, { key: "k" });
    const ran: unknown[] = [];
    const h = (m: Message) => {
      ran.push(m.payload);
      if ((m.payload as { n: number }).n === 1) throw new Error("not yet");
    };
    await pollPastFence(g, h);
    expect(performance.now() - at, "the first delivery ran before the ttl").toBeLessThan(3_000);
    expect(ran).toEqual([{ n: 1 }]);
    expect((await exceptionRows(t, sid, gid)).map((x) => [x.message_id, x.status])).toEqual([[first.id, "ready"], [second.id, "deferred"]]);

    await until(at, 3_200);
    await makeDue(t, sid);
    const r = await pollPastFence(g, h, { until: committed(second.id), drain: true });
    expect(ran).toEqual([{ n: 1 }, { n: 2 }]);
    expect(r).toMatchObject({ expired: 1 });
    const rows = await exceptionRows(t, sid, gid);
    expect(rows.map((x) => [x.message_id, x.status, x.attempts, x.lease_token])).toEqual([[first.id, "expired", 1, null]]);
    expect(rows[0].last_error).toMatch(/^expired: not started/);
    expect((await g.progress()).lag).toBe("0");
    await checkInvariants(t, sid);
  });
});

describe("redrive and metrics", () => {
  it("redrive runs an expired message anyway: by ids, or by a filter with status 'expired' (all: true alone leaves it)", async () => {
    const { t, s, g, sid, gid } = await setupGroup(T(), "expiry.redrive");
    const a = await s.produce({ n: "a" }, { expiresAt: Date.now() - 1 });
    const b = await s.produce({ n: "b" }, { expiresAt: Date.now() - 1 });
    const ran: unknown[] = [];
    const h = (m: Message) => void ran.push(m.payload);
    await pollPastFence(g, h, { until: committed(b.id), drain: true });
    expect(ran).toEqual([]);
    expect((await g.progress()).exceptions.expired).toBe(2);

    expect(await g.redrive({ all: true })).toEqual({ redriven: 0, skipped: 0 });
    expect(await g.redrive({ ids: [a.id] }, { reason: "run it anyway" })).toEqual({ redriven: 1, skipped: 0 });
    expect((await deliveryLogRows(t, sid, gid, a.id)).at(-1)).toMatchObject({ status: "redriven", error: "redriven: run it anyway" });
    const r = await pollPastFence(g, h, { until: (x) => x.started > 0 });
    expect(r).toMatchObject({ started: 1, succeeded: 1, expired: 0 });
    expect(ran).toEqual([{ n: "a" }]);

    expect(await g.redrive({ all: true, status: "expired" })).toEqual({ redriven: 1, skipped: 0 });
    await pollPastFence(g, h, { until: (x) => x.started > 0 });
    expect(ran).toEqual([{ n: "a" }, { n: "b" }]);
    expect(await exceptionRows(t, sid, gid)).toEqual([]);
    expect(await codeOf(g.redrive({ all: true, status: "ready" as never }))).toBe("SQL0030");
  });

  it("the poll's report counts expired messages, and the EMF document carries them as Expired", async () => {
    const { s, g } = await setupGroup(T(), "expiry.metric");
    for (let i = 0; i < 3; i++) await s.produce({ i }, { expiresAt: Date.now() - 1 });
    const r = await pollPastFence(g, () => {}, { until: committed("3"), drain: true });
    expect(r.expired).toBe(3);
    const doc = pollDocument({ stream: "expiry.metric", group: "g", report: r, durationMs: 1 });
    expect(doc.Expired).toBe(3);
    expect(doc.LeaseExpired).toBe(0);
  });
});

describe("the operator CLI", () => {
  async function cli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
    const child = spawnNode({ script: "packages/cli/dist/bin.js", args, env: { DATABASE_URL: url(), SQLSTREAMS_SCHEMA: undefined } });
    child.process.stdin?.end();
    const exit = await child.waitForExit(60_000);
    return { code: exit.code, stdout: child.lines.join("\n"), stderr: child.stderr() };
  }

  it("status shows EXPIRED, failures --status expired lists the rows, redrive --expired --all puts them back", async () => {
    const { s, g, sid, gid, t } = await setupGroup(T(), "expiry.cli");
    await s.produce({ n: 1 }, { expiresAt: 0 });
    await s.produce({ n: 2 });
    await pollPastFence(g, () => {}, { until: committed("2"), drain: true });

    const status = await cli(["status", "--stream", "expiry.cli"]);
    expect(status.code, status.stderr).toBe(0);
    const lines = status.stdout.split("\n");
    const header = lines[0].split(/\s+/);
    const row = lines.find((l) => l.startsWith("expiry.cli"))?.split(/\s+/) ?? [];
    expect(row[header.indexOf("EXPIRED")]).toBe("1");
    expect(row[header.indexOf("DEAD")]).toBe("0");

    const listed = await cli(["failures", "--stream", "expiry.cli", "--group", "g", "--status", "expired", "--json"]);
    expect(listed.code, listed.stderr).toBe(0);
    expect((JSON.parse(listed.stdout) as { rows: { messageId: string; status: string }[] }).rows.map((r) => [r.messageId, r.status])).toEqual([["1", "expired"]]);

    const none = await cli(["redrive", "--stream", "expiry.cli", "--group", "g", "--all", "--json"]);
    expect(JSON.parse(none.stdout)).toMatchObject({ redriven: 0 });
    const back = await cli(["redrive", "--stream", "expiry.cli", "--group", "g", "--all", "--expired", "--json"]);
    expect(back.code, back.stderr).toBe(0);
    expect(JSON.parse(back.stdout)).toMatchObject({ redriven: 1, skipped: 0 });
    expect((await exceptionRows(t, sid, gid)).map((x) => [x.message_id, x.status])).toEqual([["1", "ready"]]);
  });
});
