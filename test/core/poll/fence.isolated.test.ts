// docs/protocol/poll-cycle.md#the-fence worked example and C14: a producer transaction that commits after later ids are
// visible is never skipped. Two real connections.
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { freshDatabase, useFreshDatabase } from "../../support/db.js";
import { SCHEMA, count, cursor, groupIdOf, streamIdOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();

describe("snapshot fence (C14)", () => {
  it("the worked example: no delivery while A is open, ids 1 and 2 after A commits", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream("fence.commit");
    await s.register();
    const g = s.consumer("g");
    await g.register();
    const n = await streamIdOf(t, "fence.commit");
    const gid = await groupIdOf(t, "g", "fence.commit");
    const seen: string[] = [];
    const handler = (m: { id: string }) => void seen.push(m.id);

    const a = await t.pool.connect();
    try {
      await a.query("BEGIN");
      const idA = await s.produceInTx(a, { who: "A" }); // step 1: A draws id 1 and stays open
      expect(idA.id).toBe("1");
      const idB = await s.produce({ who: "B" }); // step 2: B draws id 2 and commits
      expect(idB.id).toBe("2");

      const p1 = await g.poll(handler, { batchLimit: 10 }); // step 3
      expect(seen).toEqual([]);
      expect(p1.rangesClaimed).toBe(0);
      expect(await count(t, `claim_lease_${n}`)).toBe(0);
      const c1 = await cursor(t, n, gid);
      expect([c1.claimed, c1.settled_head, c1.pending_head]).toEqual(["0", "0", "2"]);
      expect(c1.pending_xid).not.toBeNull();

      await g.poll(handler, { batchLimit: 10 }); // step 4: A still open
      expect(seen).toEqual([]);
      const c2 = await cursor(t, n, gid);
      expect([c2.claimed, c2.settled_head, c2.pending_head]).toEqual(["0", "0", "2"]);
      expect(BigInt(c2.pending_xid as string)).toBeGreaterThan(BigInt(c1.pending_xid as string));

      await a.query("COMMIT"); // step 5
    } finally {
      a.release();
    }
    const p3 = await g.poll(handler, { batchLimit: 10 }); // step 6
    expect(seen).toEqual(["1", "2"]);
    expect(p3.rangesClaimed).toBe(1);
    const c3 = await cursor(t, n, gid);
    expect([c3.claimed, c3.committed, c3.settled_head, c3.pending_head]).toEqual(["2", "2", "2", "2"]);

    t.statements.length = 0;
    const p4 = await g.poll(handler, { batchLimit: 10 }); // step 7: idle, one read, nothing written
    expect(p4.idle).toBe(true);
    expect(t.statements).toHaveLength(1);
    expect(await cursor(t, n, gid)).toEqual(c3);
  });

  it("if A rolls back, id 1 never exists and only id 2 is delivered", async () => {
    const t = testClient(url());
    const s = t.client.stream("fence.rollback");
    await s.register();
    const g = s.consumer("g");
    await g.register();
    const n = await streamIdOf(t, "fence.rollback");
    const gid = await groupIdOf(t, "g", "fence.rollback");
    const seen: string[] = [];
    const a = await t.pool.connect();
    try {
      await a.query("BEGIN");
      await s.produceInTx(a, { who: "A" });
      await s.produce({ who: "B" });
      await g.poll((m) => void seen.push(m.id));
      expect(seen).toEqual([]);
      await a.query("ROLLBACK");
    } finally {
      a.release();
    }
    await g.drain((m) => void seen.push(m.id));
    expect(seen).toEqual(["2"]);
    expect((await cursor(t, n, gid)).committed).toBe("2");
  });

  it("a produceInTx held open 3 s holds every claim at the last proven head, then all are delivered once", async () => {
    const t = testClient(url());
    const s = t.client.stream("fence.long");
    await s.register();
    const g = s.consumer("g");
    await g.register();
    const n = await streamIdOf(t, "fence.long");
    const gid = await groupIdOf(t, "g", "fence.long");
    await s.produceBatch([{ payload: 1 }, { payload: 2 }]);
    const seen: string[] = [];
    const handler = (m: { id: string }) => void seen.push(m.id);
    await g.drain(handler);
    expect(seen).toEqual(["1", "2"]);

    const a = await t.pool.connect();
    const startedAt = Date.now();
    try {
      await a.query("BEGIN");
      const held = await s.produceInTx(a, { who: "held" }); // id 3
      expect(held.id).toBe("3");
      while (Date.now() - startedAt < 3_000) {
        await s.produce({ who: "other" });
        await g.poll(handler);
        expect((await cursor(t, n, gid)).claimed).toBe("2");
        await sleep(250);
      }
      expect(seen).toEqual(["1", "2"]);
      await a.query("COMMIT");
    } finally {
      a.release();
    }
    await g.drain(handler);
    const head = (await t.sql<{ h: string }>(`SELECT max(id)::text AS h FROM ${SCHEMA}.message_log_${n}`))[0].h;
    const expected = Array.from({ length: Number(head) }, (_, i) => String(i + 1));
    expect(seen).toEqual(expected); // every id once, in order, id 3 included
    expect((await cursor(t, n, gid)).committed).toBe(head);
  });

  it("only this stream's producers hold its fence: a write transaction in another database, an idle-in-transaction session and an open produce into another stream do not", async () => {
    // docs/protocol/poll-cycle.md#the-fence. On the cluster-xmin fence alone this delivered 0 of 20.
    const t = testClient(url());
    const s = t.client.stream("fence.own");
    await s.register();
    const g = s.consumer("g");
    await g.register();
    const other = t.client.stream("fence.other");
    await other.register();
    const elsewhere = await freshDatabase();
    const foreign = new pg.Client({ connectionString: elsewhere.url, application_name: "foreign-writer" });
    foreign.on("error", () => {});
    const idle = await t.pool.connect();
    const otherTx = await t.pool.connect();
    try {
      await foreign.connect();
      await foreign.query("CREATE TABLE unrelated (v int)");
      await foreign.query("BEGIN");
      await foreign.query("INSERT INTO unrelated VALUES (1)"); // holds an xid: the cluster xmin stays behind it
      await idle.query("BEGIN");
      await idle.query("SELECT pg_current_xact_id()"); // idle in transaction, with an xid
      await otherTx.query("BEGIN");
      await other.produceInTx(otherTx, { other: true }); // a producer of another stream, left open
      const ids = (await s.produceBatch(Array.from({ length: 20 }, (_, i) => ({ payload: { i } })))).map((r) => r.id);
      const seen: string[] = [];
      const r = await g.drain((m) => void seen.push(m.id));
      expect(seen).toEqual(ids);
      expect(r.succeeded).toBe(20);
      expect(t.events.filter((e) => e.code === "SQL0043")).toEqual([]);
      // The cluster's xmin really was behind all along (else this test proves nothing).
      const [x] = await t.sql<{ behind: boolean }>(
        "SELECT pg_snapshot_xmin(pg_current_snapshot()) < pg_current_xact_id() AS behind",
      );
      expect(x.behind).toBe(true);
    } finally {
      await otherTx.query("ROLLBACK").catch(() => {});
      otherTx.release();
      await idle.query("ROLLBACK").catch(() => {});
      idle.release();
      await foreign.end().catch(() => {});
      await elsewhere.drop();
    }
  });

  it("a producer transaction of this stream that holds the fence for seconds is named (SQL0043): pid, age, application_name, statement", async () => {
    const t = testClient(url());
    const s = t.client.stream("fence.warn");
    await s.register();
    const g = s.consumer("g");
    await g.register();
    const holder = new pg.Client({ connectionString: url(), application_name: "slow-producer" });
    holder.on("error", () => {});
    await holder.connect();
    try {
      await holder.query("BEGIN");
      await s.produceInTx(holder as unknown as pg.PoolClient, { held: true });
      const pid = (await holder.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0].pid;
      await s.produce({ later: true });
      const deadline = Date.now() + 30_000;
      let warning = t.events.find((e) => e.code === "SQL0043");
      while (!warning && Date.now() < deadline) {
        const r = await g.poll(() => {});
        expect(r.succeeded).toBe(0); // the fence holds: id 2 waits for id 1
        warning = t.events.find((e) => e.code === "SQL0043");
        if (!warning) await sleep(200);
      }
      expect(warning).toBeDefined();
      expect(warning).toMatchObject({ level: "warn", stream: "fence.warn", group: "g", pid, applicationName: "slow-producer" });
      expect(warning?.xactAgeMs as number).toBeGreaterThanOrEqual(2_000);
      expect(warning?.lastStatement).toBe("SELECT"); // the first word only: statement text can carry secrets
      expect(warning?.message).toContain(`pid ${pid}`);
      await holder.query("COMMIT");
    } finally {
      await holder.end().catch(() => {});
    }
    const seen: string[] = [];
    await g.drain((m) => void seen.push(m.id));
    expect(seen).toEqual(["1", "2"]);
  });
});
