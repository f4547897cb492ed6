// Exception-row leases after a crash (docs/protocol/crash-recovery.md#the-kill-backstop, docs/protocol/exception-lifecycle.md#retries, docs/protocol/crash-recovery.md#a-crash; C12, C13): a SIGKILLed
// poller charges only the row whose handler had started, and only once its run lease expired;
// rows it had merely reserved come back uncharged; a run that outlived its lease records nothing.
import { beforeAll, describe, expect, it } from "vitest";
import type { CycleReport, Message } from "@sqlstreams/core";
import { useFreshDatabase } from "../../support/db.js";
import { checkInvariants } from "../../support/invariants.js";
import { type NodeChild, type PollerConfig, spawnPoller } from "../../support/processes.js";
import { SCHEMA, type TestClient, cursor, deliveryLogRows, exceptionRows, makeDue, setupProduced, testClient } from "../../support/streams.js";

const url = useFreshDatabase();

// A poller in a child process (support/poller-child.ts). Per id: "hang" blocks the event loop
// until the process is killed; "waitfail" awaits a "go" line on stdin and then throws.

const poller = (cfg: PollerConfig): NodeChild => spawnPoller(url(), cfg);

async function leaseMs(t: TestClient, n: string) {
  return t.sql<{ message_id: string; status: string; lease_token: string | null; run_ms: number | null; res_ms: number | null }>(
    `SELECT message_id::text, status, lease_token::text,
            (EXTRACT(EPOCH FROM (lease_expires_at - updated_at)) * 1000)::float8 AS run_ms,
            (EXTRACT(EPOCH FROM (lease_expires_at - (SELECT updated_at FROM ${SCHEMA}.exception_queue_${n} WHERE status = 'inflight'))) * 1000)::float8 AS res_ms
       FROM ${SCHEMA}.exception_queue_${n} ORDER BY message_id`,
  );
}

/** A stream whose messages 1..k all failed their first delivery: k ready rows at attempts 1, due now. */
async function failedRows(t: TestClient, name: string, k: number, config: Record<string, unknown>) {
  const { g, n, gid } = await setupProduced(t, name, config, k);
  const r = await g.drain(() => {
    throw new Error("first failure");
  });
  expect(r.failed).toBe(k);
  await makeDue(t, n);
  return { g, n, gid };
}

let t: TestClient;
beforeAll(async () => {
  t = testClient(url());
  await t.client.migrate();
});

describe("exception-row leases across a crash", () => {
  it("C12: a poller killed while row 1 runs leaves 1 inflight and 2, 3 reserved; expiry charges 1 only, 2 and 3 run uncharged", async () => {
    const { g, n, gid } = await failedRows(t, "c12", 3, { message: { timeout: 200 } });
    const child = poller({ stream: "c12", group: "g", opts: { batchLimit: 3, concurrency: 1 }, actions: { "1": "hang" } });
    await child.waitFor({ event: "start", id: "1" });
    expect((await child.kill()).signal).toBe("SIGKILL");

    // Row 1 holds a run lease of timeout + recordMargin; 2 and 3 a reservation of
    // Tmax × ceil(3 / 1) + recordMargin taken just before 1 started. Nothing else changed.
    const ls = await leaseMs(t, n);
    expect(ls.map((r) => [r.message_id, r.status, r.lease_token !== null])).toEqual([["1", "inflight", true], ["2", "ready", true], ["3", "ready", true]]);
    expect(ls[0].run_ms).toBe(2_200);
    for (const r of ls.slice(1)) expect(Math.abs((r.res_ms as number) - 2_600)).toBeLessThanOrEqual(250);
    expect((await exceptionRows(t, n, gid)).map((e) => e.attempts)).toEqual([1, 1, 1]);
    const deliveryLogBefore = await deliveryLogRows(t, n, gid);
    await checkInvariants(t, n);

    // Before expiry no poll touches them.
    const calls: Message<{ i: number }>[] = [];
    const h = (m: Message<{ i: number }>) => void calls.push(m);
    expect(await g.poll(h, { batchLimit: 3 })).toMatchObject({ idle: true, leaseExpired: 0, started: 0 });

    // The run lease of 1 expires: it is charged (attempts 2, backoff n = 0 ⇒ 1 000 ms, DL expired).
    // 2 and 3 are still reserved by the dead poller: not selectable yet, and not charged.
    await t.sql(`UPDATE ${SCHEMA}.exception_queue_${n} SET lease_expires_at = now() - interval '1 millisecond' WHERE status = 'inflight'`);
    const e1 = await g.poll(h, { batchLimit: 3 });
    expect(e1).toMatchObject({ leaseExpired: 1, killed: 0, started: 0 });
    expect(calls).toEqual([]);
    const rows = await exceptionRows(t, n, gid);
    expect(rows.map((e) => [e.message_id, e.status, e.attempts, e.lease_token === null])).toEqual([
      ["1", "ready", 2, true], ["2", "ready", 1, false], ["3", "ready", 1, false],
    ]);
    expect(Math.abs(rows[0].gap_ms - 1_000)).toBeLessThanOrEqual(250);
    const dlAfter = await deliveryLogRows(t, n, gid);
    expect(dlAfter.slice(deliveryLogBefore.length).map((d) => [d.message_id, d.attempt, d.status, d.error])).toEqual([
      ["1", 1, "expired", "lease expired before an outcome was recorded"],
    ]);
    await checkInvariants(t, n);

    // Once the reservations expire, 2 and 3 run at the attempt they had, with no DL row of their own.
    await t.sql(`UPDATE ${SCHEMA}.exception_queue_${n} SET lease_expires_at = now() - interval '1 millisecond' WHERE lease_token IS NOT NULL`);
    const e2 = await g.poll(h, { batchLimit: 3 });
    expect(e2).toMatchObject({ leaseExpired: 0, started: 2, succeeded: 2 });
    expect(calls.map((m) => [m.id, m.attempt])).toEqual([["2", 1], ["3", 1]]);
    expect((await deliveryLogRows(t, n, gid)).filter((d) => d.message_id !== "1").map((d) => [d.message_id, d.attempt, d.status])).toEqual([
      ["2", 0, "failure"], ["3", 0, "failure"],
    ]);

    await makeDue(t, n);
    await g.drain(h, { batchLimit: 3 });
    expect(calls.map((m) => [m.id, m.attempt])).toEqual([["2", 1], ["3", 1], ["1", 2]]);
    expect(await exceptionRows(t, n, gid)).toEqual([]);
    expect(await cursor(t, n, gid)).toMatchObject({ committed: "3" });
    await checkInvariants(t, n);
  });

  it("a run that outlived its lease records nothing: the row was charged, retried and deleted meanwhile", async () => {
    const { g, n, gid } = await failedRows(t, "late.row", 1, { message: { timeout: 10_000 } });
    const child = poller({ stream: "late.row", group: "g", method: "drain", actions: { "1": "waitfail" } });
    await child.waitFor({ event: "start", id: "1" });
    const [row] = await leaseMs(t, n);
    expect(row).toMatchObject({ status: "inflight", run_ms: 12_000 });

    // The lease expires (moved by hand); another poll charges the run, then retries it successfully.
    await t.sql(`UPDATE ${SCHEMA}.exception_queue_${n} SET lease_expires_at = now() - interval '1 millisecond' WHERE status = 'inflight'`);
    expect(await g.poll(() => {})).toMatchObject({ leaseExpired: 1 });
    await makeDue(t, n);
    const seen: number[] = [];
    expect(await g.poll((m) => void seen.push(m.attempt))).toMatchObject({ succeeded: 1 });
    expect(seen).toEqual([2]);
    expect(await exceptionRows(t, n, gid)).toEqual([]);

    // The stalled run now fails; its record is guarded by the old token and writes nothing.
    child.send("go");
    const rep = (await child.waitFor({ event: "report" })).report as CycleReport;
    expect(rep).toMatchObject({ leaseLost: 1, failed: 0, dead: 0 });
    expect(child.messages.filter((m) => m.event === "log").map((m) => m.code)).toContain("SQL0034");
    expect(await exceptionRows(t, n, gid)).toEqual([]);
    expect((await deliveryLogRows(t, n, gid)).map((d) => [d.attempt, d.status])).toEqual([[0, "failure"], [1, "expired"]]);
    expect(await cursor(t, n, gid)).toMatchObject({ committed: "1" });
    await checkInvariants(t, n);
  });

  it("starting a reserved row is idempotent for its reservation token (a start retried after an unknown commit still runs)", async () => {
    const { n, gid } = await failedRows(t, "start.retry", 1, { message: { timeout: 200 } });
    const token = "6f1d7a56-0d57-4b52-9d58-9a3c7f0e2a11";
    await t.sql(`UPDATE ${SCHEMA}.exception_queue_${n} SET lease_token = $1, lease_expires_at = now() + interval '10 seconds'`, [token]);
    const start = () => t.sql<{ r: string }>(`SELECT kind AS r FROM ${SCHEMA}.start_exceptions_${n}($1, $2, '[{"id": 1, "key_token": null, "run_ms": 2200}]')`, [gid, token]);
    expect(await start()).toEqual([{ r: "started" }]);
    const [first] = await exceptionRows(t, n, gid);
    // The statement is sent again (the reply to the first was lost): same answer, nothing changes.
    expect(await start()).toEqual([{ r: "started" }]);
    const [again] = await exceptionRows(t, n, gid);
    expect(again).toEqual(first);
    expect(again).toMatchObject({ status: "inflight", attempts: 1, lease_token: token });
    // Any other token still finds nothing to start.
    expect(await t.sql(`SELECT kind AS r FROM ${SCHEMA}.start_exceptions_${n}($1, gen_random_uuid(), '[{"id": 1, "key_token": null, "run_ms": 2200}]')`, [gid])).toEqual([{ r: "lost" }]);
  });

  it("C13: the kill backstop makes an expired run dead when its budget is spent; with a delay in the budget it is charged instead", async () => {
    const { g, n, gid } = await failedRows(t, "c13", 3, { message: { timeout: 200 } });
    // An expired run at attempts 3 (delays 0, 1, and 0 with no last_error), as a crash would leave it.
    await t.sql(
      `UPDATE ${SCHEMA}.exception_queue_${n}
          SET status = 'inflight', attempts = 3, delays = CASE message_id WHEN 2 THEN 1 ELSE 0 END,
              last_error = CASE message_id WHEN 3 THEN NULL ELSE last_error END,
              lease_token = gen_random_uuid(), lease_expires_at = now() - interval '1 millisecond'`,
    );
    t.events.length = 0;
    const r = await g.poll(() => {
      throw new Error("must not run");
    });
    expect(r).toMatchObject({ killed: 2, leaseExpired: 1, dead: 2, started: 0 });
    const rows = await exceptionRows(t, n, gid);
    expect(rows.map((e) => [e.message_id, e.status, e.attempts, e.delays, e.lease_token])).toEqual([
      ["1", "dead", 3, 0, null], ["2", "ready", 4, 1, null], ["3", "dead", 3, 0, null],
    ]);
    expect(rows[0].last_error).toMatch(/^Error: first failure[\s\S]* \[killed: crash-loop hit max attempts\]$/);
    expect(rows[2].last_error).toBe(" [killed: crash-loop hit max attempts]");
    expect(Math.abs(rows[1].gap_ms - 2_000)).toBeLessThanOrEqual(250); // used a − d = 2 ⇒ n = 1 ⇒ 1 000 × 2
    const deliveryLog = (await deliveryLogRows(t, n, gid)).filter((d) => d.attempt === 3);
    expect(deliveryLog.map((d) => [d.message_id, d.status])).toEqual([["1", "killed"], ["2", "expired"], ["3", "killed"]]);
    expect(deliveryLog[0].error).toBe(rows[0].last_error);
    expect(t.events.filter((e) => e.code === "SQL0038")).toHaveLength(2);
    await checkInvariants(t, n);
  });
});
