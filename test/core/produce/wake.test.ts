// Wake on produce (docs/guide/producing.md#wake-on-produce): the throttle in Postgres across concurrent
// producers, the pending flag the poller's release picks up, the options' checks, and the Lambda
// waker through the AWS SDK against a local stand-in for the Lambda Invoke API.
process.env.AWS_EC2_METADATA_DISABLED = "true";

import { setTimeout as sleep } from "node:timers/promises";
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { LambdaClient } from "@aws-sdk/client-lambda";
import { SqlStreams, type LogEvent, type WakeTarget } from "@sqlstreams/core";
import { DatabaseProvider, createLambdaWaker, createPollHandler, localContext, wakerFromEnv } from "@sqlstreams/aws";
import { useFreshDatabase } from "../../support/db.js";
import { codeOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();

/** A producer of its own (own pool, own waker) as another process would be. */
function producer(window: number, wakes: WakeTarget[], events: LogEvent[] = []) {
  const pool = new pg.Pool({ connectionString: url(), max: 2 });
  const client = new SqlStreams({ pool, wakeWindow: window, waker: { wake: (t) => void wakes.push(t) }, logger: (e) => events.push(e) });
  return { client, close: async () => { await client.close(); await pool.end(); } };
}

describe("wake on produce", () => {
  it("a burst from 8 concurrent producers wakes each group once; the poller's release picks up the rest; no wake is lost", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream("orders.woken");
    await s.register();
    await s.consumer("emails").register();
    await s.consumer("audit").register();
    await s.consumer("paused").register();
    await s.consumer("paused").pause();

    const wakes: WakeTarget[] = [];
    // A window far longer than the test: every wake after the first must come from a release.
    const producers = Array.from({ length: 8 }, () => producer(600_000, wakes));
    try {
      await Promise.all(producers.flatMap((p, i) => Array.from({ length: 5 }, (_, j) => p.client.stream("orders.woken").produce({ i, j }))));
      const count = (g: string) => wakes.filter((w) => w.group === g).length;
      expect(count("emails")).toBe(1);
      expect(count("audit")).toBe(1);
      expect(count("paused")).toBe(0);
      expect(wakes.every((w) => w.stream === "orders.woken")).toBe(true);

      // The woken poller drains and releases: 39 produces came while its wake was in flight.
      const emails = t.client.stream("orders.woken").consumer("emails");
      expect(await emails.releaseWake()).toBe(true); // pending: drain again
      expect(await emails.releaseWake()).toBe(false); // nothing came since
      // Released: the next produce wakes it at once, inside the window; audit is still in flight.
      await producers[3].client.stream("orders.woken").produce({ after: "release" });
      expect(count("emails")).toBe(2);
      expect(count("audit")).toBe(1);

      // Concurrent produces racing a release: either the release sees the pending mark, or the
      // produce sees the release and wakes; never neither.
      for (let round = 0; round < 10; round++) {
        const before = count("emails");
        const [pending] = await Promise.all([emails.releaseWake(), producers[round % 8].client.stream("orders.woken").produce({ round })]);
        const woke = count("emails") > before;
        expect(pending || woke, `round ${round}`).toBe(true);
        // Pending: the poller drained again and releases; woke: the new poller releases its wake.
        await emails.releaseWake();
      }
    } finally {
      await Promise.all(producers.map((p) => p.close()));
    }
  });

  it("after the window a produce wakes again (DB clock); produceBatch wakes; duplicates do not", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream("windowed");
    await s.register();
    await s.consumer("g").register();
    const wakes: WakeTarget[] = [];
    const p = producer(100, wakes);
    try {
      await p.client.stream("windowed").produceBatch([{ payload: 1 }, { payload: 2 }]);
      expect(wakes).toEqual([{ stream: "windowed", group: "g" }]);
      const first = await p.client.stream("windowed").produce({ k: 1 }, { idempotencyKey: "k1" });
      // Poll until the window has passed in Postgres: a produce then claims a new wake.
      const deadline = Date.now() + 30_000;
      while (wakes.length < 2 && Date.now() < deadline) {
        await sleep(50);
        const again = await p.client.stream("windowed").produce({ k: 1 }, { idempotencyKey: "k1" });
        expect(again).toEqual({ id: first.id, duplicate: true }); // a duplicate never wakes
        if (wakes.length < 2) await p.client.stream("windowed").produce({ fresh: true });
      }
      expect(wakes).toHaveLength(2);
      const rows = await t.sql<{ wakes: string }>(
        "SELECT w.wakes::text FROM sqlstreams.wake_throttle w JOIN sqlstreams.consumer_group_config c ON c.id = w.group_id JOIN sqlstreams.stream_config s ON s.id = c.stream_id WHERE s.name = 'windowed'",
      );
      expect(rows).toEqual([{ wakes: "2" }]);
    } finally {
      await p.close();
    }
  });

  it("bad options fail with SQL0063 before anything is written; a failing waker is logged (SQL0064), the produce commits", async () => {
    expect(await codeOf(() => new SqlStreams({ connectionString: url(), waker: 5 as never }))).toBe("SQL0063");
    expect(await codeOf(() => new SqlStreams({ connectionString: url(), waker: {} as never }))).toBe("SQL0063");
    expect(await codeOf(() => new SqlStreams({ connectionString: url(), waker: { wake: () => {} }, wakeWindow: 50 }))).toBe("SQL0063");
    expect(await codeOf(() => new SqlStreams({ connectionString: url(), wakeWindow: 1.5 }))).toBe("SQL0063");
    const t = testClient(url());
    await t.client.migrate();
    await t.client.stream("failing.wake").register();
    await t.client.stream("failing.wake").consumer("g").register();
    await expect(t.client.wake("failing.wake")).rejects.toMatchObject({ code: "SQL0063" });

    const events: LogEvent[] = [];
    const pool = new pg.Pool({ connectionString: url(), max: 1 });
    const c = new SqlStreams({ pool, logger: (e) => events.push(e), waker: { wake: () => Promise.reject(new Error("AccessDenied")) } });
    try {
      const r = await c.stream("failing.wake").produce({ ok: true });
      expect(r.duplicate).toBe(false);
      expect(events.filter((e) => e.code === "SQL0064")).toMatchObject([{ level: "warn", stream: "failing.wake", group: "g" }]);
      expect(events[0].message).toContain("AccessDenied");
    } finally {
      await c.close();
      await pool.end();
    }
  });
});

describe("the Lambda waker (AWS SDK, InvokeCommand, InvocationType Event)", () => {
  it("invokes the group's poller asynchronously through the Lambda API; failures are logged, not thrown", async () => {
    const seen: { method: string; path: string; type: string | undefined; body: string; auth: boolean }[] = [];
    let status = 202;
    const server = createServer((req: IncomingMessage, res) => {
      let body = "";
      req.on("data", (c: Buffer) => (body += c.toString()));
      req.on("end", () => {
        seen.push({ method: req.method ?? "", path: req.url ?? "", type: req.headers["x-amz-invocation-type"] as string | undefined, body, auth: String(req.headers.authorization ?? "").startsWith("AWS4-HMAC-SHA256") });
        res.writeHead(status, { "content-type": "application/json", "x-amzn-requestid": "stand-in" });
        res.end(status === 202 ? "" : JSON.stringify({ Type: "User", message: "not allowed" }));
      });
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const lambda = new LambdaClient({ endpoint, region: "eu-west-1", credentials: { accessKeyId: "AKIATEST", secretAccessKey: "test" }, maxAttempts: 1 });
    const t = testClient(url());
    await t.client.migrate();
    await t.client.stream("orders.placed").register();
    await t.client.stream("orders.placed").consumer("emails").register();
    const events: LogEvent[] = [];
    const pool = new pg.Pool({ connectionString: url(), max: 1 });
    const waker = createLambdaWaker({ functions: { "orders.placed/emails": "shop-prod-EmailsPoller" }, client: lambda });
    const c = new SqlStreams({ pool, waker, wakeWindow: 600_000, logger: (e) => events.push(e) });
    try {
      await c.stream("orders.placed").produce({ orderId: "o-1" });
      expect(seen).toHaveLength(1);
      expect(seen[0]).toMatchObject({ method: "POST", path: "/2015-03-31/functions/shop-prod-EmailsPoller/invocations", type: "Event", auth: true });
      expect(JSON.parse(seen[0].body)).toEqual({ stream: "orders.placed", group: "emails", source: "wake" });
      // Throttled: no second call inside the window.
      await c.stream("orders.placed").produce({ orderId: "o-2" });
      expect(seen).toHaveLength(1);

      // The API refuses: the produce still commits, SQL0064 says why.
      await c.stream("orders.placed").consumer("emails").releaseWake();
      status = 403;
      const r = await c.stream("orders.placed").produce({ orderId: "o-3" });
      expect(r.duplicate).toBe(false);
      expect(seen).toHaveLength(2);
      expect(events.filter((e) => e.code === "SQL0064")).toHaveLength(1);

      // A group without a function: SQL0065 from the waker, logged as SQL0064 by the client.
      await expect(waker.wake({ stream: "orders.placed", group: "unknown" })).rejects.toMatchObject({ code: "SQL0065" });
    } finally {
      await c.close();
      await pool.end();
      await new Promise((r) => server.close(r));
    }
  });

  it("wakerFromEnv: off unless SQLSTREAMS_WAKE=lambda; the function map must be JSON (SQL0065)", async () => {
    expect(wakerFromEnv({})).toBeUndefined();
    expect(await codeOf(() => wakerFromEnv({ SQLSTREAMS_WAKE: "lambda" }))).toBe("SQL0065");
    expect(await codeOf(() => wakerFromEnv({ SQLSTREAMS_WAKE: "lambda", SQLSTREAMS_WAKE_FUNCTIONS: "[1]" }))).toBe("SQL0065");
    expect(await codeOf(() => createLambdaWaker({ functions: { "a/b": "" } }))).toBe("SQL0065");
    expect(typeof (wakerFromEnv({ SQLSTREAMS_WAKE: "lambda", SQLSTREAMS_WAKE_FUNCTIONS: '{"a/b":"fn"}' }, { region: "us-east-1" }) as { wake?: unknown } | undefined)?.wake).toBe("function");
  });
});

describe("the poll function and wake on produce", () => {
  it("releases its group's wake when idle, so the next produce wakes at once", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream("released");
    await s.register();
    await s.consumer("g").register({ message: { timeout: 5_000 } });
    const wakes: WakeTarget[] = [];
    const p = producer(600_000, wakes);
    const db = new DatabaseProvider({ env: { DATABASE_URL: url() }, logger: () => {}, waker: false });
    const handled: number[] = [];
    const poll = createPollHandler<{ n: number }>({ stream: "released", group: "g", handle: (m) => void handled.push(m.payload.n), database: db, log: () => {} });
    try {
      await p.client.stream("released").produce({ n: 1 });
      await p.client.stream("released").produce({ n: 2 }); // in flight: marked pending
      expect(wakes).toHaveLength(1);
      await poll({ stream: "released", group: "g" }, localContext(20_000));
      expect(handled).toEqual([1, 2]);
      const row = await t.sql<{ woken_at: string; pending: boolean }>(
        "SELECT w.woken_at::text, w.pending FROM sqlstreams.wake_throttle w JOIN sqlstreams.consumer_group_config c ON c.id = w.group_id JOIN sqlstreams.stream_config s ON s.id = c.stream_id WHERE s.name = 'released'",
      );
      expect(row).toEqual([{ woken_at: "-infinity", pending: false }]);
      await p.client.stream("released").produce({ n: 3 });
      expect(wakes).toHaveLength(2);
    } finally {
      await p.close();
      await db.close();
    }
  });

  it("keepConnection false (SQLSTREAMS_DB_KEEP_CONNECTION=false): no connection is left open after an invocation", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const appName = (k: string) => `keep-${k}-${process.pid}`;
    const open = async (k: string) =>
      Number((await t.sql<{ n: string }>("SELECT count(*)::text AS n FROM pg_stat_activity WHERE application_name = $1", [appName(k)]))[0].n);
    const closing = new DatabaseProvider({ env: { DATABASE_URL: url(), AWS_LAMBDA_FUNCTION_NAME: appName("no"), SQLSTREAMS_DB_KEEP_CONNECTION: "false" }, logger: () => {} });
    const keeping = new DatabaseProvider({ env: { DATABASE_URL: url(), AWS_LAMBDA_FUNCTION_NAME: appName("yes") }, logger: () => {} });
    try {
      await closing.use((c) => c.streamNames());
      await keeping.use((c) => c.streamNames());
      const deadline = Date.now() + 20_000;
      while ((await open("no")) > 0 && Date.now() < deadline) await sleep(50);
      expect(await open("no")).toBe(0);
      expect(await open("yes")).toBe(1);
      // Still usable: the next invocation connects again with the cached credentials.
      expect(await closing.use((c) => c.streamNames())).toEqual(expect.any(Array));
      expect(closing.credentialLoads).toBe(1);
    } finally {
      await closing.close();
      await keeping.close();
    }
  });
});
