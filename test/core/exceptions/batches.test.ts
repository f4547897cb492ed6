// The exception phase in batches (docs/protocol/poll-cycle.md#batched-starts-and-records): reserved rows
// start together and outcomes are recorded together through exception_step_N, one round trip per
// batch, each row still under its own guard: a row whose lease was lost writes nothing while the
// rest of its batch is recorded; a start repeated after its reply was lost starts nothing twice.
import { beforeAll, describe, expect, it } from "vitest";
import { useFreshDatabase } from "../../support/db.js";
import { checkInvariants } from "../../support/invariants.js";
import { startProxy } from "../../support/proxy.js";
import { SCHEMA, type TestClient, deliveryLogRows, exceptionRows, makeDue, setupProduced, testClient } from "../../support/streams.js";

const url = useFreshDatabase();

let t: TestClient;
beforeAll(async () => {
  t = testClient(url());
  await t.client.migrate();
});

/** Messages 1..k of a fresh stream, all failed once: k ready rows at attempts 1, due now. */
async function failedRows(c: TestClient, name: string, k: number, config: Record<string, unknown> = {}) {
  const { g, n, gid } = await setupProduced(c, name, config, k);
  expect((await g.drain(() => {
    throw new Error("first failure");
  })).failed).toBe(k);
  await makeDue(c, n);
  return { g, n, gid };
}

const steps = (c: TestClient, from: number, n: number | string) => c.statements.slice(from).filter((s) => s.includes(`exception_step_${n}(`));
const reservations = (c: TestClient, from: number, n: number | string) => c.statements.slice(from).filter((s) => s.includes(`reserve_exceptions_${n}(`));

describe("exception rows start and record in batches", () => {
  it("one round trip starts the batch and one records it; a row whose lease was lost meanwhile writes nothing, the others are recorded", async () => {
    const { g, n, gid } = await failedRows(t, "batch.lost", 4);
    let release!: () => void;
    const barrier = new Promise<void>((r) => (release = r));
    const seen: string[] = [];
    const mark = t.statements.length;
    const r = await g.poll(async (m) => {
      seen.push(m.id);
      if (seen.length === 4) {
        // Another poller took row 2 over (its lease expired, say): our outcome for it must not land.
        await t.sql(`UPDATE ${SCHEMA}.exception_queue_${n} SET lease_token = gen_random_uuid() WHERE message_id = 2`);
        release();
      }
      await barrier;
      if (m.id === "3") throw new Error("second failure");
    }, { batchLimit: 10, concurrency: 4 });
    expect(seen.sort()).toEqual(["1", "2", "3", "4"]);
    expect(r).toMatchObject({ started: 4, succeeded: 2, failed: 1, leaseLost: 1 });
    expect(t.events.filter((e) => e.code === "SQL0034")).toHaveLength(1);
    // Two round trips for four rows: the reservation with the starts, then the outcomes (before:
    // the reservation and eight transactions).
    expect(reservations(t, mark, n)).toHaveLength(1);
    expect(steps(t, mark, n)).toHaveLength(1);
    const rows = await exceptionRows(t, n, gid);
    expect(rows.map((e) => [e.message_id, e.status, e.attempts, e.last_error?.split("\n")[0]])).toEqual([
      ["2", "inflight", 1, "Error: first failure"], // untouched: still the other poller's
      ["3", "ready", 2, "Error: second failure"],
    ]);
    expect((await deliveryLogRows(t, n, gid, "2")).map((d) => [d.attempt, d.status])).toEqual([[0, "failure"]]);
    expect((await deliveryLogRows(t, n, gid, "3")).map((d) => [d.attempt, d.status])).toEqual([[0, "failure"], [1, "failure"]]);
  });

  for (const [what, concurrency, match] of [
    ["the reservation's (which starts the rows)", 3, "reserve_exceptions_"],
    ["a batch start's", 1, "exception_step_"],
  ] as const) {
    it(`${what} reply lost after its commit: the repeat finds its rows started, each handler runs once`, async () => {
      const proxy = await startProxy(url());
      try {
        const c = testClient(proxy.url);
        c.pool.on("error", () => {}); // a cut idle connection must not crash the worker
        await c.client.migrate();
        const { g, n, gid } = await failedRows(c, `batch.reply.${concurrency}`, 3);
        let fired = false;
        void proxy.loseReply((sql) => sql.includes(`${match}${n}(`)).then(() => {
          fired = true;
        });
        const mark = c.statements.length;
        const seen: string[] = [];
        const r = await g.poll((m) => void seen.push(m.id), { batchLimit: 10, concurrency });
        expect(fired).toBe(true);
        expect(seen.sort()).toEqual(["1", "2", "3"]);
        expect(r).toMatchObject({ started: 3, succeeded: 3, leaseLost: 0 });
        // The repeated record of a row whose run lease cannot have expired is known to be ours.
        expect(c.events.filter((e) => e.code === "SQL0034" || e.code === "SQL0044")).toEqual([]);
        // The statement was sent twice: the repeat answered "started" for rows already inflight under its token.
        expect(c.statements.slice(mark).filter((s) => s.includes(`${match}${n}(`)).length).toBeGreaterThanOrEqual(2);
        expect(await exceptionRows(c, n, gid)).toEqual([]);
        expect(await c.sql(`SELECT * FROM ${SCHEMA}.message_key_lease_${n}`)).toEqual([]);
        expect((await g.poll((m) => void seen.push(m.id))).started).toBe(0);
        expect(seen).toHaveLength(3);
        await checkInvariants(c, n);
      } finally {
        await proxy.close();
      }
    });
  }

  it("a batch start whose key is busy defers nothing by itself: the row stays reserved, the reason is the caller's to record", async () => {
    const { n, gid } = await failedRows(t, "batch.busy", 2);
    const token = "0b6c1d2e-3f40-4a5b-8c7d-9e0f1a2b3c4d";
    await t.sql(`UPDATE ${SCHEMA}.exception_queue_${n} SET message_key = 'k' || message_id, concurrency = 'exclusive',
                        lease_token = $1, lease_expires_at = now() + interval '10 seconds'`, [token]);
    await t.sql(`INSERT INTO ${SCHEMA}.message_key_lease_${n} (consumer_group_id, message_key, token, expires_at)
                 VALUES ($1, 'k1', gen_random_uuid(), now() + interval '10 seconds')`, [gid]);
    const before = await exceptionRows(t, n, gid);
    const starts = JSON.stringify([1, 2].map((id) => ({ id, key_token: `00000000-0000-4000-8000-00000000000${id}`, run_ms: 5_000 })));
    const res = await t.sql(`SELECT step, message_id::text, kind, reason, ref FROM ${SCHEMA}.exception_step_${n}($1, $2, '[]', $3)`, [gid, token, starts]);
    expect(res).toEqual([
      { step: "start", message_id: "1", kind: "deferred", reason: "busy", ref: null },
      { step: "start", message_id: "2", kind: "started", reason: null, ref: null },
    ]);
    const after = await exceptionRows(t, n, gid);
    expect(after[0]).toEqual(before[0]);
    expect(after[1]).toMatchObject({ status: "inflight", lease_token: token });
    expect((await deliveryLogRows(t, n, gid)).filter((d) => d.status === "deferred")).toEqual([]);
  });
  it("a mixed batch start answers row by row: plain rows in one UPDATE, keyed, compacted, lost and repeated rows as before", async () => {
    const { n, gid } = await failedRows(t, "batch.mixed", 8);
    const token = "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f";
    const other = "2d3e4f5a-6b7c-4d8e-9f0a-1b2c3d4e5f6a";
    await t.sql(`UPDATE ${SCHEMA}.exception_queue_${n} SET lease_token = $1, lease_expires_at = now() + interval '10 seconds'`, [token]);
    // 1, 2: plain; 3: keyed but parallel (plain too); 4: an exclusive key (takes its lease);
    // 5: parallel but compacted, and not its key's head; 6: under another token (lost);
    // 7: started already under ours (a repeat); 8: its message is gone (lost).
    await t.sql(`UPDATE ${SCHEMA}.exception_queue_${n} SET message_key = 'p3' WHERE message_id = 3`);
    await t.sql(`UPDATE ${SCHEMA}.exception_queue_${n} SET message_key = 'k4', concurrency = 'exclusive' WHERE message_id = 4`);
    await t.sql(`UPDATE ${SCHEMA}.exception_queue_${n} SET message_key = 'c5' WHERE message_id = 5`);
    await t.sql(`UPDATE ${SCHEMA}.message_log_${n} SET message_key = 'c5', compaction_rank = 0 WHERE id = 5`);
    await t.sql(`INSERT INTO ${SCHEMA}.compaction_head_${n} (compaction_key, message_id, compaction_rank, schema_version) VALUES ('c5', 1, 0, 1)`);
    await t.sql(`UPDATE ${SCHEMA}.exception_queue_${n} SET lease_token = $1 WHERE message_id = 6`, [other]);
    await t.sql(`UPDATE ${SCHEMA}.exception_queue_${n} SET status = 'inflight', lease_expires_at = now() + interval '1 hour' WHERE message_id = 7`);
    await t.sql(`DELETE FROM ${SCHEMA}.message_log_${n} WHERE id = 8`);
    const before = await exceptionRows(t, n, gid);
    // Each row its own run lease: 1 s per id, so a start that paired the wrong length shows.
    const starts = JSON.stringify([8, 5, 1, 7, 3, 6, 2, 4].map((id) => ({ id, key_token: id === 4 ? "00000000-0000-4000-8000-000000000004" : null, run_ms: id * 1_000 })));
    const res = await t.sql(`SELECT step, message_id::text, kind, reason, ref::text FROM ${SCHEMA}.exception_step_${n}($1, $2, '[]', $3)`, [gid, token, starts]);
    expect(res.sort((a, b) => Number(a.message_id) - Number(b.message_id))).toEqual([
      { step: "start", message_id: "1", kind: "started", reason: null, ref: null },
      { step: "start", message_id: "2", kind: "started", reason: null, ref: null },
      { step: "start", message_id: "3", kind: "started", reason: null, ref: null },
      { step: "start", message_id: "4", kind: "started", reason: null, ref: null },
      { step: "start", message_id: "5", kind: "superseded", reason: null, ref: "1" },
      { step: "start", message_id: "6", kind: "lost", reason: null, ref: null },
      { step: "start", message_id: "7", kind: "started", reason: null, ref: null },
      { step: "start", message_id: "8", kind: "lost", reason: null, ref: null },
    ]);
    const after = await exceptionRows(t, n, gid);
    const leaseSeconds = await t.sql<{ id: string; s: number }>(
      `SELECT message_id::text AS id, round(extract(epoch FROM lease_expires_at - now()))::int AS s FROM ${SCHEMA}.exception_queue_${n} WHERE status = 'inflight' ORDER BY message_id`);
    expect(leaseSeconds).toEqual([{ id: "1", s: 1 }, { id: "2", s: 2 }, { id: "3", s: 3 }, { id: "4", s: 4 }, { id: "7", s: 3600 }]);
    for (const i of [4, 5, 6, 7]) expect(after[i]).toEqual(before[i]); // 5, 6, 7, 8: untouched
    expect(after.slice(0, 4).map((e) => [e.status, e.lease_token])).toEqual(Array(4).fill(["inflight", token]));
    expect(await t.sql(`SELECT message_key, token::text FROM ${SCHEMA}.message_key_lease_${n} WHERE consumer_group_id = $1`, [gid]))
      .toEqual([{ message_key: "k4", token: "00000000-0000-4000-8000-000000000004" }]);
  });
});
