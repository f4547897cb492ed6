// Producing from SQL: sqlstreams.produce() and produce_batch() (docs/guide/producing.md#producing-from-sql).
// The same rules as the library path: the same idempotency UUIDs (a key produced from SQL and from
// TypeScript is one key), the same checks and codes, compaction heads, and the caller's
// transaction deciding; a trigger on an application table produces on INSERT.
import { describe, expect, it } from "vitest";
import { useFreshDatabase } from "../../support/db.js";
import { SCHEMA, count, streamIdOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();

/** The message of the error a statement raises (fails the test when it raises none). */
async function raised(p: Promise<unknown>): Promise<{ message: string; code: string }> {
  try {
    await p;
  } catch (e) {
    const err = e as { message: string; code: string };
    return { message: err.message, code: err.code };
  }
  throw new Error("expected the statement to raise");
}

describe("sqlstreams.produce() from SQL", () => {
  it("produces with the library's rules: ids, keys, options, compaction, idempotency shared with TypeScript", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream("sql.orders");
    await s.register();
    const n = await streamIdOf(t, "sql.orders");
    const [a] = await t.sql<{ id: string }>(`SELECT ${SCHEMA}.produce('sql.orders', '{"order": 1}')::text AS id`);
    const [b] = await t.sql<{ id: string }>(
      `SELECT ${SCHEMA}.produce('sql.orders', '{"order": 2}', key => 'c-1', options => '{"message": {"timeout": 5000, "concurrency": "exclusive"}}')::text AS id`,
    );
    expect([a.id, b.id]).toEqual(["1", "2"]);
    // Compaction: the head follows the highest (rank, id).
    await t.sql(`SELECT ${SCHEMA}.produce('sql.orders', '{"v": 1}', 'k', NULL, '{"compaction": {"rank": 5}}')`);
    await t.sql(`SELECT ${SCHEMA}.produce('sql.orders', '{"v": 2}', 'k', NULL, '{"compaction": {"rank": 1}}')`);
    expect(await t.sql(`SELECT message_id::text AS id, compaction_rank::text AS rank FROM ${SCHEMA}.compaction_head_${n}`)).toEqual([{ id: "3", rank: "5" }]);
    expect(await t.sql(`SELECT message_key, options FROM ${SCHEMA}.message_log_${n} WHERE id = 2`)).toEqual([
      { message_key: "c-1", options: { timeout: 5000, concurrency: "exclusive" } },
    ]);
    // An idempotency key is one key whichever side produces it (the same version-5 UUID).
    const lib = await s.produce({ pay: 1 }, { idempotencyKey: "payment:1" });
    const [dup] = await t.sql<{ id: string }>(`SELECT ${SCHEMA}.produce('sql.orders', '{"pay": 2}', idempotency_key => 'payment:1')::text AS id`);
    expect(dup.id).toBe(lib.id);
    const [fromSql] = await t.sql<{ id: string }>(`SELECT ${SCHEMA}.produce('sql.orders', '{"pay": 3}', idempotency_key => 'ключ 🙂 ${"x".repeat(120)}')::text AS id`);
    expect(await s.produce({ pay: 4 }, { idempotencyKey: `ключ 🙂 ${"x".repeat(120)}` })).toEqual({ id: fromSql.id, duplicate: true });
    expect(await t.sql(`SELECT ${SCHEMA}.idempotency_uuid('payment:1')::text AS u, ${SCHEMA}.idempotency_uuid('3F2504E0-4F89-11D3-9A0C-0305E82C3301')::text AS v`)).toEqual([
      { u: "dce973c4-9674-5b83-89bc-5687eb07cb04", v: "3f2504e0-4f89-11d3-9a0c-0305e82c3301" },
    ]);
    expect(await count(t, `idempotency_key_${n}`)).toBe(2);
    // The batch form: ids ascending in item order.
    const batch = await t.sql<{ id: string }>(
      `SELECT id::text FROM ${SCHEMA}.produce_batch('sql.orders', '[{"payload": {"i": 1}}, {"payload": {"i": 2}, "key": "c-2"}, {"payload": null}]') AS id`,
    );
    const ids = batch.map((r) => Number(r.id));
    expect(ids[0]).toBeGreaterThan(Number(fromSql.id));
    expect(ids).toEqual([ids[0], ids[0] + 1, ids[0] + 2]);
    const g = s.consumer("all");
    await g.register();
    const seen: unknown[] = [];
    await g.drain((m) => void seen.push(m.payload));
    expect(seen).toContainEqual({ order: 2 });
    expect(seen).toContainEqual({ i: 2 });
    expect(seen).toContainEqual(null);
    expect(seen).not.toContainEqual({ v: 2 }); // compacted away by the rank-5 head
  });

  it("refuses bad input with the library's codes before writing anything", async () => {
    const t = testClient(url());
    await t.client.migrate();
    await t.client.stream("sql.checks").register({ maxPayloadBytes: 1024 });
    const n = await streamIdOf(t, "sql.checks");
    const cases: [string, string][] = [
      [`SELECT ${SCHEMA}.produce('nope', '{}')`, "SQL0009"],
      [`SELECT ${SCHEMA}.produce('sql.checks', NULL)`, "SQL0016"],
      [`SELECT ${SCHEMA}.produce('sql.checks', '{}', '')`, "SQL0018"],
      [`SELECT ${SCHEMA}.produce('sql.checks', '{}', repeat('k', 1025))`, "SQL0018"],
      [`SELECT ${SCHEMA}.produce('sql.checks', '{}', NULL, '')`, "SQL0018"],
      [`SELECT ${SCHEMA}.produce('sql.checks', to_jsonb(repeat('x', 2000)))`, "SQL0017"],
      [`SELECT ${SCHEMA}.produce('sql.checks', '{}', options => '{"message": {"timeout": 0}}')`, "SQL0013"],
      [`SELECT ${SCHEMA}.produce('sql.checks', '{}', options => '{"message": {"timeout": 1.5}}')`, "SQL0013"],
      [`SELECT ${SCHEMA}.produce('sql.checks', '{}', options => '{"message": {"nope": 1}}')`, "SQL0013"],
      [`SELECT ${SCHEMA}.produce('sql.checks', '{}', options => '{"message": {"retry": {"baseDelay": 10, "maxDelay": 5}}}')`, "SQL0014"],
      [`SELECT ${SCHEMA}.produce('sql.checks', '{}', options => '{"message": {"concurrency": "ordered"}}')`, "SQL0019"],
      [`SELECT ${SCHEMA}.produce('sql.checks', '{}', options => '{"compaction": {}}')`, "SQL0020"],
      [`SELECT ${SCHEMA}.produce('sql.checks', '{}', 'k', NULL, '{"compaction": {"rank": 1.5}}')`, "SQL0020"],
      [`SELECT ${SCHEMA}.produce('sql.checks', '{}', 'k', NULL, '{"compaction": {}, "message": {"concurrency": "ordered"}}')`, "SQL0021"],
      [`SELECT ${SCHEMA}.produce('sql.checks', '{}', options => '{"idempotencyKey": "x"}')`, "SQL0015"],
      [`SELECT ${SCHEMA}.produce_batch('sql.checks', '{}')`, "SQL0015"],
      [`SELECT ${SCHEMA}.produce_batch('sql.checks', '[{"payload": 1, "idempotency_key": "x"}]')`, "SQL0015"],
      [`SELECT ${SCHEMA}.produce_batch('sql.checks', (SELECT jsonb_agg(jsonb_build_object('payload', g)) FROM generate_series(1, 1001) g))`, "SQL0015"],
      [`SELECT ${SCHEMA}.produce_batch('sql.checks', '[{"payload": 1}, {"payload": 2, "key": ""}]')`, "SQL0018"],
    ];
    for (const [sql, code] of cases) {
      const e = await raised(t.sql(sql));
      expect(e.message.startsWith(`${code} `), `${sql} → ${e.message}`).toBe(true);
      expect(e.message).toContain("(fix: ");
    }
    expect(await count(t, `message_log_${n}`)).toBe(0);
    // A missing partition is SQL0022, not a silent failure.
    await t.sql(`DROP TABLE ${SCHEMA}.message_log_${n}_0`);
    const e = await raised(t.sql(`SELECT ${SCHEMA}.produce('sql.checks', '{}')`));
    expect(e.message.startsWith("SQL0022 ")).toBe(true);
  });

  it("refuses nesting deeper than the library's 1000 levels (SQL0016), from produce and produce_batch", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream("sql.deep");
    await s.register();
    const n = await streamIdOf(t, "sql.deep");
    const arrays = (levels: number) => "[".repeat(levels) + "]".repeat(levels);
    const objects = (levels: number) => '{"d": '.repeat(levels) + "1" + "}".repeat(levels);
    // The library's own limit, for comparison: 1000 nested arrays go, 1001 do not.
    const nest = (levels: number) => {
      let v: unknown = [];
      for (let i = 1; i < levels; i++) v = [v];
      return v;
    };
    await s.produce(nest(1000));
    await expect(s.produce(nest(1001))).rejects.toMatchObject({ code: "SQL0016" });
    // SQL: the same boundary, arrays and objects, alone and in a batch.
    await t.sql(`SELECT ${SCHEMA}.produce('sql.deep', $1::jsonb)`, [arrays(1000)]);
    await t.sql(`SELECT ${SCHEMA}.produce('sql.deep', $1::jsonb)`, [objects(1000)]);
    for (const deep of [arrays(1001), objects(1001), arrays(5000)]) {
      const e = await raised(t.sql(`SELECT ${SCHEMA}.produce('sql.deep', $1::jsonb)`, [deep]));
      expect(e.message).toMatch(/^SQL0016 payload cannot be stored as JSON: nesting is deeper than 1000 levels/);
      const b = await raised(t.sql(`SELECT ${SCHEMA}.produce_batch('sql.deep', jsonb_build_array(jsonb_build_object('payload', 1), jsonb_build_object('payload', $1::jsonb)))`, [deep]));
      expect(b.message.startsWith("SQL0016 ")).toBe(true);
    }
    // Wide is not deep: a large flat payload goes.
    await t.sql(`SELECT ${SCHEMA}.produce('sql.deep', (SELECT jsonb_agg(jsonb_build_array(g, jsonb_build_object('g', g))) FROM generate_series(1, 5000) g))`);
    expect(await count(t, `message_log_${n}`)).toBe(4);
  });

  it("a trigger produces on INSERT: consumed once the row commits, never when it rolls back", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream("app.orders");
    await s.register();
    const n = await streamIdOf(t, "app.orders");
    await t.sql(`CREATE TABLE app_orders (id int PRIMARY KEY, customer text NOT NULL, total int NOT NULL)`);
    await t.sql(`CREATE FUNCTION app_orders_produce() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM ${SCHEMA}.produce('app.orders', jsonb_build_object('orderId', NEW.id, 'total', NEW.total), key => NEW.customer,
                             idempotency_key => 'order:' || NEW.id);
        RETURN NEW;
      END $$`);
    await t.sql(`CREATE TRIGGER app_orders_produce AFTER INSERT ON app_orders FOR EACH ROW EXECUTE FUNCTION app_orders_produce()`);
    const g = s.consumer("shipping");
    await g.register();
    const seen: unknown[] = [];

    const c = await t.pool.connect();
    try {
      await c.query("BEGIN");
      await c.query("INSERT INTO app_orders VALUES (1, 'c-1', 10)");
      await g.drain((m) => void seen.push(m.payload)); // not committed yet: nothing to see
      expect(seen).toEqual([]);
      await c.query("ROLLBACK");
      await c.query("BEGIN");
      await c.query("INSERT INTO app_orders VALUES (2, 'c-2', 20), (3, 'c-2', 30)");
      await c.query("COMMIT");
    } finally {
      c.release();
    }
    await g.drain((m) => void seen.push(m.payload));
    expect(seen).toEqual([
      { orderId: 2, total: 20 },
      { orderId: 3, total: 30 },
    ]);
    expect(await t.sql(`SELECT message_key FROM ${SCHEMA}.message_log_${n} ORDER BY id`)).toEqual([{ message_key: "c-2" }, { message_key: "c-2" }]);
    expect(await count(t, `idempotency_key_${n}`)).toBe(2); // the rolled-back order's key is gone
    expect((await g.progress()).committed).toBe(String(await t.sql<{ m: string }>(`SELECT max(id)::text AS m FROM ${SCHEMA}.message_log_${n}`).then((r) => r[0].m)));
  });

  it("lives in the client's schema", async () => {
    const t = testClient(url(), { schema: "other_s" });
    await t.client.migrate();
    await t.client.stream("in.other").register();
    const [r] = await t.sql<{ id: string }>(`SELECT other_s.produce('in.other', '[1, 2]')::text AS id`);
    expect(r.id).toBe("1");
  });
});
