// SPEC §5.3.4 worked example and C14: a producer transaction that commits after later ids are
// visible is never skipped. Permanent regression test; two real connections.
import { describe, expect, it } from "vitest";
import { useFreshDatabase } from "../support/db.js";
import { S, count, cursor, groupIdOf, streamIdOf, testClient } from "../support/streams.js";

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
        await new Promise((r) => setTimeout(r, 250));
      }
      expect(seen).toEqual(["1", "2"]);
      await a.query("COMMIT");
    } finally {
      a.release();
    }
    await g.drain(handler);
    const head = (await t.sql<{ h: string }>(`SELECT max(id)::text AS h FROM ${S}.message_log_${n}`))[0].h;
    const expected = Array.from({ length: Number(head) }, (_, i) => String(i + 1));
    expect(seen).toEqual(expected); // every id once, in order, id 3 included
    expect((await cursor(t, n, gid)).committed).toBe(head);
  });
});
