// Typed streams (docs/guide/producing.md#typed-streams): defineStream with a Standard Schema validator
// (zod, valibot, or any object with "~standard".validate) checks payloads on produce — SQL0067
// before anything is written — and on consume — a payload that fails is dead (Permanent, SQL0068)
// without the handler running; the handler gets the schema's output.
import { describe, expect, it } from "vitest";
import { z } from "zod";
import * as v from "valibot";
import { defineStream, type StandardSchema } from "@sqlstreams/core";
import { useFreshDatabase } from "../../support/db.js";
import { codeOf, count, streamIdOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();

const OrderPlaced = z.object({ orderId: z.string().min(1), total: z.number().int().nonnegative() });
const ordersZ = defineStream("typed.zod", { schema: OrderPlaced });
const ordersV = defineStream("typed.valibot", { schema: v.object({ sku: v.string(), qty: v.pipe(v.number(), v.minValue(1)) }) });

/** A hand-written asynchronous Standard Schema: accepts even numbers. */
const even: StandardSchema<number> = {
  "~standard": {
    version: 1,
    vendor: "test",
    validate: async (x) => (typeof x === "number" && x % 2 === 0 ? { value: x } : { issues: [{ message: "not an even number" }] }),
  },
};

describe("typed streams", () => {
  it("zod: produce checks the payload (SQL0067, nothing written) and stores the schema's output", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream(ordersZ);
    await s.register();
    const n = await streamIdOf(t, ordersZ.name);
    await s.produce({ orderId: "o-1", total: 5, extra: "stripped" } as never);
    expect(await codeOf(s.produce({ orderId: "", total: 5 }))).toBe("SQL0067");
    expect(await codeOf(s.produce({ orderId: "o-2", total: "5" } as never))).toBe("SQL0067");
    const err = await s.produce({ orderId: "o-2", total: -1 }).catch((e: Error) => e);
    expect(String(err)).toContain("payload.total");
    expect(await codeOf(s.produceBatch([{ payload: { orderId: "o-3", total: 1 } }, { payload: { orderId: "o-4" } as never }]))).toBe("SQL0067");
    const c = await t.pool.connect();
    try {
      await c.query("BEGIN");
      expect(await codeOf(s.produceInTx(c, { orderId: 7 } as never))).toBe("SQL0067");
      await s.produceInTx(c, { orderId: "o-5", total: 2 });
      await c.query("COMMIT");
    } finally {
      c.release();
    }
    expect(await t.sql(`SELECT payload FROM sqlstreams.message_log_${n} ORDER BY id`)).toEqual([
      { payload: { orderId: "o-1", total: 5 } },
      { payload: { orderId: "o-5", total: 2 } },
    ]);
  });

  it("consume: a payload the schema refuses is dead with SQL0068 and never reaches the handler", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const typed = t.client.stream(ordersV);
    await typed.register();
    // Another producer that does not know the schema (an older deployment, SQL, psql).
    const untyped = t.client.stream(ordersV.name);
    await untyped.produce({ sku: "a", qty: 1 });
    await untyped.produce({ sku: "b", qty: 0 });
    await untyped.produce({ sku: "c", qty: 3 });
    const g = typed.consumer("picking");
    await g.register();
    const seen: string[] = [];
    const report = await g.drain((msg) => {
      seen.push(msg.payload.sku); // typed: { sku: string; qty: number }, no cast
    });
    expect(seen).toEqual(["a", "c"]);
    expect(report.dead).toBe(1);
    const dead = await g.failures();
    expect(dead.map((d) => [d.messageId, d.status])).toEqual([["2", "dead"]]);
    expect(dead[0].lastError).toContain("SQL0068");
    expect(dead[0].lastError).toContain("payload.qty");
  });

  it("an asynchronous schema works on both sides; defineStream refuses a non-schema", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const def = defineStream("typed.even", { schema: even });
    const s = t.client.stream(def);
    await s.register();
    const n = await streamIdOf(t, def.name);
    await s.produce(2);
    expect(await codeOf(s.produce(3))).toBe("SQL0067");
    await t.client.stream(def.name).produce(5);
    const g = s.consumer("g");
    await g.register();
    const seen: number[] = [];
    await g.drain((msg) => void seen.push(msg.payload));
    expect(seen).toEqual([2]);
    expect(await count(t, `message_log_${n}`)).toBe(2);
    expect(await codeOf(() => defineStream("typed.bad", { schema: {} as never }))).toBe("SQL0015");
    expect(await codeOf(() => defineStream("Bad Name"))).toBe("SQL0006");
  });
});
