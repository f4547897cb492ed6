// docs/protocol/poll-cycle.md#the-byte-bound: a range hands out at most batchBytes of payload (the first
// message always goes), so big payloads cannot run a small function out of memory, and a reclaim
// decides from ids without loading payloads.
import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { useFreshDatabase } from "../../support/db.js";
import { spawnPoller } from "../../support/processes.js";
import { codeOf, count, cursor, setupGroup, testClient } from "../../support/streams.js";

const url = useFreshDatabase();

describe("ranges bounded by bytes (batchBytes)", () => {
  it("a bad batchBytes is SQL0045 before any statement", async () => {
    const t = testClient(url());
    const { g } = await setupGroup(t, "bytes.bad");
    t.statements.length = 0;
    for (const bad of [0, 1023, 1.5, Number.NaN, "16MB", 2 ** 31]) {
      expect(await codeOf(g.poll(() => {}, { batchBytes: bad as number }))).toBe("SQL0045");
      expect(await codeOf(g.drain(() => {}, { batchBytes: bad as number }))).toBe("SQL0045");
    }
    expect(t.statements).toEqual([]);
  });

  it("a range stops before the message that would pass the bound; a message larger than the bound goes alone", async () => {
    const t = testClient(url());
    const { s, g, sid, gid } = await setupGroup(t, "bytes.cut");
    const ids = (await s.produceBatch([
      { payload: { s: "a".repeat(3_000) } },
      { payload: { s: "b".repeat(3_000) } },
      { payload: { s: "c".repeat(3_000) } },
      { payload: { s: "d".repeat(9_000) } }, // larger than the bound on its own
      { payload: { s: "e".repeat(100) } },
    ])).map((r) => r.id);
    const seen: string[][] = [];
    const batches: number[] = [];
    for (let i = 0; i < 20 && seen.flat().length < 5; i++) {
      const got: string[] = [];
      const r = await g.poll((m) => void got.push(m.id), { batchLimit: 100, batchBytes: 7_000 });
      if (r.rangesClaimed > 0) {
        seen.push(got);
        batches.push(got.length);
      }
    }
    expect(seen).toEqual([[ids[0], ids[1]], [ids[2]], [ids[3]], [ids[4]]]);
    expect(batches).toEqual([2, 1, 1, 1]);
    expect(await count(t, `claim_lease_${sid}`)).toBe(0);
    expect((await cursor(t, sid, gid)).committed).toBe(ids[4]);
  });

  it("a payload stored uncompressed counts its stored size, a compressed one its JSON text; a range that fits goes whole", async () => {
    // docs/protocol/poll-cycle.md#the-byte-bound. Random hex does not compress, so Postgres stores those
    // payloads as they are, and the claim counts pg_column_size without converting them; the
    // repeated letters compress, and count their JSON text.
    const t = testClient(url());
    const { s, g, sid, gid } = await setupGroup(t, "bytes.stored");
    const hex = (n: number) => randomBytes(n / 2).toString("hex");
    const ids = (await s.produceBatch([
      { payload: { s: hex(3_000) } },
      { payload: { s: hex(3_000) } },
      { payload: { s: hex(3_000) } },
      { payload: { s: "x".repeat(20_000) } }, // compressed: its 20,009 bytes of text count
      { payload: { s: hex(2_000) } },
      { payload: { s: hex(2_000) } },
    ])).map((r) => r.id);
    const stored = await t.sql<{ size: number; packed: boolean; text: number }>(
      `SELECT pg_column_size(payload) AS size, pg_column_compression(payload) IS NOT NULL AS packed, octet_length(payload::text) AS text
         FROM sqlstreams.message_log_${sid} ORDER BY id`,
    );
    expect(stored.map((r) => r.packed)).toEqual([false, false, false, true, false, false]);
    // Stored sizes of the hex payloads: within a few bytes of their text, and not below it.
    for (const r of [stored[0], stored[4]]) expect(r.size - r.text).toBeGreaterThanOrEqual(0);
    expect(stored[3].size).toBeLessThan(2_000);
    const seen: string[][] = [];
    for (let i = 0; i < 20 && seen.flat().length < 6; i++) {
      const got: string[] = [];
      const r = await g.poll((m) => void got.push(m.id), { batchLimit: 100, batchBytes: 7_000 });
      if (r.rangesClaimed > 0) seen.push(got);
    }
    // Two hex payloads fit 7,000 bytes, three do not; the compressed one is larger than the bound
    // by its text (not by its stored size, which would fit beside the third); the last two fit.
    expect(seen).toEqual([[ids[0], ids[1]], [ids[2]], [ids[3]], [ids[4], ids[5]]]);
    expect((await cursor(t, sid, gid)).committed).toBe(ids[5]);
    // Within the bound, the whole range goes in one claim.
    const more = (await s.produceBatch(Array.from({ length: 5 }, () => ({ payload: { s: hex(1_000) } })))).map((r) => r.id);
    const got: string[] = [];
    await g.poll((m) => void got.push(m.id), { batchLimit: 100, batchBytes: 7_000 });
    expect(got).toEqual(more);
  });

  it("a 128 MB heap drains 16 messages of about 4.5 MB each (a child process with --max-old-space-size=128)", async () => {
    const t = testClient(url());
    const { s, sid, gid } = await setupGroup(t, "bytes.big", { stream: { maxPayloadBytes: 8 * 1_048_576 } });
    // About 4.5 MB of JSON each, and about three times that once parsed (400 000 distinct short
    // strings): 16 of them in one range need far more than a 128 MB heap.
    for (let i = 0; i < 16; i++) await s.produce({ i, s: Array.from({ length: 400_000 }, (_, k) => `v${i * 1_000_000 + k}`) });
    // batchLimit 16 asks for every message in one range: only the byte bound keeps it small.
    const child = spawnPoller(
      url(),
      { stream: "bytes.big", method: "loop", opts: { batchLimit: 16 }, stopAfter: 16, maxDrains: 50, pauseMs: 0, echo: ["i", "s.length", "s.0"] },
      "big-drain",
      ["--max-old-space-size=128"],
    );
    const exit = await child.exited;
    expect(child.stderr()).not.toMatch(/heap out of memory/i);
    expect(exit.code).toBe(0);
    expect(child.messages.find((m) => m.event === "done")).toEqual({ event: "done", handled: 16 });
    // Every payload arrived whole: 400 000 strings, the first one of its own message.
    const arrived = child.messages.filter((m) => m.event === "start").map((m) => m.payload as Record<string, unknown>);
    expect(arrived).toHaveLength(16);
    for (const p of arrived) expect(p).toEqual({ i: p.i, "s.length": 400_000, "s.0": `v${(p.i as number) * 1_000_000}` });
    expect((await cursor(t, sid, gid)).committed).toBe("16");
  });
});
