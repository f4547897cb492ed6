// Other sessions' SQL never reaches a log: a producer transaction held open whose last statement
// carries a secret literal holds the fence; the poll's SQL0043 warning and `sqlstreams doctor`
// (a child process, JSON and text) name the backend by pid, application_name, age and the first
// word of its statement, never the text.
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { useFreshDatabase } from "../../support/db.js";
import { repoRoot, spawnNode } from "../../support/processes.js";
import { testClient, type TestClient } from "../../support/streams.js";

const url = useFreshDatabase();
const SECRET = "hunter2";

async function doctor(args: string[]): Promise<{ code: number | null; out: string }> {
  const child = spawnNode({ script: `${repoRoot}/packages/cli/dist/bin.js`, args: ["doctor", ...args], env: { DATABASE_URL: url(), SQLSTREAMS_SCHEMA: undefined } });
  const exit = await child.waitForExit(60_000);
  return { code: exit.code, out: child.lines.join("\n") + child.stderr() };
}

describe("fence holders are named without their SQL", () => {
  let t: TestClient;
  let holder: pg.Client;
  let pid: number;

  beforeAll(async () => {
    t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream("accounts");
    await s.register();
    await s.consumer("mailer").register();
    holder = new pg.Client({ connectionString: url(), application_name: "secret-holder" });
    await holder.connect();
    pid = (await holder.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0].pid;
    await holder.query("BEGIN");
    await s.produceInTx(holder as unknown as pg.PoolClient, { n: 1 });
    // The session's last statement, as pg_stat_activity shows it while the transaction idles.
    await holder.query(`SELECT 'ALTER ROLE app PASSWORD ''${SECRET}''' AS x`);
    await s.produce({ n: 2 });
    // Older than the 2 s after which the poll names a holder.
    await new Promise((r) => setTimeout(r, 2_300));
  });

  afterAll(async () => {
    await holder.query("ROLLBACK").catch(() => {});
    await holder.end().catch(() => {});
  });

  it("the SQL0043 warning names pid, application_name and SELECT, not the text", async () => {
    const r = await t.client.stream("accounts").consumer("mailer").poll(() => {});
    expect(r.succeeded).toBe(0);
    const warn = t.events.filter((e) => e.code === "SQL0043" && e.level === "warn");
    expect(warn.length).toBeGreaterThan(0);
    expect(warn[0]).toMatchObject({ pid, applicationName: "secret-holder", lastStatement: "SELECT" });
    expect(JSON.stringify(t.events)).not.toContain(SECRET);
  });

  it("doctor names the holder and never prints its SQL", async () => {
    const json = await doctor(["--json", "--hold-threshold", "0ms"]);
    expect(json.code).toBe(1);
    expect(json.out).toContain(`"pid": ${pid}`);
    expect(json.out).toContain('"statement": "SELECT"');
    expect(json.out).not.toContain(SECRET);
    const text = await doctor(["--hold-threshold", "0ms"]);
    expect(text.out).toContain(`backend ${pid} (secret-holder)`);
    expect(text.out).toContain("last statement: SELECT");
    expect(text.out).not.toContain(SECRET);
  });
});
