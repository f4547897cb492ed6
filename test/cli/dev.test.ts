// `sqlstreams dev`: the local stand-in for EventBridge. Runs this repository's own declaration
// (functions/groups.ts and its TypeScript handlers, no bundles) with --demo and a fixture app of
// its own against the test database, Ctrl-C, the error paths, and once the embedded-Postgres path
// (stopped afterwards). test/cli/dev-app.test.ts runs an app outside the repository.
import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { SqlStreams } from "@sqlstreams/core";
import { useFreshDatabase } from "../support/db.js";
import { type ChildMessage, repoRoot, spawnNode } from "../support/processes.js";

const url = useFreshDatabase();
const scratch = mkdtempSync(join(tmpdir(), "sqlstreams-cli-dev-"));
// As root, the embedded Postgres runs as `postgres`: its data directory's parents must be traversable.
chmodSync(scratch, 0o755);
const fixtures = join(repoRoot, "node_modules", ".cache", "sqlstreams-test", `cli-fixture-${randomBytes(4).toString("hex")}`);

afterAll(() => {
  // Whatever happened, no embedded Postgres of this file survives it.
  const pidFile = join(scratch, "pg", "dev-pg", "postmaster.pid");
  if (existsSync(pidFile)) {
    const pid = Number(readFileSync(pidFile, "utf8").split("\n")[0]);
    try {
      if (pid > 0) process.kill(pid, "SIGQUIT");
    } catch {
      // already gone
    }
  }
  rmSync(scratch, { recursive: true, force: true });
  rmSync(fixtures, { recursive: true, force: true });
});

function dev(args: string[], env: Record<string, string | undefined> = {}, cwd?: string) {
  return spawnNode({
    script: join(repoRoot, "packages/cli/dist/bin.js"),
    cwd,
    args: ["dev", "--json", "--log-file", join(scratch, `dev-${randomBytes(3).toString("hex")}.log`), ...args],
    env: { DATABASE_URL: url(), SQLSTREAMS_SCHEMA: undefined, FRAUD_REVIEW_URL: undefined, LEDGER_URL: undefined, CI: "true", ...env },
  });
}

function summaryOf(messages: ChildMessage[]): Record<string, unknown> & { groups: Record<string, unknown>[] } {
  const s = messages.find((m) => m.event === "dev.summary");
  if (!s) throw new Error("no dev.summary line");
  return s as Record<string, unknown> & { groups: Record<string, unknown>[] };
}

/** An app of our own: functions/groups.mjs and functions/handlers/<name>.mjs, run with cwd = the app. */
function fixture(name: string, groups: string, handlers: Record<string, string>): string {
  const dir = join(fixtures, name);
  mkdirSync(join(dir, "functions", "handlers"), { recursive: true });
  writeFileSync(join(dir, "functions", "groups.mjs"), groups);
  for (const [file, source] of Object.entries(handlers)) writeFileSync(join(dir, "functions", "handlers", `${file}.mjs`), source);
  return dir;
}

const FIXTURE_HANDLER = `
import { createPollHandler } from "@sqlstreams/aws";
import { Permanent } from "@sqlstreams/core";
import { groups } from "../groups.mjs";
export const poll = createPollHandler({
  stream: "fx.events", group: "fx-cron", groups,
  handle(m) {
    const d = m.payload && m.payload.demo;
    if (d && d.permanent) throw Permanent(new Error("fixture: permanent"));
    if (d && d.failOnce && m.attempt === 0) throw new Error("fixture: fails once");
  },
});
`;

describe("sqlstreams dev", () => {
  it("--once --demo drives functions/groups.ts (the default declaration) on compressed schedules until every group is caught up, then exits 0", async () => {
    const child = dev(["--once", "--demo", "--tick", "500", "--messages", "120", "--timeout", "100"]);
    const exit = await child.waitForExit(110_000);
    expect(exit.code, child.stderr()).toBe(0);
    const s = summaryOf(child.messages);
    expect(s).toMatchObject({ converged: true, exitCode: 0 });
    const byName = Object.fromEntries(s.groups.map((g) => [`${g.stream}/${g.group}`, g]));
    expect(Object.keys(byName).sort()).toEqual(["ledger.adjustments/apply-balance", "orders.placed/fraud-scoring"]);
    for (const g of s.groups) {
      expect(g).toMatchObject({ produced: 120, lag: "0", ready: 0, deferred: 0, inflight: 0, errors: 0 });
      // The demo's invalid payloads (every 37th) end dead: visible, and not a failure of the run.
      expect(g.dead).toBe(3);
    }
    // The fail-once orders were retried by the handler's exception path.
    expect(byName["orders.placed/fraud-scoring"].failed).toBeGreaterThanOrEqual(4);
    expect(child.messages.find((m) => m.event === "dev.migrated")).toMatchObject({
      declaration: "functions/groups.ts",
      streams: ["orders.placed", "ledger.adjustments"],
    });
    // The database agrees, read independently.
    const client = new SqlStreams({ connectionString: url(), logger: () => {} });
    try {
      for (const [stream, group] of [["orders.placed", "fraud-scoring"], ["ledger.adjustments", "apply-balance"]]) {
        const p = await client.stream(stream).consumer(group).progress();
        expect(p).toMatchObject({ head: "120", committed: "120", lag: "0" });
        expect(p.exceptions).toMatchObject({ ready: 0, deferred: 0, inflight: 0, dead: 3 });
      }
    } finally {
      await client.close();
    }
  }, 120_000);

  it("follows cron schedules on a sped-up clock (--speed), with an app of its own (a .mjs declaration)", async () => {
    const dir = fixture(
      "cron",
      `export const groups = [{
        stream: "fx.events", group: "fx-cron", function: "functions/handlers/fx.poll",
        schedule: "cron(0/1 * * * ? *)", timeout: 10000,
        config: { exceptionInitialBackoff: 100, message: { timeout: 3000, retry: { maxRetries: 3, baseDelay: 100 } } },
      }];
      export const streams = { "fx.events": {} };`,
      { fx: FIXTURE_HANDLER },
    );
    const child = dev(["--once", "--speed", "60", "--demo", "--messages", "60", "--groups", "functions/groups.mjs", "--timeout", "60"], {}, dir);
    const exit = await child.waitForExit(70_000);
    expect(exit.code, child.stderr()).toBe(0);
    const s = summaryOf(child.messages);
    expect(s.converged).toBe(true);
    expect(s.groups).toHaveLength(1);
    // every 37th demo message is Permanent; every 29th fails once and is retried
    expect(s.groups[0]).toMatchObject({ stream: "fx.events", group: "fx-cron", produced: 60, lag: "0", dead: 1, ready: 0, deferred: 0, inflight: 0 });
    expect(s.groups[0].invocations as number).toBeGreaterThanOrEqual(1);
  }, 80_000);

  it("Ctrl-C stops scheduling, lets running invocations finish and exits 0", async () => {
    const child = dev(["--tick", "300", "--demo", "--messages", "40"]);
    await child.waitFor((m) => m.event === "dev.progress", { timeoutMs: 60_000 });
    // dev serves the operator dashboard on loopback and prints its URL.
    const dashboard = child.messages.find((m) => m.event === "dev.dashboard");
    expect(String(dashboard?.url)).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/\?token=[A-Za-z0-9_-]{43}$/);
    const printed = new URL(String(dashboard?.url));
    const page = await fetch(`${printed.origin}/`, { headers: { authorization: `Bearer ${printed.searchParams.get("token")}` } });
    expect(page.status).toBe(200);
    expect(await page.text()).toContain("Streams and consumer groups");
    const exit = await (async () => {
      child.process.kill("SIGINT");
      return child.waitForExit(60_000);
    })();
    expect(exit.code, child.stderr()).toBe(0);
    expect(summaryOf(child.messages)).toMatchObject({ exitCode: 0, reason: "stopped (Ctrl-C)" });
  }, 90_000);

  it("error paths: no declaration, an unreadable schedule, conflicting flags — a code, a fix, exit 1", async () => {
    const noDeclaration = dev(["--once"], {}, scratch);
    expect((await noDeclaration.waitForExit(30_000)).code).toBe(1);
    const e1 = JSON.parse(noDeclaration.lines.join("\n")) as { error: { code: string; message: string; fix: string } };
    expect(e1.error).toMatchObject({ code: "SQL0070", message: expect.stringContaining("functions/groups.ts") });
    expect(e1.error.fix).toContain("--groups");
    expect(e1.error.fix).not.toContain("npm run build");

    const dir = fixture(
      "bad-schedule",
      `export const groups = [{ stream: "fx.events", group: "fx-cron", function: "functions/handlers/fx.poll", schedule: "rate(2 fortnights)", timeout: 10000,
        config: { message: { timeout: 3000 } } }];`,
      { fx: FIXTURE_HANDLER },
    );
    const badSchedule = dev(["--once"], {}, dir);
    expect((await badSchedule.waitForExit(30_000)).code).toBe(1);
    expect(JSON.parse(badSchedule.lines.join("\n"))).toMatchObject({ error: { code: "SQL0015" } });
    expect(badSchedule.lines.join("\n")).toContain("fortnights");

    const flags = spawnNode({ script: "packages/cli/dist/bin.js", args: ["dev", "--tick", "500", "--speed", "10"], env: { DATABASE_URL: url() } });
    expect((await flags.waitForExit(30_000)).code).toBe(1);
    expect(flags.stderr()).toMatch(/error SQL0015: pass --tick or --speed, not both/);
  }, 60_000);

  it("without DATABASE_URL: an embedded Postgres in --data-dir, initialised once, reused, always stopped", async () => {
    const dataDir = join(scratch, "pg", "dev-pg");
    const env = { DATABASE_URL: undefined };
    const first = dev(["--once", "--tick", "500", "--demo", "--messages", "20", "--data-dir", dataDir], env);
    const e1 = await first.waitForExit(110_000);
    expect(e1.code, first.stderr() + first.lines.join("\n")).toBe(0);
    expect(first.messages.find((m) => m.event === "dev.database")).toMatchObject({ embedded: true, reused: false });
    expect(summaryOf(first.messages).converged).toBe(true);
    expect(existsSync(join(dataDir, "PG_VERSION"))).toBe(true);
    expect(existsSync(join(dataDir, "postmaster.pid"))).toBe(false); // the server was stopped
    expect(statSync(join(scratch, "pg", "dev-pg.json")).mode & 0o777).toBe(0o600);
    // The password is never printed: the URL shown is masked.
    expect(String(first.messages.find((m) => m.event === "dev.database")?.url)).toMatch(/^postgres:\/\/postgres:\*\*\*@127\.0\.0\.1:\d+\/postgres$/);

    const second = dev(["--once", "--tick", "500", "--demo", "--messages", "10", "--data-dir", dataDir], env);
    const e2 = await second.waitForExit(110_000);
    expect(e2.code, second.stderr() + second.lines.join("\n")).toBe(0);
    expect(second.messages.find((m) => m.event === "dev.database")).toMatchObject({ embedded: true, reused: true });
    const groups = summaryOf(second.messages).groups;
    // the data survived: the heads count both runs' messages
    for (const g of groups) expect(g).toMatchObject({ produced: 10, head: "30", lag: "0" });
    expect(existsSync(join(dataDir, "postmaster.pid"))).toBe(false);
  }, 240_000);
});
