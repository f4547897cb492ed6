// The Lambda adapter against a real Postgres: poll handler (drain and continuous), deadline,
// unknown events, overlapping invocations, maintain and migrate handlers, the example functions.
process.env.AWS_EC2_METADATA_DISABLED = "true";

import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SqlStreams, SqlStreamsError, type ConsumerConfig, type CycleReport, type Message } from "@sqlstreams/core";
import {
  DatabaseProvider,
  closeDefaultDatabase,
  createMaintainHandler,
  createMigrateHandler,
  createPollHandler,
  localContext,
  validateGroups,
  type GroupDeclaration,
  type LogLine,
} from "@sqlstreams/aws";
import { query, useFreshDatabase } from "../support/db.js";

const url = useFreshDatabase();

let admin: SqlStreams;
const providers: DatabaseProvider[] = [];

/** A provider configured like a function with DATABASE_URL (pool of one connection). */
function database(): DatabaseProvider {
  const p = new DatabaseProvider({ env: { DATABASE_URL: url() }, logger: () => {} });
  providers.push(p);
  return p;
}

/** Registers a stream and group; message timeout 5 s unless given (it must fit the test budgets). */
async function setupGroup(stream: string, group: string, config: ConsumerConfig = { message: { timeout: 5_000 } }) {
  const s = admin.stream<{ n: number }>(stream);
  await s.register();
  await s.consumer(group).register(config);
  return s;
}

async function produce(stream: string, count: number, from = 0): Promise<void> {
  const s = admin.stream<{ n: number }>(stream);
  for (let i = 0; i < count; i += 1_000) {
    const n = Math.min(1_000, count - i);
    await s.produceBatch(Array.from({ length: n }, (_, j) => ({ payload: { n: from + i + j } })));
  }
}

beforeAll(async () => {
  admin = new SqlStreams({ connectionString: url(), logger: () => {} });
  await admin.migrate();
});

afterAll(async () => {
  for (const p of providers) await p.close();
  await admin?.close();
  await closeDefaultDatabase();
});

describe("createPollHandler", () => {
  it("drains the group, returns the CycleReport and logs one JSON line per invocation", async () => {
    const s = await setupGroup("orders.test", "scoring");
    await produce("orders.test", 25);
    const seen: number[] = [];
    const lines: LogLine[] = [];
    const handler = createPollHandler<{ n: number }>({
      stream: "orders.test",
      group: "scoring",
      handle: (m) => {
        seen.push(m.payload.n);
      },
      batchLimit: 10,
      database: database(),
      log: (l) => lines.push(l),
    });
    const ctx = localContext(30_000);
    const report = await handler({ stream: "orders.test", group: "scoring" }, ctx);
    expect(seen.sort((a, b) => a - b)).toEqual(Array.from({ length: 25 }, (_, i) => i));
    expect(report.succeeded).toBe(25);
    expect(report.idle).toBe(true);
    expect(report.committedAfter).toBe("25");
    expect(report.stream).toBe("orders.test");
    expect(report.group).toBe("scoring");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({
      level: "info",
      event: "sqlstreams.poll",
      stream: "orders.test",
      group: "scoring",
      mode: "drain",
      succeeded: 25,
      lag: "0",
      requestId: ctx.awsRequestId,
    });
    expect(typeof lines[0].durationMs).toBe("number");
    expect((await s.consumer("scoring").progress()).lag).toBe("0");

    // A warm invocation with nothing to do: idle at once, still one line.
    const again = await handler({ stream: "orders.test", group: "scoring" }, localContext(30_000));
    expect(again.idle).toBe(true);
    expect(again.started).toBe(0);
    expect(lines).toHaveLength(2);
  });

  it("rejects an event naming another stream or group with SQL0031 before touching the database", async () => {
    // No credentials at all: any database access would fail with SQL0032 instead.
    const db = new DatabaseProvider({ env: {} });
    const lines: LogLine[] = [];
    const handler = createPollHandler({
      stream: "orders.placed",
      group: "fraud-scoring",
      handle: () => {},
      database: db,
      log: (l) => lines.push(l),
    });
    for (const event of [
      { stream: "orders.placed", group: "nope" },
      { stream: "other", group: "fraud-scoring" },
      {},
      null,
      "orders.placed/fraud-scoring",
    ]) {
      const err = await handler(event as never, localContext(10_000)).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(SqlStreamsError);
      expect((err as SqlStreamsError).code).toBe("SQL0031");
    }
    expect(db.credentialLoads).toBe(0);
    expect(lines.every((l) => l.level === "error" && (l.error as { code: string }).code === "SQL0031")).toBe(true);

    // With a declaration, the pair must be declared there (checked when the module loads).
    const groups: GroupDeclaration[] = [
      { stream: "orders.placed", group: "fraud-scoring", function: "functions/handlers/fraud-scoring.handler", schedule: "rate(1 minute)" },
    ];
    expect(() => createPollHandler({ stream: "orders.placed", group: "other", handle: () => {}, groups })).toThrow(/SQL0031/);
  });

  it("without credentials fails with SQL0032", async () => {
    const handler = createPollHandler({
      stream: "orders.placed",
      group: "fraud-scoring",
      handle: () => {},
      database: new DatabaseProvider({ env: {} }),
      log: () => {},
    });
    await expect(handler({ stream: "orders.placed", group: "fraud-scoring" }, localContext(5_000))).rejects.toMatchObject({ code: "SQL0032" });
  });

  it("respects the deadline: a slow handler and a short budget return in time and leave no lease that blocks the next invocation", async () => {
    const s = await setupGroup("slow.stream", "slow", { message: { timeout: 2_000 } });
    await produce("slow.stream", 20);
    const handled: number[] = [];
    const handle = async (m: Message<{ n: number }>) => {
      await sleep(400);
      handled.push(m.payload.n);
    };
    const handler = createPollHandler<{ n: number }>({
      stream: "slow.stream",
      group: "slow",
      handle,
      batchLimit: 20,
      recordMargin: 500,
      database: database(),
      log: () => {},
    });
    const budget = 5_000;
    const t0 = Date.now();
    const ctx = localContext(budget);
    const first = await handler({ stream: "slow.stream", group: "slow" }, ctx);
    const elapsed = Date.now() - t0;
    // deadline = budget - (recordMargin + 1000); nothing starts that could not finish before it.
    expect(elapsed).toBeLessThan(budget - 500);
    expect(ctx.getRemainingTimeInMillis()).toBeGreaterThan(0);
    expect(first.succeeded).toBeGreaterThan(0);
    expect(first.succeeded).toBeLessThan(20);
    expect(first.started).toBe(first.succeeded);

    // Nothing held: the next invocation, right away, takes the rest without waiting for a lease
    // to expire and without counting a reclaim.
    const p = await s.consumer("slow").progress();
    expect(p.openLeases - p.expiredLeases).toBe(0);
    const t1 = performance.now();
    const second = await handler({ stream: "slow.stream", group: "slow" }, localContext(60_000));
    expect(second.rangesReclaimed).toBe(0);
    expect(first.succeeded + second.succeeded).toBe(20);
    expect(performance.now() - t1).toBeLessThan(20 * 400 + 5_000);
    expect([...handled].sort((a, b) => a - b)).toEqual(Array.from({ length: 20 }, (_, i) => i));
    expect((await s.consumer("slow").progress()).lag).toBe("0");
  });

  it("two overlapping invocations over 1,000 messages handle every message once", async () => {
    await setupGroup("overlap.stream", "overlap");
    await produce("overlap.stream", 1_000);
    const counts = new Map<number, number>();
    const handle = async (m: Message<{ n: number }>) => {
      counts.set(m.payload.n, (counts.get(m.payload.n) ?? 0) + 1);
      if (m.payload.n % 50 === 0) await sleep(5);
    };
    const make = () =>
      createPollHandler<{ n: number }>({
        stream: "overlap.stream",
        group: "overlap",
        handle,
        batchLimit: 25,
        concurrency: 4,
        database: database(),
        log: () => {},
      });
    const a = make();
    const b = make();
    const event = { stream: "overlap.stream", group: "overlap" };
    const [ra, rb] = await Promise.all([a(event, localContext(60_000)), b(event, localContext(60_000))]);
    // A straggler range can remain if one invocation went idle while the other still held it.
    const rest = await a(event, localContext(60_000));
    const total = ra.succeeded + rb.succeeded + rest.succeeded;
    expect(counts.size).toBe(1_000);
    expect([...counts.values()].every((c) => c === 1)).toBe(true);
    expect(total).toBe(1_000);
    expect(ra.succeeded).toBeGreaterThan(0);
    expect(rb.succeeded).toBeGreaterThan(0);
  });

  it("continuous mode keeps polling until its budget ends, picking up messages produced meanwhile", async () => {
    await setupGroup("live.stream", "live", { message: { timeout: 1_000 } });
    const seen: number[] = [];
    const lines: LogLine[] = [];
    const handler = createPollHandler<{ n: number }>({
      stream: "live.stream",
      group: "live",
      handle: (m) => {
        seen.push(m.payload.n);
      },
      mode: "continuous",
      idleWait: 200,
      recordMargin: 200,
      database: database(),
      log: (l) => lines.push(l),
    });
    // deadline = budget - 1 200; a 1 s message starts while 1.2 s remain before it.
    const budget = 8_000;
    const t0 = Date.now();
    const run = handler({ stream: "live.stream", group: "live" }, localContext(budget));
    await sleep(1_000);
    await produce("live.stream", 5);
    await sleep(800);
    await produce("live.stream", 5, 5);
    const report: CycleReport = await run;
    const elapsed = Date.now() - t0;
    expect(seen.sort((a, b) => a - b)).toEqual(Array.from({ length: 10 }, (_, i) => i));
    expect(report.succeeded).toBe(10);
    expect(report.polls).toBeGreaterThan(3);
    // Ran most of its budget, and stopped before the end of it.
    expect(elapsed).toBeGreaterThan(5_000);
    expect(elapsed).toBeLessThan(budget);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ mode: "continuous", succeeded: 10, group: "live" });
  });
});

describe("createMaintainHandler and createMigrateHandler", () => {
  it("migrate registers every stream and group of the declaration, idempotently; maintain covers every stream", async () => {
    const groups = validateGroups([
      {
        stream: "deploy.one",
        group: "g1",
        function: "functions/handlers/g1.handler",
        schedule: "rate(1 minute)",
        config: { message: { timeout: 5_000 } },
      },
      { stream: "deploy.one", group: "g2", function: "functions/handlers/g2.handler", schedule: "rate(5 minutes)" },
      {
        stream: "deploy.two",
        group: "ordered",
        function: "functions/handlers/ordered.handler",
        schedule: "rate(1 minute)",
        config: { concurrencyOverride: "ordered" },
      },
    ] satisfies GroupDeclaration[]);
    const lines: LogLine[] = [];
    const migrate = createMigrateHandler({ groups, streams: { "deploy.two": { retention: 86_400_000 } }, database: database(), log: (l) => lines.push(l) });
    const r1 = await migrate({}, localContext(60_000));
    expect(r1.streams).toEqual(["deploy.one", "deploy.two"]);
    expect(r1.groups).toEqual(["deploy.one/g1", "deploy.one/g2", "deploy.two/ordered"]);
    // Deploying again changes nothing and moves no cursor.
    await produce("deploy.one", 3);
    const g1 = admin.stream("deploy.one").consumer("g1");
    await g1.drain(() => {});
    await migrate({}, localContext(60_000));
    expect((await g1.progress()).committed).toBe("3");
    const rows = await query<{ stream: string; group: string }>(
      url(),
      `SELECT s.name AS stream, g.name AS group FROM sqlstreams.consumer_group_config g JOIN sqlstreams.stream_config s ON s.id = g.stream_id WHERE s.name LIKE 'deploy.%' ORDER BY 1, 2`,
    );
    expect(rows).toEqual([
      { stream: "deploy.one", group: "g1" },
      { stream: "deploy.one", group: "g2" },
      { stream: "deploy.two", group: "ordered" },
    ]);
    expect(lines.map((l) => l.event)).toEqual(["sqlstreams.migrate", "sqlstreams.migrate"]);

    const maintainLines: LogLine[] = [];
    const maintain = createMaintainHandler({ database: database(), log: (l) => maintainLines.push(l) });
    const reports = await maintain({}, localContext(60_000));
    expect(Object.keys(reports)).toEqual(expect.arrayContaining(["deploy.one", "deploy.two", "orders.test"]));
    expect(maintainLines).toHaveLength(1);
    expect(maintainLines[0]).toMatchObject({ event: "sqlstreams.maintain" });
  });

  it("a declaration with an invalid group config fails the migrate invocation with the library's code", async () => {
    const migrate = createMigrateHandler({
      groups: [{ stream: "bad.config", group: "g", function: "functions/handlers/g.handler", schedule: "rate(1 minute)", config: { message: { timeout: -1 } } }],
      database: database(),
      log: () => {},
    });
    await expect(migrate({}, localContext(60_000))).rejects.toMatchObject({ code: "SQL0013" });
  });

  it("a declaration's keyConcurrency is stored for an exclusive group and refused (SQL0014) for an ordered one", async () => {
    const decl = (config: ConsumerConfig) => createMigrateHandler({
      groups: [{ stream: "kc.config", group: "g", function: "functions/handlers/g.handler", schedule: "rate(1 minute)", config }],
      database: database(),
      log: () => {},
    });
    await expect(decl({ concurrencyOverride: "ordered", keyConcurrency: 2 })({}, localContext(60_000))).rejects.toMatchObject({ code: "SQL0014" });
    await decl({ concurrencyOverride: "exclusive", keyConcurrency: 3 })({}, localContext(60_000));
    expect((await admin.stream("kc.config").consumer("g").progress()).concurrency.perKey).toBe(3);
  });

  it("a declaration's rateLimit is registered on deploy, and a bad one fails it with SQL0013", async () => {
    const declare = (rateLimit: { perSecond: number; burst?: number }): GroupDeclaration[] =>
      [{ stream: "deploy.rate", group: "g", function: "functions/handlers/g.handler", schedule: "rate(1 minute)", config: { rateLimit } }];
    const bad = createMigrateHandler({ groups: declare({ perSecond: 0 }), database: database(), log: () => {} });
    await expect(bad({}, localContext(60_000))).rejects.toMatchObject({ code: "SQL0013" });
    const good = createMigrateHandler({ groups: validateGroups(declare({ perSecond: 50, burst: 10 })), database: database(), log: () => {} });
    await good({}, localContext(60_000));
    expect((await admin.stream("deploy.rate").consumer("g").progress()).rateLimit).toEqual({ perSecond: 50, burst: 10, limited: 0, limitedAt: null });
  });
});

describe("functions/", () => {
  it("the example deployment: migrate, then the fraud-scoring and apply-balance functions drain their groups", async () => {
    process.env.DATABASE_URL = url();
    const { groups } = await import("../../functions/groups.js");
    const migrate = await import("../../functions/migrate.js");
    const fraud = await import("../../functions/handlers/fraud-scoring.js");
    const ledger = await import("../../functions/handlers/apply-balance.js");
    const maintain = await import("../../functions/maintain.js");
    validateGroups(groups);
    await migrate.handler({}, localContext(60_000));

    const orders = admin.stream("orders.placed");
    const before = BigInt((await orders.consumer("fraud-scoring").progress()).head);
    await orders.produceBatch([
      { payload: { orderId: "o-1", customerId: "c-1", amountCents: 2_500, currency: "EUR", billingCountry: "DE", shippingCountry: "DE", items: 1, previousOrders: 4 } },
      { payload: { orderId: "o-2", customerId: "c-2", amountCents: 750_000, currency: "EUR", billingCountry: "DE", shippingCountry: "NG", items: 30 } },
      { payload: { not: "an order" } },
    ]);
    const r = await fraud.handler({ stream: "orders.placed", group: "fraud-scoring" }, localContext(60_000));
    expect(r.succeeded).toBe(2);
    expect(r.dead).toBe(1);
    expect(BigInt(r.committedAfter)).toBe(before + 3n);
    expect(fraud.scoreOrder({ orderId: "o-2", customerId: "c-2", amountCents: 750_000, currency: "EUR", billingCountry: "DE", shippingCountry: "NG", items: 30 }).decision).toBe("reject");

    const ledgerStream = admin.stream("ledger.adjustments");
    await ledgerStream.produceBatch([
      { payload: { adjustmentId: "a-1", accountId: "acc-1", amountCents: 100, reason: "refund" }, key: "acc-1" },
      { payload: { adjustmentId: "a-2", accountId: "acc-1", amountCents: -40, reason: "fee" }, key: "acc-1" },
      { payload: { adjustmentId: "a-3", accountId: "acc-2", amountCents: 5, reason: "interest" }, key: "acc-2" },
    ]);
    // Continuous mode runs until its budget ends: give it a short one (the message timeout is 5 s).
    const lr = await ledger.handler({ stream: "ledger.adjustments", group: "apply-balance" }, localContext(12_000));
    expect(lr.succeeded).toBe(3);
    // The handlers answer only for their own group.
    await expect(ledger.handler({ stream: "orders.placed", group: "fraud-scoring" }, localContext(5_000))).rejects.toMatchObject({ code: "SQL0031" });

    const m = await maintain.handler({}, localContext(60_000));
    expect(Object.keys(m)).toEqual(expect.arrayContaining(["orders.placed", "ledger.adjustments"]));
  });
});
