// Retention (docs/protocol/retention.md, C27, I11): partitions drop only behind the lowest group, the row sweep takes
// the expired tail of partitions that cannot drop, dead and delivery-log rows go with their
// messages, the active partition is never touched. Time is moved by rewriting created_at, never
// by sleeping.
import { describe, expect, it } from "vitest";
import { Permanent, type SqlStreams } from "@sqlstreams/core";
// Internal (not exported by the package): the retention floor, read from the built library.
import { floorOf, retentionStatus } from "../../../packages/core/dist/maintain/floor.js";
import { useFreshDatabase } from "../../support/db.js";
import { SCHEMA, type TestClient, committed, count, cursor, groupIdOf, partitions, pollPastFence, precreate, progressIs, range, streamIdOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();

async function ids(t: TestClient, n: string): Promise<number[]> {
  return (await t.sql<{ id: string }>(`SELECT id FROM ${SCHEMA}.message_log_${n} ORDER BY id`)).map((r) => Number(r.id));
}

/** Ages every message of the stream by `ms` (instead of waiting). */
async function age(t: TestClient, n: string, ms: number, where = "TRUE"): Promise<void> {
  await t.sql(`UPDATE ${SCHEMA}.message_log_${n} SET created_at = created_at - $1::bigint * interval '1 millisecond' WHERE ${where}`, [ms]);
}

/** Every message id above the floor must still exist after maintain() (I11). */
async function assertI11(t: TestClient, client: SqlStreams, n: string, before: number[]): Promise<void> {
  const f = await floorOf(client.db, n);
  const after = new Set(await ids(t, n));
  for (const id of before) if (BigInt(id) > f.floor) expect(after.has(id), `message ${id} above floor ${f.floor} was removed`).toBe(true);
}

describe("retention (docs/protocol/retention.md, C27)", () => {
  it("C27: drops behind the lowest group, sweeps the tail, never touches the active partition", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream<{ i: number }>("c27.orders");
    await s.register({ partitionSize: 10, retention: 1000, deliveryLog: "failures" });
    const n = await streamIdOf(t, "c27.orders");
    const g7 = s.consumer("g7");
    const g8 = s.consumer("g8");
    await g7.register();
    await g8.register();
    // Group 8 reads up to 12 (the head then); group 7 everything, with message 5 permanently dead.
    for (let i = 1; i <= 12; i++) await s.produce({ i });
    await pollPastFence(g8, () => {}, { drain: true, until: committed("12") });
    for (let i = 13; i <= 35; i++) await s.produce({ i });
    expect(await partitions(t, n)).toEqual([0, 1, 2, 3]);
    await pollPastFence(g7, (m) => (m.id === "5" ? Permanent(new Error("bad 5")) : undefined), { drain: true, until: committed("35"), opts: { batchLimit: 100 } });
    const gid7 = await groupIdOf(t, "g7");
    const gid8 = await groupIdOf(t, "g8");
    expect((await cursor(t, n, gid7)).committed).toBe("35");
    expect((await cursor(t, n, gid8)).committed).toBe("12");
    expect(await count(t, `exception_queue_${n}`, "consumer_group_id = $1 AND message_id = 5 AND status = 'dead'", [gid7])).toBe(1);
    expect(await count(t, `delivery_log_${n}`, "message_id = 5")).toBe(1);
    // The dead row stays queryable (with its payload) until retention removes the message.
    expect((await g7.failures()).map((f) => f.messageId)).toEqual(["5"]);

    // "After 1.5 s": move the clock of the rows instead of sleeping.
    await age(t, n, 1500);
    const before = await ids(t, n);
    const r1 = await s.maintain();
    expect(r1.errors).toEqual([]);
    expect(r1.partitionsDropped).toBe(1);
    expect(r1.rowsSwept).toBe(3);
    expect(r1.floor).toBe("12");
    expect(r1.retentionHeldBy).toMatchObject({ group: "g8", committed: "12", unresolvedFrom: null });
    expect(r1.exceptionRowsDeleted).toBe(1);
    expect(r1.deliveryLogRowsDeleted).toBe(1);
    // Partition 0 (ids 1–9) is gone with EQ7(5) and DL(5); partition 1 is swept up to the floor 12;
    // partitions 2 and 3 (active) untouched; partition 4 created ahead.
    expect(await partitions(t, n)).toEqual([1, 2, 3, 4]);
    expect(r1.partitionsCreated).toBe(1);
    expect(await ids(t, n)).toEqual(range(13, 35));
    expect(await count(t, `exception_queue_${n}`)).toBe(0);
    expect(await count(t, `delivery_log_${n}`)).toBe(0);
    await assertI11(t, t.client, n, before);

    const st = await retentionStatus(t.client.db, n);
    expect(st).toMatchObject({ retentionMs: 1000n, floor: 12n, held: true, heldBy: { group: "g8", committed: 12n } });
    expect(st.heldForMs).toBeGreaterThan(0);

    // Nothing more to do while group 8 lags.
    const r2 = await s.maintain();
    expect(r2.partitionsDropped + r2.rowsSwept).toBe(0);
    expect(r2.retentionHeldBy?.group).toBe("g8");

    // Group 8 catches up: partitions 1 and 2 drop; the active partition 3 keeps 30–35.
    await pollPastFence(g8, () => {}, { drain: true, until: committed("35"), opts: { batchLimit: 100 } });
    expect((await cursor(t, n, gid8)).committed).toBe("35");
    const before3 = await ids(t, n);
    const r3 = await s.maintain();
    expect(r3.errors).toEqual([]);
    expect(r3.partitionsDropped).toBe(2);
    expect(r3.rowsSwept).toBe(0);
    expect(r3.retentionHeldBy).toBeNull();
    // The active partition's rows are expired but nothing above the floor waits: not held.
    expect(await retentionStatus(t.client.db, n)).toMatchObject({ floor: 35n, held: false, heldForMs: null });
    expect(await partitions(t, n)).toEqual([3, 4]);
    expect(await ids(t, n)).toEqual(range(30, 35));
    await assertI11(t, t.client, n, before3);

    // The stream keeps working: ids continue, both groups see them.
    for (let i = 36; i <= 41; i++) await s.produce({ i });
    const seen: string[] = [];
    await pollPastFence(g8, (m) => void seen.push(m.id), { drain: true, until: committed("41"), opts: { batchLimit: 100 } });
    expect(seen).toEqual(["36", "37", "38", "39", "40", "41"]);
    expect((await g8.progress()).lag).toBe("0");
  });

  it("unexpired partitions stay even below the floor; retention 0 keeps everything", async () => {
    const t = testClient(url());
    const s = t.client.stream("keep.young");
    await s.register({ partitionSize: 10, retention: 3_600_000 });
    const forever = t.client.stream("keep.forever");
    await forever.register({ partitionSize: 10 });
    const n = await streamIdOf(t, "keep.young");
    const nf = await streamIdOf(t, "keep.forever");
    await precreate(t, n, 10, 3);
    await precreate(t, nf, 10, 3);
    await s.produceBatch(range(1, 25).map((i) => ({ payload: i })));
    await forever.produceBatch(range(1, 25).map((i) => ({ payload: i })));
    // No groups: the floor is the head.
    const r = await t.client.maintain();
    expect(r["keep.young"].partitionsDropped + r["keep.young"].rowsSwept).toBe(0);
    expect(r["keep.young"].floor).toBe("25");
    expect(r["keep.forever"].floor).toBeNull();
    await age(t, nf, 365 * 24 * 3_600_000);
    const r2 = await t.client.maintain({ streams: ["keep.forever"] });
    expect(Object.keys(r2)).toEqual(["keep.forever"]);
    expect(r2["keep.forever"].partitionsDropped + r2["keep.forever"].rowsSwept).toBe(0);
    expect(await ids(t, nf)).toEqual(range(1, 25));
    // Half of partition 0 ages past retention: the sweep takes exactly the expired rows.
    await age(t, n, 2 * 3_600_000, "id <= 4");
    const r3 = await s.maintain();
    expect(r3.partitionsDropped).toBe(0);
    expect(r3.rowsSwept).toBe(4);
    expect(await ids(t, n)).toEqual(range(5, 25));
  });

  it("with no group every expired partition below the active one drops (floor = head)", async () => {
    const t = testClient(url());
    const s = t.client.stream("nogroup");
    await s.register({ partitionSize: 10, retention: 1000 });
    const n = await streamIdOf(t, "nogroup");
    await precreate(t, n, 10, 6);
    for (let b = 0; b < 5; b++) await s.produceBatch(range(1, 10).map((i) => ({ payload: i })));
    // ids 1–50: the last id handed out (50) is in partition 5, the active one.
    await age(t, n, 5000);
    const r = await s.maintain();
    expect(r.errors).toEqual([]);
    expect(r.floor).toBe("50");
    // Partition 5 holds the head (50) and stays; 0–4 drop.
    expect(r.partitionsDropped).toBe(5);
    expect(await ids(t, n)).toEqual([50]);
    expect((await partitions(t, n))[0]).toBe(5);
  });

  it("an unresolved or redriven row holds the floor; dead rows do not", async () => {
    const t = testClient(url());
    const s = t.client.stream("hold.rows");
    await s.register({ partitionSize: 10, retention: 1000 });
    const n = await streamIdOf(t, "hold.rows");
    await precreate(t, n, 10, 4);
    const g = s.consumer("g");
    await g.register({ message: { retry: { maxRetries: 0 } } });
    await s.produceBatch(range(1, 30).map((i) => ({ payload: i })));
    // 4 dies (no retries left), 7 is permanent: both dead.
    await pollPastFence(g, (m) => {
      if (m.id === "4") throw new Error("die");
      if (m.id === "7") throw Permanent(new Error("dead too"));
    }, { drain: true, until: committed("30"), opts: { batchLimit: 100 } });
    const gid = await groupIdOf(t, "g");
    expect(await count(t, `exception_queue_${n}`, "status = 'dead'")).toBe(2);
    expect((await cursor(t, n, gid)).committed).toBe("30");
    // Redrive 4: it holds the floor at 3 although committed is 30.
    await g.redrive({ ids: ["4"] }, { reason: "fixed" });
    const f = await floorOf(t.client.db, n);
    expect(f.floor).toBe(3n);
    expect(f.heldBy).toMatchObject({ group: "g", committed: 30n, unresolvedFrom: 4n });
    await age(t, n, 5000);
    const before = await ids(t, n);
    const r = await s.maintain();
    expect(r.errors).toEqual([]);
    expect(r.partitionsDropped).toBe(0);
    expect(r.rowsSwept).toBe(3);
    expect(r.retentionHeldBy).toMatchObject({ group: "g", unresolvedFrom: "4" });
    expect(await ids(t, n)).toEqual(range(4, 30));
    await assertI11(t, t.client, n, before);
    // The redriven row runs and succeeds: partitions 0–2 drop (id 30, the last handed out, is in
    // the active partition 3).
    await pollPastFence(g, () => {}, { drain: true, until: progressIs((p) => p.exceptions.ready + p.exceptions.inflight + p.exceptions.deferred === 0), opts: { batchLimit: 100 } });
    expect(await count(t, `exception_queue_${n}`, "status IN ('ready', 'inflight', 'deferred')")).toBe(0);
    const r2 = await s.maintain();
    expect(r2.errors).toEqual([]);
    expect(r2.partitionsDropped).toBe(3);
    // Dead row 7 went with its partition.
    expect(await count(t, `exception_queue_${n}`)).toBe(0);
    expect(await ids(t, n)).toEqual([30]);
  });

  it("compaction heads pointing at removed messages are emptied; the next compacted produce becomes head", async () => {
    const t = testClient(url());
    const s = t.client.stream("compact.ret");
    await s.register({ partitionSize: 10, retention: 1000 });
    const n = await streamIdOf(t, "compact.ret");
    await precreate(t, n, 10, 3);
    await s.produce({ v: 1 }, { key: "a", compaction: {} }); // 1: head of a, in partition 0 (dropped)
    await s.produce({ v: 1 }, { key: "b", compaction: {} }); // 2
    await s.produceBatch(range(3, 12).map((i) => ({ payload: i })));
    await s.produce({ v: 1 }, { key: "c", compaction: {} }); // 13: head of c, in partition 1 (swept)
    // A group at 13 lets partition 0 drop and 10–13 be swept.
    const g = s.consumer("g");
    await g.register();
    await pollPastFence(g, () => {}, { drain: true, until: committed("13") });
    await s.produceBatch(range(14, 25).map((i) => ({ payload: i })));
    await age(t, n, 5000, "id <= 13");
    const r = await s.maintain();
    expect(r.errors).toEqual([]);
    expect(r.partitionsDropped).toBe(1);
    expect(r.rowsSwept).toBe(4);
    const heads = await t.sql<{ compaction_key: string; message_id: string | null; compaction_rank: string | null }>(
      `SELECT compaction_key, message_id::text, compaction_rank::text FROM ${SCHEMA}.compaction_head_${n} ORDER BY compaction_key`,
    );
    expect(heads).toEqual([
      { compaction_key: "a", message_id: null, compaction_rank: null },
      { compaction_key: "b", message_id: null, compaction_rank: null },
      { compaction_key: "c", message_id: null, compaction_rank: null },
    ]);
    // Empty heads younger than an hour stay; older ones are deleted.
    await t.sql(`UPDATE ${SCHEMA}.compaction_head_${n} SET updated_at = now() - interval '61 minutes' WHERE compaction_key = 'b'`);
    const r2 = await s.maintain();
    expect(r2.emptyHeadsDeleted).toBe(1);
    const { id } = await s.produce({ v: 2 }, { key: "a", compaction: { rank: -5 } });
    const head = await t.sql<{ message_id: string }>(`SELECT message_id::text FROM ${SCHEMA}.compaction_head_${n} WHERE compaction_key = 'a'`);
    expect(head[0].message_id).toBe(id);
  });

  it("delivery-log rows (mode all) go with their messages, whatever their number", async () => {
    const t = testClient(url());
    const s = t.client.stream("audit.ret");
    await s.register({ partitionSize: 1500, retention: 1000, deliveryLog: "all" });
    const n = await streamIdOf(t, "audit.ret");
    await precreate(t, n, 1500, 3);
    const a = s.consumer("a");
    const b = s.consumer("b");
    await a.register();
    await b.register();
    for (let i = 0; i < 4; i++) await s.produceBatch(range(1, 1000).map((x) => ({ payload: x })));
    await pollPastFence(a, () => {}, { drain: true, until: committed("4000"), opts: { batchLimit: 1000 } });
    await pollPastFence(b, () => {}, { drain: true, until: committed("4000"), opts: { batchLimit: 1000 } });
    expect(await count(t, `delivery_log_${n}`)).toBe(8000);
    await age(t, n, 5000);
    const r = await s.maintain();
    expect(r.errors).toEqual([]);
    // Partitions 0 and 1 (ids 1–2999) drop; partition 2 holds the head (4000).
    expect(r.partitionsDropped).toBe(2);
    expect(r.deliveryLogRowsDeleted).toBe(2 * 2999);
    expect(await count(t, `delivery_log_${n}`, "message_id < 3000")).toBe(0);
    expect(await count(t, `delivery_log_${n}`)).toBe(2 * 1001);
  });
});
