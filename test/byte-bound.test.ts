// docs/poll-cycle.md#the-byte-bound: a range hands out at most batchBytes of payload (the first
// message always goes), so big payloads cannot run a small function out of memory, and a reclaim
// decides from ids without loading payloads.
import { describe, expect, it } from "vitest";
import { useFreshDatabase } from "./support/db.js";
import { spawnNode } from "./support/processes.js";
import { codeOf, count, cursor, setupGroup, testClient } from "./support/streams.js";

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

  it("a 128 MB heap drains 16 messages of about 4.5 MB each (a child process with --max-old-space-size=128)", async () => {
    const t = testClient(url());
    const { s, sid, gid } = await setupGroup(t, "bytes.big", { stream: { maxPayloadBytes: 8 * 1_048_576 } });
    // About 4.5 MB of JSON each, and about three times that once parsed (400 000 distinct short
    // strings): 16 of them in one range need far more than a 128 MB heap.
    for (let i = 0; i < 16; i++) await s.produce({ i, s: Array.from({ length: 400_000 }, (_, k) => `v${i * 1_000_000 + k}`) });
    const child = spawnNode({
      name: "big-drain",
      nodeArgs: ["--max-old-space-size=128"],
      env: { DATABASE_URL: url() },
      source: `
        import { SqlStreams } from "@sqlstreams/core";
        const client = new SqlStreams({ connectionString: process.env.DATABASE_URL, logger: () => {} });
        const g = client.stream("bytes.big").consumer("g");
        let n = 0;
        let bad = 0;
        // batchLimit 16 asks for every message in one range: only the byte bound keeps it small.
        for (let i = 0; i < 50 && n < 16; i++) {
          await g.drain((m) => {
            n++;
            if (m.payload.s.length !== 400000 || m.payload.s[0] !== "v" + m.payload.i * 1000000) bad++;
          }, { batchLimit: 16 });
        }
        console.log(JSON.stringify({ event: "done", n, bad }));
        await client.close();
      `,
    });
    const exit = await child.exited;
    expect(child.stderr()).not.toMatch(/heap out of memory/i);
    expect(exit.code).toBe(0);
    expect(child.messages.find((m) => m.event === "done")).toEqual({ event: "done", n: 16, bad: 0 });
    expect((await cursor(t, sid, gid)).committed).toBe("16");
  });
});
