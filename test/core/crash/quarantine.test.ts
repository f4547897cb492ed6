// Quarantine and the kill backstop (docs/protocol/crash-recovery.md#a-crash, docs/protocol/crash-recovery.md#quarantine, docs/protocol/crash-recovery.md#the-kill-backstop, docs/protocol/exception-lifecycle.md#first-delivery, docs/protocol/exception-lifecycle.md#retries; C11), proven with
// real child processes: a message whose handler kills the process (SIGKILL) every time it runs.
// Each poll is a fresh child process, as each Lambda invocation would be.
import { beforeAll, describe, expect, it } from "vitest";
import type { CycleReport } from "@sqlstreams/core";
import { useFreshDatabase } from "../../support/db.js";
import { checkInvariants } from "../../support/invariants.js";
import { spawnPoller, type ExitInfo, type NodeChild } from "../../support/processes.js";
import { SCHEMA, type TestClient, count, cursor, deliveryLogRows, exceptionRows, expireLeases, groupIdOf, makeDue, setupProduced, streamIdOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();


interface Run {
  child: NodeChild;
  exit: ExitInfo;
  /** [id, attempt] of every handler start, in order. */
  starts: [string, number][];
  codes: string[];
  report: CycleReport | undefined;
}

/** Runs one poll (or drain) in a fresh process to its end: a crash or a normal exit. */
async function run(stream: string, method: "poll" | "drain", crash: string[], opts: Record<string, unknown> = { batchLimit: 4 }): Promise<Run> {
  // Ids listed in `crash` make the child SIGKILL itself when their handler runs.
  const child = spawnPoller(url(), { stream, method, opts, actions: Object.fromEntries(crash.map((id) => [id, "crash"])) }, `${method} ${stream}`);
  const exit = await child.waitForExit(30_000);
  if (exit.signal === null && exit.code !== 0) throw new Error(`child failed: ${child.stderr()}`);
  return {
    child,
    exit,
    starts: child.messages.filter((m) => m.event === "start").map((m) => [m.id as string, m.attempt as number]),
    codes: child.messages.filter((m) => m.event === "log").map((m) => m.code as string),
    report: child.messages.find((m) => m.event === "report")?.report as CycleReport | undefined,
  };
}

const crashed = (r: Run) => r.exit.signal === "SIGKILL";
const QUARANTINED = "quarantined: range reclaimed too many times";

const expireRanges = (t: TestClient, n: string) => t.sql(`UPDATE ${SCHEMA}.claim_lease_${n} SET expires_at = now() - interval '1 millisecond'`);

let t: TestClient;
beforeAll(async () => {
  t = testClient(url());
  await t.client.migrate();
});

describe("quarantine of a range that keeps crashing the process", () => {
  it("C11: three crash runs, quarantine on reclaim 3, neighbours succeed, the crashing message is charged through lease expiry and killed at attempts 3", async () => {
    const { g, n, gid } = await setupProduced(t, "c11", { message: { timeout: 200 } }, 4);
    const starts: [string, number][] = [];
    const go = async (method: "poll" | "drain") => {
      const r = await run("c11", method, ["2"]);
      starts.push(...r.starts);
      return r;
    };

    // First delivery, reclaim 1, reclaim 2: each runs 1 and dies on 2.
    for (let k = 0; k < 3; k++) {
      if (k > 0) await expireRanges(t, n);
      const r = await go(k === 0 ? "drain" : "poll"); // drain: the first claim may wait on the fence
      expect(crashed(r)).toBe(true);
      expect(r.starts).toEqual([["1", 0], ["2", 0]]);
      const [l] = await t.sql<{ low: string; high: string; reclaims: number }>(`SELECT low::text, high::text, reclaims FROM ${SCHEMA}.claim_lease_${n}`);
      expect(l).toEqual({ low: "0", high: "4", reclaims: k });
      if (k > 0) expect(r.codes).toContain("SQL0035");
      await checkInvariants(t, n);
    }

    // Reclaim 3 quarantines instead of running: one ready row per message, attempts 0.
    await expireRanges(t, n);
    const q = await go("poll");
    expect(crashed(q)).toBe(false);
    expect(q.starts).toEqual([]);
    expect(q.report).toMatchObject({ rangesReclaimed: 1, rangesQuarantined: 1, started: 0 });
    expect(q.codes).toEqual(expect.arrayContaining(["SQL0035", "SQL0036"]));
    expect(await count(t, `claim_lease_${n}`)).toBe(0);
    const exceptionQueue = await exceptionRows(t, n, gid);
    expect(exceptionQueue.map((e) => [e.message_id, e.status, e.attempts, e.delays, e.last_error, e.concurrency, e.lease_token])).toEqual(
      ["1", "2", "3", "4"].map((id) => [id, "ready", 0, 0, QUARANTINED, "parallel", null]),
    );
    for (const e of exceptionQueue) expect(Math.abs(e.gap_ms)).toBeLessThanOrEqual(250); // can_run_after now()
    expect((await deliveryLogRows(t, n, gid)).map((d) => [d.message_id, d.attempt, d.status, d.error])).toEqual(
      ["1", "2", "3", "4"].map((id) => [id, 0, "failure", QUARANTINED]),
    );
    expect(await cursor(t, n, gid)).toMatchObject({ claimed: "4", committed: "0" });
    await checkInvariants(t, n);

    // Exception phase: 1 succeeds and is deleted, 2 kills the process while 3 and 4 are reserved.
    const x = await go("drain");
    expect(crashed(x)).toBe(true);
    expect(x.starts).toEqual([["1", 0], ["2", 0]]);
    let rows = await exceptionRows(t, n, gid);
    expect(rows.map((e) => [e.message_id, e.status, e.attempts, e.lease_token !== null])).toEqual([
      ["2", "inflight", 0, true], ["3", "ready", 0, true], ["4", "ready", 0, true],
    ]);
    const [{ run_ms }] = await t.sql<{ run_ms: number }>(
      `SELECT (EXTRACT(EPOCH FROM (lease_expires_at - updated_at)) * 1000)::float8 AS run_ms FROM ${SCHEMA}.exception_queue_${n} WHERE message_id = 2`,
    );
    expect(run_ms).toBe(200 + 2_000); // the run lease: timeout + recordMargin
    await checkInvariants(t, n);

    // After the leases expire: 2 is charged (ready, attempts 1, initial backoff, DL expired);
    // 3 and 4 were only reserved, so they run at attempt 0 and succeed.
    await expireLeases(t, n);
    const c1 = await go("drain");
    expect(crashed(c1)).toBe(false);
    expect(c1.starts).toEqual([["3", 0], ["4", 0]]);
    expect(c1.report).toMatchObject({ leaseExpired: 1, killed: 0, succeeded: 2 });
    rows = await exceptionRows(t, n, gid);
    expect(rows.map((e) => [e.message_id, e.status, e.attempts, e.last_error, e.lease_token])).toEqual([["2", "ready", 1, QUARANTINED, null]]);
    expect(Math.abs(rows[0].gap_ms - 5_000)).toBeLessThanOrEqual(250);
    expect((await deliveryLogRows(t, n, gid, "2")).map((d) => [d.attempt, d.status])).toEqual([[0, "failure"], [0, "expired"]]);
    for (const id of ["3", "4"]) expect((await deliveryLogRows(t, n, gid, id)).map((d) => [d.attempt, d.status])).toEqual([[0, "failure"]]);

    // 2 crashes again at attempts 1, 2 and 3; each expiry charges it; the last one kills it.
    for (let a = 1; a <= 3; a++) {
      await makeDue(t, n);
      const r = await go("drain");
      expect(crashed(r)).toBe(true);
      expect(r.starts).toEqual([["2", a]]);
      expect((await exceptionRows(t, n, gid)).map((e) => [e.status, e.attempts])).toEqual([["inflight", a]]);
      await expireLeases(t, n);
      const c = await go("drain");
      expect(crashed(c)).toBe(false);
      expect(c.starts).toEqual([]);
      if (a < 3) {
        expect(c.report).toMatchObject({ leaseExpired: 1, killed: 0 });
        const [e] = await exceptionRows(t, n, gid);
        expect([e.status, e.attempts]).toEqual(["ready", a + 1]);
        expect(Math.abs(e.gap_ms - 1_000 * 2 ** (a - 1))).toBeLessThanOrEqual(250);
      } else {
        expect(c.report).toMatchObject({ leaseExpired: 0, killed: 1, dead: 1 });
        expect(c.codes).toContain("SQL0038");
      }
      await checkInvariants(t, n);
    }
    const [dead] = await exceptionRows(t, n, gid);
    expect(dead).toMatchObject({ message_id: "2", status: "dead", attempts: 3, delays: 0, lease_token: null, last_error: `${QUARANTINED} [killed: crash-loop hit max attempts]` });
    expect((await deliveryLogRows(t, n, gid, "2")).map((d) => [d.attempt, d.status, d.error])).toEqual([
      [0, "failure", QUARANTINED],
      [0, "expired", "lease expired before an outcome was recorded"],
      [1, "expired", "lease expired before an outcome was recorded"],
      [2, "expired", "lease expired before an outcome was recorded"],
      [3, "killed", `${QUARANTINED} [killed: crash-loop hit max attempts]`],
    ]);

    // The whole history: 2 ran seven times and never recorded a run; its neighbours all succeeded.
    expect(starts.filter(([id]) => id === "2").map(([, a]) => a)).toEqual([0, 0, 0, 0, 1, 2, 3]);
    expect(starts.filter(([id]) => id !== "2")).toEqual([["1", 0], ["1", 0], ["1", 0], ["1", 0], ["3", 0], ["4", 0]]);
    expect(await cursor(t, n, gid)).toMatchObject({ claimed: "4", committed: "4" });
    const p = await g.progress();
    expect(p).toMatchObject({ lag: "0", openLeases: 0, exceptions: { ready: 0, inflight: 0, deferred: 0, dead: 1 } });
    await checkInvariants(t, n);
  });

  it("C11 variant: a compacted non-head id in the range gets no row (maxRangeReclaims 1)", async () => {
    const s = t.client.stream<{ i: number }>("c11.compact");
    await s.register();
    const g = s.consumer("g");
    await g.register({ message: { timeout: 200 }, maxRangeReclaims: 1 });
    await s.produce({ i: 1 }, { key: "a" });
    await s.produce({ i: 2 }, { key: "b" });
    await s.produce({ i: 3 }, { key: "k", compaction: { rank: 1 } });
    await s.produce({ i: 4 });
    await s.produce({ i: 5 }, { key: "k", compaction: { rank: 2 } }); // the head of k, outside (0, 4]
    const n = await streamIdOf(t, "c11.compact");
    const gid = await groupIdOf(t, "g", "c11.compact");
    const first = await run("c11.compact", "drain", ["2"]);
    expect(crashed(first)).toBe(true);
    expect(first.starts).toEqual([["1", 0], ["2", 0]]);
    await expireRanges(t, n);
    const q = await run("c11.compact", "poll", ["2"]);
    expect(q.report).toMatchObject({ rangesReclaimed: 1, rangesQuarantined: 1, started: 0 });
    expect((await exceptionRows(t, n, gid)).map((e) => [e.message_id, e.status, e.attempts, e.message_key])).toEqual([
      ["1", "ready", 0, "a"], ["2", "ready", 0, "b"], ["4", "ready", 0, null],
    ]);
    expect((await deliveryLogRows(t, n, gid)).map((d) => d.message_id)).toEqual(["1", "2", "4"]);
    await checkInvariants(t, n);
  });

  it("C11 variant: with concurrencyOverride ordered the quarantined rows store ordered and their keys", async () => {
    const s = t.client.stream<{ i: number }>("c11.ordered");
    await s.register();
    const g = s.consumer("g");
    await g.register({ message: { timeout: 200 }, concurrencyOverride: "ordered", maxRangeReclaims: 1 });
    for (const [i, key] of [[1, "a"], [2, "b"], [3, "a"], [4, "b"]] as const) await s.produce({ i }, { key });
    const n = await streamIdOf(t, "c11.ordered");
    const gid = await groupIdOf(t, "g", "c11.ordered");
    const first = await run("c11.ordered", "drain", ["2"]);
    expect(crashed(first)).toBe(true);
    await expireRanges(t, n);
    await t.sql(`UPDATE ${SCHEMA}.message_key_lease_${n} SET expires_at = now() - interval '1 millisecond'`);
    const q = await run("c11.ordered", "poll", ["2"]);
    expect(q.report).toMatchObject({ rangesQuarantined: 1, started: 0 });
    expect((await exceptionRows(t, n, gid)).map((e) => [e.message_id, e.status, e.concurrency, e.message_key])).toEqual([
      ["1", "ready", "ordered", "a"], ["2", "ready", "ordered", "b"], ["3", "ready", "ordered", "a"], ["4", "ready", "ordered", "b"],
    ]);
    // Key a proceeds in order on its own; key b is held behind the crashing message 2.
    const seen: string[] = [];
    await g.drain((m) => {
      if (m.id === "2") throw new Error("still broken");
      seen.push(m.id);
    }, { batchLimit: 4 });
    expect(seen).toEqual(["1", "3"]);
    // 4 started in 2's group (both clean) and was put back when 2 failed: deferred behind it, uncharged.
    expect((await exceptionRows(t, n, gid)).map((e) => [e.message_id, e.status, e.attempts])).toEqual([["2", "ready", 1], ["4", "deferred", 0]]);
    await checkInvariants(t, n);
  });
});
