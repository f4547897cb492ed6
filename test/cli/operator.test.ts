// The operator's tools as a user runs them: `sqlstreams inspect / failures (filters) / discard /
// redrive --rate / produce / status --watch --check` as child processes against a fresh database,
// and the library calls underneath (inspect, failures filters, discard, paced redrive).
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { Permanent } from "@sqlstreams/core";
import { useFreshDatabase } from "../support/db.js";
import { spawnNode } from "../support/processes.js";
import { SCHEMA, type TestClient, codeOf, streamIdOf, table, testClient } from "../support/streams.js";

const url = useFreshDatabase();

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  json: () => Record<string, unknown>;
}

async function cli(args: string[], opts: { env?: Record<string, string | undefined>; stdin?: string } = {}): Promise<Run> {
  const child = spawnNode({ script: "packages/cli/dist/bin.js", args, env: { DATABASE_URL: url(), SQLSTREAMS_SCHEMA: undefined, ...opts.env } });
  if (opts.stdin !== undefined) child.process.stdin?.write(opts.stdin);
  child.process.stdin?.end();
  const exit = await child.waitForExit(60_000);
  const stdout = child.lines.join("\n");
  return { code: exit.code, stdout, stderr: child.stderr(), json: () => JSON.parse(stdout) as Record<string, unknown> };
}

const STREAM = "orders.placed";
const SG = ["--stream", STREAM, "--group", "fraud"];

interface Order {
  n: number;
  customer: number;
  bad?: boolean;
}

describe("operator tools (CLI and library)", () => {
  let t: TestClient;

  beforeAll(async () => {
    t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream<Order>(STREAM);
    await s.register();
    await s.consumer("fraud").register({ exceptionInitialBackoff: 0 });
    await s.consumer("ledger").register({ exceptionInitialBackoff: 0 });
    for (let i = 1; i <= 12; i++) await s.produce({ n: i, customer: i % 3, bad: i % 4 === 0 }, { key: `cust-${i % 3}` });
    // fraud: 4, 8, 12 end dead with a message naming the order; ledger: everything succeeds.
    await s.consumer("fraud").drain((m) => {
      if (m.payload.bad) throw Permanent(new Error(`order ${m.payload.n} is broken (${m.payload.n === 8 ? "timeout" : "parse"})`));
    });
  });

  it("inspect --id: the message, and per group its position, exception row and delivery timeline; --json; SQL0058 for a missing id", async () => {
    // ledger has not consumed anything yet: message 8 is above its cursor.
    const h = await cli(["inspect", STREAM, "--id", "8"]);
    expect(h.code, h.stderr).toBe(0);
    expect(h.stdout).toContain("message 8 of orders.placed");
    expect(h.stdout).toMatch(/key: +cust-2/);
    expect(h.stdout).toMatch(/payload: +\{.*"n": ?8.*\}/);
    expect(h.stdout).toMatch(/payload: .*"customer": ?2/);
    expect(h.stdout).toMatch(/group fraud: dead exception row: attempts 0, delays 0/);
    expect(h.stdout).toContain("last error: ");
    expect(h.stdout).toContain("order 8 is broken (timeout)");
    expect(h.stdout).toMatch(/group ledger: not reached yet/);
    expect(h.stdout).toMatch(/\s0\s+failure\s+.*order 8 is broken/);

    const j = await cli(["inspect", STREAM, "--id", "8", "--json"]);
    const doc = j.json() as { messages: { id: string; groups: { group: string; position: string; row: { status: string } | null; timeline: { status: string }[] }[] }[] };
    expect(doc.messages).toHaveLength(1);
    const [fraud, ledger] = doc.messages[0].groups;
    expect(fraud).toMatchObject({ group: "fraud", position: "exception", row: { status: "dead" } });
    expect(fraud.timeline.map((x) => x.status)).toEqual(["failure"]);
    expect(ledger).toMatchObject({ group: "ledger", position: "waiting", row: null, timeline: [] });

    const ok = (await cli(["inspect", STREAM, "--id", "5", "--json"])).json() as typeof doc;
    expect(ok.messages[0].groups[0]).toMatchObject({ group: "fraud", position: "resolved", row: null });

    const missing = await cli(["inspect", STREAM, "--id", "999"]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/^error SQL0058: stream orders.placed has no message 999/);
    const neither = await cli(["inspect", STREAM]);
    expect(neither.code).toBe(1);
    expect(neither.stderr).toMatch(/SQL0015: pass exactly one of --id N or --key K/);
    const noStream = await cli(["inspect", "--id", "1"]);
    expect(noStream.stderr).toMatch(/SQL0015: name the stream/);
  });

  it("inspect --key: the key's latest messages, newest first", async () => {
    const j = await cli(["inspect", STREAM, "--key", "cust-1", "--limit", "2", "--json"]);
    expect(j.code, j.stderr).toBe(0);
    const doc = j.json() as { messages: { id: string; key: string }[] };
    expect(doc.messages.map((m) => m.id)).toEqual(["10", "7"]);
    expect(doc.messages.every((m) => m.key === "cust-1")).toBe(true);
    const none = await cli(["inspect", STREAM, "--key", "nobody"]);
    expect(none.stderr).toMatch(/SQL0058: stream orders.placed has no message with key "nobody"/);
  });

  it("failures: --error-contains, --key, --payload-contains (jsonb containment), --since/--before, paging with --offset", async () => {
    const byError = (await cli(["failures", ...SG, "--error-contains", "TIMEOUT", "--json"])).json() as { rows: { messageId: string }[]; total: number };
    expect(byError.rows.map((r) => r.messageId)).toEqual(["8"]);
    expect(byError.total).toBe(1);
    const byKey = (await cli(["failures", ...SG, "--key", "cust-0", "--json"])).json() as { rows: { messageId: string }[] };
    expect(byKey.rows.map((r) => r.messageId).sort()).toEqual(["12"]);
    const byPayload = (await cli(["failures", ...SG, "--payload-contains", '{"customer":1}', "--json"])).json() as { rows: { messageId: string }[] };
    expect(byPayload.rows.map((r) => r.messageId)).toEqual(["4"]);
    const future = (await cli(["failures", ...SG, "--since", "2999-01-01T00:00:00Z", "--json"])).json() as { rows: unknown[] };
    expect(future.rows).toEqual([]);
    const past = (await cli(["failures", ...SG, "--before", "2999-01-01T00:00:00Z", "--json"])).json() as { rows: unknown[] };
    expect(past.rows).toHaveLength(3);

    const page1 = (await cli(["failures", ...SG, "--limit", "2", "--json"])).json() as { rows: { messageId: string }[]; total: number; nextOffset: number | null };
    expect(page1.total).toBe(3);
    expect(page1.nextOffset).toBe(2);
    const page2 = (await cli(["failures", ...SG, "--limit", "2", "--offset", "2", "--json"])).json() as typeof page1;
    expect(page2.nextOffset).toBeNull();
    expect([...page1.rows, ...page2.rows].map((r) => r.messageId).sort()).toEqual(["12", "4", "8"]);
    const human = await cli(["failures", ...SG, "--limit", "2"]);
    expect(human.stdout).toMatch(/2 dead row\(s\) \(1–2 of 3\), newest first; next page: --offset 2/);

    const bad = await cli(["failures", ...SG, "--payload-contains", "{not json"]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/SQL0015: --payload-contains must be JSON/);
    const scalar = await cli(["failures", ...SG, "--payload-contains", "7"]);
    expect(scalar.stderr).toMatch(/SQL0015: failures\(\) payloadContains must be a JSON object or array/);
  });

  it("discard: deletes only dead rows and leaves a 'discarded' audit row; no selector SQL0059", async () => {
    const none = await cli(["discard", ...SG]);
    expect(none.code).toBe(1);
    expect(none.stderr).toMatch(/^error SQL0059/);
    const r = await cli(["discard", ...SG, "--ids", "4,5", "--reason", "poison: customer deleted", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json()).toMatchObject({ stream: STREAM, group: "fraud", discarded: 1, skipped: 1 });
    const n = await streamIdOf(t, STREAM);
    const rows = await t.sql<{ message_id: string }>(`SELECT message_id::text FROM ${table(n, "exception_queue")} e JOIN ${SCHEMA}.consumer_group_config g ON g.id = e.consumer_group_id WHERE g.name = 'fraud' ORDER BY 1`);
    expect(rows.map((x) => x.message_id)).toEqual(["12", "8"]);
    const audit = await t.sql<{ status: string; error: string; attempt: number }>(
      `SELECT status, error, attempt FROM ${table(n, "delivery_log")} WHERE message_id = 4 ORDER BY id`,
    );
    expect(audit.map((a) => a.status)).toEqual(["failure", "discarded"]);
    expect(audit[1]).toMatchObject({ error: "discarded: poison: customer deleted", attempt: 0 });
    // The audit row shows in the message's timeline; the group no longer has a row for it.
    const j = (await cli(["inspect", STREAM, "--id", "4", "--json"])).json() as { messages: { groups: { position: string; timeline: { status: string }[] }[] }[] };
    expect(j.messages[0].groups[0]).toMatchObject({ position: "resolved" });
    expect(j.messages[0].groups[0].timeline.map((x) => x.status)).toEqual(["failure", "discarded"]);
    const human = await cli(["discard", ...SG, "--error-contains", "order 12"]);
    expect(human.stdout).toContain("orders.placed/fraud: discarded 1 dead row(s)");
  });

  it("redrive --rate: paced batches, each its own transaction; stopped part-way and run again it finishes the rest", async () => {
    const s = t.client.stream<Order>("bulk");
    await s.register();
    const g = s.consumer("g");
    await g.register({ exceptionInitialBackoff: 0 });
    for (let i = 1; i <= 25; i++) await s.produce({ n: i, customer: 1, bad: true });
    await g.drain(() => {
      throw Permanent(new Error("bad"));
    });
    expect((await g.progress()).exceptions.dead).toBe(25);

    // Stop after the first batch: that batch is committed, the rest is still dead.
    const stop = new AbortController();
    const first = await g.redrive({ all: true }, {
      rate: 1_000, batchSize: 10, signal: stop.signal, onBatch: () => stop.abort(), reason: "bulk fix",
    });
    expect(first).toEqual({ redriven: 10, skipped: 0, batches: 1 });
    expect((await g.progress()).exceptions).toMatchObject({ dead: 15, ready: 10 });

    const run = await cli(["redrive", "--stream", "bulk", "--group", "g", "--all", "--rate", "20"]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toContain("bulk/g: redrove 15 dead row(s), skipped 0 (not dead or message gone) in 1 batch(es)");
    expect((await g.progress()).exceptions).toMatchObject({ dead: 0, ready: 25 });
    const logs = await t.sql<{ n: number }>("SELECT count(*)::int AS n FROM sqlstreams.delivery_log_2 WHERE status = 'redriven'");
    expect(logs[0].n).toBe(25);

    // Small batches: one transaction per batch, progress on stderr.
    await g.drain(() => {
      throw Permanent(new Error("bad again"));
    });
    const paced = await cli(["redrive", "--stream", "bulk", "--group", "g", "--error-contains", "again", "--rate", "50", "--json"]);
    expect(paced.json()).toMatchObject({ redriven: 25, batches: 1 });
    expect(await codeOf(g.redrive({ all: true }, { rate: 0 }))).toBe("SQL0030");
    expect(await codeOf(g.discard({ all: true }, { rate: -1 }))).toBe("SQL0059");
    const badRate = await cli(["redrive", "--stream", "bulk", "--group", "g", "--all", "--rate", "fast"]);
    expect(badRate.stderr).toMatch(/SQL0015: --rate must be rows per second/);
  });

  it("redrive with batchSize walks up the ids: one transaction per batch, every row once", async () => {
    const g = t.client.stream<Order>("bulk").consumer("g");
    await g.drain(() => {
      throw Permanent(new Error("third time"));
    });
    const seen: number[] = [];
    const r = await g.redrive({ errorContains: "third" }, { rate: 10_000, batchSize: 7, onBatch: (p) => seen.push(p.done) });
    expect(r).toEqual({ redriven: 25, skipped: 0, batches: 4 });
    expect(seen).toEqual([7, 14, 21, 25]);
  });

  it("produce: payload as argument, from a file and from stdin; key, idempotency key, message options; bad JSON is SQL0062", async () => {
    const a = await cli(["produce", STREAM, '{"n":100,"customer":9}', "--key", "cust-9", "--json"]);
    expect(a.code, a.stderr).toBe(0);
    const id = (a.json() as { id: string }).id;
    const log = table(await streamIdOf(t, STREAM), "message_log");
    const row = await t.sql<{ payload: unknown; message_key: string }>(`SELECT payload, message_key FROM ${log} WHERE id = $1`, [id]);
    expect(row[0]).toEqual({ payload: { n: 100, customer: 9 }, message_key: "cust-9" });

    const dir = mkdtempSync(join(tmpdir(), "sqlstreams-produce-"));
    writeFileSync(join(dir, "p.json"), JSON.stringify({ n: 101, customer: 9 }));
    const f = await cli(["produce", STREAM, "--file", join(dir, "p.json"), "--message", '{"timeout":5000}']);
    expect(f.code, f.stderr).toBe(0);
    expect(f.stdout).toMatch(/^orders.placed: produced message \d+$/);
    const fid = /message (\d+)/.exec(f.stdout)![1];
    const opts = await t.sql<{ options: unknown }>(`SELECT options FROM ${log} WHERE id = $1`, [fid]);
    expect(opts[0].options).toMatchObject({ timeout: 5000 });

    const s1 = await cli(["produce", STREAM, "--idempotency-key", "order-102", "--json"], { stdin: '{"n":102,"customer":9}\n' });
    expect(s1.code, s1.stderr).toBe(0);
    const s2 = await cli(["produce", STREAM, "--idempotency-key", "order-102"], { stdin: '{"n":102,"customer":9}' });
    expect(s2.stdout).toContain(`duplicate of message ${(s1.json() as { id: string }).id}`);

    const bad = await cli(["produce", STREAM, "{nope"]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/^error SQL0062: the payload argument is not valid JSON/);
    const badStdin = await cli(["produce", STREAM], { stdin: "" });
    expect(badStdin.stderr).toMatch(/SQL0062: stdin is not valid JSON/);
    const ordered = await cli(["produce", STREAM, "{}", "--message", '{"concurrency":"ordered"}']);
    expect(ordered.stderr).toMatch(/SQL0019/);
    const extra = await cli(["produce", STREAM, "{}", "more"]);
    expect(extra.stderr).toMatch(/SQL0015: unexpected argument "more"/);
  });

  it("produce --delay / --deliver-at schedules the message; status counts it; a bad or doubled flag is refused", async () => {
    const d = await cli(["produce", STREAM, '{"n":200}', "--delay", "2d"]);
    expect(d.code, d.stderr).toBe(0);
    expect(d.stdout).toMatch(/^orders.placed: scheduled message \d+, due \d{4}-.*Z \(cancel with/);
    const at = await cli(["produce", STREAM, '{"n":201}', "--deliver-at", "2099-01-01T00:00:00Z", "--json"]);
    expect(at.json()).toMatchObject({ scheduled: true, deliverAt: "2099-01-01T00:00:00.000Z" });
    const st = await cli(["status", "--stream", STREAM, "--json"]);
    expect((st.json() as { groups: { scheduled: { waiting: number } }[] }).groups[0].scheduled.waiting).toBe(2);
    const plain = await cli(["status", "--stream", STREAM]);
    expect(plain.stdout).toContain("SCHEDULED");
    expect((await cli(["produce", STREAM, "{}", "--delay", "soon"])).stderr).toMatch(/--delay must be a duration/);
    expect((await cli(["produce", STREAM, "{}", "--delay", "1s", "--deliver-at", "0"])).stderr).toMatch(/SQL0015: options: give deliverAt or delay, not both/);
    const s = t.client.stream(STREAM);
    await s.cancelScheduled((d.stdout.match(/scheduled message (\d+)/) ?? [])[1]);
    await s.cancelScheduled((at.json() as { id: string }).id);
  });

  it("status --check / --max-age: exit code 2 on dead letters or an old unresolved message; --watch refreshes (JSON lines)", async () => {
    const plain = await cli(["status", "--stream", STREAM]);
    expect(plain.code).toBe(0);
    const check = await cli(["status", "--stream", STREAM, "--check"]);
    expect(check.code).toBe(2);
    expect(check.stdout).toMatch(/alert: orders.placed\/fraud has 1 dead message\(s\)/);
    // ledger has consumed nothing: its oldest unresolved message is older than 1 ms.
    const old = await cli(["status", "--stream", STREAM, "--group", "ledger", "--max-age", "1ms", "--json"]);
    expect(old.code).toBe(2);
    expect((old.json() as { alerts: string[] }).alerts.join()).toMatch(/ledger: oldest unresolved message is .* old/);
    const young = await cli(["status", "--stream", STREAM, "--group", "ledger", "--max-age", "30d"]);
    expect(young.code).toBe(0);
    const badAge = await cli(["status", "--max-age", "soon"]);
    expect(badAge.code).toBe(1);
    expect(badAge.stderr).toMatch(/SQL0015: --max-age must be a duration/);

    const w = await cli(["status", "--stream", STREAM, "--watch", "--interval", "200ms", "--iterations", "2", "--json"]);
    expect(w.code, w.stderr).toBe(0);
    const frames = w.stdout.trim().split("\n").map((l) => JSON.parse(l) as { time: string; groups: unknown[] });
    expect(frames).toHaveLength(2);
    expect(frames[1].groups).toHaveLength(2);
    const human = await cli(["status", "--stream", STREAM, "--watch", "--interval", "200ms", "--iterations", "2"]);
    expect(human.stdout.match(/refreshing; Ctrl-C to stop/g)).toHaveLength(2);
    // Not a terminal: no colour codes, whatever NO_COLOR says.
    expect(human.stdout).not.toContain("\u001b[");
  });

  it("colours only on a terminal and never with NO_COLOR", async () => {
    const f = (await import("../../packages/cli/dist/format.js")) as typeof import("../../packages/cli/src/format.js");
    expect(f.colourEnabled(true, {})).toBe(true);
    expect(f.colourEnabled(false, {})).toBe(false);
    expect(f.colourEnabled(true, { NO_COLOR: "1" })).toBe(false);
    expect(f.colourEnabled(true, { NO_COLOR: "" })).toBe(true);
    const painted = f.paint(true, "red", "3");
    expect(f.visible(painted)).toBe("3");
    // Coloured cells keep the columns aligned.
    expect(f.table(["A", "B"], [[painted, "x"], ["10", "y"]]).split("\n").map((l) => f.visible(l))).toEqual([" A  B", " 3  x", "10  y"]);
  });
});
