// The invariants of docs/protocol/conformance.md#invariants that are cheap to check from the tables after any step:
//
//   import { checkInvariants } from "./support/invariants.js";
//   await checkInvariants(t, streamId);                       // after every step of a scenario
//   await checkInvariants(t, streamId, { afterSeek: true });  // a seek() may lower the cursor
//
// I1  0 ≤ committed ≤ claimed ≤ settled_head; claimed and committed never decrease (tracked per
//     database, stream and group across calls in this process) except across seek().
// I2  committed ≤ low < high ≤ claimed for every claim lease; one group's leases never overlap.
// I3  no ready/inflight/deferred row at or below committed, except rows put back by redrive()
//     (a `redriven` delivery-log row, or an id passed in `redriven` for streams in mode off), and
//     those at or above the group's redrive floor.
// I4  inflight rows hold a lease; dead and superseded rows hold none; attempts ≥ delays ≥ 0.
// I9  mode off writes no delivery_log_N row; mode failures writes no success row.
// I10 the delivery-log attempts of one (group, message) never decrease, except right after a
//     `redriven` row.
//
// Also exported: tableSnapshot(), a JSON dump of a stream's family state for "nothing changed"
// assertions (pause, polls before a row is due, late results of abandoned handlers).
import { expect } from "vitest";
import { SCHEMA, type TestClient } from "./streams.js";

export interface InvariantOptions {
  /** A seek() ran since the last check: the cursor may have moved back (I1 monotonicity). */
  afterSeek?: boolean;
  /** Message ids redriven in a stream whose mode writes no delivery-log row (I3 exemption). */
  redriven?: string[];
}

const lastCursor = new Map<string, { claimed: bigint; committed: bigint }>();

/** Checks I1–I4, I9 and I10 for every group of the stream; fails the test with the offending rows. */
export async function checkInvariants(t: TestClient, streamId: string | number, opts: InvariantOptions = {}): Promise<void> {
  const n = String(streamId);
  if (!/^[0-9]+$/.test(n)) throw new Error(`checkInvariants: stream id must be numeric, got ${n}`);
  const [{ db, mode }] = await t.sql<{ db: string; mode: string }>(
    `SELECT current_database() AS db, delivery_log_mode AS mode FROM ${SCHEMA}.stream_config WHERE id = $1`,
    [n],
  );

  // I1
  const cursors = await t.sql<{ g: string; claimed: string; committed: string; settled_head: string }>(
    `SELECT consumer_group_id::text AS g, claimed::text, committed::text, settled_head::text
       FROM ${SCHEMA}.consumer_group_cursor_${n}`,
  );
  for (const c of cursors) {
    const claimed = BigInt(c.claimed);
    const committed = BigInt(c.committed);
    const where = `I1 stream ${n} group ${c.g}: ${JSON.stringify(c)}`;
    expect(0n <= committed && committed <= claimed && claimed <= BigInt(c.settled_head), where).toBe(true);
    const key = `${db}/${n}/${c.g}`;
    const prev = lastCursor.get(key);
    if (prev && !opts.afterSeek) {
      expect(claimed >= prev.claimed, `${where}: claimed decreased from ${prev.claimed}`).toBe(true);
      expect(committed >= prev.committed, `${where}: committed decreased from ${prev.committed}`).toBe(true);
    }
    lastCursor.set(key, { claimed, committed });
  }

  // I2
  const leaseViolations = await t.sql(
    `SELECT l.consumer_group_id::text AS g, l.low::text, l.high::text, c.committed::text, c.claimed::text
       FROM ${SCHEMA}.claim_lease_${n} l JOIN ${SCHEMA}.consumer_group_cursor_${n} c USING (consumer_group_id)
      WHERE NOT (c.committed <= l.low AND l.low < l.high AND l.high <= c.claimed)`,
  );
  expect(leaseViolations, `I2 stream ${n}: leases outside (committed, claimed]`).toEqual([]);
  const overlaps = await t.sql(
    `SELECT a.consumer_group_id::text AS g, a.low::text AS a_low, a.high::text AS a_high, b.low::text AS b_low, b.high::text AS b_high
       FROM ${SCHEMA}.claim_lease_${n} a JOIN ${SCHEMA}.claim_lease_${n} b
         ON a.consumer_group_id = b.consumer_group_id AND a.token < b.token AND a.low < b.high AND b.low < a.high`,
  );
  expect(overlaps, `I2 stream ${n}: overlapping leases`).toEqual([]);

  // I3
  const below = await t.sql<{ g: string; message_id: string; status: string; committed: string }>(
    `SELECT e.consumer_group_id::text AS g, e.message_id::text, e.status, c.committed::text
       FROM ${SCHEMA}.exception_queue_${n} e JOIN ${SCHEMA}.consumer_group_cursor_${n} c USING (consumer_group_id)
      WHERE e.status IN ('ready', 'inflight', 'deferred') AND e.message_id <= c.committed
        AND NOT EXISTS (SELECT 1 FROM ${SCHEMA}.delivery_log_${n} d
                         WHERE d.consumer_group_id = e.consumer_group_id AND d.message_id = e.message_id
                           AND d.status = 'redriven')
        AND NOT (e.message_id::text = ANY($1::text[]))`,
    [opts.redriven ?? []],
  );
  expect(below, `I3 stream ${n}: unresolved rows at or below committed`).toEqual([]);
  // ... and each of those lies at or above the group's redrive floor, where the exception
  // reservation starts reading at or below committed (consumer_group_cursor_N.redrive_floor).
  const belowFloor = await t.sql(
    `SELECT e.consumer_group_id::text AS g, e.message_id::text, e.status, c.committed::text, c.redrive_floor::text
       FROM ${SCHEMA}.exception_queue_${n} e JOIN ${SCHEMA}.consumer_group_cursor_${n} c USING (consumer_group_id)
      WHERE e.status IN ('ready', 'inflight', 'deferred') AND e.message_id <= c.committed
        AND (c.redrive_floor IS NULL OR e.message_id < c.redrive_floor)`,
  );
  expect(belowFloor, `I3 stream ${n}: unresolved rows at or below committed and below the redrive floor`).toEqual([]);

  // I4
  const badRows = await t.sql(
    `SELECT consumer_group_id::text AS g, message_id::text, status, attempts, delays, lease_token::text, lease_expires_at
       FROM ${SCHEMA}.exception_queue_${n}
      WHERE (status = 'inflight' AND (lease_token IS NULL OR lease_expires_at IS NULL))
         OR (status IN ('dead', 'superseded') AND (lease_token IS NOT NULL OR lease_expires_at IS NOT NULL))
         OR NOT (attempts >= delays AND delays >= 0)`,
  );
  expect(badRows, `I4 stream ${n}`).toEqual([]);

  // I9
  if (mode === "off") {
    const deliveryLog = await t.sql(`SELECT * FROM ${SCHEMA}.delivery_log_${n}`);
    expect(deliveryLog, `I9 stream ${n}: mode off wrote delivery-log rows`).toEqual([]);
  } else if (mode === "failures") {
    const deliveryLog = await t.sql(`SELECT * FROM ${SCHEMA}.delivery_log_${n} WHERE status = 'success'`);
    expect(deliveryLog, `I9 stream ${n}: mode failures wrote success rows`).toEqual([]);
  }

  // I10
  const decreasing = await t.sql(
    `SELECT g, message_id, prev_attempt, attempt, prev_status FROM (
       SELECT consumer_group_id::text AS g, message_id::text, attempt, status,
              lag(attempt) OVER w AS prev_attempt, lag(status) OVER w AS prev_status
         FROM ${SCHEMA}.delivery_log_${n}
       WINDOW w AS (PARTITION BY consumer_group_id, message_id ORDER BY id)) x
      WHERE attempt < prev_attempt AND prev_status <> 'redriven'`,
  );
  expect(decreasing, `I10 stream ${n}: delivery-log attempts decreased`).toEqual([]);
}

const FAMILY: [string, string][] = [
  ["exception_queue", "consumer_group_id, message_id"],
  ["delivery_log", "id"],
  ["consumer_group_cursor", "consumer_group_id"],
  ["claim_lease", "consumer_group_id, low"],
  ["message_key_lease", "consumer_group_id, message_key"],
  ["compaction_head", "compaction_key"],
];

/** Every row of the stream's mutable family tables and of its groups' config rows, as JSON text. */
export async function tableSnapshot(t: TestClient, streamId: string | number): Promise<Record<string, unknown>> {
  const n = String(streamId);
  const out: Record<string, unknown> = {};
  for (const [name, order] of FAMILY) {
    const r = await t.sql<{ rows: unknown }>(
      `SELECT COALESCE(jsonb_agg(to_jsonb(x) ORDER BY ${order}), '[]'::jsonb) AS rows FROM ${SCHEMA}.${name}_${n} x`,
    );
    out[name] = r[0].rows;
  }
  const g = await t.sql<{ rows: unknown }>(
    `SELECT COALESCE(jsonb_agg(to_jsonb(x) ORDER BY id), '[]'::jsonb) AS rows FROM ${SCHEMA}.consumer_group_config x WHERE stream_id = $1`,
    [n],
  );
  out.consumer_group_config = g[0].rows;
  out.message_log = (await t.sql<{ n: number; max: string | null }>(`SELECT count(*)::int AS n, max(id)::text AS max FROM ${SCHEMA}.message_log_${n}`))[0];
  return out;
}
