// The dashboard in a real browser: `sqlstreams dashboard` as a child process, Debian's chromium
// driven by playwright-core. Load the overview, open a group with a dead letter, redrive it
// through the UI and see Postgres change; a read-only dashboard shows no actions and refuses a
// forged POST; a POST without the page's token is refused. Screenshots go to .screenshots/.
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { chromium, type Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Permanent } from "@sqlstreams/core";
import { useFreshDatabase } from "../support/db.js";
import { repoRoot, spawnNode, type NodeChild } from "../support/processes.js";
import { streamIdOf, testClient, type TestClient } from "../support/streams.js";

const url = useFreshDatabase();
const CHROMIUM = process.env.SQLSTREAMS_CHROMIUM ?? "/usr/bin/chromium";
const SHOTS = join(repoRoot, ".screenshots");

/** `url` is the dashboard's root; `open` the printed URL (with the start's token) to open first. */
async function startDashboard(args: string[], env: Record<string, string> = {}): Promise<{ child: NodeChild; url: string; open: string }> {
  const child = spawnNode({ script: "packages/cli/dist/bin.js", args: ["dashboard", "--port", "0", "--json", ...args], env: { DATABASE_URL: url(), SQLSTREAMS_SCHEMA: undefined, SQLSTREAMS_DASHBOARD_TOKEN: undefined, ...env } });
  const m = await child.waitFor((x) => typeof x.url === "string", { timeoutMs: 60_000 });
  return { child, url: `${new URL(m.url as string).origin}/`, open: m.url as string };
}

describe.skipIf(!existsSync(CHROMIUM) && !process.env.CI)("dashboard in chromium", () => {
  let t: TestClient;
  let browser: Browser;
  let dash: { child: NodeChild; url: string; open: string };
  let n: string;

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream<{ order: number; customer: string }>("orders.placed");
    await s.register();
    const g = s.consumer("fraud-scoring");
    await g.register({ exceptionInitialBackoff: 0 });
    await s.consumer("ledger").register();
    for (let i = 1; i <= 6; i++) await s.produce({ order: i, customer: `c-${i % 2}` }, { key: `c-${i % 2}` });
    await g.drain((m) => {
      if (m.payload.order === 4) throw Permanent(new Error("review service rejected order 4: unknown customer"));
    });
    n = await streamIdOf(t, "orders.placed");
    dash = await startDashboard([]);
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"] });
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    await dash?.child.kill("SIGTERM");
  });

  it("overview → group with a dead letter → redrive through the UI changes Postgres", async () => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    await page.goto(dash.open);
    await expect.poll(() => page.getByRole("heading", { name: "Streams and consumer groups" }).count()).toBe(1);
    const overview = await page.locator("table").first().innerText();
    expect(overview).toMatch(/orders\.placed\s+fraud-scoring\s+6\s+6\s+0/);
    await page.screenshot({ path: join(SHOTS, "overview.png"), fullPage: true });

    await page.getByRole("link", { name: "fraud-scoring" }).click();
    await expect.poll(() => page.getByRole("heading", { name: "orders.placed / fraud-scoring" }).count()).toBe(1);
    // The failure list (the group page also has a table of blocked keys).
    const rows = await page.locator("table", { has: page.locator("caption", { hasText: /\brows\b/ }) }).locator("tbody tr").allInnerTexts();
    expect(rows).toHaveLength(1);
    expect(rows[0]).toContain("review service rejected order 4");
    await page.screenshot({ path: join(SHOTS, "group.png"), fullPage: true });

    // Keyboard reachable: the redrive button is a real, labelled button.
    const redrive = page.getByRole("button", { name: "Redrive message 4" });
    await redrive.focus();
    await page.keyboard.press("Enter");
    await expect.poll(() => page.getByRole("status").filter({ hasText: "redrove 1 dead message(s)" }).count(), { timeout: 30_000 }).toBe(1);
    const db = await t.sql<{ status: string; attempts: number }>(`SELECT status, attempts FROM sqlstreams.exception_queue_${n} WHERE message_id = 4`);
    expect(db).toEqual([{ status: "ready", attempts: 0 }]);
    const audit = await t.sql<{ error: string }>(`SELECT error FROM sqlstreams.delivery_log_${n} WHERE message_id = 4 AND status = 'redriven'`);
    expect(audit).toEqual([{ error: "redriven: dashboard" }]);

    await page.goto(`${dash.url}message?stream=orders.placed&id=4`);
    await expect.poll(() => page.getByRole("heading", { name: "Message 4" }).count()).toBe(1);
    expect(await page.locator("main").innerText()).toMatch(/fraud-scoring: ready exception row/);
    await page.screenshot({ path: join(SHOTS, "message.png"), fullPage: true });
    await page.close();
  });

  it("read-only mode shows no actions and refuses a POST; a POST without the page's token is refused", async () => {
    // Make 4 dead again.
    await t.client.stream("orders.placed").consumer("fraud-scoring").drain(() => {
      throw Permanent(new Error("still broken"));
    });
    const ro = await startDashboard(["--read-only"]);
    try {
      const page = await browser.newPage();
      await page.goto(ro.open);
      await page.goto(`${ro.url}group?stream=orders.placed&group=fraud-scoring`);
      await expect.poll(() => page.getByText("read-only", { exact: true }).count()).toBe(1);
      expect(await page.getByRole("button", { name: /Redrive|Discard|Pause|Seek/ }).count()).toBe(0);
      // The browser's own cookie and a well-formed request: read-only refuses it anyway.
      const forged = await page.request.post(`${ro.url}action/redrive`, { form: { stream: "orders.placed", group: "fraud-scoring", ids: "4", csrf: "x" } });
      expect(forged.status()).toBe(403);
      expect(await forged.text()).toContain("SQL0061");
      await page.screenshot({ path: join(SHOTS, "read-only.png"), fullPage: true });
      await page.close();
    } finally {
      await ro.child.kill("SIGTERM");
    }
    // The writable dashboard: a POST without the cookie's token (e.g. from another site) is refused.
    const res = await fetch(`${dash.url}action/redrive`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", origin: "https://evil.example", authorization: `Bearer ${new URL(dash.open).searchParams.get("token")}` },
      body: "stream=orders.placed&group=fraud-scoring&ids=4&csrf=abcdefabcdefabcdefabcdef",
    });
    expect(res.status).toBe(403);
    const db = await t.sql<{ status: string }>(`SELECT status FROM sqlstreams.exception_queue_${n} WHERE message_id = 4`);
    expect(db).toEqual([{ status: "dead" }]);
  });

  it("beyond loopback it needs a token (SQL0060); with one, requests without it get 401", async () => {
    const child = spawnNode({ script: "packages/cli/dist/bin.js", args: ["dashboard", "--host", "0.0.0.0", "--port", "0"], env: { DATABASE_URL: url(), SQLSTREAMS_DASHBOARD_TOKEN: undefined } });
    const exit = await child.waitForExit(60_000);
    expect(exit.code).toBe(1);
    expect(child.stderr()).toMatch(/error SQL0060/);
    const secret = "s3cret-token-of-at-least-32-characters";
    const tok = await startDashboard([], { SQLSTREAMS_DASHBOARD_TOKEN: secret });
    try {
      expect(tok.open).toBe(tok.url);
      expect((await fetch(tok.url)).status).toBe(401);
      const ok = await fetch(tok.url, { headers: { authorization: `Basic ${Buffer.from(`ops:${secret}`).toString("base64")}` } });
      expect(ok.status).toBe(200);
    } finally {
      await tok.child.kill("SIGTERM");
    }
  });
});
