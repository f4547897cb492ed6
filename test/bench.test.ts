// Keeps `npm run bench` from rotting: runs the harness in --quick mode on a tiny N for one floor
// arm and one of our arms, against the test server, and checks correctness only. Speed is never
// asserted in a test (ARCHITECTURE.md): the figures come from `npm run bench`.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { baseDatabaseUrl } from "./support/db.js";

const ROOT = fileURLToPath(new URL("..", import.meta.url));

interface ArmLine {
  type: "arm";
  arm: string;
  ok: boolean;
  reps: number;
  n: number;
  metrics: Record<string, { median: number | null; min: number | null; max: number | null; unit: string }>;
  check: { expected: number; handled: number; missing: number; duplicates: number; ok: boolean };
  where?: { roundTrips?: number; roundTripsPerMsg?: number; rowsWrittenPerMsg?: number; ranges?: number };
  failures: unknown[];
}

function runBench(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["bench/run.mjs", ...args], {
      cwd: ROOT,
      env: { ...process.env, DATABASE_URL: baseDatabaseUrl() },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

describe("npm run bench (--quick)", () => {
  it("runs a floor arm and our consume arm, every message handled, one JSON line per arm", async () => {
    const { code, stdout, stderr } = await runBench(["--quick", "--json", "--servers", "url", "--arms", "floor-read,consume", "--n", "300"]);
    const lines = stdout
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l) as { type: string });
    const arms = lines.filter((l): l is ArmLine => l.type === "arm");
    expect(arms.map((a) => a.arm), stderr).toEqual(["floor-read", "consume"]);
    for (const a of arms) {
      expect(a.failures, `${a.arm}: ${JSON.stringify(a.failures)}`).toEqual([]);
      expect(a.ok).toBe(true);
      expect(a.reps).toBe(1);
      expect(a.check).toMatchObject({ expected: 300, missing: 0, ok: true });
      expect(a.check.handled).toBeGreaterThanOrEqual(300);
      expect(a.metrics.consume.median).toBeGreaterThan(0);
    }
    // Our arm reports round trips and rows written per message (values are the bench's business).
    const ours = arms.find((a) => a.arm === "consume");
    expect(typeof ours?.where?.roundTripsPerMsg).toBe("number");
    expect(typeof ours?.where?.rowsWrittenPerMsg).toBe("number");
    expect(lines.some((l) => l.type === "ratios")).toBe(true);
    expect(code, stderr).toBe(0);
  }, 120_000);

  it("runs the cost-curve arms in quick mode: a backlog arm and the idle fleet (one statement per idle poll)", async () => {
    const { code, stdout, stderr } = await runBench(["--quick", "--json", "--servers", "url", "--arms", "consume-10k,idle"]);
    const arms = stdout
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l) as { type: string; server?: string })
      .filter((l): l is ArmLine & { server: string } => l.type === "arm");
    expect(arms.map((a) => [a.arm, a.server]), stderr).toEqual([["consume-10k", "url"], ["idle", "url"]]);
    for (const a of arms) expect(a.failures, `${a.arm}: ${JSON.stringify(a.failures)}`).toEqual([]);
    expect(arms[0].check).toMatchObject({ expected: 100, windows: 2, missing: 0, duplicates: 0, ok: true });
    expect(arms[1].check).toMatchObject({ expected: 60, missing: 0, ok: true });
    expect(arms[1].metrics.stmtPerPoll.median).toBe(1);
    expect(code, stderr).toBe(0);
  }, 180_000);

  it("runs the produce-tx arm: produceInTx through every adapter and the SQL function, all committed", async () => {
    const { code, stdout, stderr } = await runBench(["--quick", "--json", "--servers", "url", "--arms", "produce-tx", "--n", "40"]);
    const arms = stdout
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l) as { type: string })
      .filter((l): l is ArmLine => l.type === "arm");
    expect(arms.map((a) => a.arm), stderr).toEqual(["produce-tx"]);
    expect(arms[0].failures, JSON.stringify(arms[0].failures)).toEqual([]);
    expect(Object.keys(arms[0].metrics).sort()).toEqual(["drizzle-pg", "drizzle-postgres.js", "kysely", "pg", "postgres.js", "prisma", "sql-function"]);
    expect(arms[0].check).toMatchObject({ ok: true, rows: 7 * 90, expected: 7 * 90 });
    expect(code, stderr).toBe(0);
  }, 180_000);
});
