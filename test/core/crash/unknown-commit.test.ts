// docs/protocol/crash-recovery.md#unknown-commits: a reply lost after its COMMIT ran. A TCP proxy between
// the library and a real Postgres forwards the statement, waits for the server's ReadyForQuery
// (the commit is done) and cuts the connection instead of delivering the answer. The retry must
// find the poll's own committed work and carry on: no duplicate-lease error, no false SQL0034,
// no reclaim charged for the library's own lost reply.
import { describe, expect, it } from "vitest";
import { useFreshDatabase } from "../../support/db.js";
import { startProxy, type TcpProxy as Proxy } from "../../support/proxy.js";
import { SCHEMA, count, cursor, expireLeases, setupGroup, testClient, type TestClient } from "../../support/streams.js";

const url = useFreshDatabase();

async function withProxy(body: (p: Proxy, t: TestClient) => Promise<void>): Promise<void> {
  const proxy = await startProxy(url());
  try {
    const t = testClient(proxy.url);
    t.pool.on("error", () => {}); // a cut idle connection must not crash the worker
    await body(proxy, t);
  } finally {
    await proxy.close();
  }
}

/** Arms the proxy and reports whether the reply really was lost. */
function lose(proxy: Proxy, match: (text: string) => boolean): { fired: () => boolean } {
  let fired = false;
  void proxy.loseReply(match).then(() => {
    fired = true;
  });
  return { fired: () => fired };
}

const produceFive = async (s: { produceBatch: (items: { payload: unknown }[]) => Promise<{ id: string }[]> }) =>
  (await s.produceBatch(Array.from({ length: 5 }, (_, i) => ({ payload: { i } })))).map((r) => r.id);

describe("unknown commits: claim, reclaim and record are idempotent per lease token", () => {
  it("record_range's reply lost after its commit: the retry finds its own record and reports the successes", async () => {
    await withProxy(async (proxy, t) => {
      const { s, g, sid, gid } = await setupGroup(t, "uc.record");
      const ids = await produceFive(s);
      const seen: string[] = [];
      const lost = lose(proxy, (sql) => sql.includes(`record_range_${sid}(`));
      const r = await g.poll((m) => void seen.push(m.id), { batchLimit: 10 });
      expect(lost.fired()).toBe(true);
      expect(seen).toEqual(ids);
      expect(r.succeeded).toBe(5); // before: 0, and SQL0034 "outcomes discarded"
      expect(r.leaseLost).toBe(0);
      expect(t.events.filter((e) => e.code === "SQL0034" || e.code === "SQL0044")).toEqual([]);
      expect(await count(t, `claim_lease_${sid}`)).toBe(0);
      expect((await cursor(t, sid, gid)).committed).toBe("5");
      expect(r.committedAfter).toBe("5");
      const again = await g.poll((m) => void seen.push(m.id));
      expect(again.idle).toBe(true);
      expect(seen).toEqual(ids); // each ran once
    });
  });

  it("a drain's record + next claim reply lost (the steady state): the retry finds its claimed range, reports the record, runs each message once", async () => {
    await withProxy(async (proxy, t) => {
      const { s, g, sid, gid } = await setupGroup(t, "uc.steady");
      const ids = [...(await produceFive(s)), ...(await produceFive(s))];
      const seen: string[] = [];
      let claims = 0;
      // The second claim statement is the one that records (0, 5] and claims (5, 10].
      const lost = lose(proxy, (sql) => sql.includes(`claim_${sid}(`) && ++claims === 2);
      const r = await g.drain((m) => void seen.push(m.id), { batchLimit: 5 });
      expect(lost.fired()).toBe(true);
      expect(seen).toEqual(ids);
      expect(r.succeeded).toBe(10);
      expect(r.rangesClaimed).toBe(2);
      expect(r.rangesReclaimed).toBe(0);
      expect(r.leaseLost).toBe(0);
      expect(t.events.filter((e) => e.code === "SQL0034" || e.code === "SQL0044")).toEqual([]);
      expect(await count(t, `claim_lease_${sid}`)).toBe(0);
      expect((await cursor(t, sid, gid)).committed).toBe("10");
    });
  });

  it("a partial record's reply lost: the rest stays released under the new token and runs once more, nothing else", async () => {
    await withProxy(async (proxy, t) => {
      const { s, g, sid, gid } = await setupGroup(t, "uc.partial");
      const ids = await produceFive(s);
      const seen: string[] = [];
      const ac = new AbortController();
      const lost = lose(proxy, (sql) => sql.includes(`record_range_${sid}(`));
      const r = await g.poll((m) => {
        seen.push(m.id);
        if (seen.length === 2) ac.abort(); // messages 3..5 are not started: a partial record
      }, { batchLimit: 10, signal: ac.signal });
      expect(lost.fired()).toBe(true);
      expect(r.succeeded).toBe(2);
      expect(r.rangesPartial).toBe(1);
      expect(r.leaseLost).toBe(0);
      expect(t.events.filter((e) => e.code === "SQL0034")).toEqual([]);
      const rest = await g.drain((m) => void seen.push(m.id));
      expect(rest.rangesResumed).toBe(1);
      expect(rest.rangesReclaimed).toBe(0);
      expect(seen).toEqual(ids);
      expect((await cursor(t, sid, gid)).committed).toBe("5");
    });
  });

  it("claim's reply lost after its commit: the retry takes its own lease instead of failing on a duplicate one", async () => {
    await withProxy(async (proxy, t) => {
      const { s, g, sid, gid } = await setupGroup(t, "uc.claim");
      const ids = await produceFive(s);
      const seen: string[] = [];
      const lost = lose(proxy, (sql) => sql.includes(`claim_${sid}(`));
      const r = await g.poll((m) => void seen.push(m.id), { batchLimit: 10 }); // before: SQL0033 duplicate key
      expect(lost.fired()).toBe(true);
      expect(r.rangesClaimed).toBe(1);
      expect(r.succeeded).toBe(5);
      expect(seen).toEqual(ids);
      expect(await count(t, `claim_lease_${sid}`)).toBe(0); // no orphan left to expire and be reclaimed
      expect((await cursor(t, sid, gid)).committed).toBe("5");
      expect(t.events.filter((e) => e.code === "SQL0035" || e.code === "SQL0034")).toEqual([]);
    });
  });

  it("a reclaim's COMMIT reply lost: the retry continues with its own takeover, charged one reclaim, not two", async () => {
    await withProxy(async (proxy, t) => {
      const { s, g, sid, gid } = await setupGroup(t, "uc.reclaim", { group: { maxRangeReclaims: 5 } });
      const ids = await produceFive(s);
      // A poller that claimed (0, 5] and died: its lease is expired.
      const [{ obs }] = await t.sql<{ obs: string }>("SELECT pg_current_xact_id()::text AS obs");
      await t.sql(`SELECT * FROM ${SCHEMA}.claim_${sid}($1, 10, 5, $2::xid8, gen_random_uuid(), 30000, 1, 30000, 1, 2000, NULL, 16777216)`, [gid, obs]);
      expect(await count(t, `claim_lease_${sid}`)).toBe(1);
      await expireLeases(t, sid);
      const seen: string[] = [];
      const lost = lose(proxy, (sql) => sql.startsWith("Q") && sql.includes("COMMIT"));
      const r = await g.poll((m) => void seen.push(m.id), { batchLimit: 10 });
      expect(lost.fired()).toBe(true);
      expect(r.rangesReclaimed).toBe(1); // before: 0, the range orphaned until the takeover lease expired
      expect(r.succeeded).toBe(5);
      expect(seen).toEqual(ids);
      expect(t.events.filter((e) => e.code === "SQL0035").map((e) => e.reclaims)).toEqual([1]);
      expect(await count(t, `claim_lease_${sid}`)).toBe(0);
      expect((await cursor(t, sid, gid)).committed).toBe("5");
    });
  });
});
