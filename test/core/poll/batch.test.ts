// Batch handlers (docs/guide/consuming.md#batch-handlers): pollBatch/drainBatch and
// createPollHandler({ handleBatch }) against real Postgres. Per-message outcomes, per-key rules
// for ordered and exclusive groups, whole-batch failures (throw, wrong shape, timeout), typed
// streams, a batch killed mid-run in a real child process, and Delay's long horizons.
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { Delay, Permanent, defineStream, type Message, type StandardSchema } from "@sqlstreams/core";
import { DatabaseProvider, createPollHandler, localContext } from "@sqlstreams/aws";
import { useFreshDatabase } from "../../support/db.js";
import { spawnNode } from "../../support/processes.js";
import { codedError, count, deliveryLogRows, exceptionRows, expireLeases, groupIdOf, makeDue, streamIdOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();

async function setup(name: string, config: Record<string, unknown> = {}) {
  const t = testClient(url());
  await t.client.migrate();
  const s = t.client.stream<{ n: number }>(name);
  await s.register();
  const g = s.consumer("g");
  await g.register({ exceptionInitialBackoff: 3_600_000, ...config });
  return { t, s, g, n: await streamIdOf(t, name), gid: await groupIdOf(t, "g", name) };
}

describe("drainBatch", () => {
  it("250 messages, maxBatch 100: batches of at most 100; an Error retries, a Delay runs later, a Permanent is dead, the rest succeed", async () => {
    const { t, s, g, n, gid } = await setup("batch.outcomes");
    for (let i = 0; i < 250; i += 125) await s.produceBatch(Array.from({ length: 125 }, (_, j) => ({ payload: { n: i + j + 1 } })));
    const sizes: number[] = [];
    const runs = new Map<string, number[]>();
    const handler = (msgs: Message<{ n: number }>[]) => {
      sizes.push(msgs.length);
      for (const m of msgs) runs.set(m.id, [...(runs.get(m.id) ?? []), m.attempt]);
      return msgs.map((m) => {
        if (m.attempt > 0) return undefined;
        if (m.id === "7") return new Error("bulk API refused 7");
        if (m.id === "8") return Delay(60_000);
        if (m.id === "9") return Permanent("9 cannot succeed");
        return undefined;
      });
    };
    const r = await g.drainBatch(handler, { maxBatch: 100 });
    expect(Math.max(...sizes)).toBe(100);
    expect(sizes.reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(250);
    expect(runs.size).toBe(250);
    expect(r).toMatchObject({ succeeded: 247, failed: 1, delayed: 1, dead: 1 });

    const rows = await exceptionRows(t, n, gid);
    expect(rows.map((x) => [x.message_id, x.status, x.attempts, x.delays])).toEqual([
      ["7", "ready", 1, 0], ["8", "ready", 1, 1], ["9", "dead", 0, 0],
    ]);
    expect(rows[0].last_error).toContain("bulk API refused 7");
    expect(rows[1].gap_ms).toBeGreaterThan(59_000);
    expect(rows[2].last_error).toMatch(/^SQL0026 permanent: .*9 cannot succeed/);
    expect((await deliveryLogRows(t, n, gid)).map((x) => [x.message_id, x.attempt, x.status])).toEqual([
      ["7", 0, "failure"], ["8", 0, "delayed"], ["9", 0, "failure"],
    ]);

    // Made due, the retry of 7 runs; 8 is not due for a minute and does not run.
    await t.sql(`UPDATE sqlstreams.exception_queue_${n} SET can_run_after = now() WHERE message_id = 7`);
    const r2 = await g.drainBatch(handler, { maxBatch: 100 });
    expect(r2.succeeded).toBe(1);
    expect(runs.get("7")).toEqual([0, 1]);
    expect(runs.get("8")).toEqual([0]);
    // Made due, 8 runs again; 9 stays dead.
    await makeDue(t, n);
    const r3 = await g.drainBatch(handler, { maxBatch: 100 });
    expect(r3.succeeded).toBe(1);
    expect(runs.get("8")).toEqual([0, 1]);
    expect(runs.get("9")).toEqual([0]);
    expect((await exceptionRows(t, n, gid)).map((x) => [x.message_id, x.status])).toEqual([["9", "dead"]]);
    expect((await g.progress()).lag).toBe("0");
  });

  it("pollBatch: one poll claims maxBatch ids by default and hands them to one call", async () => {
    const { s, g } = await setup("batch.poll");
    await s.produceBatch(Array.from({ length: 50 }, (_, i) => ({ payload: { n: i } })));
    const calls: string[][] = [];
    const r = await g.pollBatch((msgs) => void calls.push(msgs.map((m) => m.id)), { maxBatch: 20 });
    expect(calls).toEqual([Array.from({ length: 20 }, (_, i) => String(i + 1))]);
    expect(r.succeeded).toBe(20);
    // concurrency below maxBatch bounds a batch too.
    calls.length = 0;
    await g.pollBatch((msgs) => void calls.push(msgs.map((m) => m.id)), { maxBatch: 20, concurrency: 5 });
    expect(calls.map((c) => c.length)).toEqual([5, 5, 5, 5]);
  });

  it("a throw fails every message of the batch, retryably; the next drain delivers them", async () => {
    const { t, s, g, n, gid } = await setup("batch.throw");
    await s.produceBatch(Array.from({ length: 30 }, (_, i) => ({ payload: { n: i } })));
    let calls = 0;
    const r = await g.drainBatch(() => {
      calls++;
      throw new Error("warehouse down");
    }, { maxBatch: 50 });
    expect(calls).toBe(1);
    expect(r).toMatchObject({ failed: 30, succeeded: 0 });
    const rows = await exceptionRows(t, n, gid);
    expect(rows).toHaveLength(30);
    expect(rows.every((x) => x.status === "ready" && x.attempts === 1 && (x.last_error ?? "").includes("warehouse down"))).toBe(true);
    const seen: string[] = [];
    await makeDue(t, n);
    const r2 = await g.drainBatch(async (msgs) => {
      for (const m of msgs) seen.push(m.id);
      await sleep(1);
    });
    expect(r2.succeeded).toBe(30);
    expect(seen).toHaveLength(30);
    expect(await count(t, `exception_queue_${n}`)).toBe(0);
  });

  it("a result of the wrong length or with a foreign entry fails the messages it covers with SQL0080", async () => {
    const { t, s, g, n, gid } = await setup("batch.shape");
    await s.produceBatch(Array.from({ length: 5 }, (_, i) => ({ payload: { n: i } })));
    const r = await g.drainBatch((msgs) => msgs.slice(1).map(() => undefined), { maxBatch: 10 });
    expect(r.failed).toBe(5);
    const rows = await exceptionRows(t, n, gid);
    expect(rows.every((x) => (x.last_error ?? "").includes("SQL0080") && x.last_error?.includes("array of 4 entries for 5 messages"))).toBe(true);
    await makeDue(t, n);
    const r2 = await g.drainBatch((msgs) => msgs.map((m) => (m.id === "2" ? ("nope" as unknown as Error) : undefined)));
    expect(r2).toMatchObject({ succeeded: 4, failed: 1 });
    const left = await exceptionRows(t, n, gid);
    expect(left.map((x) => [x.message_id, x.attempts])).toEqual([["2", 2]]);
    expect(left[0].last_error).toContain("SQL0080 the batch handler's entry for message 2 is a string");
  });

  it("options are validated before anything is claimed", async () => {
    const { t, g, n } = await setup("batch.options");
    for (const bad of [{ maxBatch: 0 }, { maxBatch: 1_001 }, { maxBatch: 1.5 }, { concurrency: 0 }, { bogus: 1 }]) {
      expect((await codedError(g.drainBatch(() => {}, bad as never))).code).toBe("SQL0015");
    }
    expect((await codedError(g.pollBatch("x" as never))).code).toBe("SQL0015");
    expect(await count(t, `claim_lease_${n}`)).toBe(0);
  });

  it("a batch that outlives the smallest timeout among its messages fails as a whole (SQL0027), every member's signal aborted", async () => {
    const { t, s, g, n, gid } = await setup("batch.timeout", { message: { timeout: 5_000 } });
    // One member's timeout is 300 ms, the others' 5 s: the batch's is 300 ms.
    await s.produceBatch(Array.from({ length: 6 }, (_, i) => ({ payload: { n: i }, ...(i === 2 ? { message: { timeout: 300 } } : {}) })));
    let calls = 0;
    let ended: (aborted: boolean) => void = () => {};
    const abortedAll = new Promise<boolean>((resolve) => (ended = resolve));
    const r = await g.drainBatch(async (msgs) => {
      calls++;
      await sleep(600);
      ended(msgs.every((m) => m.signal.aborted && String(m.signal.reason).includes("SQL0027")));
      return msgs.map(() => undefined);
    }, { maxBatch: 10 });
    expect(calls).toBe(1);
    // The drain ended at the timeout; the handler, abandoned, finishes later and changes nothing.
    expect(await abortedAll).toBe(true);
    expect(r.failed).toBe(6);
    const rows = await exceptionRows(t, n, gid);
    expect(rows).toHaveLength(6);
    expect(rows.every((x) => x.status === "ready" && (x.last_error ?? "").includes("SQL0027"))).toBe(true);
    expect(rows.filter((x) => x.last_error?.includes("the batch did not finish within the smallest timeout"))).toHaveLength(5);
  });
});

describe("per-key rules", () => {
  it("ordered: no two of one key in a batch, and a key's messages run in order when one in the middle fails once", async () => {
    const { t, s, g, n } = await setup("batch.ordered", { concurrencyOverride: "ordered" });
    const keys = ["a", "b", "c", "d"];
    await s.produceBatch(Array.from({ length: 40 }, (_, i) => ({ payload: { n: i }, key: keys[i % 4] })));
    const failOnce = "18"; // key b, its fifth message
    const succeeded = new Map<string, number[]>();
    let sameKeyInBatch = false;
    const handler = async (msgs: Message<{ n: number }>[]) => {
      const ks = msgs.map((m) => m.key);
      if (new Set(ks).size !== ks.length) sameKeyInBatch = true;
      await sleep(2);
      return msgs.map((m) => {
        if (m.id === failOnce && m.attempt === 0) return new Error("once");
        succeeded.set(m.key as string, [...(succeeded.get(m.key as string) ?? []), Number(m.id)]);
        return undefined;
      });
    };
    for (let i = 0; i < 20 && [...succeeded.values()].flat().length < 40; i++) {
      await g.drainBatch(handler, { maxBatch: 100 });
      await makeDue(t, n);
    }
    expect(sameKeyInBatch).toBe(false);
    for (const [k, i] of keys.map((k, i) => [k, i] as const)) {
      const expected = Array.from({ length: 10 }, (_, j) => 4 * j + i + 1);
      expect(succeeded.get(k)).toEqual(expected);
    }
    expect((await g.progress()).lag).toBe("0");
  });

  it("exclusive: no two of one key in a batch or in two batches running at once, across two drains", async () => {
    const { t, s } = await setup("batch.exclusive", { concurrencyOverride: "exclusive" });
    const t2 = testClient(url());
    const keys = ["a", "b", "c", "d", "e"];
    await s.produceBatch(Array.from({ length: 200 }, (_, i) => ({ payload: { n: i }, key: keys[i % 5] })));
    const running = new Map<string, number>();
    let violations = 0;
    let batches = 0;
    const seen = new Set<string>();
    const handler = async (msgs: Message<{ n: number }>[]) => {
      batches++;
      const ks = msgs.map((m) => m.key as string);
      if (new Set(ks).size !== ks.length) violations++;
      for (const k of ks) {
        if ((running.get(k) ?? 0) > 0) violations++;
        running.set(k, (running.get(k) ?? 0) + 1);
      }
      await sleep(5);
      for (const k of ks) running.set(k, (running.get(k) as number) - 1);
      for (const m of msgs) seen.add(m.id);
    };
    const g1 = t.client.stream<{ n: number }>("batch.exclusive").consumer("g");
    const g2 = t2.client.stream<{ n: number }>("batch.exclusive").consumer("g");
    for (let i = 0; i < 30 && seen.size < 200; i++) {
      await Promise.all([g1.drainBatch(handler, { maxBatch: 3, concurrency: 12 }), g2.drainBatch(handler, { maxBatch: 3, concurrency: 12 })]);
    }
    expect(seen.size).toBe(200);
    expect(batches).toBeGreaterThan(1);
    expect(violations).toBe(0);
  });
});

describe("typed streams", () => {
  it("a message failing the schema is dead alone (SQL0068); the others are batched", async () => {
    const schema: StandardSchema<{ n: number }> = {
      "~standard": {
        version: 1, vendor: "test",
        validate: (v) => (typeof (v as { n?: unknown })?.n === "number" ? { value: v as { n: number } } : { issues: [{ message: "n must be a number", path: ["n"] }] }),
      },
    };
    const { t } = await setup("batch.typed");
    const raw = t.client.stream("batch.typed");
    await raw.produceBatch([{ payload: { n: 1 } }, { payload: { n: "two" } }, { payload: { n: 3 } }]);
    const typed = testClient(url()).client.stream(defineStream("batch.typed", { schema })).consumer("g");
    const batches: number[][] = [];
    const r = await typed.drainBatch((msgs) => void batches.push(msgs.map((m) => m.payload.n)));
    expect(batches).toEqual([[1, 3]]);
    expect(r).toMatchObject({ succeeded: 2, dead: 1 });
    const n = await streamIdOf(t, "batch.typed");
    const rows = await exceptionRows(t, n, await groupIdOf(t, "g", "batch.typed"));
    expect(rows.map((x) => [x.message_id, x.status])).toEqual([["2", "dead"]]);
    expect(rows[0].last_error).toContain("SQL0068");
  });
});

describe("crash", () => {
  it("a batch killed mid-run (SIGKILL of the process) leaves every message to be delivered after its lease expires", async () => {
    const { t, s, g, n } = await setup("batch.crash");
    await s.produceBatch(Array.from({ length: 40 }, (_, i) => ({ payload: { n: i } })));
    const child = spawnNode({
      name: "batch-crash",
      env: { DATABASE_URL: url() },
      source: `
        import { SqlStreams } from "@sqlstreams/core";
        const client = new SqlStreams({ connectionString: process.env.DATABASE_URL, logger: () => {} });
        const g = client.stream("batch.crash").consumer("g");
        await g.drainBatch(async (msgs) => {
          process.stdout.write(JSON.stringify({ event: "batch", ids: msgs.map((m) => m.id) }) + "\\n");
          await new Promise(() => {});
        }, { maxBatch: 25 });
      `,
    });
    const first = await child.waitFor({ event: "batch" });
    expect((first.ids as string[]).length).toBeGreaterThan(0);
    const exit = await child.kill();
    expect(exit.signal).toBe("SIGKILL");
    expect(await count(t, `claim_lease_${n}`)).toBe(1);
    // While the lease holds, the killed batch's messages are not handed out again.
    const seen = new Set<string>();
    await g.drainBatch((msgs) => void msgs.forEach((m) => seen.add(m.id)));
    expect((first.ids as string[]).filter((id) => seen.has(id))).toEqual([]);
    await expireLeases(t, n);
    for (let i = 0; i < 10 && seen.size < 40; i++) {
      await g.drainBatch((msgs) => void msgs.forEach((m) => seen.add(m.id)));
    }
    expect(seen.size).toBe(40);
    expect((await g.progress()).lag).toBe("0");
    expect(await count(t, `claim_lease_${n}`)).toBe(0);
  });
});

describe("createPollHandler({ handleBatch })", () => {
  it("drains the group in batches; handle and handleBatch are exclusive", async () => {
    const { s, g } = await setup("batch.lambda", { message: { timeout: 5_000 } });
    await s.produceBatch(Array.from({ length: 120 }, (_, i) => ({ payload: { n: i } })));
    const provider = new DatabaseProvider({ env: { DATABASE_URL: url() }, logger: () => {} });
    const sizes: number[] = [];
    const handler = createPollHandler<{ n: number }>({
      stream: "batch.lambda", group: "g", database: provider, log: () => {}, metrics: false, maxBatch: 50,
      handleBatch: (msgs) => msgs.map((m) => (sizes.push(msgs.length), m.payload.n === 5 ? Permanent("five") : undefined)),
    });
    try {
      const report = await handler({ stream: "batch.lambda", group: "g" }, localContext(30_000));
      expect(report).toMatchObject({ succeeded: 119, dead: 1, idle: true });
      expect(Math.max(...sizes)).toBe(50);
      expect((await g.progress()).lag).toBe("0");
    } finally {
      await provider.close();
    }
    expect(() => createPollHandler({ stream: "batch.lambda", group: "g", handle: () => {}, handleBatch: () => {} })).toThrow(/exactly one/);
    expect(() => createPollHandler({ stream: "batch.lambda", group: "g" })).toThrow(/exactly one/);
    expect(() => createPollHandler({ stream: "batch.lambda", group: "g", handle: () => {}, maxBatch: 5 })).toThrow(/maxBatch/);
  });
});

describe("Delay horizons", () => {
  it("Delay accepts days and months; can_run_after is set on the database clock", async () => {
    const { t, s, g, n, gid } = await setup("batch.delay");
    await s.produceBatch([{ payload: { n: 1 } }, { payload: { n: 2 } }]);
    const day = 86_400_000;
    await g.drainBatch((msgs) => msgs.map((m) => (m.id === "1" ? Delay(90 * day) : Delay(365 * day))));
    const rows = await t.sql<{ message_id: string; days: number }>(
      `SELECT message_id::text, EXTRACT(EPOCH FROM (can_run_after - now())) / 86400 AS days FROM sqlstreams.exception_queue_${n}
        WHERE consumer_group_id = $1 ORDER BY message_id`, [gid],
    );
    expect(rows.map((r) => [r.message_id, Math.round(Number(r.days))])).toEqual([["1", 90], ["2", 365]]);
    expect(() => Delay(366 * day)).toThrow(/SQL0015|up to/);
  });
});
