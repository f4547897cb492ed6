// Backlog-driven scaling (docs/guide/deployment.md#backlog-driven-scaling): a poll invocation that
// ends at its budget with a backlog starts continuations of its own function, up to the group's
// cap, and a group that has caught up stops continuing. The real AWS SDK client sends its Invoke
// calls to a local HTTP endpoint (loopback, static fake credentials) that records them; the test
// plays Lambda by running the poll handler for every Invoke it records.
import { createServer, type Server } from "node:http";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DatabaseProvider, createPollHandler, localContext, type GroupDeclaration } from "@sqlstreams/aws";
import type { CycleReport } from "@sqlstreams/core";
import { useFreshDatabase } from "../support/db.js";
import { codeOf, testClient, type TestClient } from "../support/streams.js";
import { continuationsOf } from "../../packages/aws/src/scale.js";
import { emptyCycleReport } from "../../packages/core/src/cycle/types.js";

const url = useFreshDatabase();

interface Invoke {
  path: string;
  type: string | undefined;
  auth: string | undefined;
  body: string;
}

let server: Server;
let endpoint: string;
const invokes: Invoke[] = [];
let onInvoke: (i: Invoke) => void = () => {};
let t: TestClient;
let db: DatabaseProvider;

beforeAll(async () => {
  t = testClient(url());
  await t.client.migrate();
  db = new DatabaseProvider({ env: { DATABASE_URL: url() }, logger: () => {} });
  server = createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString("utf8")));
    req.on("end", () => {
      const i = { path: req.url ?? "", type: req.headers["x-amz-invocation-type"] as string | undefined, auth: req.headers.authorization, body };
      invokes.push(i);
      res.writeHead(202, { "content-type": "application/json" }).end();
      onInvoke(i);
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const addr = server.address();
  if (addr === null || typeof addr === "string") throw new Error("no port");
  endpoint = `http://127.0.0.1:${addr.port}`;
});

afterAll(async () => {
  await db.close();
  await new Promise<void>((r) => server.close(() => r()));
});

const declaration = (over: Partial<GroupDeclaration> = {}): GroupDeclaration => ({
  stream: "scale", group: "g", function: "functions/scale.handler", schedule: "rate(1 minute)",
  config: { maxConcurrency: 3, message: { timeout: 500 } }, scale: { max: 3, continueAboveLag: 20 },
  timeout: 4_000, recordMargin: 200, ...over,
});

describe("backlog-driven scaling", () => {
  it("a declaration's scale is checked: it needs maxConcurrency, max <= maxConcurrency, integers", async () => {
    const make = (d: GroupDeclaration) => () => createPollHandler({ stream: "scale", group: "g", handle: () => {}, groups: [d], database: db });
    expect(await codeOf(make(declaration({ config: { message: { timeout: 500 } } })))).toBe("SQL0015");
    expect(await codeOf(make(declaration({ scale: { max: 4, continueAboveLag: 20 } })))).toBe("SQL0015");
    expect(await codeOf(make(declaration({ scale: { max: 0, continueAboveLag: 20 } })))).toBe("SQL0015");
    expect(await codeOf(make(declaration({ scale: { max: 2, continueAboveLag: -1 } })))).toBe("SQL0015");
    expect(await codeOf(make(declaration({ scale: { max: 2, continueAboveLag: 1, extra: 1 } as never })))).toBe("SQL0015");
    make(declaration())();
  });

  it("a rate-limited invocation starts no continuation: more drains cannot raise the group's rate", () => {
    const progress = { lag: "1000", concurrency: { max: 3, running: 0, capped: 0 } } as Parameters<typeof continuationsOf>[2];
    const scale = { max: 3, continueAboveLag: 20 };
    expect(continuationsOf(scale, emptyCycleReport("scale", "g"), progress)).toBe(2);
    expect(continuationsOf(scale, { ...emptyCycleReport("scale", "g"), rateLimited: 4 }, progress)).toBe(0);
  });

  it("a backlog continues itself up to the cap, and stops when caught up", async () => {
    const total = 1_200;
    const s = t.client.stream<{ i: number }>("scale");
    await s.register();
    const d = declaration();
    await s.consumer("g").register(d.config);
    for (let k = 0; k < total; k += 400) await s.produceBatch(Array.from({ length: 400 }, (_, i) => ({ payload: { i: k + i } })));
    const handled = new Set<number>();
    // Each drain runs one handler at a time (concurrency 1): handlers at once = drains working at once.
    let active = 0;
    let peak = 0;
    const handler = createPollHandler<{ i: number }>({
      stream: "scale", group: "g", groups: [d], database: db, log: () => {}, metrics: false,
      handle: async (m) => {
        handled.add(m.payload.i);
        peak = Math.max(peak, ++active);
        await sleep(10);
        active--;
      },
      lambda: { clientConfig: { endpoint, region: "us-east-1", credentials: { accessKeyId: "AKIDLOCALTEST", secretAccessKey: "local-test-secret" } } },
    });

    // Playing Lambda: every invocation (the scheduled one, then each recorded Invoke) runs the
    // handler with a 4 s budget.
    const runs: { report: CycleReport }[] = [];
    const pending = new Set<Promise<void>>();
    const invoke = () => {
      const p = handler({ stream: "scale", group: "g" }, localContext(4_000, { functionName: "scaler" })).then((report) => {
        runs.push({ report });
      });
      pending.add(p);
      void p.finally(() => pending.delete(p));
    };
    onInvoke = () => invoke();
    invoke(); // the schedule's tick
    const deadline = Date.now() + 120_000;
    while (pending.size > 0 && Date.now() < deadline) await sleep(50);
    expect(pending.size).toBe(0);

    // Every message handled; the backlog is gone.
    expect(handled.size).toBe(total);
    expect((await s.consumer("g").progress()).lag).toBe("0");
    // The real client's calls: Event invocations of this function, signed, with the group's event.
    expect(invokes.length).toBeGreaterThan(0);
    expect(runs).toHaveLength(invokes.length + 1);
    for (const i of invokes) {
      expect(i.type).toBe("Event");
      expect(i.path).toContain("/invocations");
      expect(decodeURIComponent(i.path)).toContain("function:scaler");
      expect(i.auth).toContain("Credential=AKIDLOCALTEST/");
      expect(JSON.parse(i.body)).toEqual({ stream: "scale", group: "g", source: "continue" });
    }
    // Up to the cap: at some moment three drains worked at once, never more.
    expect(peak).toBe(3);
    const working = runs.filter((r) => r.report.capped === 0);
    // Caught up: the invocations that ended idle started nothing, and nothing is running or invoked now.
    const before = invokes.length;
    await sleep(500);
    expect(invokes.length).toBe(before);
    expect(working.some((r) => r.report.idle)).toBe(true);
    expect((await s.consumer("g").progress()).concurrency).toMatchObject({ max: 3, running: 0 });
  }, 150_000);

  it("outside Lambda, a context's onContinue (as sqlstreams dev sets it) receives the continuations instead of an Invoke", async () => {
    const s = t.client.stream<{ i: number }>("scale.dev");
    await s.register();
    const d = declaration({ stream: "scale.dev" });
    await s.consumer("g").register(d.config);
    await s.produceBatch(Array.from({ length: 600 }, (_, i) => ({ payload: { i } })));
    const handler = createPollHandler<{ i: number }>({
      stream: "scale.dev", group: "g", groups: [d], database: db, log: () => {}, metrics: false,
      handle: () => sleep(10),
      lambda: { clientConfig: { endpoint, region: "us-east-1", credentials: { accessKeyId: "AKIDLOCALTEST", secretAccessKey: "local-test-secret" } } },
    });
    const before = invokes.length;
    const asked: number[] = [];
    let r = await handler({ stream: "scale.dev", group: "g" }, localContext(4_000, { functionName: "dev", onContinue: (n) => asked.push(n) }));
    // Ended at its budget with a backlog, nothing else running: two continuations (the most per invocation).
    expect(r.idle).toBe(false);
    expect(asked).toEqual([2]);
    expect(invokes.length).toBe(before);
    // Caught up: no continuation.
    while (!r.idle) r = await handler({ stream: "scale.dev", group: "g" }, localContext(4_000, { functionName: "dev", onContinue: (n) => asked.push(n) }));
    expect(asked.at(-1)).toBe(2);
    const n = asked.length;
    await handler({ stream: "scale.dev", group: "g" }, localContext(4_000, { functionName: "dev", onContinue: (k) => asked.push(k) }));
    expect(asked).toHaveLength(n);
  }, 120_000);
});
