// blockedKeys() (docs/guide/operations.md#blocked-keys): the ordered keys whose next message waits
// behind an unresolved earlier one, with the blocking message, its status, since when, and how
// many wait behind it; a dead predecessor releases its key, so a dead letter blocks nothing.
import { beforeAll, describe, expect, it } from "vitest";
import { DatabaseProvider, createDashboardHandler, type FunctionUrlEvent } from "@sqlstreams/aws";
import { Delay, Permanent, type Message } from "@sqlstreams/core";
import { spawnNode } from "../../support/processes.js";
import { useFreshDatabase } from "../../support/db.js";
import { SCHEMA, type TestClient, codeOf, pollPastFence, setupGroup, streamIdOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();
let t: TestClient;
beforeAll(() => {
  t = testClient(url());
});

/** A key with a terminal escape in it: shown escaped by the CLI. */
const EVIL = "z\u001b]0;x\u0007";

async function cli(args: string[]): Promise<{ code: number | null; stdout: string }> {
  const child = spawnNode({ script: "packages/cli/dist/bin.js", args, env: { DATABASE_URL: url(), SQLSTREAMS_SCHEMA: undefined } });
  child.process.stdin?.end();
  const exit = await child.waitForExit(60_000);
  return { code: exit.code, stdout: child.lines.join("\n") };
}

function dashboardGet(path: string, query: string): FunctionUrlEvent {
  return { rawPath: path, rawQueryString: query, headers: { host: "abc.lambda-url.eu-west-1.on.aws" }, requestContext: { http: { method: "GET" } } };
}

type P = { k: string; n: number; act?: "fail" | "delay" | "dead" };

describe("blockedKeys", () => {
  it("names a key behind a retry in backoff and one behind a Delay, with their counts; not a dead letter's key, not a key with nothing behind", async () => {
    await setupGroup(t, "bk", { group: { message: { concurrency: "ordered" }, exceptionInitialBackoff: 600_000 } });
    const stream = t.client.stream<P>("bk");
    const g = stream.consumer("g");
    const sent: [string, P][] = [
      ["a", { k: "a", n: 1, act: "fail" }], ["a", { k: "a", n: 2 }], ["a", { k: "a", n: 3 }],
      ["b", { k: "b", n: 1, act: "delay" }], ["b", { k: "b", n: 2 }],
      ["c", { k: "c", n: 1 }], ["c", { k: "c", n: 2 }],
      ["d", { k: "d", n: 1, act: "dead" }], ["d", { k: "d", n: 2 }],
      ["e", { k: "e", n: 1, act: "fail" }],
      [EVIL, { k: "z", n: 1, act: "fail" }], [EVIL, { k: "z", n: 2 }],
    ];
    const ids: Record<string, string> = {};
    for (const [key, p] of sent) {
      const r = await stream.produce(p, { key });
      ids[`${p.k}${p.n}`] = r.id;
    }
    const ran: string[] = [];
    const handler = (m: Message<P>) => {
      ran.push(`${m.payload.k}${m.payload.n}`);
      if (m.payload.act === "fail") throw new Error("downstream refused");
      if (m.payload.act === "delay") return Delay(600_000);
      if (m.payload.act === "dead") return Permanent(new Error("cannot parse"));
      return undefined;
    };
    const before = new Date(Date.now() - 60_000);
    await pollPastFence(g, handler, { drain: true, until: () => ["a1", "b1", "c2", "d2", "e1", "z1"].every((x) => ran.includes(x)) });
    expect(ran).toEqual(expect.arrayContaining(["a1", "b1", "c1", "c2", "d1", "d2", "e1"]));
    expect(ran).not.toContain("a2");
    expect(ran).not.toContain("b2");

    // A fourth message of key a, not claimed yet, waits too.
    await stream.produce({ k: "a", n: 4 }, { key: "a" });
    const blocked = await g.blockedKeys();
    expect(blocked.map((b) => [b.key, b.blockingId, b.status, b.waiting])).toEqual(
      expect.arrayContaining([["a", ids.a1, "ready", 3], ["b", ids.b1, expect.stringMatching(/^(ready|deferred)$/), 1]]),
    );
    expect(blocked.map((b) => b.key).sort()).toEqual(["a", "b", EVIL]);
    const a = blocked.find((b) => b.key === "a")!;
    expect(a.since.getTime()).toBeGreaterThan(before.getTime());
    expect(a.runsAfter!.getTime()).toBeGreaterThan(Date.now() + 500_000); // in its 10-minute backoff
    expect(a.attempts).toBe(1);
    expect((await g.progress()).blockedKeys).toBe(3);
    expect(await g.blockedKeys({ limit: 1 })).toHaveLength(1);

    // The dead letter of key d is resolved: nothing of d waits. (Its row is there, dead.)
    const n = await streamIdOf(t, "bk");
    expect(await t.sql(`SELECT status FROM ${SCHEMA}.exception_queue_${n} WHERE message_id = $1`, [ids.d1])).toEqual([{ status: "dead" }]);

    // The CLI: a table with the key's control characters escaped, and exact JSON.
    const human = await cli(["blocked", "--stream", "bk", "--group", "g"]);
    expect(human.code).toBe(0);
    expect(human.stdout).toMatch(/^KEY\s+BLOCKED BY\s+STATUS\s+ATTEMPTS\s+SINCE\s+RUN AFTER\s+WAITING/);
    expect(human.stdout).not.toContain("\u001b");
    expect(human.stdout).toContain("z\\e]0;x\\x07");
    expect(human.stdout).toMatch(new RegExp(`\\ba\\s+${ids.a1}\\s+ready\\s+1\\s+.*\\s3$`, "m"));
    const json = JSON.parse((await cli(["blocked", "--stream", "bk", "--group", "g", "--json", "--limit", "2"])).stdout) as { keys: { key: string; waiting: number }[] };
    expect(json.keys).toHaveLength(2);
    expect((await cli(["blocked", "--stream", "bk", "--group", "g", "--json"])).stdout).toContain(JSON.stringify(EVIL));

    // The dashboard's group page lists them, each linked to its blocking message.
    const db = new DatabaseProvider({ env: { DATABASE_URL: url() } });
    try {
      const page = await createDashboardHandler({ database: db })(dashboardGet("/group", "stream=bk&group=g"));
      expect(page.statusCode).toBe(200);
      expect(page.body).toContain("Blocked keys");
      expect(page.body).toContain("3 blocked key(s)");
      expect(page.body).toContain(`/message?stream=bk&amp;id=${ids.a1}`);
    } finally {
      await db.close();
    }
  });

  it("refuses a bad limit with SQL0015", async () => {
    const { g } = await setupGroup(t, "bk-bad");
    for (const bad of [0, 1.5, 1001, "3"]) expect(await codeOf(g.blockedKeys({ limit: bad as number }))).toBe("SQL0015");
    expect(await codeOf(g.blockedKeys({ lim: 3 } as never))).toBe("SQL0015");
  });
});
