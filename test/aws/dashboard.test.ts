// The dashboard as a Lambda Function URL handler (createDashboardHandler) against a real database:
// pages render, a redrive POST with the page's token changes Postgres, one without is refused,
// and SQLSTREAMS_DASHBOARD_READ_ONLY refuses every action.
import { createHash } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DatabaseProvider, createDashboardHandler, type FunctionUrlEvent } from "@sqlstreams/aws";
import { Permanent } from "@sqlstreams/core";
import { useFreshDatabase } from "../support/db.js";
import { groupIdOf, streamIdOf, testClient, type TestClient } from "../support/streams.js";

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
    expect(ok.headers.location).toBe("/group?stream=orders.placed&group=fraud&done=redriven&n=1%2C0");
    const after = await handler(event("GET", "/group", { query: "stream=orders.placed&group=fraud&done=redriven&n=1%2C0", cookies: [cookie] }));
    expect(after.body).toContain('<p class="flash" role="status">redrove 1 dead message(s)</p>');
    expect((await t.sql<{ status: string }>(`SELECT status FROM sqlstreams.exception_queue_${n}`))[0].status).toBe("ready");
  });

  it("the group page shows the group's rateLimit and how often it held work back", async () => {
    const handler = createDashboardHandler({ database: db, readOnly: true });
    const plain = await handler(event("GET", "/group", { query: "stream=orders.placed&group=fraud" }));
    expect(plain.body).toContain("no rate limit");
    await t.client.stream("orders.placed").consumer("limited").register({ rateLimit: { perSecond: 5, burst: 2 } });
    const limited = await handler(event("GET", "/group", { query: "stream=orders.placed&group=limited" }));
    expect(limited.body).toContain("rateLimit 5/s, burst 2 (0 rate-limited claims)");
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
      await expect(import("../../functions/dashboard.js")).rejects.toMatchObject({ code: "SQL0091" });
    } finally {
      if (saved === undefined) delete process.env.SQLSTREAMS_DASHBOARD_READ_ONLY;
      else process.env.SQLSTREAMS_DASHBOARD_READ_ONLY = saved;
    }
  });
});

describe("dashboard: what a request cannot make it do", () => {
  let db: DatabaseProvider;

  beforeAll(async () => {
    const t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream<{ n: number }>("orders.many");
    await s.register();
    await s.consumer("bulk").register();
    for (let b = 0; b < 11; b++) await s.produceBatch(Array.from({ length: 1_000 }, (_, i) => ({ payload: { n: b * 1_000 + i } })));
    const n = await streamIdOf(t, "orders.many");
    const gid = await groupIdOf(t, "bulk", "orders.many");
    await t.sql(`INSERT INTO sqlstreams.exception_queue_${n} (consumer_group_id, message_id, status, concurrency, attempts, last_error)
      SELECT $1, id, 'dead', 'parallel', 1, 'rejected' FROM sqlstreams.message_log_${n}`, [gid]);
    db = new DatabaseProvider({ env: { DATABASE_URL: url() } });
  }, 120_000);

  afterAll(async () => {
    await db.close();
  });

  it("one inline script, allowed by its hash; no inline handlers; base-uri 'none'", async () => {
    const home = await createDashboardHandler({ database: db, readOnly: true })(event("GET", "/"));
    const csp = home.headers["content-security-policy"];
    const script = /<script>([\s\S]*?)<\/script>/.exec(home.body)?.[1] ?? "";
    expect(csp).toContain(`script-src 'sha256-${createHash("sha256").update(script).digest("base64")}'`);
    expect(csp).not.toContain("unsafe-inline'; form");
    expect(csp).not.toMatch(/script-src[^;]*unsafe-inline/);
    expect(csp).toContain("base-uri 'none'");
  });

  it("the success banner comes from a fixed list filled with numbers: a link cannot choose its words", async () => {
    const handler = createDashboardHandler({ database: db, readOnly: true });
    for (const q of ["done=Your+session+expired%3A+call+%2B1-555-0100", "done=redriven&n=1%2Cevil", "done=redriven", "done=constructor", "done=__proto__&n="]) {
      const r = await handler(event("GET", "/", { query: q }));
      expect(r.statusCode, q).toBe(200);
      expect(r.body, q).not.toContain('class="flash"');
    }
    expect((await handler(event("GET", "/", { query: "done=paused" }))).body).toContain('<p class="flash" role="status">paused</p>');
  });

  it("NUL, a JSON filter Postgres cannot take, a 19-digit id, extreme dates and TRACE get a coded 4xx, never 500", async () => {
    const handler = createDashboardHandler({ database: db, readOnly: false });
    const bad: [string, string, string][] = [
      ["GET", "/group", "stream=orders.many&group=bulk&key=a%00b"],
      ["GET", "/group", "stream=orders.many&group=bulk&error=a%00b"],
      ["GET", "/group", "stream=orders.many&group=bulk&payload=%7B%22a%22%3A%22%5Cu0000%22%7D"],
      ["GET", "/group", "stream=orders.many&group=bulk&payload=%7B%22a%22%3A%22%5Cud800%22%7D"],
      ["GET", "/group", "stream=orders.many&group=bulk&since=-271821-04-20"],
      ["GET", "/message", "stream=orders.many&id=9999999999999999999"],
      ["GET", "/message", "stream=orders.many&id=1e3"],
      ["GET", "/message", "stream=orders.many&key=%00"],
      ["TRACE", "/", ""],
    ];
    for (const [method, path, query] of bad) {
      const r = await handler(event(method, path, { query }));
      expect(r.statusCode, `${method} ${path}?${query}`).toBeGreaterThanOrEqual(400);
      expect(r.statusCode, `${method} ${path}?${query}`).toBeLessThan(500);
      expect(r.body, `${method} ${path}?${query}`).toMatch(/SQL00(90|18|15)/);
    }
  });

  it("bulk buttons say how many one press acts on", async () => {
    const handler = createDashboardHandler({ database: db, readOnly: false });
    const page = await handler(event("GET", "/group", { query: "stream=orders.many&group=bulk" }));
    // The count stops past 10,000 (one press's reach), so 11,000 rows read "10,000+".
    expect(page.body).toContain("Redrive 10,000 of the 10,000+ matching");
    expect(page.body).toContain("Discard 10,000 of the 10,000+ matching");
    expect(page.body).not.toContain("all 11000");
    const one = await handler(event("GET", "/group", { query: "stream=orders.many&group=bulk&payload=%7B%22n%22%3A7%7D" }));
    expect(one.body).toContain("Redrive all 1 matching");
  });
});
