import { describe, expect, it } from "vitest";
import { SqlStreams, SqlStreamsError } from "@sqlstreams/core";
import { useFreshDatabase } from "./support/db.js";
import { S, codeOf, streamIdOf, testClient } from "./support/streams.js";

const url = useFreshDatabase();


/** Row counts of every table in the schema, to prove a rejected call changed nothing. */
async function snapshot(t: ReturnType<typeof testClient>): Promise<Record<string, number>> {
  const tables = await t.sql<{ name: string }>(`SELECT tablename AS name FROM pg_tables WHERE schemaname = '${S}' ORDER BY 1`);
  const out: Record<string, number> = {};
  for (const { name } of tables) out[name] = (await t.sql<{ n: number }>(`SELECT count(*)::int AS n FROM ${S}."${name}"`))[0].n;
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
