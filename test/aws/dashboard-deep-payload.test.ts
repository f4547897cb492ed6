// Payloads too deep to render, and a database the dashboard cannot reach. A dead letter whose
// payload nests 999 levels (produced through SQL produce(), which accepts up to 999) and one
// nesting 5,000 (written straight into the log, as an older row could be): the dashboard's group
// and message pages answer 200 and say the payload is not displayable; the real `sqlstreams
// failures` and `inspect` binaries exit 0 and say so (text and JSON). A dashboard whose database
// is missing answers 503 with Retry-After, not 400.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createDashboard } from "@sqlstreams/aws";
import { SqlStreams } from "@sqlstreams/core";
import { useFreshDatabase } from "../support/db.js";
import { repoRoot, spawnNode } from "../support/processes.js";
import { groupIdOf, streamIdOf, testClient, type TestClient } from "../support/streams.js";

const url = useFreshDatabase();

async function cli(args: string[]): Promise<{ code: number | null; out: string; err: string }> {
  const child = spawnNode({ script: `${repoRoot}/packages/cli/dist/bin.js`, args, env: { DATABASE_URL: url(), SQLSTREAMS_SCHEMA: undefined } });
  const exit = await child.waitForExit(60_000);
  return { code: exit.code, out: child.lines.join("\n"), err: child.stderr() };
}

describe("payloads nested too deep to display", () => {
  let t: TestClient;
  const ids: string[] = [];

  beforeAll(async () => {
    t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream("deep");
    await s.register();
    await s.consumer("g").register();
    const n = await streamIdOf(t, "deep");
    const gid = await groupIdOf(t, "g", "deep");
    const [viaSql] = await t.sql<{ id: string }>(`SELECT sqlstreams.produce('deep', (repeat('[', 999) || repeat(']', 999))::jsonb)::text AS id`);
    ids.push(viaSql.id);
    const [direct] = await t.sql<{ id: string }>(`INSERT INTO sqlstreams.message_log_${n} (payload) VALUES ((repeat('[', 5000) || repeat(']', 5000))::jsonb) RETURNING id::text AS id`);
    ids.push(direct.id);
    await t.sql(
      `INSERT INTO sqlstreams.exception_queue_${n} (consumer_group_id, message_id, status, concurrency, attempts, last_error)
       SELECT $1, unnest($2::bigint[]), 'dead', 'parallel', 1, 'rejected'`,
      [gid, ids],
    );
  });

  it("the group and message pages answer 200 and say the payload is not displayable", async () => {
    const app = createDashboard({ client: t.client, readOnly: true });
    const group = await app(new Request("http://127.0.0.1/group?stream=deep&group=g"));
    const body = await group.text();
    expect(group.status, body.slice(0, 500)).toBe(200);
    expect(body).toContain("payload not displayable: nested 999 levels");
    expect(body).toContain("payload not displayable: nested 5000 levels");
    for (const id of ids) {
      const m = await app(new Request(`http://127.0.0.1/message?stream=deep&id=${id}`));
      const text = await m.text();
      expect(m.status, text.slice(0, 500)).toBe(200);
      expect(text).toMatch(/payload not displayable: nested (999|5000) levels/);
      expect(text).toContain(`WHERE l.id = ${id}`);
    }
  });

  it("sqlstreams failures and inspect exit 0 and say so", async () => {
    const f = await cli(["failures", "--stream", "deep", "--group", "g"]);
    expect(f.code, f.err).toBe(0);
    expect(f.out).toContain("payload not displayable: nested 999 levels");
    expect(f.out).toContain("payload not displayable: nested 5000 levels");
    const fj = await cli(["failures", "--stream", "deep", "--group", "g", "--json"]);
    expect(fj.code, fj.err).toBe(0);
    const rows = (JSON.parse(fj.out) as { rows: { payload: unknown; payloadNotDisplayable?: string }[] }).rows;
    expect(rows.map((r) => r.payloadNotDisplayable?.slice(0, 40))).toEqual(["payload not displayable: nested 5000 lev", "payload not displayable: nested 999 leve"]);
    for (const id of ids) {
      const i = await cli(["inspect", "deep", "--id", id]);
      expect(i.code, i.err).toBe(0);
      expect(i.out).toMatch(/payload: +payload not displayable: nested (999|5000) levels/);
      const ij = await cli(["inspect", "deep", "--id", id, "--json"]);
      expect(ij.code, ij.err).toBe(0);
      expect(ij.out).toContain("payload not displayable");
    }
  });
});

describe("a database the dashboard cannot use", () => {
  const clients: SqlStreams[] = [];
  afterAll(async () => {
    for (const c of clients) await c.close();
  });

  it("answers 503 with Retry-After for a missing database (SQL0033), 4xx for bad input", async () => {
    const missing = new URL(url());
    missing.pathname = "/sqlstreams_no_such_database";
    const client = new SqlStreams({ connectionString: missing.toString(), logger: () => {} });
    clients.push(client);
    const app = createDashboard({ client, readOnly: true });
    const r = await app(new Request("http://127.0.0.1/"));
    const body = await r.text();
    expect(r.status, body.slice(0, 500)).toBe(503);
    expect(r.headers.get("retry-after")).toMatch(/^[0-9]+$/);
    expect(body).toContain("database does not exist");
    const bad = await app(new Request("http://127.0.0.1/message?stream=x&id=abc"));
    expect(bad.status).toBe(400);
  });
});
