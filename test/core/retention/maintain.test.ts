// maintain() mechanics (docs/protocol/retention.md#maintain, C22's TTL, C28): partitions ahead, TTL and lease sweeps,
// independent steps, the deadline, lock-timeout skips, concurrent runs, and the cost of a run with
// nothing to do.
import { describe, expect, it } from "vitest";
import { Permanent, isSqlStreamsError } from "@sqlstreams/core";
import { useFreshDatabase } from "../../support/db.js";
import { SCHEMA, committed, count, partitions, pollPastFence, precreate, progressIs, range, streamIdOf, testClient, whileHeld } from "../../support/streams.js";

const url = useFreshDatabase();

describe("maintain() (docs/protocol/retention.md)", () => {
  it("creates partitions K and K+1 of the next id, and recreates one dropped by hand", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream("parts");
    await s.register({ partitionSize: 10 });
    const n = await streamIdOf(t, "parts");
    expect(await partitions(t, n)).toEqual([0]);
    const r = await s.maintain();
    expect(r.partitionsCreated).toBe(1); // next id 1 → K = 0 (exists) and 1
    expect(await partitions(t, n)).toEqual([0, 1]);
    for (let i = 1; i <= 12; i++) await s.produce(i);
    // C28: committing id 9 created partition 1 ahead (already there); next 13 → K = 1, so 2 is made.
    const r2 = await s.maintain();
    expect(r2.partitionsCreated).toBe(1);
    expect(await partitions(t, n)).toEqual([0, 1, 2]);
    await t.sql(`DROP TABLE ${SCHEMA}.message_log_${n}_2`);
    const r3 = await s.maintain();
    expect(r3.partitionsCreated).toBe(1);
    expect(await partitions(t, n)).toEqual([0, 1, 2]);
    expect((await s.maintain()).partitionsCreated).toBe(0);
  });

  it("C22: an idempotency key expires after idempotencyKeyTtl; the next produce inserts anew", async () => {
    const t = testClient(url());
    const s = t.client.stream("idem.ttl");
    await s.register({ idempotencyKeyTtl: 1000 });
    const n = await streamIdOf(t, "idem.ttl");
    const a = await s.produce({ pay: 1 }, { idempotencyKey: "payment:1" });
    const b = await s.produce({ pay: 1 }, { idempotencyKey: "payment:1" });
    expect(a.duplicate).toBe(false);
    expect(b).toEqual({ id: a.id, duplicate: true });
    await s.produce({ pay: 2 }, { idempotencyKey: "payment:2" });
    // A maintain() before the TTL keeps both keys.
    expect((await s.maintain()).idempotencyKeysDeleted).toBe(0);
    // "After 1 s": age payment:1 only.
    await t.sql(`UPDATE ${SCHEMA}.idempotency_key_${n} SET created_at = created_at - interval '1001 milliseconds' WHERE message_id = $1`, [a.id]);
    const r = await s.maintain();
    expect(r.idempotencyKeysDeleted).toBe(1);
    expect(await count(t, `idempotency_key_${n}`)).toBe(1);
    const c = await s.produce({ pay: 1 }, { idempotencyKey: "payment:1" });
    expect(c.duplicate).toBe(false);
    expect(c.id).not.toBe(a.id);
    expect(await count(t, `message_log_${n}`)).toBe(3);
  });

  it("C28: deletes expired key leases and empty heads idle for over an hour, nothing else", async () => {
    const t = testClient(url());
    const s = t.client.stream("leases");
    await s.register();
    const n = await streamIdOf(t, "leases");
    await t.sql(
      `INSERT INTO ${SCHEMA}.message_key_lease_${n} (consumer_group_id, message_key, token, expires_at) VALUES
         (7, 'old', gen_random_uuid(), now() - interval '1 second'),
         (7, 'live', gen_random_uuid(), now() + interval '1 minute'),
         (8, 'old', gen_random_uuid(), now() - interval '1 hour')`,
    );
    await t.sql(
      `INSERT INTO ${SCHEMA}.compaction_head_${n} (compaction_key, message_id, compaction_rank, schema_version, updated_at) VALUES
         ('empty-old', NULL, NULL, NULL, now() - interval '61 minutes'),
         ('empty-young', NULL, NULL, NULL, now() - interval '59 minutes'),
         ('set-old', 1, 0, 1, now() - interval '2 hours')`,
    );
    const r = await s.maintain();
    expect(r.errors).toEqual([]);
    expect(r.keyLeasesDeleted).toBe(2);
    expect(r.emptyHeadsDeleted).toBe(1);
    expect((await t.sql<{ k: string }>(`SELECT message_key AS k FROM ${SCHEMA}.message_key_lease_${n}`)).map((x) => x.k)).toEqual(["live"]);
    expect((await t.sql<{ k: string }>(`SELECT compaction_key AS k FROM ${SCHEMA}.compaction_head_${n} ORDER BY 1`)).map((x) => x.k)).toEqual([
      "empty-young",
      "set-old",
    ]);
  });

  it("TTL sweeps run in batches of 1000 until done", async () => {
    const t = testClient(url());
    const s = t.client.stream("idem.many");
    await s.register({ idempotencyKeyTtl: 1000 });
    const n = await streamIdOf(t, "idem.many");
    await t.sql(
      `INSERT INTO ${SCHEMA}.idempotency_key_${n} (idempotency_key, message_id, created_at)
       SELECT gen_random_uuid(), g, now() - interval '1 day' FROM generate_series(1, 2500) g`,
    );
    const before = t.statements.length;
    const r = await s.maintain();
    expect(r.idempotencyKeysDeleted).toBe(2500);
    expect(t.statements.slice(before).filter((x) => x.includes(`idempotency_key_${n} WHERE idempotency_key IN`)).length).toBe(3);
  });

  it("a failing step is reported and the next step still runs", async () => {
    const t = testClient(url());
    const s = t.client.stream("broken.step");
    await s.register();
    const n = await streamIdOf(t, "broken.step");
    await t.sql(`INSERT INTO ${SCHEMA}.message_key_lease_${n} VALUES (1, 'k', gen_random_uuid(), now() - interval '1 second')`);
    await t.sql(`ALTER TABLE ${SCHEMA}.idempotency_key_${n} RENAME TO idempotency_key_${n}_gone`);
    try {
      const r = await s.maintain();
      expect(r.errors).toHaveLength(1);
      expect(r.errors[0]).toMatchObject({ step: "idempotencyKeys", code: "SQL0033" });
      expect(r.errors[0].message).toContain("42P01");
      expect(r.keyLeasesDeleted).toBe(1);
      expect(t.events.some((e) => e.level === "error" && e.step === "idempotencyKeys")).toBe(true);
    } finally {
      await t.sql(`ALTER TABLE ${SCHEMA}.idempotency_key_${n}_gone RENAME TO idempotency_key_${n}`);
    }
  });

  it("no step or batch starts within 2 s of the deadline", async () => {
    const t = testClient(url());
    const s = t.client.stream("late.run");
    await s.register({ partitionSize: 10, retention: 1000, idempotencyKeyTtl: 1000 });
    const n = await streamIdOf(t, "late.run");
    await s.produce(1, { idempotencyKey: "x" });
    await t.sql(`UPDATE ${SCHEMA}.idempotency_key_${n} SET created_at = now() - interval '1 day'`);
    const before = t.statements.length;
    const r = await s.maintain({ deadline: Date.now() + 1500 });
    expect(r.deadlineReached).toBe(true);
    expect(r.partitionsCreated + r.idempotencyKeysDeleted).toBe(0);
    // Only the stream's settings were read.
    expect(t.statements.length - before).toBe(1);
    expect(await count(t, `idempotency_key_${n}`)).toBe(1);
    const all = await t.client.maintain({ deadline: Date.now() - 10 });
    expect(all["late.run"].deadlineReached).toBe(true);
    const ok = await s.maintain({ deadline: Date.now() + 60_000 });
    expect(ok.deadlineReached).toBe(false);
    expect(ok.idempotencyKeysDeleted).toBe(1);
  });

  it("rejects unknown streams and bad options before touching anything", async () => {
    const t = testClient(url());
    await t.client.stream("known").register();
    const before = t.statements.length;
    await expect(t.client.maintain({ streams: ["known", "nope"] })).rejects.toSatisfy((e) => isSqlStreamsError(e, "SQL0009"));
    await expect(t.client.stream("nope").maintain()).rejects.toSatisfy((e) => isSqlStreamsError(e, "SQL0009"));
    await expect(t.client.maintain({ streams: ["Bad Name"] })).rejects.toSatisfy((e) => isSqlStreamsError(e, "SQL0006"));
    await expect(t.client.maintain({ deadline: Number.NaN })).rejects.toSatisfy((e) => isSqlStreamsError(e, "SQL0015"));
    // Only look-ups: no write, no DDL.
    for (const text of t.statements.slice(before)) expect(text).toMatch(/^\s*SELECT/);
  });

  it("a run with nothing to do is a handful of read statements", async () => {
    const t = testClient(url());
    const s = t.client.stream("idle.stream");
    await s.register({ partitionSize: 100, retention: 3_600_000, idempotencyKeyTtl: 60_000 });
    const g = s.consumer("g");
    await g.register();
    await s.produceBatch(range(1, 50).map((i) => ({ payload: i })));
    await pollPastFence(g, () => {}, { drain: true, until: committed("50") });
    await s.maintain(); // first run creates partition 1 ahead
    const before = t.statements.length;
    const r = await s.maintain();
    const sent = t.statements.slice(before);
    expect(r.errors).toEqual([]);
    expect(r.partitionsCreated + r.partitionsDropped + r.rowsSwept + r.idempotencyKeysDeleted).toBe(0);
    // settings, sequence + partitions, floor, (a sweep window when a partition lies below the
    // floor), the held-retention probe, the scheduled-message mover that finds nothing due, three
    // TTL/lease deletes that find nothing, and the progress sample (docs/protocol/data-model.md#progress-history).
    expect(sent.length).toBeLessThanOrEqual(10);
    expect(sent.filter((x) => /^\s*(BEGIN|DROP|CREATE|LOCK)/.test(x))).toEqual([]);
    // Retention off: seven statements (the last one the progress sample).
    const off = t.client.stream("idle.off");
    await off.register();
    await off.maintain();
    const b2 = t.statements.length;
    await off.maintain();
    expect(t.statements.length - b2).toBe(7);
  });

  it("a drop that cannot get the log's lock within 2 s is skipped with SQL0041, then done on the next run", async () => {
    const t = testClient(url());
    const s = t.client.stream("locked.log");
    await s.register({ partitionSize: 10, retention: 1000 });
    const n = await streamIdOf(t, "locked.log");
    await precreate(t, n, 10, 3);
    await s.produceBatch(range(1, 25).map((i) => ({ payload: i })));
    await t.sql(`UPDATE ${SCHEMA}.message_log_${n} SET created_at = now() - interval '1 minute'`);
    // A long reader holds the log (as a slow failures() query or a produceInTx would).
    await whileHeld(t, `SELECT count(*) FROM ${SCHEMA}.message_log_${n}`, async () => {
      const started = Date.now();
      const r = await s.maintain();
      const took = Date.now() - started;
      expect(r.errors).toEqual([]);
      expect(r.partitionsDropped).toBe(0);
      expect(r.partitionsSkipped).toBe(1);
      // The sweep does not delete a droppable partition row by row meanwhile.
      expect(r.rowsSwept).toBe(0);
      expect(took).toBeGreaterThanOrEqual(1900);
      expect(t.events.some((e) => e.code === "SQL0041" && String(e.message).includes("skipped"))).toBe(true);
      // Producers are not blocked behind the failed drop once it gave up.
      await s.produce(26);
    });
    const r2 = await s.maintain();
    expect(r2.errors).toEqual([]);
    expect(r2.partitionsDropped).toBe(2);
    expect((await partitions(t, n))[0]).toBe(2);
  });

  it("a delivery-log row another transaction holds is skipped, not waited for; its partition drops on the next run", async () => {
    const t = testClient(url());
    const s = t.client.stream("locked.audit");
    await s.register({ partitionSize: 10, retention: 1000, deliveryLog: "all" });
    const n = await streamIdOf(t, "locked.audit");
    await precreate(t, n, 10, 3);
    const g = s.consumer("g");
    await g.register();
    await s.produceBatch(range(1, 25).map((i) => ({ payload: i })));
    await pollPastFence(g, () => {}, { drain: true, until: committed("25") });
    await t.sql(`UPDATE ${SCHEMA}.message_log_${n} SET created_at = now() - interval '1 minute'`);
    // Another deleter (a second maintain() on the same partition, say) holds one audit row of
    // partition 0. Waiting on it while holding others is how two deleters deadlock.
    await whileHeld(t, `SELECT 1 FROM ${SCHEMA}.delivery_log_${n} WHERE message_id = 5 FOR UPDATE`, async () => {
      const r = await s.maintain();
      expect(r.errors).toEqual([]);
      expect(r.partitionsDropped).toBe(0);
      expect(r.partitionsSkipped).toBe(1);
      // Every audit row of partition 0 but the held one went in the batches before the drop.
      expect(await count(t, `delivery_log_${n}`, "message_id < 10")).toBe(1);
      expect(t.events.some((e) => e.code === "SQL0041" && String(e.message).includes("partition 0"))).toBe(true);
    });
    const r2 = await s.maintain();
    expect(r2.errors).toEqual([]);
    expect(r2.partitionsDropped).toBe(2);
    expect(await count(t, `delivery_log_${n}`, "message_id < 20")).toBe(0);
  });

  it("a sweep batch that waits 2 s on a locked row pauses with SQL0041 and resumes on the next run", async () => {
    const t = testClient(url());
    const s = t.client.stream("locked.row");
    await s.register({ partitionSize: 10, retention: 1000 });
    const n = await streamIdOf(t, "locked.row");
    await precreate(t, n, 10, 3);
    const g = s.consumer("g");
    const lag = s.consumer("lag");
    await g.register();
    await lag.register();
    await s.produceBatch(range(1, 13).map((i) => ({ payload: i })));
    await pollPastFence(lag, () => {}, { drain: true, until: committed("13") });
    await s.produceBatch(range(14, 25).map((i) => ({ payload: i })));
    await pollPastFence(g, (m) => (m.id === "11" ? Permanent(new Error("dead")) : undefined), { drain: true, until: committed("25") });
    await t.sql(`UPDATE ${SCHEMA}.message_log_${n} SET created_at = now() - interval '1 minute'`);
    await whileHeld(t, `SELECT 1 FROM ${SCHEMA}.exception_queue_${n} WHERE message_id = 11 FOR UPDATE`, async () => {
      const r = await s.maintain();
      expect(r.errors).toEqual([]);
      expect(r.partitionsDropped).toBe(1); // partition 0; partition 1 lies above the floor 13
      expect(r.rowsSwept).toBe(0);
      expect(t.events.some((e) => e.code === "SQL0041" && String(e.message).includes("sweep"))).toBe(true);
    });
    const r2 = await s.maintain();
    expect(r2.errors).toEqual([]);
    expect(r2.rowsSwept).toBe(4);
    expect(r2.exceptionRowsDeleted).toBe(1);
    expect(await count(t, `exception_queue_${n}`)).toBe(0);
  });

  it("concurrent maintain() calls never drop a partition twice, and producers keep going", async () => {
    const t = testClient(url());
    const s = t.client.stream("racing");
    await s.register({ partitionSize: 100, retention: 1000, deliveryLog: "all" });
    const n = await streamIdOf(t, "racing");
    const g = s.consumer("g");
    await g.register();
    await precreate(t, n, 100, 31);
    for (let b = 0; b < 30; b++) await s.produceBatch(range(1, 100).map((i) => ({ payload: i })));
    await pollPastFence(g, () => {}, { drain: true, until: committed("3000"), opts: { batchLimit: 500 } });
    await t.sql(`UPDATE ${SCHEMA}.message_log_${n} SET created_at = now() - interval '1 minute'`);
    const others = Array.from({ length: 3 }, () => testClient(url()));
    let producing = true;
    const producer = (async () => {
      let k = 0;
      while (producing) {
        await s.produce({ late: k++ });
      }
      return k;
    })();
    const runs = await Promise.all([s.maintain(), ...others.map((o) => o.client.stream("racing").maintain())]);
    producing = false;
    const produced = await producer;
    expect(produced).toBeGreaterThan(0);
    for (const r of runs) expect(r.errors).toEqual([]);
    const dropped = runs.reduce((a, r) => a + r.partitionsDropped, 0);
    // Ids 1–3000 fill partitions 0–29; the late produces land in 30 (active). 0–29 drop exactly once.
    const final = await s.maintain();
    expect(dropped + final.partitionsDropped).toBe(30);
    expect((await partitions(t, n))[0]).toBe(30);
    expect(await count(t, `delivery_log_${n}`, "message_id < 3000")).toBe(0);
    // The late messages are all there and get consumed.
    const seen: string[] = [];
    await pollPastFence(g, (m) => void seen.push(m.id), { drain: true, until: progressIs((p) => p.lag === "0"), opts: { batchLimit: 500 } });
    expect(seen.length).toBe(produced);
  });
});
