// The dashboard against hostile requests: `sqlstreams dashboard` as a child process, raw HTTP
// with forged Host/Origin headers, and Debian's chromium (playwright-core) playing a DNS
// rebinding page (a name mapped to 127.0.0.1) and a page of another loopback origin. The dead
// letter the attacks aim at must stay dead.
import { existsSync } from "node:fs";
import { createServer, request, type Server } from "node:http";
import { chromium, type Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Permanent } from "@sqlstreams/core";
import { useFreshDatabase } from "../support/db.js";
import { spawnNode, type NodeChild } from "../support/processes.js";
import { streamIdOf, testClient, type TestClient } from "../support/streams.js";

const url = useFreshDatabase();
const CHROMIUM = process.env.SQLSTREAMS_CHROMIUM ?? "/usr/bin/chromium";

interface Raw {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** One HTTP request with exactly these headers (fetch would not let us forge Host). */
function raw(port: number, method: string, path: string, headers: Record<string, string>, body?: string): Promise<Raw> {
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port, method, path, headers: { ...headers, ...(body !== undefined ? { "content-length": String(Buffer.byteLength(body)) } : {}) }, setHost: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString("utf8") }));
    });
    req.on("error", reject);
    req.end(body);
  });
}

function startDashboard(args: string[] = [], env: Record<string, string | undefined> = {}): NodeChild {
  return spawnNode({ script: "packages/cli/dist/bin.js", args: ["dashboard", "--port", "0", "--json", ...args], env: { DATABASE_URL: url(), SQLSTREAMS_SCHEMA: undefined, SQLSTREAMS_DASHBOARD_TOKEN: undefined, ...env } });
}

async function refused(args: string[], env: Record<string, string | undefined> = {}): Promise<string> {
  const child = startDashboard(args, env);
  const exit = await child.waitForExit(60_000);
  expect(exit.code).toBe(1);
  const out = child.lines.join("\n") + child.stderr();
  expect(out).not.toContain('"url"');
  return out;
}

describe("dashboard: Host, Origin and token", () => {
  let t: TestClient;
  let dash: NodeChild;
  let printed: URL;
  let port: number;
  let token: string;
  let n: string;
  let browser: Browser | undefined;

  const deadStatus = async () => (await t.sql<{ status: string }>(`SELECT status FROM sqlstreams.exception_queue_${n} WHERE message_id = 2`))[0]?.status;

  beforeAll(async () => {
    t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream<{ order: number }>("orders.placed");
    await s.register();
    const g = s.consumer("billing");
    await g.register({ exceptionInitialBackoff: 0 });
    for (let i = 1; i <= 3; i++) await s.produce({ order: i });
    await g.drain((m) => {
      if (m.payload.order === 2) throw Permanent(new Error("rejected"));
    });
    n = await streamIdOf(t, "orders.placed");
    dash = startDashboard();
    const m = await dash.waitFor((x) => typeof x.url === "string", { timeoutMs: 60_000 });
    printed = new URL(m.url as string);
    port = Number(printed.port);
    token = printed.searchParams.get("token") ?? "";
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    await dash?.kill("SIGTERM");
  });

  it("prints a URL with a fresh random token; the token becomes a cookie, nothing answers without it", async () => {
    expect(printed.origin).toBe(`http://127.0.0.1:${port}`);
    expect(token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    const own = { host: `127.0.0.1:${port}` };
    expect((await raw(port, "GET", "/", own)).status).toBe(401);
    expect((await raw(port, "GET", "/?token=wrong", own)).status).toBe(401);
    const trade = await raw(port, "GET", `/?token=${token}`, own);
    expect(trade.status).toBe(303);
    expect(trade.headers.location).toBe("/");
    const set = String(trade.headers["set-cookie"]);
    expect(set).toMatch(/HttpOnly; SameSite=Strict/);
    const page = await raw(port, "GET", "/", { ...own, cookie: set.split(";")[0] });
    expect(page.status).toBe(200);
    expect(page.body).toContain("Streams and consumer groups");
    // localhost and [::1] are its own names too.
    expect((await raw(port, "GET", "/", { host: `localhost:${port}`, authorization: `Bearer ${token}` })).status).toBe(200);
  });

  it("refuses a foreign Host (DNS rebinding) and a foreign Origin, even with the token", async () => {
    const bearer = { authorization: `Bearer ${token}` };
    const foreign = await raw(port, "GET", "/", { host: `attacker.example:${port}`, ...bearer });
    expect(foreign.status).toBe(421);
    expect(foreign.body).toContain("SQL0090");
    // A rebinding page posts with its own Host and Origin (same origin as far as the browser knows).
    const csrf = "abcdefabcdefabcdefabcdef";
    const form = `stream=orders.placed&group=billing&ids=2&csrf=${csrf}`;
    const post = (h: Record<string, string>) => raw(port, "POST", "/action/discard", { "content-type": "application/x-www-form-urlencoded", cookie: `sqlstreams_csrf=${csrf}`, ...bearer, ...h }, form);
    expect((await post({ host: `attacker.example:${port}`, origin: `http://attacker.example:${port}` })).status).toBe(421);
    const cross = await post({ host: `127.0.0.1:${port}`, origin: "http://attacker.example" });
    expect(cross.status).toBe(403);
    expect(cross.body).toContain("SQL0061");
    // Another loopback port is another origin: no reading either.
    expect((await raw(port, "GET", "/group?stream=orders.placed&group=billing", { host: `127.0.0.1:${port}`, origin: "http://127.0.0.1:1", ...bearer })).status).toBe(403);
    expect(await deadStatus()).toBe("dead");
  });

  it("gives coded 4xx, not 500, to TRACE, a malformed Host and an absolute request target", async () => {
    const trace = await raw(port, "TRACE", "/", { host: `127.0.0.1:${port}` });
    expect(trace.status).toBe(405);
    expect(trace.body).toContain("SQL0090");
    for (const host of ["[::1", "a b", "", "127.0.0.1:notaport"]) {
      const r = await raw(port, "GET", "/", { host, authorization: `Bearer ${token}` });
      expect(r.status, host).toBeGreaterThanOrEqual(400);
      expect(r.status, host).toBeLessThan(500);
    }
  });

  it("--host is checked by what it is: a loopback-looking name is a name; a token never comes from argv", async () => {
    expect(await refused(["--host", "127.evil.example"])).toMatch(/"code": "SQL0091",\s+"message": "--host 127\.evil\.example does not resolve/);
    expect(await refused(["--host", "0.0.0.0"])).toMatch(/"code": "SQL0060",\s+"message": "[^"]*TLS/);
    expect(await refused(["--host", "0.0.0.0"], { SQLSTREAMS_DASHBOARD_TOKEN: "short-token" })).toMatch(/"SQL0091",\s+"message": "the dashboard token has 11 characters/);
    expect(await refused(["--token", "x".repeat(40)])).toMatch(/"SQL0091",\s+"message": "--token on the command line/);
  }, 120_000);

  it("beyond loopback with a configured token: not printed, and required", async () => {
    const secret = "k".repeat(24) + "-configured-token";
    const child = startDashboard(["--host", "0.0.0.0", "--allow-host", "dash.internal"], { SQLSTREAMS_DASHBOARD_TOKEN: secret });
    try {
      const m = await child.waitFor((x) => typeof x.url === "string", { timeoutMs: 60_000 });
      expect(String(m.url)).not.toContain(secret);
      const p = Number(new URL(String(m.url)).port);
      expect((await raw(p, "GET", "/", { host: `dash.internal:${p}` })).status).toBe(401);
      expect((await raw(p, "GET", "/", { host: `dash.internal:${p}`, authorization: `Basic ${Buffer.from(`ops:${secret}`).toString("base64")}` })).status).toBe(200);
      expect((await raw(p, "GET", "/", { host: `other.internal:${p}`, authorization: `Bearer ${secret}` })).status).toBe(421);
    } finally {
      await child.kill("SIGTERM");
    }
  }, 90_000);

  it("too many requests without the token from one address: 429 for the rest of the minute, even with it", async () => {
    const child = startDashboard();
    try {
      const m = await child.waitFor((x) => typeof x.url === "string", { timeoutMs: 60_000 });
      const printed = new URL(String(m.url));
      const p = Number(printed.port);
      const own = { host: `127.0.0.1:${p}` };
      for (let i = 0; i < 10; i++) expect((await raw(p, "GET", `/?token=guess-${i}`, own)).status).toBe(401);
      const blocked = await raw(p, "GET", `/?token=guess-10`, own);
      expect(blocked.status).toBe(429);
      expect(blocked.body).toContain("SQL0090");
      expect(Number(blocked.headers["retry-after"])).toBeGreaterThan(0);
      expect((await raw(p, "GET", "/", { ...own, authorization: `Bearer ${printed.searchParams.get("token")}` })).status).toBe(429);
    } finally {
      await child.kill("SIGTERM");
    }
  }, 90_000);

  describe.skipIf(!existsSync(CHROMIUM) && !process.env.CI)("in chromium", () => {
    const others: Server[] = [];
    let otherPort = 0;

    beforeAll(async () => {
      // attacker.example resolves to this machine: the second answer of a rebinding DNS server.
      browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--host-resolver-rules=MAP attacker.example 127.0.0.1"] });
      // Pages of other origins: another port of 127.0.0.1, and 127.0.0.2 on that port.
      for (const host of ["127.0.0.1", "127.0.0.2"]) {
        const other = createServer((_req, res) => {
          res.writeHead(200, { "content-type": "text/html" });
          res.end("<!doctype html><title>another origin</title><p>elsewhere</p>");
        });
        await new Promise<void>((r) => other.listen(otherPort, host, () => r()));
        otherPort = (other.address() as { port: number }).port;
        others.push(other);
      }
    }, 60_000);

    afterAll(async () => {
      for (const o of others) await new Promise<void>((r) => o.close(() => r()));
    });

    it("the printed URL opens the dashboard and drops the token from the address bar", async () => {
      const page = await (browser as Browser).newPage();
      await page.goto(printed.toString());
      await expect.poll(() => page.getByRole("heading", { name: "Streams and consumer groups" }).count()).toBe(1);
      expect(page.url()).toBe(`http://127.0.0.1:${port}/`);
      await page.close();
    });

    it("a DNS-rebinding page can neither read the group page nor discard its dead letter", async () => {
      const page = await (browser as Browser).newPage();
      const first = await page.goto(`http://attacker.example:${port}/`);
      expect(first?.status()).toBe(421);
      // The attacker's script, running in that origin: read the form token from /group, then post.
      const outcome = await page.evaluate(async () => {
        const g = await fetch("/group?stream=orders.placed&group=billing");
        const text = await g.text();
        const csrf = /name="csrf" value="([^"]+)"/.exec(text)?.[1] ?? "none";
        const d = await fetch("/action/discard", { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, body: `stream=orders.placed&group=billing&ids=2&csrf=${csrf}` });
        return { read: g.status, csrf, discard: d.status };
      });
      expect(outcome).toEqual({ read: 421, csrf: "none", discard: 421 });
      expect(await deadStatus()).toBe("dead");
      await page.close();
    });

    it("a page of another loopback origin, in a browser holding the dashboard's cookies, cannot read or act", async () => {
      const context = await (browser as Browser).newContext();
      const own = await context.newPage();
      await own.goto(printed.toString());
      await expect.poll(() => own.getByRole("heading", { name: "Streams and consumer groups" }).count()).toBe(1);
      const csrf = (await context.cookies()).find((c) => c.name === "sqlstreams_csrf")?.value ?? "";
      expect(csrf).not.toBe("");
      for (const from of [`http://127.0.0.1:${otherPort}/`, `http://127.0.0.2:${otherPort}/`]) {
        const page = await context.newPage();
        await page.goto(from);
        const outcome = await page.evaluate(
          async ({ target, csrf }) => {
            let read: string;
            try {
              const r = await fetch(`${target}group?stream=orders.placed&group=billing`, { credentials: "include" });
              read = String(r.status);
            } catch (e) {
              read = (e as Error).name;
            }
            // Even knowing the form token (it cannot), a no-cors form post must not act.
            await fetch(`${target}action/discard`, { method: "POST", mode: "no-cors", credentials: "include", headers: { "content-type": "application/x-www-form-urlencoded" }, body: `stream=orders.placed&group=billing&ids=2&csrf=${csrf}` }).catch(() => undefined);
            return read;
          },
          { target: `http://127.0.0.1:${port}/`, csrf },
        );
        expect(outcome, from).toBe("TypeError");
        await page.close();
      }
      expect(await deadStatus()).toBe("dead");
      await context.close();
    });
  });
});
