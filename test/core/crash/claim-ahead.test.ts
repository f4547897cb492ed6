// Faults while a drain holds a range claimed ahead (docs/protocol/poll-cycle.md#claiming-ahead): an abort,
// a database error and a lost reply in the statement sent as that range starts. Ranges of 50, 50
// handlers at once and quick handlers, so from the second range on the next one is claimed while
// one runs: while message 80 runs in (50, 100], (100, 150] is claimed ahead (its lease written
// `released`: nothing of it started); as (100, 150] starts, one statement records (50, 100],
// marks (100, 150] started and claims (150, 200] ahead. Whatever fails, every message runs, none
// twice, none is quarantined and no reclaim is charged.
import { vi, beforeAll, describe, expect, it } from "vitest";
import { useFreshDatabase } from "../../support/db.js";
import { checkInvariants } from "../../support/invariants.js";
import { type ClaimLease, claimLeases } from "../../support/keyed.js";
import { startProxy } from "../../support/proxy.js";
import { SCHEMA, type TestClient, count, cursor, range, setupProduced, testClient } from "../../support/streams.js";

const url = useFreshDatabase();

let t: TestClient;
beforeAll(async () => {
  t = testClient(url());
  t.pool.on("error", () => {}); // a terminated connection must not crash the worker
  await t.client.migrate();
});

const OPTS = { batchLimit: 50, concurrency: 50 };
const GROUP = { message: { timeout: 2_000 }, maxRangeReclaims: 1 };

async function produced(name: string, on: TestClient = t) {
  const p = await setupProduced(on, name, GROUP, 0);
  await p.s.produceBatch(range(1, 300).map((i) => ({ payload: { i } })));
  return p;
}

/** Once (50, 100] runs with (100, 150] claimed ahead: both leases. */
async function whileClaimedAhead(n: string, gid: string): Promise<ClaimLease[]> {
  await vi.waitUntil(async () => (await claimLeases(t, n, gid)).length === 2, { timeout: 10_000, interval: 10 });
  return claimLeases(t, n, gid);
}

/** (100, 150]'s lease has been marked started (waited for while it runs). */
async function markedStarted(n: string, gid: string): Promise<void> {
  await vi.waitUntil(async () => (await claimLeases(t, n, gid)).find((l) => l.low === "100")?.released === false, { timeout: 10_000, interval: 10 });
}

const bounds = (ls: ClaimLease[]) => ls.map((l) => [l.low, l.high, l.reclaims, l.released]);

/** Every message ran exactly once, nothing is left or quarantined. */
async function allOnce(seen: number[], n: string, gid: string, on: TestClient = t): Promise<void> {
  expect([...seen].sort((a, b) => a - b)).toEqual(range(1, 300));
  expect(await count(on, `exception_queue_${n}`)).toBe(0);
  expect(await claimLeases(on, n, gid)).toEqual([]);
  expect(await cursor(on, n, gid)).toMatchObject({ claimed: "300", committed: "300" });
  await checkInvariants(on, n);
}

describe("faults while a range is claimed ahead", () => {
  it("an abort: the running range records, the range claimed ahead is released unstarted and resumed, never reclaimed", async () => {
    const { g, n, gid } = await produced("ahead.abort");
    const ac = new AbortController();
    const seen: number[] = [];
    let during: ClaimLease[] = [];
    const r = await g.drain(async (m) => {
      seen.push(Number(m.id));
      if (m.id !== "80") return;
      during = await whileClaimedAhead(n, gid);
      ac.abort();
    }, { ...OPTS, signal: ac.signal });
    expect(bounds(during)).toEqual([["50", "100", 0, false], ["100", "150", 0, true]]);
    expect([...seen].sort((a, b) => a - b)).toEqual(range(1, 100));
    expect(r).toMatchObject({ succeeded: 100, rangesPartial: 1, rangesReclaimed: 0 });
    // The range claimed ahead is given back as it was: released, expired now, no reclaim.
    expect(await claimLeases(t, n, gid)).toMatchObject([{ low: "100", high: "150", reclaims: 0, released: true, expired: true }]);

    t.events.length = 0;
    const rest = await g.drain((m) => void seen.push(Number(m.id)), OPTS);
    expect(rest).toMatchObject({ rangesResumed: 1, rangesReclaimed: 0, rangesQuarantined: 0 });
    expect(t.events.filter((e) => e.code === "SQL0035" || e.code === "SQL0036")).toEqual([]);
    await allOnce(seen, n, gid);
  });

  it("a database error in the statement sent as the range claimed ahead starts: the repeat records, marks it started and claims on", async () => {
    const { g, n, gid } = await produced("ahead.dberror");
    const lock = await t.pool.connect();
    const [{ pid: lockPid }] = (await lock.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows;
    const seen: number[] = [];
    let during: ClaimLease[] = [];
    let killed: Promise<number> | null = null;
    t.events.length = 0;
    try {
      const r = await g.drain(async (m) => {
        seen.push(Number(m.id));
        if (m.id === "80") {
          // Hold (50, 100]'s lease row: the statement sent as (100, 150] starts records (50, 100]
          // first (deleting that row) and waits; its backend is then terminated (57P01).
          during = await whileClaimedAhead(n, gid);
          await lock.query("BEGIN");
          await lock.query(`SELECT 1 FROM ${SCHEMA}.claim_lease_${n} WHERE consumer_group_id = $1 AND token = $2 FOR UPDATE`, [gid, during[0].token]);
          killed = (async () => {
            let pid = 0;
            await vi.waitUntil(async () => {
              const rows = await t.sql<{ pid: number }>("SELECT pid FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))", [lockPid]);
              pid = rows[0]?.pid ?? 0;
              return pid !== 0;
            }, { timeout: 10_000, interval: 10 });
            await t.sql("SELECT pg_terminate_backend($1)", [pid]);
            await lock.query("COMMIT");
            return pid;
          })();
        }
        if (m.id === "140") await markedStarted(n, gid);
      }, OPTS);
      expect(await killed).toBeGreaterThan(0);
      expect(bounds(during)).toEqual([["50", "100", 0, false], ["100", "150", 0, true]]);
      expect(r).toMatchObject({ succeeded: 300, rangesReclaimed: 0, rangesResumed: 0, rangesQuarantined: 0, leaseLost: 0 });
      expect(t.events.filter((e) => ["SQL0033", "SQL0034", "SQL0044"].includes(e.code))).toEqual([]);
      await allOnce(seen, n, gid);
    } finally {
      lock.release(true);
    }
  });

  it("a lost reply to the statement sent as the range claimed ahead starts: the repeat finds its claim; nothing runs twice", async () => {
    const proxy = await startProxy(url());
    try {
      const p = testClient(proxy.url);
      p.pool.on("error", () => {}); // the cut connection must not crash the worker
      const { g, n, gid } = await produced("ahead.lost", p);
      let fired = false;
      const seen: number[] = [];
      let during: ClaimLease[] = [];
      const r = await g.drain(async (m) => {
        seen.push(Number(m.id));
        if (m.id === "80") {
          during = await whileClaimedAhead(n, gid);
          // The next claim statement is the one sent as (100, 150] starts.
          void proxy.loseReply((sql) => sql.includes(`claim_${n}(`)).then(() => {
            fired = true;
          });
        }
        if (m.id === "140") {
          await vi.waitUntil(() => fired, { timeout: 10_000, interval: 10 });
          await markedStarted(n, gid); // by the attempt whose reply was lost
        }
      }, OPTS);
      expect(fired).toBe(true);
      expect(bounds(during)).toEqual([["50", "100", 0, false], ["100", "150", 0, true]]);
      expect(r).toMatchObject({ succeeded: 300, rangesReclaimed: 0, rangesResumed: 0, rangesQuarantined: 0, leaseLost: 0 });
      expect(p.events.filter((e) => ["SQL0033", "SQL0034", "SQL0044"].includes(e.code))).toEqual([]);
      await allOnce(seen, n, gid, p);
    } finally {
      await proxy.close();
    }
  });
});
