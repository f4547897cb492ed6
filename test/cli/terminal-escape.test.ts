// Control characters in keys, payloads and handler errors never reach the operator's terminal raw:
// `sqlstreams failures` and `inspect` run as child processes print them as escapes (an OSC 52
// clipboard write, a line erase, a carriage return, a bidi override, DEL and a C1 CSI), also when
// the 100-character cut of the error column falls inside one; their --json output keeps every
// string exact.
import { describe, expect, it } from "vitest";
import { Permanent } from "@sqlstreams/core";
import { useFreshDatabase } from "../support/db.js";
import { spawnNode } from "../support/processes.js";
import { testClient } from "../support/streams.js";

const url = useFreshDatabase();

const OSC52 = "\u001b]52;c;cm0gLXJmIH4K\u0007";
const KEY = `k${OSC52}\u001b[2K\rpwned\u202e\u007f\u009b31m`;
// The OSC starts at character 94: a cut at 100 before escaping would leave it unterminated.
const ERROR = `${"e".repeat(93)} ${OSC52}\u001b]0;title\u0007 after\rover`;
const PAYLOAD = { note: `p\u001b[2J\u009d0;x\u0007\u202e` };
// Anything a terminal acts on: C0 but newline, DEL, C1, bidi controls.
// eslint-disable-next-line no-control-regex -- finding control characters is the point
const RAW = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/;

async function cli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawnNode({ script: "packages/cli/dist/bin.js", args, env: { DATABASE_URL: url(), SQLSTREAMS_SCHEMA: undefined, NO_COLOR: "1" } });
  child.process.stdin?.end();
  const exit = await child.waitForExit(60_000);
  return { code: exit.code, stdout: child.lines.join("\n"), stderr: child.stderr() };
}

describe("operator output escapes control characters", () => {
  it("failures and inspect print escapes; --json round-trips exactly", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream<{ note: string }>("orders.hostile");
    await s.register();
    const g = s.consumer("billing");
    await g.register();
    await s.produce(PAYLOAD, { key: KEY });
    await g.drain(() => {
      throw Permanent(new Error(ERROR));
    });

    const table = await cli(["failures", "--stream", "orders.hostile", "--group", "billing"]);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toContain("k\\e]52;c;cm0gLXJmIH4K\\x07\\e[2K\\rpwned\\u202e\\x7f\\x9b31m");
    expect(table.stdout).toContain("\\e]52;c;");
    expect(table.stdout).not.toMatch(RAW);

    const shown = await cli(["inspect", "orders.hostile", "--key", KEY]);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toContain("message 1 of orders.hostile");
    expect(shown.stdout).toContain("\\e]0;title\\x07");
    expect(shown.stdout).not.toMatch(RAW);
    expect(shown.stderr).not.toMatch(RAW);

    const json = await cli(["failures", "--stream", "orders.hostile", "--group", "billing", "--json"]);
    const rows = (JSON.parse(json.stdout) as { rows: { key: string; lastError: string; payload: unknown }[] }).rows;
    expect(rows).toHaveLength(1);
    expect(rows[0].key).toBe(KEY);
    expect(rows[0].payload).toEqual(PAYLOAD);
    expect(rows[0].lastError).toContain(ERROR);
    const inspected = JSON.parse((await cli(["inspect", "orders.hostile", "--key", KEY, "--json"])).stdout) as { messages: { key: string; payload: unknown }[] };
    expect(inspected.messages[0].key).toBe(KEY);
    expect(inspected.messages[0].payload).toEqual(PAYLOAD);

    // An error message quoting the operator's input is escaped too (JSON quoting leaves C1 and bidi raw).
    const bad = await cli(["inspect", "or\u009d0;x\u0007\u202e", "--id", "1"]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain("error SQL0006");
    expect(bad.stderr).toContain("\\x9d0;x");
    expect(bad.stderr).not.toMatch(RAW);
  }, 120_000);
});
