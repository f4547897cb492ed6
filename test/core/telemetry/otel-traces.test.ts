// OpenTelemetry traces across a real Postgres round trip (docs/guide/operations.md#traces): the real
// SDK with its in-memory exporter; a message produced inside an active span is processed in a
// span of the same trace, also on a retry, with the messaging semantic conventions' attributes.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SpanKind, SpanStatusCode, context, trace } from "@opentelemetry/api";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from "@opentelemetry/sdk-trace-base";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { Delay, Permanent } from "@sqlstreams/core";
// Internal hooks, read from the build the package exports.
import { startProduce, tracedHandler } from "../../../packages/core/dist/otel.js";
import { useFreshDatabase } from "../../support/db.js";
import { SCHEMA, committed, makeDue, pollPastFence, progressIs, streamIdOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();
const exporter = new InMemorySpanExporter();
let t: ReturnType<typeof testClient>;
let contextManager: AsyncLocalStorageContextManager;

beforeAll(async () => {
  t = testClient(url());
  await t.client.migrate();
});
afterAll(() => {
  trace.disable();
  context.disable();
  contextManager?.disable();
});

const TRACEPARENT = /^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/;
const spans = (name: string): ReadableSpan[] => exporter.getFinishedSpans().filter((s) => s.name === name);
const parentOf = (s: ReadableSpan): string | undefined => s.parentSpanContext?.spanId;
async function storedOptions(stream: string, id: string): Promise<Record<string, unknown> | null> {
  const n = await streamIdOf(t, stream);
  const r = await t.sql<{ options: Record<string, unknown> | null }>(`SELECT options FROM ${SCHEMA}.message_log_${n} WHERE id = $1`, [id]);
  return r[0].options;
}

describe("without an SDK", () => {
  it("stores nothing with the message and changes nothing", async () => {
    const s = t.client.stream<{ n: number }>("otel.none");
    await s.register();
    await s.consumer("g").register({ message: { timeout: 5_000 } });
    const a = await s.produce({ n: 1 });
    const [b] = await s.produceBatch([{ payload: { n: 2 }, message: { timeout: 4_000 } }]);
    expect(await storedOptions("otel.none", a.id)).toBeNull();
    expect(await storedOptions("otel.none", b.id)).toEqual({ timeout: 4_000 });
    const seen: number[] = [];
    await pollPastFence(s.consumer("g"), (m) => void seen.push(m.payload.n), { drain: true, until: committed(b.id) });
    expect(seen).toEqual([1, 2]);
    expect(exporter.getFinishedSpans()).toHaveLength(0);
    // The hot path is the same code: the handler is not wrapped and no producer span is started.
    const h = () => {};
    expect(tracedHandler(h, "otel.none", "g")).toBe(h);
    expect(startProduce("otel.none", "produce", 1)).toBeNull();
  });
});

describe("with the SDK registered", () => {
  beforeAll(() => {
    contextManager = new AsyncLocalStorageContextManager().enable();
    context.setGlobalContextManager(contextManager);
    trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
  });

  it("produce inside a request span: the process span is in the same trace, a child of the send span and linked to it, across a retry", async () => {
    exporter.reset();
    const s = t.client.stream<{ n: number }>("otel.orders");
    await s.register();
    await s.consumer("billing").register({ message: { timeout: 5_000, retry: { maxRetries: 3, baseDelay: 60_000 } } });
    const tracer = trace.getTracer("test");
    const request = await tracer.startActiveSpan("POST /orders", async (span) => {
      const r = await s.produce({ n: 1 }, { message: { timeout: 3_000 } });
      span.end();
      return { id: r.id, traceId: span.spanContext().traceId, spanId: span.spanContext().spanId };
    });
    const [send] = spans("send otel.orders");
    expect(send.kind).toBe(SpanKind.PRODUCER);
    expect(send.spanContext().traceId).toBe(request.traceId);
    expect(parentOf(send)).toBe(request.spanId);
    expect(send.attributes).toMatchObject({
      "messaging.system": "sqlstreams",
      "messaging.destination.name": "otel.orders",
      "messaging.operation.name": "send",
      "messaging.operation.type": "send",
      "messaging.message.id": request.id,
    });
    // The context travels in the stored options, beside the message's own options.
    const stored = await storedOptions("otel.orders", request.id);
    expect(stored).toMatchObject({ timeout: 3_000 });
    expect(stored?.traceparent).toMatch(TRACEPARENT);
    expect(String(stored?.traceparent)).toContain(`-${send.spanContext().spanId}-`);

    // First run fails, the retry (made due at once) succeeds.
    const g = s.consumer("billing");
    let runs = 0;
    const handler = () => {
      runs++;
      // A span the handler starts is a child of the process span.
      trace.getTracer("handler").startSpan("charge card").end();
      if (runs === 1) throw new Error("card service down");
    };
    await pollPastFence(g, handler, { drain: true, until: () => runs >= 1 });
    const n = await streamIdOf(t, "otel.orders");
    await makeDue(t, n);
    await pollPastFence(g, handler, { drain: true, until: progressIs((p) => p.exceptions.ready === 0 && runs >= 2) });

    const process = spans("process otel.orders");
    expect(process).toHaveLength(2);
    for (const [i, p] of process.entries()) {
      expect(p.kind).toBe(SpanKind.CONSUMER);
      expect(p.spanContext().traceId).toBe(request.traceId);
      expect(parentOf(p)).toBe(send.spanContext().spanId);
      expect(p.links.map((l) => l.context.spanId)).toEqual([send.spanContext().spanId]);
      expect(p.attributes).toMatchObject({
        "messaging.system": "sqlstreams",
        "messaging.destination.name": "otel.orders",
        "messaging.consumer.group.name": "billing",
        "messaging.message.id": request.id,
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "sqlstreams.attempt": i,
      });
    }
    expect(process[0].status.code).toBe(SpanStatusCode.ERROR);
    expect(process[0].attributes["sqlstreams.outcome"]).toBe("failed");
    expect(process[0].events.some((e) => e.name === "exception")).toBe(true);
    expect(process[1].status.code).not.toBe(SpanStatusCode.ERROR);
    expect(process[1].attributes["sqlstreams.outcome"]).toBe("succeeded");
    const charges = spans("charge card");
    expect(charges.map(parentOf)).toEqual(process.map((p) => p.spanContext().spanId));
    // Each poll is a receive span with the number of messages it started.
    const receives = spans("receive otel.orders");
    expect(receives.length).toBeGreaterThanOrEqual(2);
    expect(receives.every((r) => r.kind === SpanKind.CLIENT && r.attributes["messaging.operation.type"] === "receive")).toBe(true);
    expect(receives.reduce((a, r) => a + Number(r.attributes["messaging.batch.message_count"] ?? 0), 0)).toBe(2);
  });

  it("produceBatch and produceInTx: one send span each; outcomes dead and delayed are recorded", async () => {
    exporter.reset();
    const s = t.client.stream<{ n: number }>("otel.batch");
    await s.register();
    await s.consumer("g").register({ message: { timeout: 5_000 } });
    const tracer = trace.getTracer("test");
    const traceId = await tracer.startActiveSpan("job", async (span) => {
      await s.produceBatch([{ payload: { n: 1 } }, { payload: { n: 2 } }, { payload: { n: 3 }, key: "k" }]);
      const tx = await t.pool.connect();
      try {
        await tx.query("BEGIN");
        await s.produceInTx(tx, { n: 4 });
        await tx.query("COMMIT");
      } finally {
        tx.release();
      }
      span.end();
      return span.spanContext().traceId;
    });
    const sends = spans("send otel.batch");
    expect(sends.map((x) => x.attributes["sqlstreams.operation"])).toEqual(["produceBatch", "produceInTx"]);
    expect(sends[0].attributes["messaging.batch.message_count"]).toBe(3);
    expect(sends.every((x) => x.spanContext().traceId === traceId)).toBe(true);

    const seen = new Set<number>();
    await pollPastFence(s.consumer("g"), (m) => {
      seen.add(m.payload.n);
      if (m.payload.n === 2) return Permanent(new Error("malformed"));
      if (m.payload.n === 3 && m.delays === 0) return Delay(60_000);
    }, { drain: true, until: () => seen.size === 4 });
    const process = spans("process otel.batch");
    expect(process.length).toBeGreaterThanOrEqual(4);
    expect(process.every((p) => p.spanContext().traceId === traceId)).toBe(true);
    const byN = (id: string) => process.find((p) => p.attributes["messaging.message.id"] === id);
    const ids = process.map((p) => String(p.attributes["messaging.message.id"])).sort((a, b) => Number(a) - Number(b));
    const dead = byN(ids[1]);
    expect(dead?.attributes["sqlstreams.outcome"]).toBe("dead");
    expect(dead?.status.code).toBe(SpanStatusCode.ERROR);
    const delayed = byN(ids[2]);
    expect(delayed?.attributes).toMatchObject({ "sqlstreams.outcome": "delayed", "sqlstreams.delay_ms": 60_000, "sqlstreams.message.key": "k" });
    expect(delayed?.status.code).not.toBe(SpanStatusCode.ERROR);
    // produceInTx's message carries that call's own send span as parent.
    expect(parentOf(byN(ids[3]) as ReadableSpan)).toBe(sends[1].spanContext().spanId);
  });
});
