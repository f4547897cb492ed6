// OpenTelemetry metrics across a real Postgres round trip (docs/guide/operations.md#traces): the real
// metrics SDK with its in-memory exporter records `messaging.client.consumed.messages` and
// `messaging.process.duration` per handler run with the messaging semantic conventions'
// attributes; without a meter provider the handler is not wrapped.
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { metrics } from "@opentelemetry/api";
import {
  AggregationTemporality,
  DataPointType,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
  type MetricData,
} from "@opentelemetry/sdk-metrics";
import { Delay, Permanent } from "@sqlstreams/core";
// Internal hook, read from the build the package exports.
import { tracedHandler } from "../../../packages/core/dist/otel.js";
import { useFreshDatabase } from "../../support/db.js";
import { committed, makeDue, pollPastFence, progressIs, streamIdOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();
let t: ReturnType<typeof testClient>;

beforeAll(async () => {
  t = testClient(url());
  await t.client.migrate();
});
afterAll(() => {
  metrics.disable();
});

describe("without a meter provider", () => {
  it("does not wrap the handler and records nothing", async () => {
    const h = () => {};
    expect(tracedHandler(h, "otelm.none", "g")).toBe(h);
    const s = t.client.stream<{ n: number }>("otelm.none");
    await s.register();
    await s.consumer("g").register();
    const a = await s.produce({ n: 1 });
    await pollPastFence(s.consumer("g"), () => {}, { drain: true, until: committed(a.id) });
  });
});

describe("with the metrics SDK registered", () => {
  const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  // Exports only when flushed (the interval is far beyond the test).
  const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000, exportTimeoutMillis: 30_000 });
  beforeAll(() => {
    metrics.setGlobalMeterProvider(new MeterProvider({ readers: [reader] }));
  });
  afterAll(async () => {
    await reader.shutdown();
  });

  async function collected(name: string): Promise<MetricData> {
    exporter.reset();
    await reader.forceFlush();
    const all = exporter.getMetrics().flatMap((r) => r.scopeMetrics.filter((s) => s.scope.name === "@sqlstreams/core").flatMap((s) => s.metrics));
    const m = all.find((x) => x.descriptor.name === name);
    if (!m) throw new Error(`no metric ${name}; got ${all.map((x) => x.descriptor.name).join(", ")}`);
    return m;
  }

  it("a counter and a duration histogram per handler run, with error.type on failures, across a retry", async () => {
    const s = t.client.stream<{ n: number }>("otelm.orders");
    await s.register();
    const g = s.consumer("billing");
    await g.register({ message: { timeout: 5_000, retry: { maxRetries: 3, baseDelay: 60_000 } } });
    await s.produceBatch([{ payload: { n: 1 } }, { payload: { n: 2 } }, { payload: { n: 3 } }, { payload: { n: 4 } }]);
    const runs = new Map<number, number>();
    const handler = async (m: { payload: { n: number } }) => {
      const n = m.payload.n;
      runs.set(n, (runs.get(n) ?? 0) + 1);
      await sleep(20); // a measurable duration
      if (n === 2 && runs.get(n) === 1) throw new TypeError("card service down");
      if (n === 3) return Permanent(new Error("malformed"));
      if (n === 4 && runs.get(n) === 1) return Delay(60_000);
    };
    await pollPastFence(g, handler, { drain: true, until: () => runs.size === 4 });
    await makeDue(t, await streamIdOf(t, "otelm.orders"));
    await pollPastFence(g, handler, { drain: true, until: progressIs((p) => p.exceptions.ready === 0 && (runs.get(2) ?? 0) >= 2 && (runs.get(4) ?? 0) >= 2) });
    // 1 ok; 2 failed then ok; 3 dead; 4 delayed then ok: 6 runs.
    expect([...runs.entries()].sort()).toEqual([[1, 1], [2, 2], [3, 1], [4, 2]]);

    const base = {
      "messaging.system": "sqlstreams",
      "messaging.destination.name": "otelm.orders",
      "messaging.consumer.group.name": "billing",
      "messaging.operation.name": "process",
      "messaging.operation.type": "process",
    };
    const key = (a: Record<string, unknown>) => String(a["error.type"] ?? "");

    const consumed = await collected("messaging.client.consumed.messages");
    expect(consumed.descriptor).toMatchObject({ unit: "{message}" });
    expect(consumed.dataPointType).toBe(DataPointType.SUM);
    const counts = Object.fromEntries(consumed.dataPoints.map((p) => [key(p.attributes), p.value]));
    expect(counts).toEqual({ "": 4, TypeError: 1, Permanent: 1 });
    for (const p of consumed.dataPoints) {
      expect(p.attributes).toEqual(key(p.attributes) ? { ...base, "error.type": key(p.attributes) } : base);
    }

    const duration = await collected("messaging.process.duration");
    expect(duration.descriptor).toMatchObject({ unit: "s" });
    expect(duration.dataPointType).toBe(DataPointType.HISTOGRAM);
    const hist = Object.fromEntries(duration.dataPoints.map((p) => [key(p.attributes), p.value as { count: number; sum: number; min?: number; max?: number; buckets: { boundaries: number[] } }]));
    expect(Object.keys(hist).sort()).toEqual(["", "Permanent", "TypeError"]);
    expect(hist[""].count).toBe(4);
    expect(hist.TypeError.count).toBe(1);
    expect(hist.Permanent.count).toBe(1);
    // Seconds, not milliseconds: each run slept about 20 ms.
    for (const h of Object.values(hist)) {
      expect(h.min).toBeGreaterThanOrEqual(0.015);
      expect(h.max).toBeLessThan(10); // 20 in milliseconds would fail here
    }
    // The semantic conventions' recommended buckets.
    expect(hist[""].buckets.boundaries).toEqual([0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10]);
  });

  it("the group and stream are attributes: a second group of the same stream counts apart", async () => {
    const s = t.client.stream<{ n: number }>("otelm.orders");
    const audit = s.consumer("audit");
    await audit.register({ message: { timeout: 5_000 } });
    const last = await s.produce({ n: 5 });
    let seen = 0;
    await pollPastFence(audit, () => void seen++, { drain: true, until: committed(last.id) });
    expect(seen).toBeGreaterThanOrEqual(1);
    const consumed = await collected("messaging.client.consumed.messages");
    const auditPoints = consumed.dataPoints.filter((p) => p.attributes["messaging.consumer.group.name"] === "audit");
    expect(auditPoints.map((p) => [p.attributes["error.type"], p.value])).toEqual([[undefined, seen]]);
    // The billing group's counts are unchanged.
    expect(consumed.dataPoints.filter((p) => p.attributes["messaging.consumer.group.name"] === "billing").reduce((a, p) => a + Number(p.value), 0)).toBe(6);
  });
});
