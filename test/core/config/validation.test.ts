import { describe, expect, it } from "vitest";
import { SqlStreams, SqlStreamsError } from "@sqlstreams/core";
import { useFreshDatabase } from "../../support/db.js";
import { SCHEMA, codeOf, streamIdOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();


/** Row counts of every table in the schema, to prove a rejected call changed nothing. */
async function snapshot(t: ReturnType<typeof testClient>): Promise<Record<string, number>> {
  const tables = await t.sql<{ name: string }>(`SELECT tablename AS name FROM pg_tables WHERE schemaname = '${SCHEMA}' ORDER BY 1`);
  const out: Record<string, number> = {};
  for (const { name } of tables) out[name] = (await t.sql<{ n: number }>(`SELECT count(*)::int AS n FROM ${SCHEMA}."${name}"`))[0].n;
  return out;
}

describe("bad input is rejected with a coded error before anything is written (C30)", () => {
  it("names, payloads, keys, options, and no user string in any statement text", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream<unknown>("orders.placed");
    await s.register();
    await s.consumer("fraud-scoring").register();
    await s.produce({ ok: true }, { key: "customer-1" });
    const before = await snapshot(t);
    t.statements.length = 0;

    expect(await codeOf(() => t.client.stream("Orders"))).toBe("SQL0006");
    expect(await codeOf(() => t.client.stream("a".repeat(201)))).toBe("SQL0006");
    expect(await codeOf(() => t.client.stream("orders'; DROP TABLE x; --"))).toBe("SQL0006");
    expect(await codeOf(() => t.client.stream("__system.x"))).toBe("SQL0007");
    expect(await codeOf(() => s.consumer("Fraud Scoring"))).toBe("SQL0008");
    expect(await codeOf(() => s.consumer("__system.g"))).toBe("SQL0007");
    expect(await codeOf(() => s.consumer('g"; select 1'))).toBe("SQL0008");

    expect(await codeOf(s.produce({ a: 1n }))).toBe("SQL0016");
    expect(await codeOf(s.produce({ a: NaN }))).toBe("SQL0016");
    expect(await codeOf(s.produce({ a: Infinity }))).toBe("SQL0016");
    expect(await codeOf(s.produce("a\u0000b"))).toBe("SQL0016");
    expect(await codeOf(s.produce({ ["k\u0000"]: 1 }))).toBe("SQL0016");
    expect(await codeOf(s.produce(undefined))).toBe("SQL0016");
    expect(await codeOf(s.produce({ f: () => 1 }))).toBe("SQL0016");
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(await codeOf(s.produce(cyclic))).toBe("SQL0016");
    const err = await s.produce({ deep: { list: [1, NaN] } }).catch((e: SqlStreamsError) => e);
    expect((err as SqlStreamsError).message).toContain("payload.deep.list[1]");
    expect(await codeOf(s.produce("x".repeat(2 * 1024 * 1024)))).toBe("SQL0017");

    expect(await codeOf(s.produce({}, { key: "" }))).toBe("SQL0018");
    expect(await codeOf(s.produce({}, { key: "a\u0000" }))).toBe("SQL0018");
    expect(await codeOf(s.produce({}, { key: "é".repeat(513) }))).toBe("SQL0018");
    expect(await codeOf(s.produce({}, { idempotencyKey: "" }))).toBe("SQL0018");
    expect(await codeOf(s.produce({}, { message: { concurrency: "ordered" } }))).toBe("SQL0019");
    expect(await codeOf(s.produce({}, { message: { concurrency: "exclusive" } }))).toBe("SQL0019");
    expect(await codeOf(s.produce({}, { compaction: {} }))).toBe("SQL0020");
    expect(await codeOf(s.produce({}, { key: "k", compaction: { rank: 1.5 } }))).toBe("SQL0020");
    expect(await codeOf(s.produce({}, { key: "k", compaction: { rank: 2 ** 60 } }))).toBe("SQL0020");
    expect(await codeOf(s.produce({}, { key: "k", compaction: {}, message: { concurrency: "ordered" } }))).toBe("SQL0021");
    expect(await codeOf(s.produce({}, { message: { timeout: 0 } }))).toBe("SQL0013");
    expect(await codeOf(s.produce({}, { message: { retry: { maxRetries: -1 } } }))).toBe("SQL0013");
    expect(await codeOf(s.produce({}, { message: { retry: { baseDelay: 5000, maxDelay: 1000 } } }))).toBe("SQL0014");
    expect(await codeOf(s.produce({}, { message: { bogus: 1 } as never }))).toBe("SQL0013");
    expect(await codeOf(s.produce({}, { bogus: 1 } as never))).toBe("SQL0015");

    const g = s.consumer("fraud-scoring");
    expect(await codeOf(g.register({ message: { retry: { baseDelay: 5000, maxDelay: 1000 } } }))).toBe("SQL0014");
    expect(await codeOf(g.register({ message: { timeout: -5 } }))).toBe("SQL0013");
    expect(await codeOf(g.register({ unknownKey: true } as never))).toBe("SQL0013");
    expect(await codeOf(g.register({ messageMin: { concurrency: "ordered" } } as never))).toBe("SQL0014");
    expect(await codeOf(g.register({ message: { timeout: 1000 }, messageMax: { timeout: 500 } }))).toBe("SQL0014");
    expect(await codeOf(g.poll("not a function" as never))).toBe("SQL0015");
    expect(await codeOf(g.poll(() => {}, { batchLimit: 0 }))).toBe("SQL0015");
    expect(await codeOf(g.poll(() => {}, { concurrency: 65 }))).toBe("SQL0015");
    expect(await codeOf(g.poll(() => {}, { recordMargin: 50 }))).toBe("SQL0015");
    expect(await codeOf(g.drain(() => {}, { deadline: Number.NaN }))).toBe("SQL0015");
    expect(await codeOf(t.client.stream("missing.stream").consumer("g").register())).toBe("SQL0009");
    expect(await codeOf(s.register({ partitionSize: 1 }))).toBe("SQL0012");

    expect(await snapshot(t)).toEqual(before);
    // No statement text carries a stream name, group name, key or payload.
    const texts = t.statements.join("\n");
    for (const needle of ["orders.placed", "fraud-scoring", "customer-1", "missing.stream", "DROP TABLE x"]) {
      expect(texts).not.toContain(needle);
    }
  });

  it("client configuration errors are SQL0001; a closed client is SQL0002", async () => {
    expect(await codeOf(() => new SqlStreams({}))).toBe("SQL0001");
    expect(await codeOf(() => new SqlStreams({ connectionString: url(), schema: "Bad-Schema" }))).toBe("SQL0001");
    const c = new SqlStreams({ connectionString: url(), logger: () => {} });
    await c.close();
    expect(await codeOf(c.migrate())).toBe("SQL0002");
  });

  it("statement texts of a full produce/consume cycle carry no user strings", async () => {
    const t = testClient(url());
    const s = t.client.stream("secret.stream.name");
    await s.register();
    const g = s.consumer("secret-group-name");
    await g.register({ concurrencyOverride: "ordered" });
    t.statements.length = 0;
    await s.produce({ secretPayload: "hunter2" }, { key: "secret-key", idempotencyKey: "secret-idem" });
    await s.produceBatch([{ payload: { secretPayload: "hunter3" }, key: "secret-key" }]);
    let n = 0;
    await g.drain(() => {
      if (n++ === 0) throw new Error("secret-error-text");
    });
    await g.progress();
    await g.failures({ status: "ready" });
    const texts = t.statements.join("\n");
    expect(t.statements.length).toBeGreaterThan(5);
    for (const needle of ["secret.stream.name", "secret-group-name", "hunter2", "hunter3", "secret-key", "secret-idem", "secret-error-text"]) {
      expect(texts).not.toContain(needle);
    }
    expect(await streamIdOf(t, "secret.stream.name")).toBe("2");
  });
});

describe("strings and values that cannot round-trip are rejected before anything is written", () => {
  it("values that cannot round-trip: lone surrogates, Map/Set/typed arrays, deep nesting", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream<unknown>("hostile.strings");
    await s.register();
    const g = s.consumer("g");
    await g.register();
    await s.produce({ ok: true }, { key: "k", idempotencyKey: "idem-\uD83D\uDE00" }); // a valid pair is fine
    const before = await snapshot(t);
    const err = async (p: Promise<unknown>) => (await p.then(() => null, (e: unknown) => e)) as SqlStreamsError;

    // Keys: a lone surrogate would become U+FFFD, so "a\uD800" and "a\uDFFF" would be one key.
    for (const bad of ["a\uD800", "a\uDFFF", "\uDC00x", "x\uD83D"]) {
      const ek = await err(s.produce({}, { key: bad }));
      expect(ek.code).toBe("SQL0018");
      expect(ek.message).toMatch(/key contains a lone UTF-16 surrogate/);
      expect(ek.details.field).toBe("key");
      const ei = await err(s.produce({}, { idempotencyKey: bad }));
      expect(ei.code).toBe("SQL0018");
      expect(ei.details.field).toBe("idempotencyKey");
      expect(ei.message).toContain("fix:");
    }
    expect((await err(s.produceBatch([{ payload: {}, key: "ok" }, { payload: {}, key: "b\uD800" }]))).code).toBe("SQL0018");

    // Payload strings and object keys: a raw 22P02 from Postgres before, a coded error now.
    const es = await err(s.produce({ a: { b: ["x", "lone \uD800 here"] } }));
    expect(es.code).toBe("SQL0016");
    expect(es.message).toContain("payload.a.b[1]");
    expect(es.message).toMatch(/lone UTF-16 surrogate at index 5/);
    expect((await err(s.produce("\uDFFF"))).code).toBe("SQL0016");
    expect((await err(s.produce({ ["k\uD800"]: 1 }))).code).toBe("SQL0016");

    // Built-ins JSON would store as {}.
    const cases: [unknown, string, RegExp][] = [
      [{ m: new Map([["a", 1]]) }, "payload.m", /a Map .*Object\.fromEntries/],
      [{ s: new Set([1]) }, "payload.s", /a Set .*\[\.\.\.set\]/],
      [{ t: new Uint8Array([1, 2]) }, "payload.t", /typed array/],
      [{ t: new Float64Array(2) }, "payload.t", /typed array/],
      [{ d: new DataView(new ArrayBuffer(2)) }, "payload.d", /DataView/],
      [{ b: new ArrayBuffer(4) }, "payload.b", /ArrayBuffer/],
      [[new WeakMap()], "payload[0]", /WeakMap/],
      [{ r: /x/ }, "payload.r", /RegExp/],
      [{ e: new Error("x") }, "payload.e", /an Error/],
      [new Map(), "payload", /a Map/],
    ];
    for (const [payload, path, why] of cases) {
      const e = await err(s.produce(payload));
      expect(e.code, path).toBe("SQL0016");
      expect(e.message).toContain(`at ${path}`);
      expect(e.message).toMatch(why);
      expect(e.details.path).toBe(path);
    }
    expect((await err(s.produceBatch([{ payload: { ok: 1 } }, { payload: { s: new Set() } }]))).code).toBe("SQL0016");

    // Nesting: 20,000 levels threw a RangeError; now a coded error naming the depth.
    let deep: unknown = 1;
    for (let i = 0; i < 20_000; i++) deep = { d: deep };
    const ed = await err(s.produce(deep));
    expect(ed.code).toBe("SQL0016");
    expect(ed.message).toMatch(/deeper than 1000 levels/);
    let deepArr: unknown = [];
    for (let i = 0; i < 1_001; i++) deepArr = [deepArr];
    expect((await err(s.produce(deepArr))).code).toBe("SQL0016");

    expect(await snapshot(t)).toEqual(before);

    // What still goes through: exactly 1000 levels, a class instance (its own properties), a Date
    // and a Buffer (their toJSON()), valid surrogate pairs; all stored as the JSON they encode to.
    let ok: unknown = "leaf";
    for (let i = 0; i < 999; i++) ok = [ok];
    class Point {
      constructor(readonly x: number, readonly y: number) {}
    }
    await s.produce({ ok });
    await s.produce({ p: new Point(1, 2), at: new Date(0), buf: Buffer.from([1]), smile: "\uD83D\uDE00" }, { key: "\uD83D\uDE00" });
    // Text whose JSON has a \u escape without a bad character in it: a backslash before a u, and
    // control characters JSON writes as \u00XX (the encoded text's \u sends it to the careful walk).
    await s.produce({ path: "C:\\users\\x", bell: "\u0007", ["tab\u0001key"]: "\u001f" });
    const seen: unknown[] = [];
    await g.drain((m) => {
      seen.push(m.payload);
    });
    expect(seen).toHaveLength(4);
    expect(seen[2]).toEqual({ p: { x: 1, y: 2 }, at: "1970-01-01T00:00:00.000Z", buf: { type: "Buffer", data: [1] }, smile: "\uD83D\uDE00" });
    expect(seen[3]).toEqual({ path: "C:\\users\\x", bell: "\u0007", ["tab\u0001key"]: "\u001f" });
    let depth = 0;
    for (let v = (seen[1] as { ok: unknown }).ok; Array.isArray(v); v = v[0]) depth++;
    expect(depth).toBe(999);
  });
});
