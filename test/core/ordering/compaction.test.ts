// docs/protocol/ordering.md#compaction compaction and docs/guide/producing.md#compaction-heads head upsert (C20): the read filter, supersede of exception rows and
// of range messages found not head at their key lease, rank pinning, batches, validation.
import { describe, expect, it } from "vitest";
import type { Message } from "@sqlstreams/core";
import { useFreshDatabase } from "../../support/db.js";
import { checkInvariants } from "../../support/invariants.js";
import { SCHEMA, type TestClient, count, cursor, deliveryLogRows, exceptionRows, groupIdOf, makeDue, pollPastFence, streamIdOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();

/** A stream whose next id is `first`: `first − 1` unrelated messages, group registered at the head. */
async function setup(t: TestClient, name: string, first: number, config: Record<string, unknown> = {}) {
  const s = t.client.stream<{ v: string }>(name);
  await s.register();
  for (let left = first - 1; left > 0; left -= 1000) {
    await s.produceBatch(Array.from({ length: Math.min(1000, left) }, () => ({ payload: { v: "filler" } })));
  }
  const g = s.consumer("cg");
  await g.register({ start: "head", ...config });
  const n = await streamIdOf(t, name);
  const gid = await groupIdOf(t, "cg", name);
  return { s, g, n, gid };
}

async function heads(t: TestClient, n: string) {
  return t.sql<{ compaction_key: string; message_id: string | null; compaction_rank: string | null; schema_version: number | null }>(
    `SELECT compaction_key, message_id::text, compaction_rank::text, schema_version FROM ${SCHEMA}.compaction_head_${n} ORDER BY compaction_key`,
  );
}

describe("C20 compaction", () => {
  it("read filter: 101, 102, 103 of key K produced before any claim ⇒ only 103 delivered, no rows, committed passes all", async () => {
    const t = testClient(url());
    const { s, g, n, gid } = await setup(t, "compact.filter", 101);
    const ids = [];
    for (const v of ["a", "b", "c"]) ids.push((await s.produce({ v }, { key: "K", compaction: {} })).id);
    expect(ids).toEqual(["101", "102", "103"]);
    expect(await heads(t, n)).toEqual([{ compaction_key: "K", message_id: "103", compaction_rank: "0", schema_version: 1 }]);
    const stored = await t.sql<{ id: string; compaction_rank: string | null }>(
      `SELECT id::text, compaction_rank::text FROM ${SCHEMA}.message_log_${n} WHERE id > 100 ORDER BY id`,
    );
    expect(stored.map((r) => r.compaction_rank)).toEqual(["0", "0", "0"]);
    const seen: string[] = [];
    const r = await g.drain((m: Message<{ v: string }>) => void seen.push(`${m.id}:${m.payload.v}`));
    expect(seen).toEqual(["103:c"]);
    expect(r).toMatchObject({ succeeded: 1, superseded: 0 });
    expect(await exceptionRows(t, n, gid)).toEqual([]);
    expect(await deliveryLogRows(t, n, gid)).toEqual([]);
    expect((await cursor(t, n, gid)).committed).toBe("103");
    await checkInvariants(t, n);
  });

  it("filter applies on every range read; uncompacted messages of the same key are never filtered", async () => {
    const t = testClient(url());
    const { s, g, n, gid } = await setup(t, "compact.mixed", 1);
    await s.produce({ v: "c1" }, { key: "K", compaction: {} }); // 1
    await s.produce({ v: "plain1" }, { key: "K" }); // 2
    await s.produce({ v: "c2" }, { key: "K", compaction: {} }); // 3
    await s.produce({ v: "plain2" }, { key: "K" }); // 4
    const seen: string[] = [];
    await g.drain((m: Message<{ v: string }>) => void seen.push(m.payload.v));
    expect(seen).toEqual(["plain1", "c2", "plain2"]);
    await s.produce({ v: "c3" }, { key: "K", compaction: {} }); // 5
    await g.drain((m: Message<{ v: string }>) => void seen.push(m.payload.v));
    expect(seen).toEqual(["plain1", "c2", "plain2", "c3"]);
    expect((await cursor(t, n, gid)).committed).toBe("5");
    expect(await exceptionRows(t, n, gid)).toEqual([]);
  });

  it("supersede: 201 fails, 202 for the key succeeds, then 201 when due becomes superseded without running", async () => {
    const t = testClient(url());
    const { s, g, n, gid } = await setup(t, "compact.supersede", 201);
    expect((await s.produce({ v: "old" }, { key: "K", compaction: {} })).id).toBe("201");
    const seen: string[] = [];
    await pollPastFence(g, (m: Message) => {
      seen.push(`${m.id}@${m.attempt}`);
      throw new Error("fails once");
    });
    expect((await exceptionRows(t, n, gid)).map((r) => [r.message_id, r.status, r.attempts])).toEqual([["201", "ready", 1]]);
    expect((await s.produce({ v: "new" }, { key: "K", compaction: {} })).id).toBe("202");
    expect(await heads(t, n)).toMatchObject([{ compaction_key: "K", message_id: "202" }]);
    await pollPastFence(g, (m: Message) => void seen.push(`${m.id}@${m.attempt}`));
    expect(seen).toEqual(["201@0", "202@0"]);
    expect((await cursor(t, n, gid)).committed).toBe("200"); // 201 still unresolved
    await checkInvariants(t, n);

    await makeDue(t, n);
    const r = await g.poll((m: Message) => void seen.push(`${m.id}@${m.attempt}`));
    expect(seen).toEqual(["201@0", "202@0"]); // handler not called
    expect(r).toMatchObject({ superseded: 1, started: 0, committedAfter: "202" });
    const exceptionQueue = await exceptionRows(t, n, gid);
    expect(exceptionQueue.map((x) => [x.message_id, x.status, x.attempts, x.lease_token])).toEqual([["201", "superseded", 1, null]]);
    expect((await deliveryLogRows(t, n, gid, "201")).map((x) => [x.attempt, x.status, x.error])).toEqual([
      [0, "failure", expect.stringMatching(/^Error: fails once/)],
      [1, "superseded", "superseded by 202"],
    ]);
    await checkInvariants(t, n);

    // Never delivered again: superseded rows are not reservable, and it counts in progress().
    await t.sql(`UPDATE ${SCHEMA}.exception_queue_${n} SET can_run_after = now() - interval '1 hour', updated_at = now() - interval '1 hour'`);
    const again = await g.drain((m: Message) => void seen.push(`${m.id}@${m.attempt}`));
    expect(again.started + again.superseded).toBe(0);
    expect(seen).toEqual(["201@0", "202@0"]);
    expect((await g.progress()).exceptions).toMatchObject({ superseded: 1, ready: 0, deferred: 0 });
  });

  it("supersede at the key lease: a compacted exclusive range message that lost its head is resolved with no row", async () => {
    const t = testClient(url());
    const { s, g, n, gid } = await setup(t, "compact.keylease", 1, { concurrencyOverride: "exclusive" });
    await s.produce({ v: "trigger" }); // 1, keyless: runs first and produces a newer head for K
    await s.produce({ v: "v1" }, { key: "K", compaction: {} }); // 2, head when the range is read
    const seen: string[] = [];
    const r = await pollPastFence(g, async (m: Message<{ v: string }>) => {
      seen.push(`${m.id}:${m.payload.v}`);
      if (m.payload.v === "trigger") expect((await s.produce({ v: "v2" }, { key: "K", compaction: {} })).id).toBe("3");
    }, { opts: { batchLimit: 2, concurrency: 1 } });
    expect(seen).toEqual(["1:trigger"]);
    expect(r).toMatchObject({ superseded: 1, succeeded: 1 });
    expect(await exceptionRows(t, n, gid)).toEqual([]);
    expect((await deliveryLogRows(t, n, gid)).map((x) => [x.message_id, x.attempt, x.status, x.error])).toEqual([["2", 0, "superseded", "superseded by 3"]]);
    expect(await t.sql(`SELECT 1 FROM ${SCHEMA}.message_key_lease_${n}`)).toEqual([]);
    await g.drain((m: Message<{ v: string }>) => void seen.push(`${m.id}:${m.payload.v}`));
    expect(seen).toEqual(["1:trigger", "3:v2"]);
    expect((await cursor(t, n, gid)).committed).toBe("3");
    await checkInvariants(t, n);
  });

  it("a deferred compacted row becomes superseded when a newer head exists at its start", async () => {
    const t = testClient(url());
    const { s, g, n, gid } = await setup(t, "compact.deferred", 1, { concurrencyOverride: "exclusive" });
    await s.produce({ v: "b" }, { key: "K", compaction: {} }); // 1
    // K's lease held by another process (as a crashed poll's would be, until it expires): the
    // range's member 1 is deferred 'key busy'. (A key lease row alone, with no open range of another
    // poll: such a range would keep 1 from being claimed at all, docs/protocol/ordering.md#ranges-of-several-pollers.)
    await t.sql(
      `INSERT INTO ${SCHEMA}.message_key_lease_${n} (consumer_group_id, message_key, token, expires_at)
       VALUES ($1, 'K', gen_random_uuid(), now() + interval '1 hour')`,
      [gid],
    );
    const seen: string[] = [];
    await pollPastFence(g, (m: Message) => void seen.push(m.id), { opts: { batchLimit: 1 } });
    expect((await exceptionRows(t, n, gid)).map((x) => [x.message_id, x.status, x.concurrency])).toEqual([["1", "deferred", "exclusive"]]);
    await s.produce({ v: "c" }, { key: "K", compaction: {} }); // 2: new head
    await t.sql(`DELETE FROM ${SCHEMA}.message_key_lease_${n} WHERE consumer_group_id = $1`, [gid]);
    const r = await pollPastFence(g, (m: Message) => void seen.push(m.id), { drain: true, until: (x) => x.superseded > 0 });
    expect(seen).toEqual(["2"]);
    expect(r.superseded).toBe(1);
    expect((await exceptionRows(t, n, gid)).map((x) => [x.message_id, x.status, x.attempts])).toEqual([["1", "superseded", 0]]);
    expect((await deliveryLogRows(t, n, gid, "1")).map((x) => [x.attempt, x.status, x.error])).toEqual([
      [0, "deferred", "deferred: key busy"],
      [0, "superseded", "superseded by 2"],
    ]);
    expect((await cursor(t, n, gid)).committed).toBe("2");
    await checkInvariants(t, n);
  });

  it("rank pin: 301 rank 100, then 302 rank 0 ⇒ head stays 301 and 302 is filtered", async () => {
    const t = testClient(url());
    const { s, g, n, gid } = await setup(t, "compact.rank", 301);
    expect((await s.produce({ v: "pinned" }, { key: "K", compaction: { rank: 100 } })).id).toBe("301");
    expect((await s.produce({ v: "lower" }, { key: "K", compaction: { rank: 0 } })).id).toBe("302");
    expect(await heads(t, n)).toEqual([{ compaction_key: "K", message_id: "301", compaction_rank: "100", schema_version: 1 }]);
    const seen: string[] = [];
    await g.drain((m: Message) => void seen.push(m.id));
    expect(seen).toEqual(["301"]);
    expect((await cursor(t, n, gid)).committed).toBe("302");
    // Later writes with a lower rank never become head; an equal rank with a higher id does.
    expect((await s.produce({ v: "lower again" }, { key: "K", compaction: { rank: 99 } })).id).toBe("303");
    await g.drain((m: Message) => void seen.push(m.id));
    expect(seen).toEqual(["301"]);
    expect((await cursor(t, n, gid)).committed).toBe("303");
    expect((await s.produce({ v: "equal" }, { key: "K", compaction: { rank: 100 } })).id).toBe("304");
    expect(await heads(t, n)).toMatchObject([{ message_id: "304", compaction_rank: "100" }]);
    expect((await s.produce({ v: "negative" }, { key: "K", compaction: { rank: -5 } })).id).toBe("305");
    await g.drain((m: Message) => void seen.push(m.id));
    expect(seen).toEqual(["301", "304"]);
    expect(await exceptionRows(t, n, gid)).toEqual([]);
    await checkInvariants(t, n);
  });

  it("a batch with three K items upserts one head, the winner (higher rank, then higher id)", async () => {
    const t = testClient(url());
    const { s, g, n, gid } = await setup(t, "compact.batch", 1);
    const ids = (await s.produceBatch([
      { payload: { v: "k-r0" }, key: "K", compaction: {} },
      { payload: { v: "k-r5" }, key: "K", compaction: { rank: 5 } },
      { payload: { v: "other" }, key: "L", compaction: { rank: 1 } },
      { payload: { v: "k-r1" }, key: "K", compaction: { rank: 1 } },
      { payload: { v: "plain" }, key: "K" },
    ])).map((r) => r.id);
    expect(ids).toEqual(["1", "2", "3", "4", "5"]);
    expect(await heads(t, n)).toEqual([
      { compaction_key: "K", message_id: "2", compaction_rank: "5", schema_version: 1 },
      { compaction_key: "L", message_id: "3", compaction_rank: "1", schema_version: 1 },
    ]);
    // Same rank throughout: the last item (highest id) wins.
    const ids2 = (await s.produceBatch([
      { payload: { v: "m1" }, key: "M", compaction: {} },
      { payload: { v: "m2" }, key: "M", compaction: {} },
      { payload: { v: "m3" }, key: "M", compaction: {} },
    ])).map((r) => r.id);
    expect(ids2).toEqual(["6", "7", "8"]);
    expect((await heads(t, n)).find((h) => h.compaction_key === "M")).toMatchObject({ message_id: "8", compaction_rank: "0" });
    // A later batch competes with the stored head: rank 4 loses to the stored rank 5.
    await s.produceBatch([{ payload: { v: "k-r4" }, key: "K", compaction: { rank: 4 } }, { payload: { v: "k-r3" }, key: "K", compaction: { rank: 3 } }]);
    expect((await heads(t, n)).find((h) => h.compaction_key === "K")).toMatchObject({ message_id: "2", compaction_rank: "5" });
    const seen: string[] = [];
    await g.drain((m: Message<{ v: string }>) => void seen.push(m.payload.v));
    expect(seen).toEqual(["k-r5", "other", "plain", "m3"]);
    expect((await cursor(t, n, gid)).committed).toBe("10");
    await checkInvariants(t, n);
  });

  it("compaction needs a key and an integer rank (SQL0020); nothing is written", async () => {
    const t = testClient(url());
    const { s, n } = await setup(t, "compact.invalid", 1);
    await expect(s.produce({ v: "x" }, { compaction: {} })).rejects.toMatchObject({ code: "SQL0020" });
    await expect(s.produce({ v: "x" }, { key: "K", compaction: { rank: 1.5 } })).rejects.toMatchObject({ code: "SQL0020" });
    await expect(s.produce({ v: "x" }, { key: "K", compaction: { rank: Number.MAX_SAFE_INTEGER + 1 } })).rejects.toMatchObject({ code: "SQL0020" });
    await expect(s.produce({ v: "x" }, { key: "K", compaction: { rank: "1" as unknown as number } })).rejects.toMatchObject({ code: "SQL0020" });
    await expect(s.produceBatch([{ payload: { v: "ok" }, key: "K", compaction: {} }, { payload: { v: "x" }, compaction: {} }])).rejects.toMatchObject({ code: "SQL0020" });
    expect(await count(t, `message_log_${n}`)).toBe(0);
    expect(await count(t, `compaction_head_${n}`)).toBe(0);
    // A safe-integer rank at the bounds is accepted.
    await s.produce({ v: "max" }, { key: "K", compaction: { rank: Number.MAX_SAFE_INTEGER } });
    expect(await heads(t, n)).toMatchObject([{ compaction_rank: String(Number.MAX_SAFE_INTEGER) }]);
  });

  it("parallel compacted messages take no key lease; two groups filter independently of each other's progress", async () => {
    const t = testClient(url());
    const { s, g, n, gid } = await setup(t, "compact.groups", 1);
    const g2 = s.consumer("cg2");
    await g2.register();
    await s.produce({ v: "a" }, { key: "K", compaction: {} }); // 1
    const seen1: string[] = [];
    await g.drain(async (m: Message) => {
      seen1.push(m.id);
      expect(await t.sql(`SELECT 1 FROM ${SCHEMA}.message_key_lease_${n}`)).toEqual([]);
    });
    await s.produce({ v: "b" }, { key: "K", compaction: {} }); // 2
    await g.drain((m: Message) => void seen1.push(m.id));
    const seen2: string[] = [];
    await g2.drain((m: Message) => void seen2.push(m.id));
    expect(seen1).toEqual(["1", "2"]);
    expect(seen2).toEqual(["2"]);
    expect((await cursor(t, n, gid)).committed).toBe("2");
    expect((await cursor(t, n, await groupIdOf(t, "cg2", "compact.groups"))).committed).toBe("2");
  });
});
