// Destroying groups and streams: guarded by SQL0042 while there is live work (leases, unresolved
// rows) or retained messages, unless forced; everything of the group or stream goes, nothing else.
import { describe, expect, it } from "vitest";
import { isSqlStreamsError } from "@sqlstreams/core";
// Internal entry points (the API wires them into consumer.destroy() and stream.destroy()).
import { destroyGroup, destroyStream } from "../../../packages/core/dist/destroy.js";
import { useFreshDatabase } from "../../support/db.js";
import { SCHEMA, committed, count, expireLeases, groupIdOf, pollPastFence, progressIs, streamIdOf, testClient, whileHeld } from "../../support/streams.js";

const url = useFreshDatabase();

const code = (c: string) => (e: unknown) => isSqlStreamsError(e, c as never);

async function tablesOf(t: ReturnType<typeof testClient>, n: string): Promise<string[]> {
  const r = await t.sql<{ name: string }>(
    `SELECT c.relname AS name FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
      WHERE s.nspname = $1 AND c.relname ~ $2 ORDER BY 1`,
    [SCHEMA, `_${n}(_[0-9]+)?(_id_seq)?$`],
  );
  return r.map((x) => x.name);
}

async function functionsOf(t: ReturnType<typeof testClient>, n: string): Promise<string[]> {
  const r = await t.sql<{ name: string }>(
    `SELECT p.proname AS name FROM pg_proc p JOIN pg_namespace s ON s.oid = p.pronamespace
      WHERE s.nspname = $1 AND p.proname ~ $2 ORDER BY 1`,
    [SCHEMA, `_${n}$`],
  );
  return r.map((x) => x.name);
}

describe("destroy", () => {
  it("a group with unresolved rows or leases is refused unless forced; a clean one goes with all its rows", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream("d.orders");
    await s.register({ deliveryLog: "all" });
    const n = await streamIdOf(t, "d.orders");
    const a = s.consumer("a");
    const b = s.consumer("b");
    await a.register();
    await b.register();
    await s.produceBatch([{ payload: 1 }, { payload: 2 }, { payload: 3 }]);
    // a: message 2 fails once and waits as a ready row.
    await pollPastFence(a, (m) => {
      if (m.id === "2") throw new Error("later");
    }, { drain: true, until: progressIs((p) => p.claimed === "3" && p.exceptions.ready === 1) });
    await pollPastFence(b, () => {}, { drain: true, until: committed("3") });
    const gidA = await groupIdOf(t, "a");
    const gidB = await groupIdOf(t, "b");
    expect(await count(t, `exception_queue_${n}`, "consumer_group_id = $1 AND status = 'ready'", [gidA])).toBe(1);

    const before = t.statements.length;
    const refused = await a.destroy().then(
      () => null,
      (e: unknown) => e,
    );
    expect(isSqlStreamsError(refused, "SQL0042")).toBe(true);
    expect((refused as Error).message).toContain("1 unresolved exception row(s)");
    expect((refused as { details: Record<string, unknown> }).details).toMatchObject({ group: "a", ready: 1 });
    // Nothing was deleted.
    expect(t.statements.slice(before).some((x) => /DELETE/.test(x))).toBe(false);
    expect(await count(t, "consumer_group_config", "id = $1", [gidA])).toBe(1);

    // A range lease blocks too (ids inside it are unresolved), expired or not.
    await t.sql(`INSERT INTO ${SCHEMA}.claim_lease_${n} (consumer_group_id, token, low, high, expires_at) VALUES ($1, gen_random_uuid(), 3, 4, now() + interval '1 minute')`, [gidB]);
    await expect(b.destroy()).rejects.toSatisfy(code("SQL0042"));
    await expireLeases(t, n);
    await expect(b.destroy()).rejects.toSatisfy(code("SQL0042"));
    await t.sql(`DELETE FROM ${SCHEMA}.claim_lease_${n} WHERE consumer_group_id = $1`, [gidB]);
    // A live key lease blocks; an expired one does not.
    await t.sql(`INSERT INTO ${SCHEMA}.message_key_lease_${n} VALUES ($1, 'k', gen_random_uuid(), now() + interval '1 minute')`, [gidB]);
    await expect(b.destroy()).rejects.toSatisfy(code("SQL0042"));
    await expireLeases(t, n);
    const rb = await destroyGroup(t.client, "d.orders", "b", {});
    expect(rb).toMatchObject({ group: "b", forced: false, deleted: { exceptionRows: 0, deliveryLogRows: 3, rangeLeases: 0, keyLeases: 1 } });
    expect(await count(t, "consumer_group_config", "id = $1", [gidB])).toBe(0);
    expect(await count(t, `consumer_group_cursor_${n}`, "consumer_group_id = $1", [gidB])).toBe(0);
    expect(await count(t, `delivery_log_${n}`, "consumer_group_id = $1", [gidB])).toBe(0);

    // Forced: a's ready row and its log rows go; the stream and its messages stay.
    const ra = await destroyGroup(t.client, "d.orders", "a", { force: true });
    expect(ra).toMatchObject({ forced: true, live: { ready: 1 }, deleted: { exceptionRows: 1 } });
    expect(await count(t, `exception_queue_${n}`)).toBe(0);
    expect(await count(t, `delivery_log_${n}`)).toBe(0);
    expect(await count(t, `message_log_${n}`)).toBe(3);
    expect(t.events.filter((e) => e.code === "DESTROY").length).toBe(2);

    // Gone: using it says so; registering again starts a fresh cursor.
    await expect(a.progress()).rejects.toSatisfy(code("SQL0010"));
    await expect(a.destroy()).rejects.toSatisfy(code("SQL0010"));
    await expect(destroyGroup(t.client, "d.missing", "a", {})).rejects.toSatisfy(code("SQL0009"));
    await expect(destroyGroup(t.client, "d.orders", "Bad", {})).rejects.toSatisfy(code("SQL0008"));
    await expect(destroyGroup(t.client, "d.orders", "a", { force: "yes" } as never)).rejects.toSatisfy(code("SQL0015"));
    await a.register();
    const seen: string[] = [];
    await pollPastFence(a, (m) => void seen.push(m.id), { drain: true, until: committed("3") });
    expect(seen).toEqual(["1", "2", "3"]);
  });

  it("destroying a lagging group releases the retention it held", async () => {
    const t = testClient(url());
    const s = t.client.stream("d.lag");
    await s.register({ partitionSize: 10, retention: 1000 });
    const n = await streamIdOf(t, "d.lag");
    const fast = s.consumer("fast");
    const slow = s.consumer("slow");
    await fast.register();
    await slow.register();
    for (let i = 1; i <= 25; i++) await s.produce(i);
    await pollPastFence(fast, () => {}, { drain: true, until: committed("25") });
    await t.sql(`UPDATE ${SCHEMA}.message_log_${n} SET created_at = now() - interval '1 minute'`);
    const r1 = await s.maintain();
    expect(r1.partitionsDropped).toBe(0);
    expect(r1.retentionHeldBy?.group).toBe("slow");
    await slow.pause();
    await slow.destroy();
    const r2 = await s.maintain();
    expect(r2.partitionsDropped).toBe(2);
    expect(r2.retentionHeldBy).toBeNull();
  });

  it("a stream with messages is refused unless forced; destroy removes the whole family and its groups", async () => {
    const t = testClient(url());
    const keep = t.client.stream("d.keep");
    await keep.register();
    await keep.produce("stays");
    const s = t.client.stream("d.gone");
    await s.register({ partitionSize: 10, deliveryLog: "all" });
    const n = await streamIdOf(t, "d.gone");
    const g = s.consumer("g");
    await g.register();
    for (let i = 1; i <= 15; i++) await s.produce(i, { key: `k${i % 3}`, compaction: {} });
    await s.produce(16, { idempotencyKey: "once" });
    await pollPastFence(g, () => {}, { drain: true, until: progressIs((p) => p.lag === "0") });
    expect((await tablesOf(t, n)).length).toBeGreaterThan(8);
    expect(await functionsOf(t, n)).not.toEqual([]);

    const refused = await s.destroy().then(
      () => null,
      (e: unknown) => e,
    );
    expect(isSqlStreamsError(refused, "SQL0042")).toBe(true);
    expect((refused as Error).message).toContain("still holds messages");
    expect(await count(t, `message_log_${n}`)).toBe(16);

    const r = await destroyStream(t.client, "d.gone", { force: true });
    expect(r).toMatchObject({ stream: "d.gone", streamId: n, forced: true, hadMessages: true, groups: ["g"] });
    expect(await tablesOf(t, n)).toEqual([]);
    expect(await functionsOf(t, n)).toEqual([]);
    expect(await count(t, "stream_config", "name = 'd.gone'")).toBe(0);
    expect(await count(t, "consumer_group_config", "stream_id = $1", [n])).toBe(0);
    expect(await count(t, "migration_log", "stream_id = $1", [n])).toBe(0);
    // The other stream is untouched.
    expect(await count(t, `message_log_${await streamIdOf(t, "d.keep")}`)).toBe(1);
    await expect(s.produce(1)).rejects.toSatisfy(code("SQL0009"));
    await expect(destroyStream(t.client, "d.gone", {})).rejects.toSatisfy(code("SQL0009"));

    // Registered again: a new id, an empty family, ids from 1.
    await s.register({ partitionSize: 10 });
    const n2 = await streamIdOf(t, "d.gone");
    expect(n2).not.toBe(n);
    expect((await s.produce("again")).id).toBe("1");
    // A fresh client (no cache) sees the same.
    const t2 = testClient(url());
    expect((await t2.client.stream("d.gone").produce("from t2")).id).toBe("2");
    // migrate() after a destroy is still clean.
    await t.client.migrate();
  });

  it("an empty stream goes without force; retention-emptied counts as empty; live work still blocks", async () => {
    const t = testClient(url());
    const s = t.client.stream("d.empty");
    await s.register({ partitionSize: 10, retention: 1000 });
    const n = await streamIdOf(t, "d.empty");
    const g = s.consumer("g");
    await g.register();
    for (let i = 1; i <= 9; i++) await s.produce(i);
    await s.produce(10); // ids 1–9 fill partition 0; 10 opens partition 1
    await pollPastFence(g, () => {}, { drain: true, until: committed("10") });
    await t.sql(`UPDATE ${SCHEMA}.message_log_${n} SET created_at = now() - interval '1 minute'`);
    await s.maintain();
    expect(await count(t, `message_log_${n}`)).toBe(1);
    await t.sql(`DELETE FROM ${SCHEMA}.message_log_${n}`);
    // A live key lease of a group still blocks.
    await t.sql(`INSERT INTO ${SCHEMA}.message_key_lease_${n} VALUES ($1, 'k', gen_random_uuid(), now() + interval '1 minute')`, [await groupIdOf(t, "g")]);
    await expect(s.destroy()).rejects.toSatisfy(code("SQL0042"));
    await expireLeases(t, n);
    await s.destroy();
    expect(await tablesOf(t, n)).toEqual([]);
    expect(await count(t, "stream_config", "name = 'd.empty'")).toBe(0);
  });

  it("a stream whose log is busy fails with SQL0042 after the lock timeout instead of waiting forever", async () => {
    const t = testClient(url());
    const s = t.client.stream("d.busy");
    await s.register();
    const n = await streamIdOf(t, "d.busy");
    await whileHeld(t, `SELECT count(*) FROM ${SCHEMA}.message_log_${n}`, () => expect(s.destroy()).rejects.toSatisfy(code("SQL0042")));
    await s.destroy();
    expect(await count(t, "stream_config", "name = 'd.busy'")).toBe(0);
  });
});
