// `sqlstreams doctor` as a child process against a fresh database: it names a deliberately held
// producer transaction (pid, application_name, query), a missing partition, expired leases and
// quarantines, declaration drift both ways, and exits 1 on an error, 0 once everything is fixed.
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { useFreshDatabase } from "../support/db.js";
import { repoRoot, spawnNode } from "../support/processes.js";
import { groupIdOf, streamIdOf, testClient, type TestClient } from "../support/streams.js";

const url = useFreshDatabase();
/** The app doctor runs in: its declaration and the handler files it names. */
const dir = mkdtempSync(join(tmpdir(), "sqlstreams-doctor-"));

interface Finding {
  check: string;
  severity: string;
  message: string;
  fix?: string;
  stream?: string;
  group?: string;
  details?: Record<string, unknown>;
}

async function doctor(args: string[] = []): Promise<{ code: number | null; stdout: string; stderr: string; findings: () => Finding[] }> {
  const child = spawnNode({ script: join(repoRoot, "packages/cli/dist/bin.js"), args: ["doctor", ...args], cwd: dir, env: { DATABASE_URL: url(), SQLSTREAMS_SCHEMA: undefined } });
  const exit = await child.waitForExit(60_000);
  const stdout = child.lines.join("\n");
  return { code: exit.code, stdout, stderr: child.stderr(), findings: () => (JSON.parse(stdout) as { findings: Finding[] }).findings };
}

describe("sqlstreams doctor", () => {
  let t: TestClient;
  let holder: pg.Client | undefined;
  const groupsFile = join(dir, "groups.mjs");

  beforeAll(() => {
    t = testClient(url());
    mkdirSync(join(dir, "functions", "handlers"), { recursive: true });
    for (const h of ["f", "d"]) writeFileSync(join(dir, "functions", "handlers", `${h}.mjs`), "export const handler = async () => ({});\n");
    writeFileSync(
      groupsFile,
      `export const groups = [
        { stream: "orders", group: "fraud", function: "functions/handlers/f.handler", schedule: "rate(1 minute)", parallelism: 2 },
        { stream: "orders", group: "declared-only", function: "functions/handlers/d.handler", schedule: "rate(1 minute)" },
      ];\n`,
    );
  });

  afterAll(async () => {
    await holder?.end().catch(() => {});
  });

  it("before migrate: one error, exit 1", async () => {
    const r = await doctor(["--json"]);
    expect(r.code).toBe(1);
    expect(r.findings()).toEqual([expect.objectContaining({ check: "migrations", severity: "error", fix: expect.stringContaining("sqlstreams migrate") })]);
  });

  it("a healthy deployment: exit 0", async () => {
    await t.client.migrate();
    const s = t.client.stream("orders");
    await s.register({ partitionSize: 10 });
    await s.consumer("fraud").register();
    await s.consumer("declared-only").register();
    await s.produce({ n: 1 });
    await t.client.maintain();
    const r = await doctor(["--groups", groupsFile]);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(/ok\s+migrations\s+no pending migrations/);
    expect(r.stdout).toMatch(/ok\s+partitions\s+stream orders: partitions 0 and 1 exist/);
    expect(r.stdout).toMatch(/ok\s+declaration\s+the 2 declared group\(s\)/);
    expect(r.stdout).toContain("0 error(s), 0 warning(s)");
  });

  it("finds a deliberately opened blocking transaction: pid, age, application_name and query", async () => {
    holder = new pg.Client({ connectionString: url(), application_name: "doctor-test-blocker" });
    await holder.connect();
    const pid = (await holder.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0].pid;
    const n = await streamIdOf(t, "orders");
    await holder.query("BEGIN");
    await holder.query(`INSERT INTO sqlstreams.message_log_${n} (payload) VALUES ('{"held": true}')`);
    try {
    // Young holders are below the threshold; with --hold-threshold 0 every holder is an error.
    const r = await doctor(["--json", "--hold-threshold", "0ms", "--groups", groupsFile]);
    expect(r.code).toBe(1);
    const fence = r.findings().filter((f) => f.check === "fence" && f.severity === "error");
    expect(fence).toHaveLength(1);
    expect(fence[0].details).toMatchObject({ pid, applicationName: "doctor-test-blocker" });
    expect(fence[0].details?.statement).toBe("INSERT");
    expect(fence[0].fix).toContain(`pg_terminate_backend(${pid})`);
    const human = await doctor(["--hold-threshold", "0ms", "--quiet", "--groups", groupsFile]);
    expect(human.stdout).toMatch(new RegExp(`error\\s+fence\\s+stream orders: backend ${pid} \\(doctor-test-blocker\\) has held the stream's fence`));
    } finally {
      await holder.query("ROLLBACK");
    }
    // Once it ends nothing is reported.
    const after = await doctor(["--json", "--hold-threshold", "0ms", "--groups", groupsFile]);
    expect(after.findings().filter((f) => f.check === "fence" && f.severity !== "ok")).toEqual([]);
  });

  it("finds a missing partition (error for the next id's, with the maintain fix) and exits 1; maintain clears it", async () => {
    const n = await streamIdOf(t, "orders");
    // The sequence jumps past every partition that exists: the next id's partition (3) is missing.
    await t.sql(`SELECT setval('sqlstreams.message_log_${n}_id_seq', 35)`);
    const r = await doctor(["--json", "--groups", groupsFile]);
    expect(r.code).toBe(1);
    const p = r.findings().find((f) => f.check === "partitions")!;
    expect(p).toMatchObject({ severity: "error", stream: "orders", details: { nextId: "36", missing: ["3", "4"] } });
    expect(p.fix).toContain("sqlstreams maintain --stream orders");
    const m = await t.client.maintain();
    expect(m.orders.errors).toEqual([]);
    const fixed = await doctor(["--json", "--groups", groupsFile]);
    expect(fixed.findings().find((f) => f.check === "partitions")).toMatchObject({ severity: "ok" });
    expect(fixed.code).toBe(0);
  });

  it("expired leases and recent quarantines are warnings; declaration drift both ways", async () => {
    const n = await streamIdOf(t, "orders");
    const g = await groupIdOf(t, "fraud", "orders");
    await t.sql(`INSERT INTO sqlstreams.claim_lease_${n} (consumer_group_id, token, low, high, expires_at) VALUES ($1, gen_random_uuid(), 100, 110, now() - interval '1 minute')`, [g]);
    await t.sql(
      `INSERT INTO sqlstreams.exception_queue_${n} (consumer_group_id, message_id, status, concurrency, last_error) VALUES ($1, 1, 'ready', 'parallel', 'quarantined: range reclaimed too many times')`,
      [g],
    );
    await t.client.stream("orders").consumer("undeclared").register();
    await t.client.stream("orders").consumer("declared-only").destroy({ force: true });
    const r = await doctor(["--json", "--groups", groupsFile]);
    const f = r.findings();
    expect(f.find((x) => x.check === "leases" && x.group === "fraud")).toMatchObject({ severity: "warning", details: { expiredRanges: 1 } });
    expect(f.find((x) => x.check === "quarantines" && x.group === "fraud")).toMatchObject({ severity: "warning", details: { quarantined: 1, ids: ["1"] } });
    expect(f.find((x) => x.check === "declaration" && x.group === "declared-only")).toMatchObject({ severity: "error" });
    expect(f.find((x) => x.check === "declaration" && x.group === "undeclared")).toMatchObject({ severity: "warning", fix: expect.stringContaining("sqlstreams destroy --stream orders --group undeclared") });
    const conn = f.find((x) => x.check === "connections")!;
    // 2 + 1 declared pollers, plus maintain and migrate, one connection each.
    expect(conn.details).toMatchObject({ pollers: 3, poolSize: 1, needed: 5 });
    expect(r.code).toBe(1);
    const huge = await doctor(["--json", "--groups", groupsFile, "--pool-size", "1000"]);
    expect(huge.findings().find((x) => x.check === "connections")).toMatchObject({ severity: "error" });
  });
});
