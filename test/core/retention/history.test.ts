// Progress history (docs/protocol/data-model.md#progress-history): maintain() samples every group into
// progress_history_N, prunes it to 7 days and a bounded number of rows per group, history()
// reads it, and `sqlstreams status --history` draws it.
import { beforeAll, describe, expect, it } from "vitest";
import { Permanent } from "@sqlstreams/core";
import { useFreshDatabase } from "../../support/db.js";
import { spawnNode } from "../../support/processes.js";
import { SCHEMA, type TestClient, committed, groupIdOf, pollPastFence, streamIdOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();
let t: TestClient;

beforeAll(async () => {
  t = testClient(url());
  await t.client.migrate();
});

async function cli(args: string[]) {
  const child = spawnNode({ script: "packages/cli/dist/bin.js", args, env: { DATABASE_URL: url(), SQLSTREAMS_SCHEMA: undefined, NO_COLOR: "1" } });
  const exit = await child.waitForExit(30_000);
  return { code: exit.code, stdout: child.lines.join("\n"), stderr: child.stderr() };
}

describe("progress history", () => {
  it("maintain() writes one sample per group; history() returns them oldest first; the CLI draws them", async () => {
    const s = t.client.stream<{ n: number }>("hist.orders");
    await s.register();
    const g = s.consumer("billing");
    await g.register({ message: { timeout: 5_000 } });
    await s.consumer("audit").register({ message: { timeout: 5_000 } });
    await s.produceBatch(Array.from({ length: 10 }, (_, n) => ({ payload: { n } })));
    const r1 = await s.maintain();
    expect(r1.progressSampled).toBe(2);
    const [first] = await g.history();
    expect(first).toMatchObject({ head: "10", committed: "0", lag: "10", exceptions: { ready: 0, dead: 0 } });
    expect(first.sampledAt).toBeInstanceOf(Date);
    expect(first.oldestUnresolvedAgeMs).toBeGreaterThanOrEqual(0);

    await pollPastFence(g, (m) => (m.payload.n === 3 ? Permanent(new Error("bad")) : undefined), { drain: true, until: committed("10") });
    // Samples are keyed by their time: wait for the DB clock to move on before the next one.
    await t.sql("SELECT pg_sleep(0.01)");
    await t.client.maintain();
    const h = await g.history();
    expect(h.map((x) => x.lag)).toEqual(["10", "0"]);
    expect(h[1]).toMatchObject({ committed: "10", exceptions: { dead: 1 } });
    expect(h[0].sampledAt.getTime()).toBeLessThan(h[1].sampledAt.getTime());
    expect(await g.history({ limit: 1 })).toHaveLength(1);
    expect((await g.history({ limit: 1 }))[0].lag).toBe("0");
    expect(await g.history({ since: new Date(Date.now() + 3_600_000) })).toEqual([]);
    await expect(g.history({ limit: 0 })).rejects.toMatchObject({ code: "SQL0015" });

    const human = await cli(["status", "--history", "--stream", "hist.orders"]);
    expect(human.code, human.stderr).toBe(0);
    const lines = human.stdout.split("\n");
    expect(lines[0]).toMatch(/^STREAM\s+GROUP\s+SAMPLES\s+SPAN\s+LAG\s+NOW\s+THROUGHPUT\/MIN\s+NOW\s+DEAD$/);
    const billing = lines.find((l) => l.includes("billing")) ?? "";
    // Lag went from 10 to 0: a full bar then the lowest; one dead row now.
    expect(billing).toMatch(/hist\.orders\s+billing\s+2\s+\S+\s+█▁\s+0\s+\S+\s+\d+\s+▁█ 1$/);
    const json = await cli(["status", "--history", "--stream", "hist.orders", "--group", "billing", "--json"]);
    const doc = JSON.parse(json.stdout) as { groups: { group: string; samples: { lag: string }[] }[] };
    expect(doc.groups).toHaveLength(1);
    expect(doc.groups[0].samples.map((x) => x.lag)).toEqual(["10", "0"]);
    const bad = await cli(["status", "--history", "--watch"]);
    expect(bad.code).not.toBe(0);
  });

  it("is pruned to 7 days and at most 5 000 samples per group, and destroyed with its group", async () => {
    const s = t.client.stream("hist.pruned");
    await s.register();
    await s.consumer("g").register({ message: { timeout: 5_000 } });
    await s.consumer("other").register({ message: { timeout: 5_000 } });
    const n = await streamIdOf(t, "hist.pruned");
    const gid = await groupIdOf(t, "g", "hist.pruned");
    const other = await groupIdOf(t, "other", "hist.pruned");
    // 6 000 samples a minute apart for g (the oldest ~4 days back), and 3 samples of 8 days ago for other.
    await t.sql(
      `INSERT INTO ${SCHEMA}.progress_history_${n} (consumer_group_id, sampled_at, head, committed, lag)
       SELECT $1, now() - i * interval '1 minute', 0, 0, 0 FROM generate_series(1, 6000) i`,
      [gid],
    );
    await t.sql(
      `INSERT INTO ${SCHEMA}.progress_history_${n} (consumer_group_id, sampled_at, head, committed, lag)
       SELECT $1, now() - interval '8 days' - i * interval '1 minute', 0, 0, 0 FROM generate_series(1, 3) i`,
      [other],
    );
    await s.maintain();
    const rows = await t.sql<{ g: string; n: number; oldest: Date; newest: Date }>(
      `SELECT consumer_group_id::text AS g, count(*)::int AS n, min(sampled_at) AS oldest, max(sampled_at) AS newest
         FROM ${SCHEMA}.progress_history_${n} GROUP BY 1`,
    );
    const byGroup = new Map(rows.map((r) => [r.g, r]));
    expect(byGroup.get(gid)?.n).toBe(5_000);
    // The newest are kept: this run's sample and the 4 999 most recent inserted ones.
    expect(Date.now() - (byGroup.get(gid)?.oldest as Date).getTime()).toBeLessThan(5_100 * 60_000);
    expect(byGroup.get(other)?.n).toBe(1); // only this run's sample: the 8-day-old ones are gone

    await s.consumer("g").destroy();
    const left = await t.sql<{ n: number }>(`SELECT count(*)::int AS n FROM ${SCHEMA}.progress_history_${n} WHERE consumer_group_id = $1`, [gid]);
    expect(left[0].n).toBe(0);
  });
});
