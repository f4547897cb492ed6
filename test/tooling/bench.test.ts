// Keeps `npm run bench` from rotting: runs the harness in --quick mode on a tiny N for its arms
// (floors, ours, PgQ when the server has it, the scale-in-streams arm, latency), against the test
// server, and checks correctness only. Speed is never asserted in a test (ARCHITECTURE.md): the
// figures come from `npm run bench`.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { baseDatabaseUrl } from "../support/db.js";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

interface ArmLine {
  type: "arm";
  arm: string;
  shape?: "lean" | "order";
  server?: string;
  ok: boolean;
  reps: number;
  n: number;
  metrics: Record<string, { median: number | null; min: number | null; max: number | null; unit: string }>;
  check: { expected: number; handled: number; missing: number; duplicates: number; ok: boolean; db?: Record<string, unknown> & { ok: boolean } };
  where?: { roundTrips?: number; roundTripsPerMsg?: number; rowsWrittenPerMsg?: number; ranges?: number };
  failures: unknown[];
}

function lines(stdout: string): { type: string }[] {
  return stdout
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as { type: string });
}
const armLines = (stdout: string) => lines(stdout).filter((l): l is ArmLine => l.type === "arm");

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
    // Every produce/consume arm runs once per payload shape.
    expect(arms.map((a) => [a.arm, a.shape]), stderr).toEqual([["floor-read", "lean"], ["floor-read", "order"], ["consume", "lean"], ["consume", "order"]]);
    for (const a of arms) {
      expect(a.failures, `${a.arm}: ${JSON.stringify(a.failures)}`).toEqual([]);
      expect(a.ok).toBe(true);
      expect(a.reps).toBe(1);
      expect(a.check).toMatchObject({ expected: 300, missing: 0, duplicates: 0, ok: true });
      expect(a.check.handled).toBeGreaterThanOrEqual(300);
      expect(a.metrics.consume.median).toBeGreaterThan(0);
    }
    // Our arm is checked in the database too: the cursor at the head, no lease, no exception row.
    for (const a of arms.filter((x) => x.arm === "consume")) {
      expect(a.check.db).toMatchObject({ ok: true, g1: { lag: "0", openLeases: 0, leaseRows: 0, exceptions: { inflight: 0, ready: 0, dead: 0 } } });
    }
    // Our arm reports round trips and rows written per message (values are the bench's business).
    const ours = arms.find((a) => a.arm === "consume");
    expect(typeof ours?.where?.roundTripsPerMsg).toBe("number");
    expect(typeof ours?.where?.rowsWrittenPerMsg).toBe("number");
    const ratios = lines.find((l) => l.type === "ratios") as { ratios: { name: string; value: number | null }[] } | undefined;
    for (const shape of ["lean", "order"]) expect(ratios?.ratios.find((r) => r.name === `[${shape}] consume / floor-read`)?.value).toBeGreaterThan(0);
    expect(code, stderr).toBe(0);
  }, 180_000);

  it("runs the insert floor (JSON-array insert) and the COPY floor, and our produce arm, on the lean payload", async () => {
    const { code, stdout, stderr } = await runBench(["--quick", "--json", "--servers", "url", "--payloads", "lean", "--arms", "floor-insert,floor-copy,produce", "--n", "300"]);
    const arms = armLines(stdout);
    expect(arms.map((a) => [a.arm, a.shape]), stderr).toEqual([["floor-insert", "lean"], ["floor-copy", "lean"], ["produce", "lean"]]);
    for (const a of arms) {
      expect(a.failures, `${a.arm}: ${JSON.stringify(a.failures)}`).toEqual([]);
      expect(a.check).toMatchObject({ expected: 300, missing: 0, duplicates: 0, ok: true });
    }
    expect(code, stderr).toBe(0);
  }, 180_000);

  it("runs the PgQ arm where the server has the extension, else says it skipped it", async (ctx) => {
    const c = new pg.Client({ connectionString: baseDatabaseUrl() });
    await c.connect();
    const available = (await c.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_available_extensions WHERE name = 'pgq'")).rows[0].n > 0;
    await c.end();
    const { code, stdout, stderr } = await runBench(["--quick", "--json", "--servers", "url", "--payloads", "lean", "--arms", "pgq", "--n", "300"]);
    if (!available) {
      expect(lines(stdout).filter((l) => l.type === "skipped"), stderr).toMatchObject([{ arm: "pgq", server: "url" }]);
      expect(code, stderr).toBe(0);
      ctx.skip();
      return;
    }
    const arms = armLines(stdout) as (ArmLine & { where: { sweep: { ok: boolean; consume: number | null }[] }; settings: { tickMs?: number } })[];
    expect(arms.map((a) => a.arm), stderr).toEqual(["pgq"]);
    expect(arms[0].failures, JSON.stringify(arms[0].failures)).toEqual([]);
    expect(arms[0].check).toMatchObject({ expected: 300, missing: 0, duplicates: 0, ok: true, db: { ok: true, leftoverEvents: 0, openBatch: null } });
    // Both points of the quick sweep (the two fetch styles) ran correctly.
    expect(arms[0].where.sweep.map((p) => p.ok)).toEqual([true, true]);
    expect(arms[0].metrics.consume.median).toBeGreaterThan(0);
    expect(arms[0].metrics.produce.median).toBeGreaterThan(0);
    expect(code, stderr).toBe(0);
  }, 180_000);

  it("runs the scale-in-streams arm in quick mode: per-stream costs, one statement per idle poll, the busy stream drained", async () => {
    const { code, stdout, stderr } = await runBench(["--quick", "--json", "--servers", "url", "--arms", "streams", "--n", "200"]);
    const arms = armLines(stdout) as (ArmLine & { check: { sizes: { streams: number; ok: boolean; idleOk: boolean }[] } })[];
    expect(arms.map((a) => a.arm), stderr).toEqual(["streams"]);
    expect(arms[0].failures, JSON.stringify(arms[0].failures)).toEqual([]);
    expect(arms[0].check.sizes.map((s) => [s.streams, s.ok, s.idleOk])).toEqual([[2, true, true], [6, true, true]]);
    expect(arms[0].metrics.stmtPerPoll.median).toBe(1);
    for (const m of ["s2_registerMsPerStream", "s6_maintainMsPerStream", "s6_relations", "perStreamSpread"]) expect(arms[0].metrics[m].median, m).toBeGreaterThan(0);
    expect(code, stderr).toBe(0);
  }, 180_000);

  it("runs the latency arm in quick mode: woken on produce, continuous, and graphile-worker's LISTEN worker", async () => {
    const { code, stdout, stderr } = await runBench(["--quick", "--json", "--servers", "url", "--arms", "latency"]);
    const arms = armLines(stdout);
    expect(arms.map((a) => a.arm), stderr).toEqual(["latency"]);
    expect(arms[0].failures, JSON.stringify(arms[0].failures)).toEqual([]);
    expect(arms[0].check).toMatchObject({ ok: true, missing: 0, duplicates: 0 });
    for (const mode of ["wake", "continuous", "graphile"]) {
      expect(arms[0].metrics[`${mode}_p50`].median, mode).toBeGreaterThan(0);
      expect(arms[0].metrics[`${mode}_p99`].median, mode).toBeGreaterThanOrEqual(arms[0].metrics[`${mode}_p50`].median ?? 0);
    }
    expect(code, stderr).toBe(0);
  }, 240_000);

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
