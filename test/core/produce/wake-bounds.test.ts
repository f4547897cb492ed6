// A wake never holds a producer (docs/guide/producing.md#wake-on-produce): a waker that never settles,
// a Lambda endpoint that accepts TCP and never replies, one whose listen backlog is full (SYNs
// dropped, a real process that never accepts), and a wake_throttle row locked by another real
// connection. Each time produce() returns within a few seconds, with a SQL0064 warning, and the
// message is committed exactly once. The bound is a hang check, not a speed measurement.
process.env.AWS_EC2_METADATA_DISABLED = "true";

import { createServer, type Server, type Socket, connect } from "node:net";
import type { AddressInfo } from "node:net";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SqlStreams, type LogEvent, type Waker } from "@sqlstreams/core";
import { createLambdaWaker } from "@sqlstreams/aws";
import { useFreshDatabase } from "../../support/db.js";
import { spawnNode, type NodeChild } from "../../support/processes.js";
import { groupIdOf, streamIdOf, testClient, type TestClient } from "../../support/streams.js";

const url = useFreshDatabase();
const BOUND_MS = 3_000;
const STREAM = "orders.bounded";
const FUNCTIONS = { [`${STREAM}/emails`]: "shop-prod-EmailsPoller" };
const CREDENTIALS = { accessKeyId: "AKIATEST", secretAccessKey: "test" };

/** Resolves with how long `p` took, or rejects when it takes more than 20 s (a hang). */
async function timed(p: Promise<unknown>): Promise<number> {
  const started = performance.now();
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([p, new Promise((_, reject) => (timer = setTimeout(() => reject(new Error("still pending after 20 s")), 20_000)))]);
  clearTimeout(timer);
  return performance.now() - started;
}

describe("wake never holds a producer", () => {
  let t: TestClient;
  let n: string;
  const sockets: Socket[] = [];
  const servers: Server[] = [];
  let frozen: NodeChild | undefined;

  beforeAll(async () => {
    t = testClient(url());
    await t.client.migrate();
    await t.client.stream(STREAM).register();
    await t.client.stream(STREAM).consumer("emails").register();
    n = await streamIdOf(t, STREAM);
  });

  afterAll(async () => {
    for (const s of sockets) s.destroy();
    for (const s of servers) await new Promise<void>((r) => s.close(() => r()));
    await frozen?.kill("SIGKILL");
  });

  /** Produces one message through a client with `waker`; the wake window is reset first. */
  async function produceWith(waker: Waker, body: string): Promise<{ ms: number; events: LogEvent[] }> {
    await t.sql(`DELETE FROM sqlstreams.wake_throttle`);
    const events: LogEvent[] = [];
    const pool = new pg.Pool({ connectionString: url(), max: 2 });
    const client = new SqlStreams({ pool, waker, logger: (e) => events.push(e) });
    try {
      const ms = await timed(client.stream(STREAM).produce({ body }));
      return { ms, events };
    } finally {
      await client.close();
      await pool.end();
    }
  }

  async function committedOnce(body: string): Promise<void> {
    const rows = await t.sql<{ c: string }>(`SELECT count(*)::text AS c FROM sqlstreams.message_log_${n} WHERE payload->>'body' = $1`, [body]);
    expect(rows[0].c).toBe("1");
  }

  function warned(events: LogEvent[], pattern: RegExp): void {
    expect(events.some((e) => e.code === "SQL0064" && pattern.test(String(e.message))), JSON.stringify(events)).toBe(true);
  }

  it("a waker that never settles", async () => {
    const { ms, events } = await produceWith({ wake: () => new Promise<void>(() => {}) }, "never-settles");
    expect(ms).toBeLessThan(BOUND_MS);
    warned(events, /did not answer within 1000 ms/);
    await committedOnce("never-settles");
  });

  it("a Lambda endpoint that accepts TCP and never replies", async () => {
    const silent = createServer((s) => void sockets.push(s));
    servers.push(silent);
    await new Promise<void>((r) => silent.listen(0, "127.0.0.1", () => r()));
    const endpoint = `http://127.0.0.1:${(silent.address() as AddressInfo).port}`;
    const clientConfig = { endpoint, region: "eu-west-1", credentials: CREDENTIALS };
    // The waker on its own is bounded too (the client's request timeout, one attempt).
    const direct = createLambdaWaker({ functions: FUNCTIONS, clientConfig });
    let failure: unknown;
    const ms0 = await timed(Promise.resolve(direct.wake({ stream: STREAM, group: "emails" })).catch((e: unknown) => (failure = e)));
    expect(ms0).toBeLessThan(BOUND_MS);
    expect(failure).toBeInstanceOf(Error);

    const { ms, events } = await produceWith(createLambdaWaker({ functions: FUNCTIONS, clientConfig }), "silent-endpoint");
    expect(ms).toBeLessThan(BOUND_MS);
    warned(events, /waking orders\.bounded\/emails failed/);
    await committedOnce("silent-endpoint");
  });

  it("a Lambda endpoint that never accepts (a full listen backlog: SYNs dropped)", async () => {
    // A real process listening with a backlog of 1 whose event loop is blocked: it never accepts.
    frozen = spawnNode({
      source: `import { createServer } from "node:net";
const s = createServer();
s.listen({ port: 0, host: "127.0.0.1", backlog: 1 }, () => {
  process.stdout.write(JSON.stringify({ port: s.address().port }) + "\\n", () => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0));
});`,
      name: "never-accepts",
    });
    const port = Number((await frozen.waitFor((m) => typeof m.port === "number")).port);
    // Fill the accept queue; later connection attempts get no SYN-ACK.
    for (let i = 0; i < 4; i++) {
      const s = connect(port, "127.0.0.1");
      s.on("error", () => {});
      sockets.push(s);
    }
    await new Promise((r) => setTimeout(r, 300));
    const clientConfig = { endpoint: `http://127.0.0.1:${port}`, region: "eu-west-1", credentials: CREDENTIALS };
    let failure: unknown;
    const ms0 = await timed(Promise.resolve(createLambdaWaker({ functions: FUNCTIONS, clientConfig }).wake({ stream: STREAM, group: "emails" })).catch((e: unknown) => (failure = e)));
    expect(ms0).toBeLessThan(BOUND_MS);
    expect(failure).toBeInstanceOf(Error);

    const { ms, events } = await produceWith(createLambdaWaker({ functions: FUNCTIONS, clientConfig }), "never-accepts");
    expect(ms).toBeLessThan(BOUND_MS);
    warned(events, /waking orders\.bounded\/emails failed/);
    await committedOnce("never-accepts");
  });

  it("the group's wake_throttle row locked by another connection", async () => {
    const woken: string[] = [];
    const waker: Waker = { wake: (x) => void woken.push(x.group) };
    await produceWith(waker, "creates-the-row");
    expect(woken).toEqual(["emails"]);
    const gid = await groupIdOf(t, "emails", STREAM);
    const holder = new pg.Client({ connectionString: url() });
    await holder.connect();
    try {
      await holder.query("BEGIN");
      await holder.query("SELECT * FROM sqlstreams.wake_throttle WHERE group_id = $1 FOR UPDATE", [gid]);
      const events: LogEvent[] = [];
      const pool = new pg.Pool({ connectionString: url(), max: 2 });
      const client = new SqlStreams({ pool, waker, logger: (e) => events.push(e) });
      try {
        const ms = await timed(client.stream(STREAM).produce({ body: "row-locked" }));
        expect(ms).toBeLessThan(BOUND_MS);
      } finally {
        await client.close();
        await pool.end();
      }
      warned(events, /held its wake_throttle row/);
      expect(woken).toEqual(["emails"]);
    } finally {
      await holder.query("ROLLBACK").catch(() => undefined);
      await holder.end();
    }
    await committedOnce("row-locked");
  });
});
