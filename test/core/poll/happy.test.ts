import v8 from "node:v8";
import vm from "node:vm";
import { describe, expect, it } from "vitest";
import { useFreshDatabase } from "../../support/db.js";
import { count, cursor, deliveryLogRows, groupIdOf, streamIdOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();

describe("happy path (C1, C2, C17)", () => {
  it("C1: eight messages drained once each, ascending, no rows written, cursor at the head", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream<{ n: number }>("orders.placed");
    await s.register();
    const g = s.consumer("fraud-scoring");
    await g.register();
    for (let i = 1; i <= 8; i++) await s.produce({ n: i });
    const seen: string[] = [];
    const r = await g.drain((m) => {
      seen.push(m.id);
      expect(m.payload).toEqual({ n: Number(m.id) });
      expect(m.attempt).toBe(0);
      expect(m.stream).toBe("orders.placed");
      expect(m.group).toBe("fraud-scoring");
      expect(m.createdAt).toBeInstanceOf(Date);
      // A spread or logged message keeps its fields (handlers forward `{ ...msg }`).
      expect({ ...m }).toMatchObject({ id: m.id, payload: m.payload, key: null, createdAt: m.createdAt });
    });
    expect(seen).toEqual(["1", "2", "3", "4", "5", "6", "7", "8"]);
    expect(r.succeeded).toBe(8);
    expect(r.committedAfter).toBe("8");
    const gid = await groupIdOf(t, "fraud-scoring");
    const n = await streamIdOf(t, "orders.placed");
    expect(await count(t, `exception_queue_${n}`)).toBe(0);
    expect(await count(t, `delivery_log_${n}`)).toBe(0);
    expect(await count(t, `claim_lease_${n}`)).toBe(0);
    const c = await cursor(t, n, gid);
    expect(c.claimed).toBe("8");
    expect(c.committed).toBe("8");
    const p = await g.progress();
    expect(p.lag).toBe("0");
    expect(p.head).toBe("8");
  });

  it("C2: mode all logs one success row per message", async () => {
    const t = testClient(url());
    const s = t.client.stream("audit.all");
    await s.register({ deliveryLog: "all" });
    const g = s.consumer("g");
    await g.register();
    await s.produceBatch([{ payload: 1 }, { payload: 2 }, { payload: 3 }]);
    await g.drain(() => {});
    const sid = await streamIdOf(t, "audit.all");
    const gid = await groupIdOf(t, "g", "audit.all");
    const deliveryLog = await deliveryLogRows(t, sid, gid);
    expect(deliveryLog.map((r) => [r.message_id, r.attempt, r.status, r.error])).toEqual([
      ["1", 0, "success", ""], ["2", 0, "success", ""], ["3", 0, "success", ""],
    ]);
  });

  it("C17: start head begins after the existing messages; re-registering never moves the cursor", async () => {
    const t = testClient(url());
    const s = t.client.stream("head.start");
    await s.register();
    const items = Array.from({ length: 100 }, (_, i) => ({ payload: { i } }));
    await s.produceBatch(items);
    const g = s.consumer("late");
    await g.register({ start: "head" });
    const sid = await streamIdOf(t, "head.start");
    const gid = await groupIdOf(t, "late");
    expect(await cursor(t, sid, gid)).toEqual({ claimed: "100", committed: "100", settled_head: "100", pending_head: "0", pending_xid: null });
    await s.produce({ i: 101 });
    const seen: string[] = [];
    const r = await g.poll((m) => void seen.push(m.id));
    expect(seen).toEqual(["101"]);
    expect(r.rangesClaimed).toBe(1);
    await g.register({ start: "beginning" });
    expect((await cursor(t, sid, gid)).claimed).toBe("101");
  });

  it("a range lets go of each payload once its run is over: the first payload is collectable before the range ends", async () => {
    // docs/protocol/poll-cycle.md#dispatch: parsed at each start, held by the run alone.
    v8.setFlagsFromString("--expose-gc");
    const gc = vm.runInNewContext("gc") as () => void;
    const t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream<{ i: number; pad: string }>("payload.lifetime");
    await s.register();
    const g = s.consumer("lifetime");
    await g.register();
    await s.produceBatch(Array.from({ length: 20 }, (_, i) => ({ payload: { i, pad: "x".repeat(1000) } })));
    let first: WeakRef<object> | null = null;
    let alive: boolean | null = null;
    const r = await g.poll(
      async (m) => {
        if (m.payload.i === 0) first = new WeakRef(m.payload);
        if (m.payload.i === 19) {
          // A WeakRef keeps its target until the current job ends: collect from a later one.
          await new Promise((resolve) => setTimeout(resolve, 0));
          gc();
          alive = first?.deref() !== undefined;
        }
      },
      { batchLimit: 20, concurrency: 1 },
    );
    expect(r.succeeded).toBe(20);
    expect(r.rangesClaimed).toBe(1);
    expect(first).not.toBeNull();
    expect(alive).toBe(false);
  });
});
