// Wake on produce through `sqlstreams dev` (docs/guide/producing.md#wake-on-produce): the group's
// declared schedule runs at real speed (--speed 1) and is a yearly cron, so only a wake can run
// its handler during the test; a producer with waker "notify" (SQLSTREAMS_WAKE=notify) wakes it.
// The latency from the produce's return to the committed cursor is measured and printed.
import { setTimeout as sleep } from "node:timers/promises";
import { randomBytes } from "node:crypto";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { SqlStreams } from "@sqlstreams/core";
import { wakerFromEnv } from "@sqlstreams/aws";
import { useFreshDatabase } from "../support/db.js";
import { repoRoot, spawnNode } from "../support/processes.js";

const url = useFreshDatabase();

/** Whether the group's wake was released (its poller went idle): the next produce claims a new one. */
async function wakeReleased(c: pg.Client): Promise<boolean> {
  const r = await c.query<{ released: boolean }>(`SELECT bool_and(woken_at = '-infinity') AS released FROM sqlstreams.wake_throttle`);
  return r.rows[0].released === true;
}
const dir = join(repoRoot, "node_modules", ".cache", "sqlstreams-test", `wake-dev-${randomBytes(4).toString("hex")}`);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("sqlstreams dev honours wake on produce", () => {
  it("a produced message is handled at once, with the declared schedule far away", async () => {
    mkdirSync(join(dir, "functions", "handlers"), { recursive: true });
    writeFileSync(
      join(dir, "functions", "groups.mjs"),
      `export const groups = [{ stream: "fx.woken", group: "fx-wake", function: "functions/handlers/fx.poll", schedule: "cron(0 0 1 1 ? *)", timeout: 60000 }];
export const streams = { "fx.woken": {} };`,
    );
    writeFileSync(
      join(dir, "functions", "handlers", "fx.mjs"),
      `import { createPollHandler } from "@sqlstreams/aws";
import { groups } from "../groups.mjs";
export const poll = createPollHandler({ stream: "fx.woken", group: "fx-wake", groups, handle() {} });`,
    );
    const child = spawnNode({
      script: join(repoRoot, "packages/cli/dist/bin.js"),
      cwd: dir,
      args: ["dev", "--json", "--groups", "functions/groups.mjs", "--speed", "1", "--timeout", "300", "--log-file", join(dir, "dev.log")],
      env: { DATABASE_URL: url(), SQLSTREAMS_SCHEMA: undefined, CI: "true" },
    });
    const waker = wakerFromEnv({ SQLSTREAMS_WAKE: "notify" });
    expect(waker).toBe("notify");
    const producer = new SqlStreams({ connectionString: url(), waker: waker as "notify" });
    const reader = new SqlStreams({ connectionString: url() });
    const wakes = new pg.Client({ connectionString: url() });
    await wakes.connect();
    try {
      await child.waitFor((m) => m.event === "dev.migrated", { timeoutMs: 90_000 });
      const consumer = reader.stream("fx.woken").consumer("fx-wake");
      const latencies: number[] = [];
      for (let i = 0; i < 3; i++) {
        const { id } = await producer.stream("fx.woken").produce({ i });
        const t0 = performance.now();
        const deadline = Date.now() + 60_000;
        while (BigInt((await consumer.progress()).committed) < BigInt(id)) {
          if (Date.now() > deadline) throw new Error(`message ${id} not handled within 60 s: ${child.stderr()}`);
          await sleep(20);
        }
        latencies.push(Math.round(performance.now() - t0));
        // The woken poller releases its wake once idle; a produce before that rides along with it
        // (no new wake, by design). Wait for the release, so each produce here wakes the group.
        while (!(await wakeReleased(wakes))) {
          if (Date.now() > deadline) throw new Error(`the wake of message ${id} was not released within 60 s: ${child.stderr()}`);
          await sleep(20);
        }
      }
      console.log(`wake on produce through sqlstreams dev: produce → committed in ${latencies.join(", ")} ms`);
      child.process.kill("SIGINT");
      const exit = await child.waitForExit(60_000);
      expect(exit.code, child.stderr()).toBe(0);
      const summary = child.messages.find((m) => m.event === "dev.summary") as { groups: { wakes: number; invocations: number }[] } | undefined;
      expect(summary?.groups[0].wakes).toBeGreaterThanOrEqual(3);
      expect(child.messages.filter((m) => m.event === "dev.wake").length).toBeGreaterThanOrEqual(3);
    } finally {
      await producer.close();
      await reader.close();
      await wakes.end();
      if (child.process.exitCode === null) await child.kill("SIGKILL");
    }
  }, 240_000);
});
