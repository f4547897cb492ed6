// The `sqlstreams` command as a user runs it: a child process on packages/cli/dist/bin.js against
// a fresh database. Every command's happy path, one error path each, and --json output.
import { beforeAll, describe, expect, it } from "vitest";
import { Permanent } from "@sqlstreams/core";
import { useFreshDatabase } from "../support/db.js";
import { spawnNode } from "../support/processes.js";
import { SCHEMA, type TestClient, committed, pollPastFence, streamIdOf, table, testClient } from "../support/streams.js";

const url = useFreshDatabase();

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  json: () => Record<string, unknown>;
}

async function cli(args: string[], env: Record<string, string | undefined> = {}): Promise<Run> {
  const child = spawnNode({ script: "packages/cli/dist/bin.js", args, env: { DATABASE_URL: url(), SQLSTREAMS_SCHEMA: undefined, ...env } });
  const exit = await child.waitForExit(30_000);
  const stdout = child.lines.join("\n");
  return { code: exit.code, stdout, stderr: child.stderr(), json: () => JSON.parse(stdout) as Record<string, unknown> };
}

const SG = ["--stream", "orders.placed", "--group", "fraud-scoring"];

describe("sqlstreams (CLI)", () => {
  let t: TestClient;

  beforeAll(() => {
    t = testClient(url());
  });

  it("--help lists every command, and each command has its own --help", async () => {
    const top = await cli(["--help"], { DATABASE_URL: undefined });
    expect(top.code).toBe(0);
    for (const c of ["migrate", "status", "failures", "redrive", "seek", "pause", "resume", "destroy", "maintain", "dev"]) {
      expect(top.stdout).toContain(c);
    }
    const sub = await cli(["redrive", "--help"], { DATABASE_URL: undefined });
    expect(sub.code).toBe(0);
    expect(sub.stdout).toContain("--error-contains");
    expect(sub.stdout).toContain("--database-url");
  });

  it("unknown commands and options are SQL0015 with exit code 1", async () => {
    const a = await cli(["frobnicate"]);
    expect(a.code).toBe(1);
    expect(a.stderr).toMatch(/error SQL0015: unknown command "frobnicate"/);
    expect(a.stderr).toContain("fix:");
    const b = await cli(["status", "--colour"]);
    expect(b.code).toBe(1);
    expect(b.stderr).toMatch(/SQL0015.*--colour/);
  });

  it("no database: SQL0032, and the password of a URL never appears in output", async () => {
    const none = await cli(["status"], { DATABASE_URL: undefined });
    expect(none.code).toBe(1);
    expect(none.stderr).toMatch(/error SQL0032: no database given/);
    const bad = await cli(["status", "--database-url", "postgres://someone:s3cret-pw@127.0.0.1:1/nodb"], { DATABASE_URL: undefined });
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/error SQL0033/);
    expect(bad.stderr + bad.stdout).not.toContain("s3cret-pw");
  });

  it("status before migrate: SQL0003; migrate: idempotent, --json", async () => {
    const before = await cli(["status"]);
    expect(before.code).toBe(1);
    expect(before.stderr).toMatch(/error SQL0003/);
    expect(before.stderr).toContain("sqlstreams migrate");
    const m = await cli(["migrate"]);
    expect(m.code).toBe(0);
    expect(m.stdout).toMatch(/migrated schema sqlstreams: control plane at version \d+/);
    const again = await cli(["migrate", "--json"]);
    expect(again.code).toBe(0);
    expect(again.json()).toMatchObject({ migrated: true, schema: "sqlstreams" });
    const bad = await cli(["migrate", "--schema", "Bad-Name"]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/error SQL0001/);
  });

  it("status: a table per group, --json with progress, lag 0 with dead rows flagged; unknown stream SQL0009, unknown group SQL0010", async () => {
    const s = t.client.stream<{ n: number; bad?: boolean }>("orders.placed");
    await s.register();
    const g = s.consumer("fraud-scoring");
    await g.register({ exceptionInitialBackoff: 0 });
    await t.client.stream("ledger.adjustments").register();
    await t.client.stream("ledger.adjustments").consumer("apply-balance").register({ rateLimit: { perSecond: 5 } });
    for (let i = 1; i <= 10; i++) await s.produce({ n: i, bad: i % 4 === 0 }); // 4 and 8 end dead
    await g.drain((m) => {
      if (m.payload.bad) throw Permanent(new Error(`order ${m.payload.n} is broken`));
    });

    const human = await cli(["status"]);
    expect(human.code).toBe(0);
    const lines = human.stdout.split("\n");
    expect(lines[0]).toMatch(/^STREAM\s+GROUP\s+HEAD\s+COMMITTED\s+LAG\s+LEASES\s+READY\s+DEFERRED\s+INFLIGHT\s+DEAD\s+SUPERSEDED\s+EXPIRED\s+OLDEST\s+PAUSED\s+DRAINS\s+RATE\s+BLOCKED\s+SCHEDULED$/);
    expect(lines.find((l) => l.startsWith("orders.placed"))).toMatch(/fraud-scoring\s+10\s+10\s+0\s+0\/0\s+0\s+0\s+0\s+2\s+0\s+0\s+-\s+no/);
    expect(lines.find((l) => l.startsWith("ledger.adjustments"))).toMatch(/apply-balance\s+0\s+0\s+0/);
    expect(lines.find((l) => l.startsWith("ledger.adjustments"))).toMatch(/\s5\/s \(0\)\s/);
    expect(human.stdout).toMatch(/note: orders\.placed\/fraud-scoring: 2 dead message\(s\) — lag 0 with dead rows is not success/);

    const j = await cli(["status", "--stream", "orders.placed", "--json"]);
    expect(j.code).toBe(0);
    const doc = j.json() as { groups: Record<string, unknown>[]; notes: string[] };
    expect(doc.groups).toHaveLength(1);
    expect(doc.groups[0]).toMatchObject({
      stream: "orders.placed", group: "fraud-scoring", paused: false, head: "10", committed: "10", lag: "0",
      openLeases: 0, expiredLeases: 0, exceptions: { ready: 0, deferred: 0, inflight: 0, dead: 2, superseded: 0, expired: 0 },
    });
    expect(doc.notes.join(" ")).toContain("not success");

    const byGroup = await cli(["status", "--group", "apply-balance", "--json"]);
    expect((byGroup.json() as { groups: { stream: string }[] }).groups.map((x) => x.stream)).toEqual(["ledger.adjustments"]);
    expect((byGroup.json() as { groups: { rateLimit: unknown }[] }).groups[0].rateLimit).toEqual({ perSecond: 5, burst: 5, limited: 0, limitedAt: null });

    const unknown = await cli(["status", "--stream", "nope"]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/^error SQL0009: stream "nope" is not registered\n {2}fix: call stream\.register\(\) first/);
    const unknownJson = await cli(["status", "--stream", "nope", "--json"]);
    expect(unknownJson.code).toBe(1);
    expect(unknownJson.json()).toMatchObject({ error: { code: "SQL0009", fix: "call stream.register() first" } });
    const noGroup = await cli(["status", "--stream", "orders.placed", "--group", "nope"]);
    expect(noGroup.code).toBe(1);
    expect(noGroup.stderr).toMatch(/error SQL0010/);
  });

  it("failures: dead rows with payload and error, --json, --status; bad --status is SQL0015, unknown group SQL0010", async () => {
    const h = await cli(["failures", ...SG]);
    expect(h.code).toBe(0);
    expect(h.stdout.split("\n")[0]).toMatch(/^MESSAGE\s+KEY\s+STATUS\s+ATTEMPTS\s+DELAYS\s+UPDATED\s+RUN AFTER\s+PAYLOAD\s+LAST ERROR$/);
    expect(h.stdout).toMatch(/\n\s+8\s+-\s+dead\s+0\s+0\s+.*order 8 is broken/);
    expect(h.stdout).toContain("2 dead row(s)");
    const j = await cli(["failures", ...SG, "--json", "--limit", "1"]);
    expect(j.code).toBe(0);
    const doc = j.json() as { rows: { messageId: string; status: string; payload: unknown; lastError: string }[] };
    expect(doc.rows).toHaveLength(1);
    expect(doc.rows[0]).toMatchObject({ messageId: "8", status: "dead", payload: { n: 8, bad: true } });
    expect(doc.rows[0].lastError).toContain("order 8 is broken");
    const ready = await cli(["failures", ...SG, "--status", "ready"]);
    expect(ready.stdout).toContain("no ready rows");
    const bad = await cli(["failures", ...SG, "--status", "weird"]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/error SQL0015: --status must be one of dead, expired, ready, deferred, inflight/);
    const missing = await cli(["failures", "--stream", "orders.placed"]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/SQL0015: --group is required/);
    const noGroup = await cli(["failures", "--stream", "orders.placed", "--group", "nope"]);
    expect(noGroup.code).toBe(1);
    expect(noGroup.stderr).toMatch(/error SQL0010/);
  });

  it("redrive: by ids and by filter, --json; no selector is SQL0030", async () => {
    const none = await cli(["redrive", ...SG]);
    expect(none.code).toBe(1);
    expect(none.stderr).toMatch(/^error SQL0030/);
    const mixed = await cli(["redrive", ...SG, "--ids", "4", "--all"]);
    expect(mixed.code).toBe(1);
    expect(mixed.stderr).toMatch(/SQL0030/);
    const ids = await cli(["redrive", ...SG, "--ids", "4,5", "--reason", "fixed the parser"]);
    expect(ids.code).toBe(0);
    expect(ids.stdout).toContain("redrove 1 dead row(s), skipped 1");
    const filter = await cli(["redrive", ...SG, "--error-contains", "ORDER 8", "--json"]);
    expect(filter.code).toBe(0);
    expect(filter.json()).toMatchObject({ stream: "orders.placed", group: "fraud-scoring", redriven: 1, skipped: 0 });
    const all = await cli(["redrive", ...SG, "--all", "--json"]);
    expect(all.json()).toMatchObject({ redriven: 0 });
    const rows = await t.sql<{ message_id: string; status: string }>(
      `SELECT message_id::text, status FROM ${table(await streamIdOf(t, "orders.placed"), "exception_queue")} ORDER BY message_id`,
    );
    expect(rows).toEqual([{ message_id: "4", status: "ready" }, { message_id: "8", status: "ready" }]);
  });

  it("pause / resume: idempotent, shown by status; unknown group SQL0010", async () => {
    const p = await cli(["pause", ...SG]);
    expect(p.code).toBe(0);
    expect(p.stdout).toContain("orders.placed/fraud-scoring: paused");
    expect((await cli(["pause", ...SG, "--json"])).json()).toEqual({ stream: "orders.placed", group: "fraud-scoring", paused: true });
    const st = await cli(["status", "--stream", "orders.placed", "--json"]);
    expect((st.json() as { groups: { paused: boolean }[] }).groups[0].paused).toBe(true);
    const r = await cli(["resume", ...SG]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("resumed");
    const bad = await cli(["pause", "--stream", "orders.placed", "--group", "nope"]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/error SQL0010/);
  });

  it("seek: by id and by time, --json; outside the log SQL0029; neither --id nor --time SQL0015", async () => {
    const s = await cli(["seek", ...SG, "--id", "6"]);
    expect(s.code).toBe(0);
    expect(s.stdout).toMatch(/claimed 10 -> 5, committed \d+ -> \d+/);
    const byTime = await cli(["seek", ...SG, "--time", "2000-01-01T00:00:00Z", "--json"]);
    expect(byTime.code).toBe(0);
    expect(byTime.json()).toMatchObject({ stream: "orders.placed", group: "fraud-scoring", claimed: "0", committed: "0" });
    const out = await cli(["seek", ...SG, "--id", "99999"]);
    expect(out.code).toBe(1);
    expect(out.stderr).toMatch(/error SQL0029/);
    const neither = await cli(["seek", ...SG]);
    expect(neither.code).toBe(1);
    expect(neither.stderr).toMatch(/SQL0015: pass exactly one of --id N or --time/);
    const badTime = await cli(["seek", ...SG, "--time", "yesterday-ish"]);
    expect(badTime.code).toBe(1);
    expect(badTime.stderr).toMatch(/SQL0015: --time must be an ISO-8601 time/);
  });

  it("maintain: a report per stream, --json, --stream; unknown stream SQL0009", async () => {
    const m = await cli(["maintain"]);
    expect(m.code).toBe(0);
    expect(m.stdout.split("\n")[0]).toMatch(/^STREAM\s+PARTITIONS\+\s+PARTITIONS-\s+ROWS SWEPT/);
    expect(m.stdout).toMatch(/orders\.placed/);
    expect(m.stdout).toMatch(/ledger\.adjustments/);
    const j = await cli(["maintain", "--stream", "orders.placed", "--json"]);
    expect(j.code).toBe(0);
    const doc = j.json() as { streams: Record<string, { stream: string; errors: unknown[] }> };
    expect(Object.keys(doc.streams)).toEqual(["orders.placed"]);
    expect(doc.streams["orders.placed"].errors).toEqual([]);
    const bad = await cli(["maintain", "--stream", "nope"]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/error SQL0009/);
  });

  it("destroy: a group, then a stream (--force); a missing stream is an error with a code", async () => {
    const noStream = await cli(["destroy"]);
    expect(noStream.code).toBe(1);
    expect(noStream.stderr).toMatch(/SQL0015: --stream is required/);
    const g = await cli(["destroy", "--stream", "ledger.adjustments", "--group", "apply-balance", "--json"]);
    expect(g.code).toBe(0);
    expect(g.json()).toMatchObject({ destroyed: { stream: "ledger.adjustments", group: "apply-balance" } });
    const s = await cli(["destroy", "--stream", "ledger.adjustments", "--force"]);
    expect(s.code).toBe(0);
    expect(s.stdout).toContain("destroyed stream ledger.adjustments");
    const again = await cli(["destroy", "--stream", "ledger.adjustments"]);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/^error SQL\d{4}: /);
    const st = await cli(["status", "--json"]);
    expect((st.json() as { groups: { stream: string }[] }).groups.map((x) => x.stream)).toEqual(["orders.placed"]);
  });

  it("status names a lagging group that holds the stream's retention", async () => {
    const s = t.client.stream<{ n: number }>("kept.events");
    await s.register({ retention: 1_000 });
    const fast = s.consumer("fast");
    const slow = s.consumer("slow");
    await fast.register();
    await slow.register();
    for (let i = 1; i <= 3; i++) await s.produce({ n: i });
    await pollPastFence(fast, () => {}, { drain: true, until: committed("3") });
    const sid = await streamIdOf(t, "kept.events");
    await t.sql(`UPDATE ${SCHEMA}.message_log_${sid} SET created_at = now() - interval '1 hour'`);
    const human = await cli(["status", "--stream", "kept.events"]);
    expect(human.code).toBe(0);
    expect(human.stdout).toMatch(/note: kept\.events\/slow holds the stream's retention for [0-9hms]+: expired messages above its position \(floor 0\)/);
    expect(human.stdout).not.toMatch(/kept\.events\/fast holds/);
    const j = (await cli(["status", "--stream", "kept.events", "--json"])).json() as { groups: { group: string; retention: { held: boolean; heldBy: string | null } }[] };
    expect(j.groups.find((g) => g.group === "slow")?.retention).toMatchObject({ held: true, heldBy: "slow" });
  });
});
