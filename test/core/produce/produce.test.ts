import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { SqlStreams } from "@sqlstreams/core";
import { useFreshDatabase } from "../../support/db.js";
import { SCHEMA, codeOf, count, groupIdOf, streamIdOf, testClient } from "../../support/streams.js";
import { streamMigrations, systemMigrations } from "../../../packages/core/src/generated/migrations.js";

const url = useFreshDatabase();


describe("producing (docs/guide/producing.md, C22–C24, C28)", () => {
  it("C22: idempotency keys dedupe while retained, as v5 UUIDs or verbatim UUIDs", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream("payments");
    await s.register({ idempotencyKeyTtl: 1000 });
    const n = await streamIdOf(t, "payments");
    const a = await s.produce({ amount: 1 }, { idempotencyKey: "payment:1" });
    const b = await s.produce({ amount: 999 }, { idempotencyKey: "payment:1" });
    expect(a.duplicate).toBe(false);
    expect(b).toEqual({ id: a.id, duplicate: true });
    expect(await count(t, `message_log_${n}`)).toBe(1);
    expect(await t.sql(`SELECT idempotency_key::text AS k, message_id::text AS id FROM ${SCHEMA}.idempotency_key_${n}`)).toEqual([
      { k: "dce973c4-9674-5b83-89bc-5687eb07cb04", id: a.id },
    ]);
    await s.produce({}, { idempotencyKey: "3F2504E0-4F89-11D3-9A0C-0305E82C3301" });
    const keys = await t.sql<{ k: string }>(`SELECT idempotency_key::text AS k FROM ${SCHEMA}.idempotency_key_${n} ORDER BY created_at`);
    expect(keys.map((k) => k.k)).toContain("3f2504e0-4f89-11d3-9a0c-0305e82c3301");
    // Concurrent produces of one key insert one message.
    const many = await Promise.all(Array.from({ length: 8 }, () => s.produce({ x: 1 }, { idempotencyKey: "order-42" })));
    expect(new Set(many.map((m) => m.id)).size).toBe(1);
    expect(many.filter((m) => !m.duplicate)).toHaveLength(1);
  });

  it("C23: produces without an idempotency key write no key row", async () => {
    const t = testClient(url());
    const s = t.client.stream("no.keys");
    await s.register();
    const n = await streamIdOf(t, "no.keys");
    for (let i = 0; i < 100; i++) await s.produce({ i });
    expect(await count(t, `message_log_${n}`)).toBe(100);
    expect(await count(t, `idempotency_key_${n}`)).toBe(0);
  });

  it("C24: produceInTx commits and rolls back with the caller; without BEGIN it is SQL0015", async () => {
    const t = testClient(url());
    const s = t.client.stream("in.tx");
    await s.register();
    const n = await streamIdOf(t, "in.tx");
    await t.sql("CREATE TABLE app_orders (id int primary key)");
    const c = await t.pool.connect();
    try {
      await c.query("BEGIN");
      await c.query("INSERT INTO app_orders VALUES (1)");
      await s.produceInTx(c, { order: 1 }, { idempotencyKey: "tx-1" });
      await c.query("ROLLBACK");
      expect(await count(t, `message_log_${n}`)).toBe(0);
      expect(await count(t, `idempotency_key_${n}`)).toBe(0);

      await c.query("BEGIN");
      await c.query("INSERT INTO app_orders VALUES (2)");
      const r = await s.produceInTx(c, { order: 2 });
      expect(await count(t, `message_log_${n}`)).toBe(0); // not visible before COMMIT
      await c.query("COMMIT");
      expect(r.id).toBe("2"); // id 1 was drawn by the rolled-back transaction: a gap
      expect(await t.sql(`SELECT id::text, payload FROM ${SCHEMA}.message_log_${n}`)).toEqual([{ id: "2", payload: { order: 2 } }]);
      expect(await t.sql("SELECT id FROM app_orders")).toEqual([{ id: 2 }]);

      expect(await codeOf(s.produceInTx(c, { order: 3 }))).toBe("SQL0015");
      expect(await count(t, `message_log_${n}`)).toBe(1);
    } finally {
      c.release();
    }
    // The cursor passes the gap.
    const g = s.consumer("g");
    await g.register();
    const seen: string[] = [];
    await g.drain((m) => void seen.push(m.id));
    expect(seen).toEqual(["2"]);
    expect((await g.progress()).committed).toBe("2");
  });

  it("no statement a produce sends calls nextval() (it would pin an RDS Proxy session)", async () => {
    const t = testClient(url());
    const s = t.client.stream("no.nextval");
    await s.register({ partitionSize: 10 });
    const n = await streamIdOf(t, "no.nextval");
    t.statements.length = 0;
    await s.produce({ a: 1 });
    await s.produce({ a: 2 }, { key: "k", compaction: { rank: 1 } });
    const first = await s.produce({ a: 3 }, { idempotencyKey: "nv-1" });
    expect(await s.produce({ a: 4 }, { idempotencyKey: "nv-1" })).toEqual({ id: first.id, duplicate: true });
    const raced = await Promise.all(Array.from({ length: 6 }, () => s.produce({ a: 5 }, { idempotencyKey: "nv-race" })));
    expect(new Set(raced.map((r) => r.id)).size).toBe(1);
    await s.produceBatch([{ payload: 1 }, { payload: 2 }]);
    await s.produceBatch([{ payload: 3, key: "k2" }]);
    await s.produceBatch([{ payload: 4, key: "k3", compaction: { rank: 2 } }]);
    // Past the first partitions of 10 ids: partitions created ahead and on demand on the way.
    await s.produceBatch(Array.from({ length: 25 }, (_, i) => ({ payload: i })));
    const c = await t.pool.connect();
    try {
      await c.query("BEGIN");
      await s.produceInTx(c, { a: 6 }, { idempotencyKey: "nv-tx" });
      expect((await s.produceInTx(c, { a: 7 }, { idempotencyKey: "nv-tx" })).duplicate).toBe(true);
      await s.produceBatchInTx(c, [{ payload: 8 }, { payload: 9, key: "k4" }]);
      await c.query("COMMIT");
    } finally {
      c.release();
    }
    expect(t.statements.some((q) => q.includes(`message_log_${n}`) && q.includes("INSERT"))).toBe(true);
    expect(t.statements.filter((q) => /nextval\s*\(/i.test(q))).toEqual([]);
    expect(await count(t, `message_log_${n}`)).toBe(2 + 1 + 1 + 4 + 25 + 1 + 2);
  });

  it("produceInTx: a same-key produce waiting on another open transaction returns the first message once it commits", async () => {
    const t = testClient(url());
    const s = t.client.stream("tx.race");
    await s.register();
    const n = await streamIdOf(t, "tx.race");
    const a = await t.pool.connect();
    const b = await t.pool.connect();
    try {
      await a.query("BEGIN");
      await b.query("BEGIN");
      const first = await s.produceInTx(a, { who: "a" }, { idempotencyKey: "race-1" });
      const pid = (await b.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0].pid;
      const second = s.produceInTx(b, { who: "b" }, { idempotencyKey: "race-1" });
      // Wait (with a deadline, not a sleep) until b is blocked on a's key.
      const deadline = Date.now() + 30_000;
      for (;;) {
        const w = await t.sql<{ n: number }>("SELECT count(*)::int AS n FROM pg_locks WHERE pid = $1 AND NOT granted", [pid]);
        if (w[0].n > 0) break;
        if (Date.now() > deadline) throw new Error("the second produce never waited for the first");
        await sleep(50);
      }
      await a.query("COMMIT");
      expect(await second).toEqual({ id: first.id, duplicate: true });
      await b.query("COMMIT");
      expect(await t.sql(`SELECT id::text, payload FROM ${SCHEMA}.message_log_${n}`)).toEqual([{ id: first.id, payload: { who: "a" } }]);
      expect(await count(t, `idempotency_key_${n}`)).toBe(1);
    } finally {
      a.release();
      b.release();
    }
  });

  it("produceBatch: one transaction, ids ascending in item order, all or nothing", async () => {
    const t = testClient(url());
    const s = t.client.stream("batches");
    await s.register();
    const n = await streamIdOf(t, "batches");
    expect(await s.produceBatch([])).toEqual([]);
    const r = await s.produceBatch(Array.from({ length: 1000 }, (_, i) => ({ payload: { i }, key: `k${i % 7}` })));
    expect(r.map((x) => Number(x.id))).toEqual(Array.from({ length: 1000 }, (_, i) => i + 1));
    const rows = await t.sql<{ id: string; payload: { i: number }; message_key: string }>(
      `SELECT m.id::text AS id, payload, message_key FROM ${SCHEMA}.message_log_${n} m ORDER BY m.id LIMIT 3`,
    );
    expect(rows).toEqual([
      { id: "1", payload: { i: 0 }, message_key: "k0" },
      { id: "2", payload: { i: 1 }, message_key: "k1" },
      { id: "3", payload: { i: 2 }, message_key: "k2" },
    ]);
    expect(await codeOf(s.produceBatch(Array.from({ length: 1001 }, () => ({ payload: 1 }))))).toBe("SQL0015");
    expect(await codeOf(s.produceBatch([{ payload: 1 }, { payload: 1n as unknown as number }]))).toBe("SQL0016");
    expect(await codeOf(s.produceBatch([{ payload: 1, idempotencyKey: "x" } as never]))).toBe("SQL0015");
    expect(await count(t, `message_log_${n}`)).toBe(1000);
  });

  it("produceBatch: payloads, keys and options with quotes, backslashes, brackets, commas and null-like text arrive as sent", async () => {
    // The batch travels as JSON arrays joined from the items' JSON texts (sql/produce.ts
    // jsonArray, keys JSON-encoded): every character must come back unchanged, with and without
    // keys and options, and a key or payload spelled "null" stays a string.
    const t = testClient(url());
    const s = t.client.stream("batches.text");
    await s.register();
    const n = await streamIdOf(t, "batches.text");
    const odd = ['a"b', "back\\slash\\", "{x,y}", "[1,2]", "NULL", "null", "", " lead", "tail ", "é 中 😀", "\\\"", "a\nb\tc"];
    const plain = await s.produceBatch(odd.map((v) => ({ payload: { v, [v]: [v] } })));
    const meta = await s.produceBatch(odd.map((v, i) => ({ payload: v, key: v === "" ? "k" : v, ...(i % 2 ? { message: { timeout: 1000 + i } } : {}) })));
    expect(meta.map((x) => Number(x.id))).toEqual(plain.map((x) => Number(x.id) + odd.length));
    const rows = await t.sql<{ payload: unknown; message_key: string | null; options: unknown }>(
      `SELECT payload, message_key, options FROM ${SCHEMA}.message_log_${n} ORDER BY id`,
    );
    expect(rows).toEqual([
      ...odd.map((v) => ({ payload: { v, [v]: [v] }, message_key: null, options: null })),
      ...odd.map((v, i) => ({ payload: v, message_key: v === "" ? "k" : v, options: i % 2 ? { timeout: 1000 + i } : null })),
    ]);
  });

  it("stores keys, sparse options and compaction ranks as docs/ says", async () => {
    const t = testClient(url());
    const s = t.client.stream("stored.rows");
    await s.register();
    const n = await streamIdOf(t, "stored.rows");
    await s.produce({ a: 1 }, { key: "k", message: { timeout: 20000, concurrency: "exclusive", retry: { maxRetries: 5 } } });
    await s.produce({ a: 2 }, { key: "c", compaction: {} });
    await s.produce({ a: 3 });
    const rows = await t.sql(`SELECT message_key, compaction_rank::text AS rank, routing_key, schema_version, options FROM ${SCHEMA}.message_log_${n} ORDER BY id`);
    expect(rows).toEqual([
      { message_key: "k", rank: null, routing_key: null, schema_version: 1, options: { timeout: 20000, concurrency: "exclusive", retry: { maxRetries: 5 } } },
      { message_key: "c", rank: "0", routing_key: null, schema_version: 1, options: null },
      { message_key: null, rank: null, routing_key: null, schema_version: 1, options: null },
    ]);
  });

  it("C28: partitions are created ahead, and a missing partition is recovered with SQL0041", async () => {
    const t = testClient(url());
    const s = t.client.stream("small.parts");
    await s.register({ partitionSize: 10 });
    const n = await streamIdOf(t, "small.parts");
    const parts = async () =>
      (await t.sql<{ name: string }>(
        `SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = '${SCHEMA}.message_log_${n}'::regclass ORDER BY 1`,
      )).map((r) => r.name);
    for (let i = 1; i <= 8; i++) await s.produce({ i });
    expect(await parts()).toEqual([`message_log_${n}_0`]);
    await s.produce({ i: 9 }); // 9 is in the last tenth of partition 0
    expect(await parts()).toEqual([`message_log_${n}_0`, `message_log_${n}_1`]);
    for (let i = 10; i <= 19; i++) await s.produce({ i });
    expect(await parts()).toContain(`message_log_${n}_2`);
    // An operator drops partition 2 before id 20: the producer recovers.
    await t.sql(`DROP TABLE ${SCHEMA}.message_log_${n}_2`);
    const fresh = testClient(url()); // a client that never saw partition 2
    const r = await fresh.client.stream("small.parts").produce({ i: 20 });
    // The failed first insert consumed id 20 (a gap the cursor passes); the retry gets the next.
    expect(Number(r.id)).toBeGreaterThanOrEqual(20);
    expect(fresh.events.some((e) => e.code === "SQL0041")).toBe(true);
    // A batch that spans several partitions recovers all of them.
    await t.sql(`DROP TABLE IF EXISTS ${SCHEMA}.message_log_${n}_3`);
    const b = await fresh.client.stream("small.parts").produceBatch(Array.from({ length: 25 }, (_, i) => ({ payload: { i } })));
    expect(b.map((x) => Number(x.id) - Number(b[0].id))).toEqual(Array.from({ length: 25 }, (_, i) => i));
    expect(await count(t, `message_log_${n}`)).toBe(20 + 25);
  });

  it("produceInTx recovers a missing partition on another connection, or fails SQL0022 leaving the transaction usable", async () => {
    const t = testClient(url());
    const s = t.client.stream("tx.parts");
    await s.register({ partitionSize: 10 });
    const n = await streamIdOf(t, "tx.parts");
    await s.produceBatch(Array.from({ length: 5 }, (_, i) => ({ payload: { i } })));
    await t.sql(`SELECT setval('${SCHEMA}.message_log_${n}_id_seq', 19)`); // the next id needs partition 2
    await t.sql(`DROP TABLE IF EXISTS ${SCHEMA}.message_log_${n}_2`);
    const c = await t.pool.connect();
    try {
      await c.query("BEGIN");
      const r = await s.produceInTx(c, { in: "tx" });
      await c.query("COMMIT");
      expect(Number(r.id)).toBeGreaterThanOrEqual(20);
      expect(t.events.some((e) => e.code === "SQL0041")).toBe(true);
    } finally {
      c.release();
    }
    // A client whose only connection is the caller's: no connection can be had for the DDL.
    const pg1 = new (await import("pg")).default.Pool({ connectionString: url(), max: 1 });
    const lone = new SqlStreams({ pool: pg1, logger: () => {} });
    const ls = lone.stream("tx.parts");
    await ls.produce({ warm: true }); // the client knows the stream before its one connection is taken
    await t.sql(`SELECT setval('${SCHEMA}.message_log_${n}_id_seq', 39)`); // the next id needs partition 4
    await t.sql(`DROP TABLE IF EXISTS ${SCHEMA}.message_log_${n}_4`);
    const only = await pg1.connect();
    try {
      await only.query("BEGIN");
      await only.query("CREATE TEMP TABLE caller_work (x int)");
      const started = performance.now();
      expect(await codeOf(ls.produceInTx(only, { in: "tx" }))).toBe("SQL0022");
      expect(performance.now() - started).toBeGreaterThanOrEqual(1_900);
      await only.query("INSERT INTO caller_work VALUES (1)"); // the caller's transaction is still usable
      await only.query("COMMIT");
    } finally {
      only.release();
      await lone.close();
      await pg1.end();
    }
  });

  it("stream registration: whole replacement of settings, immutable partitionSize (SQL0011)", async () => {
    const t = testClient(url());
    const s = t.client.stream("settings");
    await s.register({ partitionSize: 100, retention: 60_000, deliveryLog: "all" });
    await s.register({ partitionSize: 100 });
    expect(await t.sql(`SELECT partition_size::text AS p, retention_ms::text AS r, delivery_log_mode AS m FROM ${SCHEMA}.stream_config WHERE name = 'settings'`)).toEqual([
      { p: "100", r: "0", m: "failures" },
    ]);
    expect(await codeOf(s.register({ partitionSize: 200 }))).toBe("SQL0011");
    await s.register(); // omitted partitionSize matches
    expect(await codeOf(s.register({ retention: 5 }))).toBe("SQL0012");
    expect(await codeOf(s.register({ deliveryLog: "some" as never }))).toBe("SQL0012");
    expect(await codeOf(s.register({ bogus: 1 } as never))).toBe("SQL0012");
  });

  it("migrate() is idempotent and safe to race", async () => {
    const t = testClient(url(), { schema: "raced" });
    const others = [testClient(url(), { schema: "raced" }), testClient(url(), { schema: "raced" })];
    await Promise.all([t.client.migrate(), ...others.map((o) => o.client.migrate())]);
    await t.client.migrate();
    expect(await t.sql(`SELECT scope, version, status FROM raced.migration_log ORDER BY id`)).toEqual(
      systemMigrations.map((m) => ({ scope: "system", version: m.version, status: "success" })),
    );
    await t.client.stream("x").register();
    await Promise.all([t.client.migrate(), others[0].client.migrate()]);
    expect(await count(t, "stream_config")).toBeGreaterThanOrEqual(0);
    const logs = await t.sql(`SELECT scope, version FROM raced.migration_log ORDER BY id`);
    expect(logs).toEqual([
      ...systemMigrations.map((m) => ({ scope: "system", version: m.version })),
      ...streamMigrations.map((m) => ({ scope: "stream", version: m.version })),
    ]);
  });

  it("a client on a schema without the control plane says SQL0003 and writes nothing", async () => {
    const t = testClient(url(), { schema: "empty_schema" });
    expect(await codeOf(t.client.stream("x").produce({}))).toBe("SQL0003");
    expect(await codeOf(t.client.stream("x").consumer("g").progress())).toBe("SQL0003");
    expect(await t.sql(`SELECT 1 FROM pg_namespace WHERE nspname = 'empty_schema'`)).toEqual([]);
  });

  it("unknown streams and groups are coded errors", async () => {
    const t = testClient(url());
    expect(await codeOf(t.client.stream("nope").produce({}))).toBe("SQL0009");
    expect(await codeOf(t.client.stream("nope").consumer("g").register())).toBe("SQL0009");
    const s = t.client.stream("known");
    await s.register();
    expect(await codeOf(s.consumer("missing").poll(() => {}))).toBe("SQL0010");
    expect(await codeOf(s.consumer("missing").progress())).toBe("SQL0010");
    await groupIdOf(t, "missing").catch(() => undefined);
  });
});
