// Group independence, redeclaration, inspection and operations (docs/guide/configuration.md, docs/guide/operations.md; scenarios C16,
// C29, C31, C32, C33, C34).
import { readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { Permanent, type ConsumerConfig, type Handler, type Message } from "@sqlstreams/core";
import { useFreshDatabase } from "../../support/db.js";
import { checkInvariants, tableSnapshot } from "../../support/invariants.js";
import { SCHEMA, type SetupOptions, type StreamTable, type TestClient, committed, count, cursor, deliveryLogRows, exceptionRows, groupIdOf, latch, makeDue, pollPastFence, setupGroup, table, testClient } from "../../support/streams.js";

const url = useFreshDatabase();
let shared: TestClient | undefined;
const T = () => (shared ??= testClient(url()));

const setup = (stream: string, opts: SetupOptions = {}) => setupGroup(T(), stream, opts);

const row = (r: { message_id: string; status: string; attempts: number; delays: number; lease_token: string | null }) => ({
  message_id: r.message_id, status: r.status, attempts: r.attempts, delays: r.delays, lease_token: r.lease_token,
});

describe("group independence (C16)", () => {
  it("C16: one group's outcome for a message never changes another group's rows or cursor", async () => {
    const { t, s, sid } = await setup("c16.independence", { groupName: "g7" });
    const g7 = s.consumer("g7");
    const g8 = s.consumer("g8");
    await g8.register();
    const gid7 = await groupIdOf(t, "g7", "c16.independence");
    const gid8 = await groupIdOf(t, "g8", "c16.independence");
    await s.produceBatch([1, 2, 3, 4, 5].map((n) => ({ payload: { n } })));
    const h7 = (m: Message<{ n: number }>) => {
      if (m.payload.n === 3 && m.attempt === 0) throw new Error("g7 fails 3 once");
    };
    const h8 = (m: Message<{ n: number }>) => {
      if (m.payload.n === 5) throw Permanent("g8 rejects 5");
    };
    await pollPastFence(g7, h7 as Handler);
    const g7Rows = await exceptionRows(t, sid, gid7);
    await pollPastFence(g8, h8 as Handler);
    expect(await exceptionRows(t, sid, gid7)).toEqual(g7Rows);
    expect(g7Rows.map(row)).toEqual([{ message_id: "3", status: "ready", attempts: 1, delays: 0, lease_token: null }]);
    expect((await exceptionRows(t, sid, gid8)).map(row)).toEqual([{ message_id: "5", status: "dead", attempts: 0, delays: 0, lease_token: null }]);
    expect((await deliveryLogRows(t, sid, gid7)).map((r) => [r.message_id, r.status])).toEqual([["3", "failure"]]);
    expect((await deliveryLogRows(t, sid, gid8)).map((r) => [r.message_id, r.status])).toEqual([["5", "failure"]]);
    expect(await cursor(t, sid, gid7)).toMatchObject({ claimed: "5", committed: "2" });
    expect(await cursor(t, sid, gid8)).toMatchObject({ claimed: "5", committed: "5" });
    expect((await g7.progress()).exceptions).toMatchObject({ ready: 1, dead: 0 });
    expect((await g8.progress()).exceptions).toMatchObject({ ready: 0, dead: 1 });
    await checkInvariants(t, sid);

    // g8 operations do not touch g7, and g7's retry does not touch g8.
    await g8.redrive({ ids: ["5"] }, { reason: "g8 only" });
    expect(await exceptionRows(t, sid, gid7)).toEqual(g7Rows);
    await g8.poll(() => {});
    expect(await exceptionRows(t, sid, gid8)).toEqual([]);
    expect(await exceptionRows(t, sid, gid7)).toEqual(g7Rows);
    await g8.pause();
    const g8Rows = await deliveryLogRows(t, sid, gid8);
    await makeDue(t, sid);
    await g7.poll(h7 as Handler);
    expect(await exceptionRows(t, sid, gid7)).toEqual([]);
    expect(await cursor(t, sid, gid7)).toMatchObject({ claimed: "5", committed: "5" });
    expect(await deliveryLogRows(t, sid, gid8)).toEqual(g8Rows);
    expect((await g8.progress()).paused).toBe(true);
    expect((await g7.progress()).paused).toBe(false);
    await checkInvariants(t, sid);
  });
});

describe("configuration (C29)", () => {
  it("C29: invalid redeclarations are rejected with codes and leave the stored config unchanged", async () => {
    const { t, g, gid } = await setup("c29.invalid", { group: { message: { retry: { maxRetries: 4 } } } });
    const stored = async () => (await t.sql(`SELECT config, updated_at, paused FROM ${SCHEMA}.consumer_group_config WHERE id = $1`, [gid]))[0];
    const before = await stored();
    await expect(g.register({ message: { retry: { baseDelay: 5000, maxDelay: 1000 } } })).rejects.toMatchObject({ code: "SQL0014" });
    await expect(g.register({ message: { retry: { maxRetries: 4, bogus: 1 } } } as ConsumerConfig)).rejects.toMatchObject({ code: "SQL0013" });
    await expect(g.register({ messageMin: { timeout: 60_000 } })).rejects.toMatchObject({ code: "SQL0014" });
    await expect(g.register({ message: { timeout: 0 } })).rejects.toMatchObject({ code: "SQL0013" });
    expect(await stored()).toEqual(before);
  });

  it("C29: raising maxRetries while a row waits at attempts 3 gives it attempts 3, 4 and 5; start: 'head' leaves the cursor", async () => {
    const { t, s, g, sid, gid } = await setup("c29.redeclare");
    await s.produce({ fails: true });
    const calls: number[] = [];
    const h = ((m: Message<{ fails?: boolean }>) => {
      if (!m.payload.fails) return;
      calls.push(m.attempt);
      throw new Error(`fail ${m.attempt}`);
    }) as Handler;
    await pollPastFence(g, h);
    for (let i = 0; i < 2; i++) {
      await makeDue(t, sid);
      await g.poll(h);
    }
    expect((await exceptionRows(t, sid, gid)).map(row)).toEqual([{ message_id: "1", status: "ready", attempts: 3, delays: 0, lease_token: null }]);
    await s.produce({}); // a head beyond the cursor: redeclaring with start 'head' must not jump to it
    const before = await cursor(t, sid, gid);
    expect(before).toMatchObject({ claimed: "1", committed: "0" });
    await g.register({ message: { retry: { maxRetries: 5 } }, start: "head" });
    expect(await cursor(t, sid, gid)).toEqual(before);
    for (let i = 0; i < 5; i++) {
      const e = (await exceptionRows(t, sid, gid)).find((x) => x.message_id === "1");
      if (e?.status === "dead") break;
      await makeDue(t, sid);
      await g.poll(h);
    }
    expect(calls).toEqual([0, 1, 2, 3, 4, 5]);
    expect((await exceptionRows(t, sid, gid)).map(row)).toEqual([{ message_id: "1", status: "dead", attempts: 5, delays: 0, lease_token: null }]);
    await pollPastFence(g, h, { until: committed("2") });
    await checkInvariants(t, sid);
  });
});

describe("redrive (C31)", () => {
  async function twoDead(stream: string, mode: "failures" | "off" = "failures") {
    const x = await setup(stream, { stream: { deliveryLog: mode } });
    await x.s.produceBatch([1, 2, 3, 4, 5, 6].map((n) => ({ payload: { n } })));
    const state = { broken: true, seen: [] as [string, number][] };
    const h = (m: Message<{ n: number }>) => {
      state.seen.push([m.id, m.attempt]);
      if (state.broken && m.payload.n >= 5) throw new Error(`Downstream unavailable for ${m.payload.n}`);
    };
    await pollPastFence(x.g, h as Handler);
    for (let i = 0; i < 3; i++) {
      await makeDue(x.t, x.sid);
      await x.g.poll(h as Handler);
    }
    expect((await exceptionRows(x.t, x.sid, x.gid)).map(row)).toEqual([
      { message_id: "5", status: "dead", attempts: 3, delays: 0, lease_token: null },
      { message_id: "6", status: "dead", attempts: 3, delays: 0, lease_token: null },
    ]);
    expect((await cursor(x.t, x.sid, x.gid)).committed).toBe("6");
    return { ...x, state, h: h as Handler };
  }

  it("C31: redrive by ids and by all puts dead rows back with a fresh budget and an audit row; the cursor never moves back", async () => {
    const { t, g, sid, gid, state, h } = await twoDead("c31.redrive");
    const dead5 = (await exceptionRows(t, sid, gid))[0];
    expect(await g.redrive({ ids: ["5"] }, { reason: "fixed" })).toEqual({ redriven: 1, skipped: 0 });
    const [r5, r6] = await exceptionRows(t, sid, gid);
    expect(row(r5)).toEqual({ message_id: "5", status: "ready", attempts: 0, delays: 0, lease_token: null });
    expect(r5.last_error).toBe(dead5.last_error);
    expect(Math.abs(r5.gap_ms)).toBeLessThanOrEqual(250);
    expect(r6.status).toBe("dead");
    expect((await deliveryLogRows(t, sid, gid, "5")).at(-1)).toEqual({ message_id: "5", attempt: 3, status: "redriven", error: "redriven: fixed" });
    expect((await g.progress()).exceptions).toMatchObject({ ready: 1, dead: 1 });
    await checkInvariants(t, sid);

    state.broken = false;
    state.seen.length = 0;
    const r = await g.poll(h);
    expect(r).toMatchObject({ started: 1, succeeded: 1 });
    expect(state.seen).toEqual([["5", 0]]);
    expect((await exceptionRows(t, sid, gid)).map((x) => x.message_id)).toEqual(["6"]);
    expect((await cursor(t, sid, gid)).committed).toBe("6");
    await checkInvariants(t, sid);

    expect(await g.redrive({ all: true })).toEqual({ redriven: 1, skipped: 0 });
    expect((await deliveryLogRows(t, sid, gid, "6")).at(-1)).toEqual({ message_id: "6", attempt: 3, status: "redriven", error: "redriven: no reason given" });
    // 6 is no longer dead, 1 has no row, 999 does not exist: all skipped
    expect(await g.redrive({ ids: ["6", 1, 999n] })).toEqual({ redriven: 0, skipped: 3 });
    await checkInvariants(t, sid);
    // A redriven row that fails again starts over with the initial backoff, still below committed.
    state.broken = true;
    await g.poll(h);
    const [again] = await exceptionRows(t, sid, gid);
    expect(row(again)).toEqual({ message_id: "6", status: "ready", attempts: 1, delays: 0, lease_token: null });
    expect(Math.abs(again.gap_ms - 5_000)).toBeLessThanOrEqual(250);
    expect((await cursor(t, sid, gid)).committed).toBe("6");
    expect((await deliveryLogRows(t, sid, gid, "6")).map((x) => [x.attempt, x.status])).toEqual([
      [0, "failure"], [1, "failure"], [2, "failure"], [3, "failure"], [3, "redriven"], [0, "failure"],
    ]);
    await checkInvariants(t, sid);
  });

  it("C31: filters match last_error case-insensitively and updated_at; rows without a message are skipped", async () => {
    const { t, s, g, sid, gid } = await setup("c31.filter");
    await s.produceBatch([{ payload: "a" }, { payload: "b" }, { payload: "c" }]);
    await pollPastFence(g, ((m: Message<string>) => {
      throw Permanent(new Error(m.payload === "a" ? "ALPHA broke" : "beta broke"));
    }) as Handler);
    const [{ now }] = await t.sql<{ now: Date }>(`SELECT now() AS now`);
    expect(await g.redrive({ deadBefore: new Date(now.getTime() - 3_600_000) })).toEqual({ redriven: 0, skipped: 0 });
    expect(await g.redrive({ errorContains: "alpha" }, { reason: "alpha fixed" })).toEqual({ redriven: 1, skipped: 0 });
    expect((await exceptionRows(t, sid, gid)).map((x) => [x.message_id, x.status])).toEqual([["1", "ready"], ["2", "dead"], ["3", "dead"]]);
    expect(await g.redrive({ deadSince: new Date(now.getTime() - 3_600_000), limit: 1 })).toEqual({ redriven: 1, skipped: 0 });
    expect((await exceptionRows(t, sid, gid)).map((x) => x.status)).toEqual(["ready", "ready", "dead"]);
    await t.sql(`DELETE FROM ${SCHEMA}.message_log_${sid} WHERE id = 3`);
    expect(await g.redrive({ ids: ["3"] })).toEqual({ redriven: 0, skipped: 1 });
    expect((await exceptionRows(t, sid, gid)).map((x) => x.status)).toEqual(["ready", "ready", "dead"]);
    await checkInvariants(t, sid);
  });

  it("C31: redrive re-resolves the concurrency with the group's current config", async () => {
    const { t, s, g, sid, gid } = await setup("c31.reresolve");
    await s.produceBatch([{ payload: 1, key: "k" }, { payload: 2 }]);
    await pollPastFence(g, () => {
      throw Permanent("no");
    });
    expect((await exceptionRows(t, sid, gid)).map((x) => [x.message_id, x.concurrency])).toEqual([["1", "parallel"], ["2", "parallel"]]);
    await g.register({ concurrencyOverride: "exclusive" });
    expect(await g.redrive({ all: true })).toEqual({ redriven: 2, skipped: 0 });
    expect((await exceptionRows(t, sid, gid)).map((x) => [x.message_id, x.status, x.concurrency])).toEqual([["1", "ready", "exclusive"], ["2", "ready", "parallel"]]);
    await checkInvariants(t, sid);
  });

  it("C31: mode off redrives without a delivery-log row", async () => {
    const { t, g, sid, gid } = await twoDead("c31.off", "off");
    expect(await g.redrive({ ids: ["5", "6"] }, { reason: "quiet" })).toEqual({ redriven: 2, skipped: 0 });
    expect((await exceptionRows(t, sid, gid)).map((x) => [x.status, x.attempts])).toEqual([["ready", 0], ["ready", 0]]);
    expect(await count(t, `delivery_log_${sid}`)).toBe(0);
    await checkInvariants(t, sid, { redriven: ["5", "6"] });
  });

  it("C31: invalid selectors are rejected with SQL0030 before anything is written", async () => {
    const { t, g, sid } = await setup("c31.invalid");
    const before = await tableSnapshot(t, sid);
    const bad: unknown[] = [
      undefined, null, [], {}, { limit: 5 }, { all: false }, { ids: [] }, { ids: ["x"] }, { ids: "5" },
      { ids: ["1"], all: true }, { bogus: 1 }, { errorContains: "" }, { all: true, limit: 0 }, { all: true, limit: 10_001 },
      { deadSince: "not a date" }, { ids: Array.from({ length: 10_001 }, (_, i) => String(i + 1)) },
    ];
    for (const sel of bad) {
      await expect(g.redrive(sel as never), JSON.stringify(sel)?.slice(0, 40)).rejects.toMatchObject({ code: "SQL0030" });
    }
    expect(await tableSnapshot(t, sid)).toEqual(before);
  });
});

describe("seek (C32)", () => {
  it("C32: seek refuses open leases, rewinds and replays, seeks by time, rejects targets outside the log, and force takes leases away", async () => {
    const { t, s, g, sid, gid } = await setup("c32.seek");
    for (let i = 1; i <= 50; i++) {
      await s.produce({ n: i });
      await sleep(2); // distinct created_at values for seek({ time })
    }
    await pollPastFence(g, ((m: Message<{ n: number }>) => {
      if (m.payload.n === 10 || m.payload.n === 30) throw Permanent("bad input");
    }) as Handler, { opts: { batchLimit: 50 } });
    expect(await cursor(t, sid, gid)).toMatchObject({ claimed: "50", committed: "50" });

    // An open range lease refuses the seek.
    await s.produce({ n: 51 });
    const entered = latch();
    const release = latch();
    const blocked = pollPastFence(g, async () => {
      entered.open();
      await release.promise;
    });
    await entered.promise;
    expect(await g.progress()).toMatchObject({ openLeases: 1, expiredLeases: 0 });
    await expect(g.seek({ id: "21" })).rejects.toMatchObject({ code: "SQL0028" });
    await g.pause();
    await expect(g.seek({ id: "21" })).rejects.toMatchObject({ code: "SQL0028" });
    release.open();
    expect(await blocked).toMatchObject({ succeeded: 1, leaseLost: 0 });
    await checkInvariants(t, sid);

    // Paused, no leases: rewind to 21.
    const res = await g.seek({ id: "21" });
    expect(res).toMatchObject({ claimed: "20", committed: "20", previous: { claimed: "51", committed: "51" }, deletedRows: 1 });
    expect(await cursor(t, sid, gid)).toMatchObject({ claimed: "20", committed: "20" });
    expect((await exceptionRows(t, sid, gid)).map((x) => [x.message_id, x.status])).toEqual([["10", "dead"]]); // 30 deleted, 10 kept
    expect(t.events.some((e) => e.code === "SEEK" && e.stream === "c32.seek")).toBe(true);
    await checkInvariants(t, sid, { afterSeek: true });
    await g.resume();
    const seen: string[] = [];
    const replay = await g.drain((m) => void seen.push(m.id));
    expect(replay.committedAfter).toBe("51");
    expect(seen).toEqual(Array.from({ length: 31 }, (_, i) => String(21 + i)));
    await checkInvariants(t, sid);

    // By time: the first id created at or after it.
    const [{ at }] = await t.sql<{ at: Date }>(`SELECT created_at AS at FROM ${SCHEMA}.message_log_${sid} WHERE id = 35`);
    const [{ earlier }] = await t.sql<{ earlier: boolean }>(`SELECT created_at < $1 AS earlier FROM ${SCHEMA}.message_log_${sid} WHERE id = 34`, [at]);
    expect(earlier).toBe(true);
    expect(await g.seek({ time: at })).toMatchObject({ claimed: "34", committed: "34" });
    await checkInvariants(t, sid, { afterSeek: true });
    // A time after every message: the visible head (moving forward skips).
    expect(await g.seek({ time: new Date(Date.now() + 3_600_000) })).toMatchObject({ claimed: "51", committed: "51" });
    await checkInvariants(t, sid, { afterSeek: true });
    // Outside the log.
    await expect(g.seek({ id: "1000" })).rejects.toMatchObject({ code: "SQL0029" });
    await expect(g.seek({ id: "-1" })).rejects.toMatchObject({ code: "SQL0029" });
    await expect(g.seek({} as never)).rejects.toMatchObject({ code: "SQL0015" });
    expect(await cursor(t, sid, gid)).toMatchObject({ claimed: "51", committed: "51" });

    // force: the open lease is deleted and the old poll's commit writes nothing.
    await s.produce({ n: 52 });
    const entered2 = latch();
    const release2 = latch();
    const old = pollPastFence(g, async () => {
      entered2.open();
      await release2.promise;
      throw new Error("would have written an exception row");
    });
    await entered2.promise;
    await expect(g.seek({ id: "41" })).rejects.toMatchObject({ code: "SQL0028" });
    expect(await g.seek({ id: "41" }, { force: true })).toMatchObject({ claimed: "40", committed: "40" });
    expect(await count(t, `claim_lease_${sid}`, "consumer_group_id = $1", [gid])).toBe(0);
    const deliveryLogBefore = await deliveryLogRows(t, sid, gid);
    release2.open();
    expect(await old).toMatchObject({ leaseLost: 1, failed: 0 });
    expect((await exceptionRows(t, sid, gid)).map((x) => x.message_id)).toEqual(["10"]);
    expect(await deliveryLogRows(t, sid, gid)).toEqual(deliveryLogBefore);
    expect(t.events.some((e) => e.code === "SQL0034" && e.stream === "c32.seek")).toBe(true);
    await checkInvariants(t, sid, { afterSeek: true });
    seen.length = 0;
    await g.drain((m) => void seen.push(m.id));
    expect(seen).toEqual(Array.from({ length: 12 }, (_, i) => String(41 + i)));
    expect(await cursor(t, sid, gid)).toMatchObject({ claimed: "52", committed: "52" });
    await checkInvariants(t, sid);
  });

  it("C32: force puts inflight and reserved rows back to ready without a charge and deletes key leases", async () => {
    const { t, s, g, sid, gid } = await setup("c32.force.rows");
    await s.produceBatch([{ payload: 1 }, { payload: 2 }, { payload: 3 }]);
    await pollPastFence(g, ((m: Message<number>) => {
      if (m.payload < 3) throw new Error("x");
    }) as Handler);
    await t.sql(`UPDATE ${SCHEMA}.exception_queue_${sid} SET status = 'inflight', lease_token = gen_random_uuid(), lease_expires_at = now() + interval '1 minute' WHERE message_id = 1`);
    await t.sql(`UPDATE ${SCHEMA}.exception_queue_${sid} SET lease_token = gen_random_uuid(), lease_expires_at = now() + interval '1 minute' WHERE message_id = 2`);
    await t.sql(`INSERT INTO ${SCHEMA}.message_key_lease_${sid} VALUES ($1, 'k', gen_random_uuid(), now() + interval '1 minute')`, [gid]);
    await expect(g.seek({ id: "3" })).rejects.toMatchObject({ code: "SQL0028" });
    expect(await g.seek({ id: "3" }, { force: true })).toMatchObject({ claimed: "2", committed: "0", deletedRows: 0 });
    expect((await exceptionRows(t, sid, gid)).map(row)).toEqual([
      { message_id: "1", status: "ready", attempts: 1, delays: 0, lease_token: null },
      { message_id: "2", status: "ready", attempts: 1, delays: 0, lease_token: null },
    ]);
    expect(await count(t, `message_key_lease_${sid}`)).toBe(0);
    await checkInvariants(t, sid, { afterSeek: true });
  });
});

describe("pause (C33)", () => {
  it("C33: a paused group's poll returns at once and changes nothing, due rows included; resume brings the work back", async () => {
    const { t, s, g, sid, gid } = await setup("c33.pause");
    await s.produceBatch([{ payload: 1 }, { payload: 2 }, { payload: 3 }]);
    const seen: [string, number][] = [];
    const h = ((m: Message<number>) => {
      seen.push([m.id, m.attempt]);
      if (m.payload === 1 && m.attempt === 0) throw new Error("once");
    }) as Handler;
    await pollPastFence(g, h);
    await makeDue(t, sid);
    await s.produceBatch([{ payload: 4 }, { payload: 5 }]);
    await g.pause();
    const [{ paused_at }] = await t.sql<{ paused_at: Date }>(`SELECT paused_at FROM ${SCHEMA}.consumer_group_config WHERE id = $1`, [gid]);
    await g.pause(); // idempotent
    await g.register(); // redeclaring keeps paused
    expect((await g.progress()).paused).toBe(true);
    const before = await tableSnapshot(t, sid);
    expect(before.consumer_group_config).toEqual([expect.objectContaining({ paused: true })]);
    const [{ paused_at: again }] = await t.sql<{ paused_at: Date }>(`SELECT paused_at FROM ${SCHEMA}.consumer_group_config WHERE id = $1`, [gid]);
    expect(again).toEqual(paused_at);
    seen.length = 0;
    const mark = t.statements.length;
    const r = await g.poll(h);
    expect(r).toMatchObject({ paused: true, started: 0, rangesClaimed: 0, committedBefore: "0", committedAfter: "0" });
    const sent = t.statements.slice(mark);
    expect(sent.length).toBeLessThanOrEqual(2);
    for (const text of sent) {
      expect(text).not.toMatch(/^\s*(INSERT|UPDATE|DELETE|BEGIN)\b/i);
      expect(text).not.toMatch(/(claim|record_range|advance|start_exception|record_exception)_[0-9]+\(/);
    }
    expect(await g.drain(h)).toMatchObject({ paused: true, polls: 1, started: 0 });
    expect(seen).toEqual([]);
    expect(await tableSnapshot(t, sid)).toEqual(before);
    await checkInvariants(t, sid);

    await g.resume();
    await g.resume(); // idempotent
    const [{ p, pa }] = await t.sql<{ p: boolean; pa: Date | null }>(`SELECT paused AS p, paused_at AS pa FROM ${SCHEMA}.consumer_group_config WHERE id = $1`, [gid]);
    expect([p, pa]).toEqual([false, null]);
    const r2 = await g.poll(h);
    expect(r2.paused).toBe(false);
    await pollPastFence(g, h, { until: committed("5") });
    expect(seen.slice().sort()).toEqual([["1", 1], ["4", 0], ["5", 0]]);
    await checkInvariants(t, sid);
  });
});

/**
 * The dead-letter query of docs/guide/operations.md#operator-sql, verbatim from the page (the first
 * statement of its sql block), with the example stream's tables bound to stream `n`; the group
 * name is the page's.
 */
function deadLetterQuery(n: string): string {
  const page = readFileSync(new URL("../../../docs/guide/operations.md", import.meta.url), "utf8");
  const block = /## Operator SQL[\s\S]*?```sql\n([\s\S]*?)```/.exec(page);
  if (!block) throw new Error("docs/guide/operations.md has no Operator SQL block");
  const query = block[1].slice(0, block[1].indexOf(";") + 1);
  return query.replace(/sqlstreams\.(exception_queue|message_log)_1\b/g, (_, name: StreamTable) => table(n, name));
}

describe("inspection (C34)", () => {
  it("C34: progress() and failures() after a dead message; the docs/guide/operations.md dead-letter query returns the same row", async () => {
    const { t, s, g, sid, gid } = await setup("c34.inspect", { groupName: "fraud-scoring", group: { message: { retry: { maxRetries: 1 } } } });
    await s.produceBatch([1, 2, 3].map((n) => ({ payload: { order: n } })));
    const h = ((m: Message<{ order: number }>) => {
      if (m.payload.order === 2) throw new Error("card declined");
    }) as Handler;
    await pollPastFence(g, h);
    // While the row waits: lag shows it, and failures() lists it as ready.
    let p = await g.progress();
    expect(p).toMatchObject({ head: "3", claimed: "3", committed: "1", lag: "2", exceptions: { ready: 1, dead: 0 } });
    expect(p.oldestUnresolvedAgeMs).toBeGreaterThanOrEqual(0);
    expect((await g.failures({ status: "ready" })).map((f) => [f.messageId, f.attempts])).toEqual([["2", 1]]);
    // The oldest unresolved message is the lowest id above committed or an unresolved row's message,
    // not a newer resolved one (3 succeeded although it is above committed).
    await t.sql(`UPDATE ${SCHEMA}.message_log_${sid} SET created_at = now() - CASE id WHEN 2 THEN interval '1 hour' ELSE interval '2 hours' END WHERE id IN (2, 3)`);
    expect(Math.abs(((await g.progress()).oldestUnresolvedAgeMs ?? 0) - 3_600_000)).toBeLessThan(60_000);
    await makeDue(t, sid);
    await g.poll(h);

    p = await g.progress();
    expect(p).toEqual({
      stream: "c34.inspect", group: "fraud-scoring", paused: false, head: "3", claimed: "3", committed: "3", lag: "0",
      openLeases: 0, expiredLeases: 0, exceptions: { ready: 0, deferred: 0, inflight: 0, dead: 1, superseded: 0, expired: 0 },
      oldestUnresolvedAgeMs: null,
      // no retention configured: nothing is held; the floor is where every group has resolved to
      retention: { floor: "3", heldBy: null, held: false, heldForMs: null },
      concurrency: { max: null, running: 0, capped: 0, perKey: 1 }, blockedKeys: 0, rateLimit: null,
      scheduled: { waiting: 0, overdue: 0, nextDueAt: null },
    });
    const f = await g.failures();
    expect(f).toHaveLength(1);
    const [stored] = await t.sql<{ updated_at: Date; can_run_after: Date; created_at: Date }>(
      `SELECT e.updated_at, e.can_run_after, m.created_at FROM ${SCHEMA}.exception_queue_${sid} e JOIN ${SCHEMA}.message_log_${sid} m ON m.id = e.message_id
        WHERE e.consumer_group_id = $1 AND e.message_id = 2`,
      [gid],
    );
    expect(f[0]).toEqual({
      messageId: "2", key: null, status: "dead", payload: { order: 2 }, attempts: 1, delays: 0,
      lastError: expect.stringMatching(/^Error: card declined\n/), canRunAfter: stored.can_run_after, createdAt: stored.created_at,
      updatedAt: stored.updated_at, cursor: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z~2$/),
    });
    expect(await g.failures({ status: "ready" })).toEqual([]);

    const rows = await t.sql(deadLetterQuery(sid));
    expect(rows).toEqual([{ message_id: "2", payload: { order: 2 }, attempts: 1, last_error: f[0].lastError, updated_at: f[0].updatedAt }]);

    // Newest first, limit respected, arguments checked.
    await s.produce({ order: 4 });
    await pollPastFence(g, () => {
      throw Permanent("bad order");
    });
    expect((await g.failures()).map((x) => x.messageId)).toEqual(["4", "2"]);
    expect((await g.failures({ limit: 1 })).map((x) => x.messageId)).toEqual(["4"]);
    expect((await t.sql(deadLetterQuery(sid))).map((x) => x.message_id)).toEqual(["4", "2"]);
    await expect(g.failures({ limit: 0 })).rejects.toMatchObject({ code: "SQL0015" });
    await expect(g.failures({ limit: 1001 })).rejects.toMatchObject({ code: "SQL0015" });
    await expect(g.failures({ status: "superseded" as never })).rejects.toMatchObject({ code: "SQL0015" });
    await expect(s.consumer("nobody").progress()).rejects.toMatchObject({ code: "SQL0010" });
    await expect(s.consumer("nobody").failures()).rejects.toMatchObject({ code: "SQL0010" });
    await checkInvariants(t, sid);
  });
});
