// decodeClaim: claim_N's answer (record row, header or fence holders) and the messages read behind
// it, decoded by the shape of each row.
import { describe, expect, it } from "vitest";
import { decodeClaim } from "../../packages/core/src/sql/claim.js";
import { type ClaimRow, type ClaimedMessageRow, recordEndsChain } from "../../packages/core/src/sql/cycle.js";

const none: ClaimRow = {
  low: null, high: null, id: null, message_key: null, compaction_rank: null, payload: null, options: null, created_at: null,
  lease_ms: null, recorded: null, committed: null, paused: null, reclaimable: null, expirable: null, reservable: null,
};
const header = (low: string, high: string, leaseMs: number | null): ClaimRow => ({ ...none, low, high, lease_ms: leaseMs });
const msg = (id: string): ClaimedMessageRow => ({ id, message_key: null, compaction_rank: null, payload: `{"n":${id}}`, options: null, created_at: 1 });
const record = (recorded: boolean, more: Partial<ClaimRow> = {}): ClaimRow => ({
  ...none, recorded, committed: "40", paused: false, reclaimable: false, expirable: false, reservable: false, ...more,
});

describe("decodeClaim", () => {
  it("a claim alone: the header's range with the messages read behind it", () => {
    const a = decodeClaim([header("10", "12", 4_000)], [msg("11"), msg("12")]);
    expect(a.record).toBeNull();
    expect(a.range).toEqual({ low: "10", high: "12", leaseMs: 4_000, msgs: [msg("11"), msg("12")] });
    expect(a.fenceHolders).toEqual([]);
  });

  it("an empty range (gaps, superseded messages): a header, no messages", () => {
    expect(decodeClaim([header("10", "20", null)], []).range).toEqual({ low: "10", high: "20", leaseMs: 0, msgs: [] });
  });

  it("a record and the next claim: the record row's flags, then the range", () => {
    const a = decodeClaim([record(true, { reservable: true }), header("12", "14", 3_000)], [msg("13")]);
    expect(a.record).toEqual({ recorded: true, committed: "40", paused: false, reclaimable: false, expirable: false, reservable: true });
    expect(a.range?.msgs.map((m) => m.id)).toEqual(["13"]);
  });

  it("a record that ended the chain (or did not land): the record row alone, no range", () => {
    const a = decodeClaim([record(false, { committed: null })], []);
    expect(a.record?.recorded).toBe(false);
    expect(a.range).toBeNull();
  });

  it("held by the fence: no range, the holders parsed from their payloads", () => {
    const holder = { pid: 123, age_ms: 2_500, app: "producer", statement: "INSERT" };
    const a = decodeClaim([{ ...none, payload: JSON.stringify(holder), options: { fence: true } as never }], []);
    expect(a.range).toBeNull();
    expect(a.fenceHolders).toEqual([holder]);
  });

  it("a row of no known shape is an error, not a silent miss", () => {
    expect(() => decodeClaim([none], [])).toThrow(/unexpected claim row/);
  });
});

describe("recordEndsChain", () => {
  const row = (more: Partial<ClaimRow> = {}) => ({ recorded: true, paused: false, reclaimable: false, expirable: false, reservable: false, ...more });

  it("a record that landed with nothing waiting goes on; due rows wait for a chain of unkeyed ranges only", () => {
    expect(recordEndsChain(row(), false)).toBe(false);
    expect(recordEndsChain(row({ reservable: true }), true)).toBe(false);
    expect(recordEndsChain(row({ reservable: true }), false)).toBe(true);
  });

  it("a record that did not land, a pause, a range to reclaim or runs to expire end it", () => {
    for (const more of [{ recorded: false }, { recorded: null }, { paused: true }, { reclaimable: true }, { expirable: true }]) {
      expect(recordEndsChain(row(more), true), JSON.stringify(more)).toBe(true);
    }
  });
});
