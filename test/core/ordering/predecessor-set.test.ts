// The set-based predecessor rule and key-lease upsert (docs/protocol/ordering.md#the-predecessor-rule,
// docs/protocol/ordering.md#key-leases): take_keys_N checks every key of a range in one statement. One call
// here mixes every case, so a rule that looked at the wrong key's row, lost a probe, or let one
// key's answer leak into another's fails: a predecessor inside another range's live lease, one in
// the exception queue, one not claimed yet, a dead row (resolved), a key leased by someone else
// (busy), an expired lease (taken over), and an exclusive key (no predecessor check).
import { describe, expect, it } from "vitest";
import { useFreshDatabase } from "../../support/db.js";
import { SCHEMA, groupIdOf, streamIdOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();

const OWN = "00000000-0000-4000-8000-000000000001";
const OTHER = "00000000-0000-4000-8000-000000000002";
const STRANGER = "00000000-0000-4000-8000-000000000003";

describe("take_keys_N: the predecessor rule and the lease upsert for many keys in one statement", () => {
  it("answers each key by its own rows: lease, exception queue and unclaimed predecessors, busy, expired, exclusive", async () => {
    const t = testClient(url());
    const s = t.client.stream<{ i: number }>("ordered.set");
    await s.register();
    await s.consumer("g").register({ concurrencyOverride: "ordered" });
    // Ids 1..30 in this order (one produce at a time, so ids follow the list).
    const keys = [
      "eq", "eqdead", "f3", "f4", "f5", "f6", "f7", "f8", "f9", "f10",
      "lease", "f12", "f13", "f14", "f15", "excl", "unclaimed", "f18", "f19", "f20",
      "eq", "eqdead", "unclaimed", "lease", "free", "busy", "expired", "excl", "f29", "f30",
    ];
    for (const [i, key] of keys.entries()) await s.produce({ i }, { key });
    const n = await streamIdOf(t, "ordered.set");
    const g = await groupIdOf(t, "g", "ordered.set");
    const ids = await t.sql<{ id: string; message_key: string }>(`SELECT m.id::text AS id, m.message_key FROM ${SCHEMA}.message_log_${n} m ORDER BY m.id`);
    expect(ids.map((r) => r.message_key)).toEqual(keys);
    const id = (pos: number) => ids[pos - 1].id;

    // Claimed up to 15; another poll's live range (10, 15]; the caller's range (20, 30].
    await t.sql(`UPDATE ${SCHEMA}.consumer_group_cursor_${n} SET claimed = $2 WHERE consumer_group_id = $1`, [g, id(15)]);
    await t.sql(
      `INSERT INTO ${SCHEMA}.claim_lease_${n} (consumer_group_id, token, low, high, expires_at)
       VALUES ($1, $2, $3, $4, now() + interval '1 hour'), ($1, $5, $6, $7, now() + interval '1 hour')`,
      [g, OTHER, id(10), id(15), OWN, id(20), id(30)],
    );
    await t.sql(
      `INSERT INTO ${SCHEMA}.exception_queue_${n} (consumer_group_id, message_id, status, message_key, concurrency, attempts)
       VALUES ($1, $2, 'ready', 'eq', 'ordered', 1), ($1, $3, 'dead', 'eqdead', 'ordered', 3)`,
      [g, id(1), id(2)],
    );
    await t.sql(
      `INSERT INTO ${SCHEMA}.message_key_lease_${n} (consumer_group_id, message_key, token, expires_at)
       VALUES ($1, 'busy', $2, now() + interval '1 hour'), ($1, 'expired', $2, now() - interval '1 second')`,
      [g, STRANGER],
    );

    const wanted = [21, 22, 23, 24, 25, 26, 27, 28].map((pos) => ({
      k: keys[pos - 1], id: id(pos), ordered: keys[pos - 1] !== "excl", ms: 60_000,
    }));
    const refused = await t.sql<{ k: string; kind: string; pred_id: string | null }>(
      `SELECT k, kind, pred_id::text FROM ${SCHEMA}.take_keys_${n}($1, $2, $3, $4, $5::jsonb) ORDER BY k`,
      [g, OWN, id(20), id(30), JSON.stringify(wanted)],
    );
    expect(refused).toEqual([
      { k: "busy", kind: "busy", pred_id: null },
      { k: "eq", kind: "pred", pred_id: id(1) },
      { k: "lease", kind: "pred", pred_id: id(11) },
      { k: "unclaimed", kind: "pred", pred_id: id(17) },
    ]);
    // Every key not refused is held under the caller's token, with the run's lease length; the
    // busy key keeps its holder; keys with a predecessor got no row.
    const leases = await t.sql<{ message_key: string; token: string; secs: number }>(
      `SELECT message_key, token::text, round(extract(epoch FROM expires_at - now()))::int AS secs
         FROM ${SCHEMA}.message_key_lease_${n} WHERE consumer_group_id = $1 ORDER BY message_key`,
      [g],
    );
    expect(leases.map((l) => [l.message_key, l.token])).toEqual([
      ["busy", STRANGER], ["eqdead", OWN], ["excl", OWN], ["expired", OWN], ["free", OWN],
    ]);
    for (const l of leases.filter((x) => x.token === OWN)) expect(l.secs, l.message_key).toBeGreaterThanOrEqual(58);

    // The one-key forms are the same rule: ordered_pred_N per key, and take_key_N's typed result.
    for (const w of wanted.filter((x) => x.ordered)) {
      const [p] = await t.sql<{ pred: string | null }>(`SELECT ${SCHEMA}.ordered_pred_${n}($1, $2, $3, $4, $5)::text AS pred`, [
        g, w.k, w.id, id(20), id(30),
      ]);
      const expected = refused.find((r) => r.k === w.k && r.kind === "pred")?.pred_id ?? null;
      expect(p.pred, w.k).toBe(expected);
    }
    const takeKey = async (pos: number, token: string) => {
      const [r] = await t.sql<{ kind: string; ref: string | null }>(
        `SELECT kind, ref::text AS ref FROM ${SCHEMA}.take_key_${n}($1, $2, $3, 60000, $4, true, $5, $6, false)`,
        [g, keys[pos - 1], token, id(pos), id(20), id(30)],
      );
      return r.kind === "pred" ? `pred ${r.ref}` : r.kind;
    };
    expect(await takeKey(21, OWN)).toBe(`pred ${id(1)}`);
    expect(await takeKey(24, OWN)).toBe(`pred ${id(11)}`);
    expect(await takeKey(23, OWN)).toBe(`pred ${id(17)}`);
    expect(await takeKey(26, OWN)).toBe("busy");
    expect(await takeKey(25, OWN)).toBe("taken"); // the same token renews its own lease
    expect(await takeKey(25, STRANGER)).toBe("busy");
  });

  it("the fast path (no wanted key has a row) answers as the upsert does, and a row late in key order falls back to it", async () => {
    // take_keys_N first tries a plain INSERT of every key without a predecessor;
    // any existing row makes it fail, undo its partial work, and run the upsert instead.
    const t = testClient(url());
    const s = t.client.stream<{ i: number }>("ordered.fast");
    await s.register();
    await s.consumer("g").register({ concurrencyOverride: "ordered" });
    const keys = ["a", "b", "a", "b", "c", "d", "zz"];
    for (const [i, key] of keys.entries()) await s.produce({ i }, { key });
    const n = await streamIdOf(t, "ordered.fast");
    const g = await groupIdOf(t, "g", "ordered.fast");
    const ids = (await t.sql<{ id: string }>(`SELECT id::text AS id FROM ${SCHEMA}.message_log_${n} ORDER BY id`)).map((r) => r.id);
    // Claimed up to 7; the caller's range (2, 7]; message 1 ("a") is an unresolved exception row.
    await t.sql(`UPDATE ${SCHEMA}.consumer_group_cursor_${n} SET claimed = $2 WHERE consumer_group_id = $1`, [g, ids[6]]);
    await t.sql(
      `INSERT INTO ${SCHEMA}.exception_queue_${n} (consumer_group_id, message_id, status, message_key, concurrency, attempts)
       VALUES ($1, $2, 'ready', 'a', 'ordered', 1)`,
      [g, ids[0]],
    );
    const wanted = [3, 4, 5, 6, 7].map((pos) => ({ k: keys[pos - 1], id: ids[pos - 1], ordered: true, ms: 60_000 }));
    const take = (token: string) =>
      t.sql<{ k: string; kind: string; pred_id: string | null }>(
        `SELECT k, kind, pred_id::text FROM ${SCHEMA}.take_keys_${n}($1, $2, $3, $4, $5::jsonb) ORDER BY k`,
        [g, token, ids[1], ids[6], JSON.stringify(wanted)],
      );
    const leases = async () =>
      (await t.sql<{ k: string; token: string }>(
        `SELECT message_key AS k, token::text FROM ${SCHEMA}.message_key_lease_${n} WHERE consumer_group_id = $1 AND expires_at > now() ORDER BY message_key`,
        [g],
      )).map((l) => `${l.k}:${l.token === OWN ? "own" : l.token === STRANGER ? "stranger" : l.token}`);

    // No rows: the fast path. Only "a" has an unresolved predecessor (its exception row).
    expect(await take(OWN)).toEqual([{ k: "a", kind: "pred", pred_id: ids[0] }]);
    expect(await leases()).toEqual(["b:own", "c:own", "d:own", "zz:own"]);

    // Every row exists under the caller's token: the fallback renews them, same answer.
    expect(await take(OWN)).toEqual([{ k: "a", kind: "pred", pred_id: ids[0] }]);
    expect(await leases()).toEqual(["b:own", "c:own", "d:own", "zz:own"]);

    // Only the last key in key order is held by someone else: the plain INSERT has written "b",
    // "c", "d" before it fails; nothing of that survives but what the upsert takes.
    await t.sql(`DELETE FROM ${SCHEMA}.message_key_lease_${n}`);
    await t.sql(
      `INSERT INTO ${SCHEMA}.message_key_lease_${n} (consumer_group_id, message_key, token, expires_at) VALUES ($1, 'zz', $2, now() + interval '1 hour')`,
      [g, STRANGER],
    );
    expect(await take(OTHER)).toEqual([{ k: "a", kind: "pred", pred_id: ids[0] }, { k: "zz", kind: "busy", pred_id: null }]);
    expect(await leases()).toEqual(["b:" + OTHER, "c:" + OTHER, "d:" + OTHER, "zz:stranger"]);
    const [{ rows }] = await t.sql<{ rows: number }>(`SELECT count(*)::int AS rows FROM ${SCHEMA}.message_key_lease_${n}`);
    expect(rows).toBe(4);
  });

  it("record_take_keys_N releases every lease under the run's key token for \"all\", and only the keys named for an array (an abandoned run's lease stays)", async () => {
    const t = testClient(url());
    const s = t.client.stream<{ i: number }>("ordered.release");
    await s.register();
    await s.consumer("g").register({ concurrencyOverride: "ordered" });
    for (let i = 0; i < 4; i++) await s.produce({ i }, { key: `r${i}` });
    const n = await streamIdOf(t, "ordered.release");
    const g = await groupIdOf(t, "g", "ordered.release");
    const held = async () =>
      (await t.sql<{ k: string; token: string }>(
        `SELECT message_key AS k, token::text FROM ${SCHEMA}.message_key_lease_${n} WHERE consumer_group_id = $1 ORDER BY message_key`,
        [g],
      )).map((l) => `${l.k}:${l.token === OWN ? "own" : l.token === STRANGER ? "stranger" : l.token}`);
    // A recorded range's lease and key leases: three keys under the run's token, one a stranger's.
    const setUp = async () => {
      await t.sql(`DELETE FROM ${SCHEMA}.message_key_lease_${n}`);
      await t.sql(
        `INSERT INTO ${SCHEMA}.claim_lease_${n} (consumer_group_id, token, low, high, expires_at) VALUES ($1, $2, 0, 4, now() + interval '1 hour')`,
        [g, OTHER],
      );
      await t.sql(
        `INSERT INTO ${SCHEMA}.message_key_lease_${n} (consumer_group_id, message_key, token, expires_at)
         VALUES ($1, 'r0', $2, now() + interval '1 hour'), ($1, 'r1', $2, now() + interval '1 hour'),
                ($1, 'r2', $2, now() + interval '1 hour'), ($1, 'r3', $3, now() + interval '1 hour')`,
        [g, OWN, STRANGER],
      );
    };
    const record = (keys: string | null) =>
      t.sql<{ recorded: boolean | null }>(
        `SELECT recorded FROM ${SCHEMA}.record_take_keys_${n}($1, $2, NULL, NULL, $3, $4::jsonb, $5, 4, 4, NULL)`,
        [g, OTHER, OWN, keys, STRANGER],
      );

    await setUp();
    expect((await record('"all"'))[0].recorded).toBe(true);
    expect(await held()).toEqual(["r3:stranger"]);

    // r1 ran abandoned: the client names the others, and r1's lease (still renewed) stays.
    await setUp();
    expect((await record(JSON.stringify(["r0", "r2"])))[0].recorded).toBe(true);
    expect(await held()).toEqual(["r1:own", "r3:stranger"]);

    // No key taken: nothing released.
    await setUp();
    expect((await record(null))[0].recorded).toBe(true);
    expect(await held()).toEqual(["r0:own", "r1:own", "r2:own", "r3:stranger"]);
  });

  it("take_keys_N ends no lease after the caller's range lease: new leases are capped at it, leases passed on are shortened to it", async () => {
    const t = testClient(url());
    const s = t.client.stream<{ i: number }>("ordered.cap");
    await s.register();
    await s.consumer("g").register({ concurrencyOverride: "ordered" });
    for (let i = 0; i < 3; i++) await s.produce({ i }, { key: `c${i}` });
    const n = await streamIdOf(t, "ordered.cap");
    const g = await groupIdOf(t, "g", "ordered.cap");
    await t.sql(`UPDATE ${SCHEMA}.consumer_group_cursor_${n} SET claimed = 3 WHERE consumer_group_id = $1`, [g]);
    // The caller's range (0, 3] expires in 10 s; c0's lease, passed on from the range before, in an hour.
    await t.sql(
      `INSERT INTO ${SCHEMA}.claim_lease_${n} (consumer_group_id, token, low, high, expires_at) VALUES ($1, $2, 0, 3, now() + interval '10 seconds')`,
      [g, OTHER],
    );
    await t.sql(
      `INSERT INTO ${SCHEMA}.message_key_lease_${n} (consumer_group_id, message_key, token, expires_at) VALUES ($1, 'c0', $2, now() + interval '1 hour')`,
      [g, OWN],
    );
    const wanted = [
      { k: "c0", id: "1", ordered: true, ms: 60_000, held: true },
      { k: "c1", id: "2", ordered: true, ms: 60_000 },
      { k: "c2", id: "3", ordered: true, ms: 1_000 },
    ];
    const refused = await t.sql(`SELECT k, kind FROM ${SCHEMA}.take_keys_${n}($1, $2, 0, 3, $3::jsonb)`, [g, OWN, JSON.stringify(wanted)]);
    expect(refused).toEqual([]);
    const rows = await t.sql<{ k: string; capped: boolean; left_ms: number }>(
      `SELECT k.message_key AS k, k.expires_at = l.expires_at AS capped,
              round(extract(epoch FROM k.expires_at - now()) * 1000)::int AS left_ms
         FROM ${SCHEMA}.message_key_lease_${n} k, ${SCHEMA}.claim_lease_${n} l
        WHERE l.token = $1 ORDER BY k.message_key`,
      [OTHER],
    );
    expect(rows.map((r) => [r.k, r.capped])).toEqual([["c0", true], ["c1", true], ["c2", false]]);
    expect(rows[2].left_ms).toBeLessThanOrEqual(1_000);
    // An exception start passes (0, 0]: no range lease, no cap.
    const [take] = await t.sql<{ kind: string }>(`SELECT kind FROM ${SCHEMA}.take_key_${n}($1, 'free', $2, 60000, 3, false, 0, 0, false)`, [g, STRANGER]);
    expect(take.kind).toBe("taken");
    const [{ left }] = await t.sql<{ left: number }>(
      `SELECT round(extract(epoch FROM expires_at - now()))::int AS left FROM ${SCHEMA}.message_key_lease_${n} WHERE message_key = 'free'`,
    );
    expect(left).toBeGreaterThan(30);
  });
});
