// claim_N's answer, decoded once (docs/protocol/poll-cycle.md#the-claims-answer). One claim answers with
// rows of four kinds: the record row (when it recorded the previous range), the range's messages
// (read behind the claim in the same transaction), the header (the range's bounds and lease), or
// instead of a header the producer transactions holding the fence.
import type { ClaimRow, ClaimedMessageRow, RecordFlagsRow } from "./cycle.js";

/** A producer transaction holding the fence (a fence-holder row's payload). */
export interface FenceHolder {
  pid: number | null;
  age_ms: number | null;
  app: string | null;
  /** The first word of the backend's current or last statement (never its text: literals can be secrets). */
  statement: string | null;
}

/** The record a claim made of the previous range: whether it landed, the cursor, and what the load would say now. */
export interface ClaimRecord extends RecordFlagsRow {
  committed: string | null;
}

/** A range a claim leased: its bounds, its lease's length (ms, as lease_ms_N computed it) and its messages. */
export interface ClaimedRange {
  low: string;
  high: string;
  leaseMs: number;
  /** Empty for an empty range: no lease was taken (leaseMs 0), the cursor advance passes its ids. */
  msgs: ClaimedMessageRow[];
}

export interface ClaimAnswer {
  /** The record row; null when the claim recorded nothing (or when a lost reply was recovered). */
  record: ClaimRecord | null;
  /** The range leased, or null when none was (the fence held it, or the record ended the chain). */
  range: ClaimedRange | null;
  /** Without a range: the producers' transactions that held the fence. */
  fenceHolders: FenceHolder[];
  /** Set when the group's rate limit cut the range (or left nothing): ms until its next token. */
  rateLimitedMs: number | null;
}

/** The claim's rows and the messages read behind it, decoded by the shape of each row. */
export function decodeClaim(rows: readonly ClaimRow[], messages: readonly ClaimedMessageRow[]): ClaimAnswer {
  const out: ClaimAnswer = { record: null, range: null, fenceHolders: [], rateLimitedMs: null };
  const msgs = [...messages];
  for (const r of rows) {
    if (typeof r.recorded === "boolean") {
      const { recorded, committed, paused, reclaimable, expirable, reservable } = r;
      out.record = { recorded, committed, paused, reclaimable, expirable, reservable };
    } else if (r.id !== null) {
      msgs.push(r as ClaimedMessageRow);
    } else if (r.low !== null) {
      out.range = { low: r.low, high: r.high as string, leaseMs: r.lease_ms ?? 0, msgs };
    } else if (r.options !== null && "rateLimited" in r.options) {
      out.rateLimitedMs = Number((r.options as { rateLimited: unknown }).rateLimited);
    } else if (r.options !== null && r.payload !== null) {
      out.fenceHolders.push(JSON.parse(r.payload) as FenceHolder);
    } else {
      throw new Error(`unexpected claim row ${JSON.stringify(r)}`);
    }
  }
  return out;
}
