// EMF metrics of the Lambda adapter (docs/guide/operations.md#metrics): every document a poll or
// maintain invocation writes is checked against the EMF rules (test/support/emf.ts), and its
// values against what the invocation did in a real Postgres.
process.env.AWS_EC2_METADATA_DISABLED = "true";

import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Delay, Permanent, SqlStreams } from "@sqlstreams/core";
import {
  DatabaseProvider,
  DurationHistogram,
  createMaintainHandler,
  createPollHandler,
  localContext,
  pollDocument,
  type EmfDocument,
  type LogLine,
} from "@sqlstreams/aws";
import { useFreshDatabase } from "../support/db.js";
import { assertEmf, emfProblems, unitOf } from "../support/emf.js";
import { emptyCycleReport } from "../../packages/core/src/cycle/types.js";

const url = useFreshDatabase();
let admin: SqlStreams;
const providers: DatabaseProvider[] = [];
function database(): DatabaseProvider {
  const p = new DatabaseProvider({ env: { DATABASE_URL: url() }, logger: () => {} });
  providers.push(p);
  return p;
}

beforeAll(async () => {
  admin = new SqlStreams({ connectionString: url(), logger: () => {} });
  await admin.migrate();
});
afterAll(async () => {
  for (const p of providers) await p.close();
  await admin?.close();
});

type Doc = {
  _aws: { Timestamp: number; CloudWatchMetrics: { Namespace: string; Dimensions: string[][]; Metrics: { Name: string; Unit: string }[] }[] };
  [member: string]: unknown;
};
const good = (): Record<string, unknown> => ({
  _aws: { Timestamp: Date.now(), CloudWatchMetrics: [{ Namespace: "SQLStreams", Dimensions: [["Stream", "Group"]], Metrics: [{ Name: "Succeeded", Unit: "Count" }] }] },
  Stream: "s",
  Group: "g",
  Succeeded: 3,
});

describe("the EMF validator", () => {
  it("accepts a valid document and names each broken rule", () => {
    expect(emfProblems(good())).toEqual([]);
    const broken = (edit: (d: Doc) => void): string[] => {
      const d = good() as Doc;
      edit(d);
      return emfProblems(d);
    };
    expect(broken((d) => delete (d as Partial<Doc>)._aws)).toEqual(["_aws metadata object missing"]);
    expect(broken((d) => (d._aws.Timestamp = Math.floor(Date.now() / 1000))).join()).toMatch(/epoch milliseconds/);
    expect(broken((d) => (d._aws.CloudWatchMetrics[0].Metrics[0].Unit = "Millis")).join()).toMatch(/not a CloudWatch unit/);
    expect(broken((d) => (d.Succeeded = "3")).join()).toMatch(/must be a number/);
    expect(broken((d) => (d.Succeeded = Number.NaN)).join()).toMatch(/must be a number/);
    expect(broken((d) => delete d.Group).join()).toMatch(/dimension Group/);
    expect(broken((d) => (d.Stream = "")).join()).toMatch(/dimension Stream/);
    expect(broken((d) => (d._aws.CloudWatchMetrics[0].Namespace = "")).join()).toMatch(/Namespace/);
    expect(broken((d) => (d._aws.CloudWatchMetrics[0].Metrics[0].Name = "x".repeat(1025))).join()).toMatch(/Name/);
    const many = Array.from({ length: 31 }, (_, i) => `D${i}`);
    expect(
      broken((d) => {
        d._aws.CloudWatchMetrics[0].Dimensions = [many];
        for (const k of many) d[k] = "v";
      }).join(),
    ).toMatch(/31 dimensions/);
    expect(
      broken((d) => {
        d._aws.CloudWatchMetrics[0].Metrics = Array.from({ length: 101 }, (_, i) => ({ Name: `M${i}`, Unit: "Count" }));
        for (let i = 0; i < 101; i++) d[`M${i}`] = i;
      }).join(),
    ).toMatch(/101 metrics/);
    expect(broken((d) => (d.Succeeded = { Values: [1, 2], Counts: [1] })).join()).toMatch(/Counts/);
    expect(broken((d) => (d.Succeeded = { Values: Array.from({ length: 101 }, (_, i) => i) })).join()).toMatch(/1-100/);
  });

  it("a histogram of thousands of distinct durations stays within 100 values and keeps every count", () => {
    const h = new DurationHistogram();
    for (let i = 0; i < 5_000; i++) h.add(i * 37.3);
    const doc = pollDocument({ stream: "s", group: "g", durations: h, durationMs: 10 });
    assertEmf(doc);
    const v = doc.HandlerDuration as { Values: number[]; Counts: number[] };
    expect(v.Values.length).toBeLessThanOrEqual(100);
    expect(v.Counts.reduce((a, b) => a + b, 0)).toBe(5_000);
    expect(unitOf(doc, "HandlerDuration")).toBe("Milliseconds");
  });

  it("a group with rateLimit shows its limit as a gauge and its rate-limited claims as a count", () => {
    const report = { ...emptyCycleReport("s", "g"), rateLimited: 3 };
    const progress = { lag: "7", oldestUnresolvedAgeMs: 5, exceptions: { ready: 0, deferred: 0, inflight: 0, dead: 0, superseded: 0, expired: 0 },
      rateLimit: { perSecond: 20, burst: 20, limited: 9, limitedAt: new Date() } };
    const doc = pollDocument({ stream: "s", group: "g", report, progress, durationMs: 10 });
    assertEmf(doc);
    expect(doc).toMatchObject({ RateLimited: 3, RateLimitPerSecond: 20 });
    expect(unitOf(doc, "RateLimitPerSecond")).toBe("Count/Second");
  });
});

describe("poll invocation metrics", () => {
  it("one valid document per invocation: its counts, the end-of-invocation gauges, handler durations", async () => {
    const s = admin.stream<{ n: number }>("metrics.poll");
    await s.register();
    await s.consumer("g").register({ message: { timeout: 5_000, retry: { maxRetries: 3, baseDelay: 60_000 } } });
    await s.produceBatch(Array.from({ length: 10 }, (_, n) => ({ payload: { n } })));
    const docs: EmfDocument[] = [];
    const lines: LogLine[] = [];
    const handler = createPollHandler<{ n: number }>({
      stream: "metrics.poll",
      group: "g",
      handle: async (m) => {
        const n = m.payload.n;
        if (n === 6 || n === 7) throw new Error("transient");
        if (n === 8) return Permanent(new Error("bad"));
        if (n === 9) return Delay(60_000);
        if (n === 0) await sleep(20);
      },
      database: database(),
      log: (l) => lines.push(l),
      metrics: (d) => docs.push(d as EmfDocument),
      stage: "test",
    });
    const report = await handler({ stream: "metrics.poll", group: "g" }, localContext(30_000));
    expect(lines).toHaveLength(1);
    expect(docs).toHaveLength(1);
    const doc = docs[0];
    assertEmf(doc);
    expect(doc._aws.CloudWatchMetrics[0]).toMatchObject({ Namespace: "SQLStreams", Dimensions: [["Stream", "Group", "Stage"]] });
    expect(doc).toMatchObject({
      Stream: "metrics.poll", Group: "g", Stage: "test",
      Succeeded: 6, Failed: 2, Dead: 1, Delayed: 1, Started: 10, NotStarted: 0, LeaseLost: 0,
      DeadTotal: 1, PollErrors: 0, BlockedKeys: 0, Capped: 0, RateLimited: 0,
    });
    expect(doc.RateLimitPerSecond).toBeUndefined(); // the group has no rateLimit
    // The gauge is the group's lag at the end of the invocation (nothing ran since).
    expect(doc.Lag).toBe(Number((await s.consumer("g").progress()).lag));
    expect(doc.Succeeded).toBe(report.succeeded);
    // The retried and delayed rows are unresolved: the gauge shows their age.
    expect(doc.OldestUnresolvedAgeMs).toBeGreaterThan(0);
    const h = doc.HandlerDuration as { Values: number[]; Counts: number[] };
    expect(h.Counts.reduce((a, b) => a + b, 0)).toBe(10);
    expect(Math.max(...h.Values)).toBeGreaterThanOrEqual(15); // the handler that waited 20 ms
    for (const [name, unit] of [["Succeeded", "Count"], ["Lag", "Count"], ["OldestUnresolvedAgeMs", "Milliseconds"], ["PollDuration", "Milliseconds"]]) {
      expect(unitOf(doc, name), name).toBe(unit);
    }

    // An invocation that fails writes a document too, with PollErrors 1 and no counts.
    const err = await handler({ stream: "metrics.poll", group: "other" }, localContext(30_000)).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: "SQL0031" });
    expect(docs).toHaveLength(2);
    assertEmf(docs[1]);
    expect(docs[1]).toMatchObject({ PollErrors: 1, Stream: "metrics.poll", Group: "g" });
    expect(docs[1].Succeeded).toBeUndefined();
  });

  it("off with metrics: false; to stdout by default only inside Lambda", async () => {
    const s = admin.stream("metrics.quiet");
    await s.register();
    await s.consumer("g").register({ message: { timeout: 5_000 } });
    await s.produce({ a: 1 });
    const written: string[] = [];
    const write = process.stdout.write.bind(process.stdout);
    const before = process.env.AWS_LAMBDA_FUNCTION_NAME;
    process.stdout.write = ((chunk: string) => {
      written.push(String(chunk));
      return true;
    }) as typeof process.stdout.write;
    try {
      delete process.env.AWS_LAMBDA_FUNCTION_NAME;
      const quiet = createPollHandler({ stream: "metrics.quiet", group: "g", handle: () => {}, database: database(), log: () => {} });
      await quiet({ stream: "metrics.quiet", group: "g" }, localContext(30_000));
      expect(written.filter((w) => w.includes('"_aws"'))).toHaveLength(0);
      process.env.AWS_LAMBDA_FUNCTION_NAME = "fn";
      const inLambda = createPollHandler({ stream: "metrics.quiet", group: "g", handle: () => {}, database: database(), log: () => {} });
      const off = createPollHandler({ stream: "metrics.quiet", group: "g", handle: () => {}, database: database(), log: () => {}, metrics: false });
      await off({ stream: "metrics.quiet", group: "g" }, localContext(30_000));
      expect(written.filter((w) => w.includes('"_aws"'))).toHaveLength(0);
      await inLambda({ stream: "metrics.quiet", group: "g" }, localContext(30_000));
    } finally {
      process.stdout.write = write;
      if (before === undefined) delete process.env.AWS_LAMBDA_FUNCTION_NAME;
      else process.env.AWS_LAMBDA_FUNCTION_NAME = before;
    }
    const emf = written.filter((w) => w.includes('"_aws"'));
    expect(emf).toHaveLength(1);
    assertEmf(JSON.parse(emf[0]));
  });
});

describe("maintain invocation metrics", () => {
  it("one valid document per stream with its partition, sweep and retention figures", async () => {
    const docs: EmfDocument[] = [];
    const maintain = createMaintainHandler({ database: database(), log: () => {}, metrics: (d) => docs.push(d as EmfDocument) });
    const reports = await maintain({}, localContext(60_000));
    expect(docs.map((d) => d.Stream).sort()).toEqual(Object.keys(reports).sort());
    for (const d of docs) {
      assertEmf(d);
      expect(d._aws.CloudWatchMetrics[0].Dimensions).toEqual([["Stream"]]);
      const r = reports[d.Stream as string];
      expect(d).toMatchObject({ PartitionsDropped: r.partitionsDropped, PartitionsCreated: r.partitionsCreated, RowsSwept: r.rowsSwept, RetentionHeldMs: r.retentionHeldMs ?? 0 });
      expect(unitOf(d, "RetentionHeldMs")).toBe("Milliseconds");
    }
  });
});
