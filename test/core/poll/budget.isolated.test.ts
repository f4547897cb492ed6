// Structural budgets of ARCHITECTURE.md, counted (never timed): a poll's range costs one round trip
// to claim (the claim and the read of its range, docs/protocol/poll-cycle.md#the-claims-answer) and one to
// record and advance; in a drain's steady state a full range costs one round
// trip that records it and claims the next (docs/protocol/poll-cycle.md#the-steady-state); a caught-up poll
// is one read-only statement; the happy path writes no per-message row.
import { describe, expect, it } from "vitest";
import { useFreshDatabase } from "../../support/db.js";
import { type TestClient, count, cursor, groupIdOf, streamIdOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();

/** Stream `name` with group "g" registered (with `config`), one message drained to warm the client's stream cache. */
async function warmed(t: TestClient, name: string, config: Record<string, unknown> = {}, key?: string) {
  const s = t.client.stream(name);
  await s.register();
  const g = s.consumer("g");
  await g.register(config);
  await s.produce({ warm: true }, key === undefined ? undefined : { key });
  await g.drain(() => {}); // warms the client's stream cache
  return { s, g, n: await streamIdOf(t, name) };
}

/** A statement, named by the protocol function it calls (the text itself when none). */
function kindOf(q: string, n: number | string): string {
  return q.includes(`record_take_keys_${n}(`) ? "record+take" : q.includes(`take_keys_${n}(`) ? "take" : q.includes(`claim_${n}(`) ? "claim"
    : q.includes("consumer_group_config g") ? "load" : q.includes(`record_range_${n}(`) ? "record"
      : q.includes(`FROM "sqlstreams".claim_lease_${n} l WHERE l.consumer_group_id = $1 AND l.token = $2`) ? "read" : q;
}

/**
 * Each round trip sent, named by its statement: a claim travels with the read of the range it
 * leases behind it, in one round trip and transaction (docs/protocol/poll-cycle.md#the-claims-answer), so
 * every claim must be followed by its read, and the pair counts once. Checked against the round
 * trips the pool's connections actually carried since `from` (t.roundTrips then).
 */
function kinds(t: TestClient, n: number | string, from?: number): string[] {
  const out: string[] = [];
  let pairs = 0;
  for (const [i, q] of t.statements.entries()) {
    const k = kindOf(q, n);
    if (k === "read") continue;
    if (k === "claim") {
      expect(kindOf(t.statements[i + 1] ?? "", n)).toBe("read");
      pairs++;
    }
    out.push(k);
  }
  expect(t.statements.length - pairs).toBe(out.length);
  if (from !== undefined) expect(t.roundTrips - from).toBe(out.length);
  return out;
}

describe("round-trip budgets", () => {
  it("happy range = load + claim + record; caught-up poll = one read; batch produce = one statement", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const { s, g, n } = await warmed(t, "budget");
    const gid = await groupIdOf(t, "g");

    t.statements.length = 0;
    await s.produceBatch(Array.from({ length: 100 }, (_, i) => ({ payload: { i, pad: "x".repeat(1000) } })));
    expect(t.statements).toHaveLength(1);

    t.statements.length = 0;
    let from = t.roundTrips;
    const r = await g.poll(() => {}, { batchLimit: 100 });
    expect(r.succeeded).toBe(100);
    expect(r.rangesClaimed).toBe(1);
    // The claim and the read of its range go in one round trip.
    expect(kinds(t, n, from)).toEqual(["load", "claim", "record"]);
    expect(await count(t, `exception_queue_${n}`)).toBe(0);
    expect(await count(t, `delivery_log_${n}`)).toBe(0);
    expect(await count(t, `claim_lease_${n}`)).toBe(0);

    const before = await cursor(t, n, gid);
    const stamp = await t.sql(`SELECT updated_at FROM sqlstreams.consumer_group_cursor_${n}`);
    t.statements.length = 0;
    from = t.roundTrips;
    const idle = await g.poll(() => {});
    expect(idle.idle).toBe(true);
    expect(t.statements).toHaveLength(1);
    expect(t.roundTrips - from).toBe(1);
    expect(t.statements[0].trim().startsWith("SELECT")).toBe(true);
    expect(await cursor(t, n, gid)).toEqual(before);
    expect(await t.sql(`SELECT updated_at FROM sqlstreams.consumer_group_cursor_${n}`)).toEqual(stamp);
  });

  it("drain steady state: full ranges cost one statement each (record + next claim), then one caught-up read", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const { s, g, n } = await warmed(t, "steady");
    await s.produceBatch(Array.from({ length: 300 }, (_, i) => ({ payload: { i } })));

    t.statements.length = 0;
    const from = t.roundTrips;
    const seen: number[] = [];
    const sentBefore: number[] = [];
    const r = await g.drain((m) => {
      seen.push((m.payload as { i: number }).i);
      sentBefore.push(t.roundTrips - from);
    }, { batchLimit: 100 });
    expect(seen).toEqual(Array.from({ length: 300 }, (_, i) => i));
    // The second range's handlers run after the claim of the third was sent; the first's before.
    expect([sentBefore[0], sentBefore[100], sentBefore[200]]).toEqual([2, 4, 5]);
    expect(r.succeeded).toBe(300);
    expect(r.rangesClaimed).toBe(3);
    // load, claim (0, 100]; record it + claim (100, 200]; while that range runs (the one before
    // was quick), (200, 300] is claimed ahead (docs/protocol/poll-cycle.md#claiming-ahead); while that one
    // runs, the record of (100, 200] travels with the next claim ahead, which finds nothing
    // (caught up); so (200, 300] is recorded on its own; caught-up load. One statement per range,
    // plus one per chain.
    expect(kinds(t, n, from)).toEqual(["load", "claim", "claim", "claim", "claim", "record", "load"]);
    expect(await count(t, `claim_lease_${n}`)).toBe(0);
    expect(await count(t, `exception_queue_${n}`)).toBe(0);
    const c = await t.sql(`SELECT committed::int AS committed FROM sqlstreams.consumer_group_cursor_${n}`);
    expect(c).toEqual([{ committed: 301 }]);
  });

  it("keyed ranges claimed ahead: the claim goes out with the key take, the record with the next range's take", async () => {
    // docs/protocol/poll-cycle.md#keyed-ranges-claimed-ahead. 300 ordered messages over 7 keys, ranges of 100.
    const t = testClient(url());
    await t.client.migrate();
    const { s, g, n } = await warmed(t, "steady.keyed", { concurrencyOverride: "ordered" }, "warm");
    await s.produceBatch(Array.from({ length: 300 }, (_, i) => ({ payload: { i }, key: `k${i % 7}` })));

    t.statements.length = 0;
    const from = t.roundTrips;
    const seen: number[] = [];
    const sentBefore: number[] = [];
    const r = await g.drain((m) => {
      seen.push((m.payload as { i: number }).i);
      sentBefore.push(t.roundTrips - from);
    }, { batchLimit: 100 });
    expect([...seen].sort((a, b) => a - b)).toEqual(Array.from({ length: 300 }, (_, i) => i));
    for (let k = 0; k < 7; k++) {
      const mine = seen.filter((i) => i % 7 === k);
      expect(mine).toEqual([...mine].sort((a, b) => a - b)); // each key in order
    }
    expect(r.succeeded).toBe(300);
    expect(r.rangesClaimed).toBe(3);
    // load, claim (0, 100], take its keys; record it + claim (100, 200]; the last range was quick,
    // so (100, 200] takes its keys and (200, 300] is claimed ahead, sent right after; when
    // (200, 300] starts, (100, 200]'s record goes with (200, 300]'s keys and the next claim ahead
    // finds nothing; (200, 300] records alone; caught-up load.
    expect(kinds(t, n, from)).toEqual(["load", "claim", "take", "claim", "take", "claim", "record+take", "claim", "record", "load"]);
    // (200, 300]'s handlers ran after its keys were answered, with the record of (100, 200].
    expect(sentBefore[seen.indexOf(200)]).toBe(8);
    expect(await count(t, `claim_lease_${n}`)).toBe(0);
    expect(await count(t, `message_key_lease_${n}`)).toBe(0);
    expect(await count(t, `exception_queue_${n}`)).toBe(0);
    const c = await t.sql(`SELECT committed::int AS committed FROM sqlstreams.consumer_group_cursor_${n}`);
    expect(c).toEqual([{ committed: 301 }]);
  });

  it("due retries do not end a chain of unkeyed ranges: they run after it; after a keyed range they still do", async () => {
    // docs/protocol/poll-cycle.md#due-rows-and-the-chain. Every 50th message fails once; its retry is due
    // 1 ms later. Four full ranges of 100.
    const t = testClient(url());
    await t.client.migrate();
    const runs = async (name: string, key: (i: number) => string | undefined, config: Record<string, unknown>) => {
      const { s, g } = await warmed(t, name, { exceptionInitialBackoff: 0, message: { retry: { baseDelay: 1 } }, ...config });
      await s.produceBatch(Array.from({ length: 400 }, (_, i) => ({ payload: { i }, key: key(i) })));
      const order: string[] = [];
      const r = await g.drain((m) => {
        const i = (m.payload as { i: number }).i;
        order.push(`${i}@${m.attempt}`);
        if (i % 50 === 0 && m.attempt === 0) throw new Error("once");
      }, { batchLimit: 100 });
      expect(r).toMatchObject({ succeeded: 400, failed: 8 });
      return order;
    };
    const plain = await runs("due.plain", () => undefined, {});
    // Every first attempt ran before any retry: the chain went on past the due rows.
    const lastFirst = plain.indexOf("399@0");
    expect(plain.slice(0, lastFirst + 1).filter((o) => o.endsWith("@1"))).toEqual([]);
    expect(plain.slice(lastFirst + 1).sort()).toEqual([0, 100, 150, 200, 250, 300, 350, 50].map((i) => `${i}@1`));
    // Keyed (exclusive) ranges: the first ranges' retries run before the last range starts.
    const keyed = await runs("due.keyed", (i) => `k${i % 7}`, { concurrencyOverride: "exclusive" });
    expect(keyed.indexOf("0@1")).toBeLessThan(keyed.indexOf("399@0"));
  });
});
