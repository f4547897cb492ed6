// `sqlstreams dev --groups` and `doctor --groups` on an app outside this repository, as a team
// would run them: a TypeScript declaration and TypeScript handlers (and the same app in plain
// JavaScript), loaded directly with no build step and no .build folder, handlers resolved from the
// app's root (the working directory). The messages come from the test; dev itself must produce
// none (every stream's message_log is counted before and after). The loading failures are SQL0070
// with the fix, never a raw ERR_UNKNOWN_FILE_EXTENSION.
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { SqlStreams } from "@sqlstreams/core";
import { useFreshDatabase } from "../support/db.js";
import { type NodeChild, repoRoot, spawnNode } from "../support/processes.js";

const url = useFreshDatabase();
const apps = mkdtempSync(join(tmpdir(), "sqlstreams-dev-app-"));
afterAll(() => rmSync(apps, { recursive: true, force: true }));

/** An app directory outside the repository with @sqlstreams/* installed (linked to the workspaces). */
function app(name: string, files: Record<string, string>): string {
  const dir = join(apps, name);
  mkdirSync(join(dir, "node_modules", "@sqlstreams"), { recursive: true });
  for (const p of ["core", "aws"]) symlinkSync(join(repoRoot, "packages", p), join(dir, "node_modules", "@sqlstreams", p), "dir");
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name, private: true, type: "module" }));
  for (const [file, source] of Object.entries(files)) {
    mkdirSync(join(dir, file, ".."), { recursive: true });
    writeFileSync(join(dir, file), source);
  }
  return dir;
}

function cli(dir: string, args: string[]): NodeChild {
  return spawnNode({
    script: join(repoRoot, "packages/cli/dist/bin.js"),
    args,
    cwd: dir,
    env: { DATABASE_URL: url(), SQLSTREAMS_SCHEMA: undefined, FRAUD_REVIEW_URL: undefined, LEDGER_URL: undefined, CI: "true" },
  });
}

async function run(dir: string, args: string[]): Promise<{ code: number | null; out: string; err: string; child: NodeChild }> {
  const child = cli(dir, args);
  const exit = await child.waitForExit(90_000);
  return { code: exit.code, out: child.lines.join("\n"), err: child.stderr(), child };
}

/** Rows in the message_log of every stream of the database. */
async function messageCounts(): Promise<Record<string, number>> {
  const c = new pg.Client({ connectionString: url() });
  await c.connect();
  try {
    const present = await c.query<{ ok: boolean }>("SELECT to_regclass('sqlstreams.stream_config') IS NOT NULL AS ok");
    if (!present.rows[0].ok) return {};
    const streams = await c.query<{ id: string; name: string }>("SELECT id::text, name FROM sqlstreams.stream_config ORDER BY id");
    const out: Record<string, number> = {};
    for (const s of streams.rows) {
      const r = await c.query<{ n: number }>(`SELECT count(*)::int AS n FROM sqlstreams.message_log_${Number(s.id)}`);
      out[s.name] = r.rows[0].n;
    }
    return out;
  } finally {
    await c.end();
  }
}

const TS_APP = {
  "src/streams/groups.ts": `import type { GroupDeclaration, StreamDeclarations } from "@sqlstreams/aws";
export const groups = [
  { stream: "app.orders", group: "billing", function: "src/handlers/billing.handler", schedule: "rate(1 minute)",
    config: { message: { timeout: 5_000, retry: { maxRetries: 3, baseDelay: 100 } } } },
  { stream: "app.refunds", group: "ledger", function: "src/handlers/ledger.handler", schedule: "cron(0 3 * * ? *)", mode: "drain" },
] satisfies GroupDeclaration[];
export const streams: StreamDeclarations = { "app.orders": {}, "app.refunds": {} };
`,
  "src/handlers/billing.ts": `import { createPollHandler } from "@sqlstreams/aws";
import { groups } from "../streams/groups.js";
import { cents } from "../lib/money.ts";
interface Order { orderId: string; amount: number }
export const handler = createPollHandler({
  stream: "app.orders", group: "billing", groups,
  handle(m) { const o = m.payload as Order; console.log("billed", o.orderId, cents(o.amount)); },
});
`,
  "src/lib/money.ts": `export const cents = (n: number): string => (n / 100).toFixed(2);\n`,
  "src/handlers/ledger.ts": `import { createPollHandler } from "@sqlstreams/aws";
import { groups } from "../streams/groups.js";
export const handler = createPollHandler({ stream: "app.refunds", group: "ledger", groups, handle() {} });
`,
};

const JS_APP = {
  "streams/groups.js": `export const groups = [
  { stream: "app.js-events", group: "audit", function: "handlers/audit.poll", schedule: "rate(5 minutes)" },
];
`,
  "handlers/audit.js": `import { createPollHandler } from "@sqlstreams/aws";
import { groups } from "../streams/groups.js";
export const poll = createPollHandler({ stream: "app.js-events", group: "audit", groups, handle() {} });
`,
};

describe("sqlstreams dev and doctor on an app's own declaration", () => {
  it("a TypeScript app: dev --once drains what the app produced and produces nothing itself; doctor --groups passes", async () => {
    const dir = app("ts-app", TS_APP);
    // Registers the streams and groups; nothing to drain yet, nothing produced.
    const first = await run(dir, ["dev", "--groups", "src/streams/groups.ts", "--once", "--tick", "300", "--json", "--no-dashboard", "--timeout", "60"]);
    expect(first.code, first.err + first.out).toBe(0);
    expect(first.child.messages.find((m) => m.event === "dev.migrated")).toMatchObject({ declaration: "src/streams/groups.ts", streams: ["app.orders", "app.refunds"] });
    expect(await messageCounts()).toEqual({ "app.orders": 0, "app.refunds": 0 });

    const producer = new SqlStreams({ connectionString: url(), logger: () => {} });
    try {
      for (let i = 0; i < 25; i++) await producer.stream("app.orders").produce({ orderId: `o-${i}`, amount: 1_000 + i });
      await producer.stream("app.refunds").produce({ refund: 1 });
      const before = await messageCounts();
      expect(before).toEqual({ "app.orders": 25, "app.refunds": 1 });

      const second = await run(dir, ["dev", "--groups", "src/streams/groups.ts", "--once", "--tick", "300", "--json", "--no-dashboard", "--timeout", "60"]);
      expect(second.code, second.err + second.out).toBe(0);
      const summary = second.child.messages.find((m) => m.event === "dev.summary") as { converged: boolean; groups: Record<string, unknown>[] };
      expect(summary.converged).toBe(true);
      expect(summary.groups).toEqual([
        expect.objectContaining({ stream: "app.orders", group: "billing", produced: 0, handled: "25", lag: "0", dead: 0, errors: 0 }),
        expect.objectContaining({ stream: "app.refunds", group: "ledger", produced: 0, handled: "1", lag: "0", dead: 0, errors: 0 }),
      ]);
      // dev wrote nothing into any stream: the counts are the app's own.
      expect(await messageCounts()).toEqual(before);
      for (const [stream, group, head] of [["app.orders", "billing", "25"], ["app.refunds", "ledger", "1"]]) {
        expect(await producer.stream(stream).consumer(group).progress()).toMatchObject({ head, committed: head, lag: "0" });
      }
    } finally {
      await producer.close();
    }
    expect(existsSync(join(dir, ".build"))).toBe(false);

    const doctor = await run(dir, ["doctor", "--groups", "src/streams/groups.ts", "--json"]);
    expect(doctor.code, doctor.err + doctor.out).toBe(0);
    const findings = (JSON.parse(doctor.out) as { findings: { check: string; severity: string; message: string }[] }).findings;
    expect(findings).toContainEqual(expect.objectContaining({ check: "declaration", severity: "ok", message: expect.stringContaining("the 2 declared group(s) of src/streams/groups.ts") }));
  }, 240_000);

  it("a JavaScript app: dev --once and doctor --groups on a .js declaration", async () => {
    const dir = app("js-app", JS_APP);
    const producer = new SqlStreams({ connectionString: url(), logger: () => {} });
    try {
      const setup = await run(dir, ["dev", "--groups", "streams/groups.js", "--once", "--tick", "300", "--json", "--no-dashboard", "--timeout", "60"]);
      expect(setup.code, setup.err + setup.out).toBe(0);
      await producer.stream("app.js-events").produceBatch([{ payload: { a: 1 } }, { payload: { a: 2 } }, { payload: { a: 3 } }]);
      const before = await messageCounts();
      const r = await run(dir, ["dev", "--groups", "streams/groups.js", "--once", "--tick", "300", "--json", "--no-dashboard", "--timeout", "60"]);
      expect(r.code, r.err + r.out).toBe(0);
      expect(r.child.messages.find((m) => m.event === "dev.summary")).toMatchObject({
        converged: true, groups: [expect.objectContaining({ stream: "app.js-events", group: "audit", produced: 0, handled: "3", lag: "0" })],
      });
      expect(await messageCounts()).toEqual(before);
    } finally {
      await producer.close();
    }
    const doctor = await run(dir, ["doctor", "--groups", "streams/groups.js", "--json"]);
    expect(doctor.code, doctor.err + doctor.out).toBe(0);
    expect(existsSync(join(dir, ".build"))).toBe(false);
  }, 240_000);

  it("a declaration or handler that cannot be loaded: SQL0070 with the fix, before anything is written", async () => {
    const dir = app("broken", {
      ...TS_APP,
      "groups.json": "{}",
      "src/not-groups.ts": "export const handler = 1;\n",
      "src/syntax.ts": "export const groups = [ {\n",
      "src/missing-handler.ts": `export const groups = [{ stream: "app.missing", group: "g", function: "src/handlers/nowhere.handler", schedule: "rate(1 minute)" }];\n`,
      "src/wrong-export.ts": `export const groups = [{ stream: "app.wrong", group: "g", function: "src/handlers/billing.poll", schedule: "rate(1 minute)" }];\n`,
    });
    const before = await messageCounts();
    const cases: [string[], RegExp][] = [
      [["--groups", "groups.json"], /"\.json" is not a module extension/],
      [["--groups", "src/absent.ts"], /--groups src\/absent\.ts: no such file/],
      [[], /no group declaration: none of functions\/groups\.ts/],
      [["--groups", "src/not-groups.ts"], /src\/not-groups\.ts has no `groups` export .*it exports handler/],
      [["--groups", "src/syntax.ts"], /src\/syntax\.ts failed to load: .*syntax\.ts:2/],
      [["--groups", "src/missing-handler.ts"], /app\.missing\/g: function "src\/handlers\/nowhere\.handler" names src\/handlers\/nowhere\.\{ts,/],
      [["--groups", "src/wrong-export.ts"], /src\/handlers\/billing\.ts has no exported function "poll"/],
    ];
    for (const [args, message] of cases) {
      const r = await run(dir, ["dev", ...args, "--once", "--json", "--no-dashboard"]);
      expect(r.code, args.join(" ")).toBe(1);
      expect(r.err, args.join(" ")).not.toMatch(/ERR_UNKNOWN_FILE_EXTENSION|ERR_MODULE_NOT_FOUND|at .*\(node:/);
      const e = (JSON.parse(r.out) as { error: { code: string; message: string; fix: string } }).error;
      expect(e.code, args.join(" ")).toBe("SQL0070");
      expect(e.message, args.join(" ")).toMatch(message);
      expect(e.fix).toContain("--groups");
    }
    // doctor loads the same way; a missing handler is an error finding of its declaration check.
    const unknown = await run(dir, ["doctor", "--groups", "groups.json", "--json"]);
    expect(unknown.code).toBe(1);
    expect(JSON.parse(unknown.out)).toMatchObject({ error: { code: "SQL0070" } });
    const missing = await run(dir, ["doctor", "--groups", "src/missing-handler.ts", "--json"]);
    expect(missing.code).toBe(1);
    const findings = (JSON.parse(missing.out) as { findings: { check: string; severity: string; message: string }[] }).findings;
    expect(findings).toContainEqual(expect.objectContaining({ check: "declaration", severity: "error", message: expect.stringContaining("src/handlers/nowhere.{ts,") }));
    expect(await messageCounts()).toEqual(before);
  }, 240_000);

  it("--messages without --demo is refused: the demo is opt-in", async () => {
    const r = await run(apps, ["dev", "--messages", "10"]);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/error SQL0015: --messages sizes the demo workload: pass it with --demo/);
  }, 60_000);
});
