// The dashboard as a Lambda Function URL handler (createDashboardHandler) against a real database:
// pages render, a redrive POST with the page's token changes Postgres, one without is refused,
// and SQLSTREAMS_DASHBOARD_READ_ONLY refuses every action.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DatabaseProvider, createDashboardHandler, type FunctionUrlEvent } from "@sqlstreams/aws";
import { Permanent } from "@sqlstreams/core";
import { useFreshDatabase } from "./support/db.js";
import { streamIdOf, testClient, type TestClient } from "./support/streams.js";

const url = useFreshDatabase();

function event(method: string, path: string, opts: { query?: string; body?: string; cookies?: string[]; headers?: Record<string, string> } = {}): FunctionUrlEvent {
  return {
    rawPath: path,
    rawQueryString: opts.query ?? "",
    headers: { host: "abc.lambda-url.eu-west-1.on.aws", ...(opts.body ? { "content-type": "application/x-www-form-urlencoded" } : {}), ...opts.headers },
    ...(opts.cookies ? { cookies: opts.cookies } : {}),
    ...(opts.body !== undefined ? { body: Buffer.from(opts.body).toString("base64"), isBase64Encoded: true } : {}),
    requestContext: { http: { method } },
  };
}

describe("dashboard behind a Function URL", () => {
  let t: TestClient;
  let db: DatabaseProvider;
  let n: string;

  beforeAll(async () => {
    t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream("orders.placed");
    await s.register();
    const g = s.consumer("fraud");
    await g.register();
    await s.produce({ n: 1 });
    await g.drain(() => {
      throw Permanent(new Error("bad order"));
    });
    n = await streamIdOf(t, "orders.placed");
    db = new DatabaseProvider({ env: { DATABASE_URL: url() } });
  });

  afterAll(async () => {
    await db.close();
  });

  it("renders pages, and a same-origin POST with the cookie's token redrives; without it: 403", async () => {
    const handler = createDashboardHandler({ database: db, readOnly: false });
    const home = await handler(event("GET", "/"));
    expect(home.statusCode).toBe(200);
    expect(home.body).toContain("fraud");
    const cookie = home.cookies?.[0]?.split(";")[0] ?? "";
    expect(cookie).toMatch(/^sqlstreams_csrf=/);
    expect(home.cookies?.[0]).toContain("Secure");
    const token = cookie.split("=")[1];
    const group = await handler(event("GET", "/group", { query: "stream=orders.placed&group=fraud", cookies: [cookie] }));
    expect(group.body).toContain(`name="csrf" value="${token}"`);

    const forged = await handler(event("POST", "/action/redrive", { body: "stream=orders.placed&group=fraud&ids=1&csrf=wrong-token-wrong-token", cookies: [cookie], headers: { "sec-fetch-site": "same-origin" } }));
    expect(forged.statusCode).toBe(403);
    const crossSite = await handler(event("POST", "/action/redrive", { body: `stream=orders.placed&group=fraud&ids=1&csrf=${token}`, cookies: [cookie], headers: { "sec-fetch-site": "cross-site" } }));
    expect(crossSite.statusCode).toBe(403);
    expect((await t.sql<{ status: string }>(`SELECT status FROM sqlstreams.exception_queue_${n}`))[0].status).toBe("dead");

    const ok = await handler(event("POST", "/action/redrive", { body: `stream=orders.placed&group=fraud&ids=1&csrf=${token}`, cookies: [cookie], headers: { "sec-fetch-site": "same-origin" } }));
    expect(ok.statusCode).toBe(303);
    expect(ok.headers.location).toContain("done=redrove+1+dead+message");
    expect((await t.sql<{ status: string }>(`SELECT status FROM sqlstreams.exception_queue_${n}`))[0].status).toBe("ready");
  });

  it("the group page charts lag and throughput from the progress history maintain() writes", async () => {
    const handler = createDashboardHandler({ database: db, readOnly: true });
    const before = await handler(event("GET", "/group", { query: "stream=orders.placed&group=fraud" }));
    expect(before.body).toContain("Lag: not enough samples yet");
    await t.client.maintain();
    await t.client.stream("orders.placed").produce({ n: 2 });
    await t.client.maintain();
    await t.client.maintain();
    const after = await handler(event("GET", "/group", { query: "stream=orders.placed&group=fraud" }));
    expect(after.body).toMatch(/<svg role="img" aria-label="Lag: last 1 ids, peak 1"/);
    expect(after.body).toMatch(/<svg role="img" aria-label="Throughput: last 0 messages\/min/);
  });

  it("read-only from the environment refuses actions", async () => {
    process.env.SQLSTREAMS_DASHBOARD_READ_ONLY = "1";
    try {
      const handler = createDashboardHandler({ database: db });
      const home = await handler(event("GET", "/"));
      expect(home.body).toContain("read-only");
      const cookie = home.cookies?.[0]?.split(";")[0] ?? "";
      const r = await handler(event("POST", "/action/pause", { body: `stream=orders.placed&group=fraud&csrf=${cookie.split("=")[1]}`, cookies: [cookie], headers: { "sec-fetch-site": "same-origin" } }));
      expect(r.statusCode).toBe(403);
      expect(r.body).toContain("SQL0061");
      expect((await t.client.stream("orders.placed").consumer("fraud").progress()).paused).toBe(false);
    } finally {
      delete process.env.SQLSTREAMS_DASHBOARD_READ_ONLY;
    }
  });
});

describe("createDashboardHandler: read-only unless read-write is asked for", () => {
  const KEYS = ["SQLSTREAMS_DASHBOARD_READ_ONLY", "SQLSTREAMS_DASHBOARD_READ_WRITE"] as const;

  /** The handler's mode under these variables, by whether its overview shows the read-only mark; or the error code. */
  async function mode(env: Partial<Record<(typeof KEYS)[number], string>>, opts: Parameters<typeof createDashboardHandler>[0] = {}): Promise<string> {
    const saved = KEYS.map((k) => process.env[k]);
    for (const k of KEYS) {
      if (env[k] === undefined) delete process.env[k];
      else process.env[k] = env[k];
    }
    try {
      const db = new DatabaseProvider({ env: { DATABASE_URL: url() } });
      try {
        const handler = createDashboardHandler({ database: db, ...opts });
        const home = await handler(event("GET", "/"));
        return home.body.includes('<span class="mode" role="status">read-only</span>') ? "ro" : "rw";
      } catch (e) {
        return (e as { code?: string }).code ?? String(e);
      } finally {
        await db.close();
      }
    } finally {
      KEYS.forEach((k, i) => (saved[i] === undefined ? delete process.env[k] : (process.env[k] = saved[i])));
    }
  }

  it("fails closed, parses its flags strictly and refuses contradictions (SQL0091)", async () => {
    expect(await mode({})).toBe("ro");
    expect(await mode({ SQLSTREAMS_DASHBOARD_READ_ONLY: "on" })).toBe("SQL0091");
    expect(await mode({ SQLSTREAMS_DASHBOARD_READ_ONLY: "TRUE " })).toBe("SQL0091");
    expect(await mode({ SQLSTREAMS_DASHBOARD_READ_WRITE: "on" })).toBe("SQL0091");
    expect(await mode({ SQLSTREAMS_DASHBOARD_READ_ONLY: "1" })).toBe("ro");
    expect(await mode({ SQLSTREAMS_DASHBOARD_READ_WRITE: "0" })).toBe("ro");
    expect(await mode({ SQLSTREAMS_DASHBOARD_READ_WRITE: "1" })).toBe("rw");
    expect(await mode({ SQLSTREAMS_DASHBOARD_READ_ONLY: "0" })).toBe("rw");
    expect(await mode({ SQLSTREAMS_DASHBOARD_READ_WRITE: "1", SQLSTREAMS_DASHBOARD_READ_ONLY: "1" })).toBe("SQL0091");
    expect(await mode({ SQLSTREAMS_DASHBOARD_READ_WRITE: "1" }, { readOnly: true })).toBe("ro");
    expect(await mode({}, { readWrite: true })).toBe("rw");
    expect(await mode({}, { readOnly: false })).toBe("rw");
    expect(await mode({}, { readWrite: true, readOnly: true })).toBe("SQL0091");
    expect(await mode({}, { readWrite: "yes" as unknown as boolean })).toBe("SQL0091");
  });

  it("this repository's functions/dashboard.ts follows the same rules", async () => {
    const saved = process.env.SQLSTREAMS_DASHBOARD_READ_ONLY;
    process.env.SQLSTREAMS_DASHBOARD_READ_ONLY = "on";
    try {
      await expect(import("../functions/dashboard.js")).rejects.toMatchObject({ code: "SQL0091" });
    } finally {
      if (saved === undefined) delete process.env.SQLSTREAMS_DASHBOARD_READ_ONLY;
      else process.env.SQLSTREAMS_DASHBOARD_READ_ONLY = saved;
    }
  });
});
