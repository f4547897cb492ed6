// Every statement of the poll cycle (docs/poll-cycle.md), built from the quoted schema and the numeric
// stream id only. The protocol functions they call live in migrations/stream/functions/, one file each.
import { table } from "./names.js";

export interface Tables {
  ml: string;
  eq: string;
  dl: string;
  cur: string;
  cl: string;
  kl: string;
  ch: string;
  fn: (name: string) => string;
}

const cache = new Map<string, Tables>();

/** The table names of one stream, built once per (schema, stream id). */
export function tables(q: string, n: string): Tables {
  const k = `${q}.${n}`;
  let t = cache.get(k);
  if (!t) {
    t = build(q, n);
    cache.set(k, t);
  }
  return t;
}

function build(q: string, n: string): Tables {
  return {
    ml: table(q, n, "message_log"),
    eq: table(q, n, "exception_queue"),
    dl: table(q, n, "delivery_log"),
    cur: table(q, n, "consumer_group_cursor"),
    cl: table(q, n, "claim_lease"),
    kl: table(q, n, "message_key_lease"),
    ch: table(q, n, "compaction_head"),
    fn: (name) => table(q, n, name),
  };
}

/**
 * Statement 1 of a poll (docs/poll-cycle.md#load), autocommit and read-only: the group row and its
 * config, the cursor, the head, what work exists, the cursor target (cursor_target_N), and the observation id
 * (allocated only when the range phase is not idle and the group is not paused).
 * $1 stream id, $2 group name.
 */
export function load(q: string, t: Tables): string {
  return `SELECT g.id::text AS group_id, g.config, g.paused, s.delivery_log_mode AS mode,
       c.claimed::text, c.committed::text, c.settled_head::text, c.pending_head::text,
       h.head::text AS head,
       c.consumer_group_id IS NOT NULL AS has_cursor,
       EXISTS (SELECT 1 FROM ${t.cl} l WHERE l.consumer_group_id = g.id AND l.expires_at < now()) AS reclaimable,
       EXISTS (SELECT 1 FROM ${t.eq} e WHERE e.consumer_group_id = g.id AND e.status = 'inflight'
                  AND e.lease_expires_at < now()) AS expirable,
       EXISTS (SELECT 1 FROM ${t.eq} e WHERE e.consumer_group_id = g.id
                  AND ((e.status = 'ready' AND e.can_run_after <= now()) OR e.status = 'deferred')
                  AND (e.lease_expires_at IS NULL OR e.lease_expires_at < now())) AS reservable,
       ${t.fn("cursor_target")}(g.id)::text AS target,
       (CASE WHEN g.paused OR c.consumer_group_id IS NULL
                  OR (h.head <= c.settled_head AND c.pending_head <= c.settled_head AND c.claimed = c.settled_head)
             THEN '0'::xid8 ELSE pg_current_xact_id() END)::text AS obs
  FROM ${q}.stream_config s
  JOIN ${q}.consumer_group_config g ON g.stream_id = s.id AND g.name = $2
  LEFT JOIN ${t.cur} c ON c.consumer_group_id = g.id
  CROSS JOIN LATERAL (SELECT COALESCE(max(m.id), 0) AS head FROM ${t.ml} m) h
 WHERE s.id = $1`;
}

export function advance(t: Tables): string {
  return `SELECT ${t.fn("advance")}($1)::text AS committed`;
}

/**
 * The fresh claim (docs/poll-cycle.md#the-fence), optionally after recording the previous range in
 * the same transaction (docs/poll-cycle.md#the-steady-state): $1 group, $2 batchLimit, $3 head,
 * $4 observation, $5 token, $6..$8 timeout default/min/max, $9 concurrency, $10 recordMargin,
 * $11 cap ms (or NULL), $12 batchBytes; $13 the previous range's token (NULL: claim only), $14 its
 * exception rows, $15 its delivery-log rows, $16 its key leases (JSON arrays, as recordRange); $17
 * true: claim even when the record finds due exception rows (docs/poll-cycle.md#due-rows-and-the-chain).
 * The answer holds no messages: claimRead, sent behind it in the same transaction,
 * reads them (docs/poll-cycle.md#the-claims-answer).
 */
export function claim(t: Tables): string {
  return `SELECT r_low::text AS low, r_high::text AS high, id::text AS id, message_key,
                 compaction_rank::text AS compaction_rank, payload, options, created_ms AS created_at,
                 lease_ms::float8 AS lease_ms, recorded, committed::text AS committed, paused,
                 reclaimable, expirable, reservable
            FROM ${t.fn("claim")}($1, $2, $3, $4::xid8, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14::jsonb, $15::jsonb, $16::jsonb, $17, $18::uuid[])`;
}

/**
 * The messages of the range a claim just leased, read by the statement after the claim in the same
 * transaction (docs/poll-cycle.md#the-claims-answer): $1 group, $2 the claim's token, $3 the claim's
 * batchLimit. No rows when the claim leased nothing. Payloads as JSON text and creation times as
 * epoch ms, as claim_N's rows. A range spans at most batchLimit ids, so the LIMIT never cuts it;
 * it makes the planner read the id index in order even on a partition without statistics yet
 * (without it, a new partition's default estimates chose a bitmap scan and a sort of the range's
 * payloads, twice the time).
 */
export function claimRead(t: Tables): string {
  return `SELECT m.id::text AS id, m.message_key, m.compaction_rank::text AS compaction_rank, m.payload::text AS payload,
                 m.options, date_part('epoch', m.created_at) * 1000 AS created_at
            FROM ${t.ml} m
           WHERE m.id > (SELECT l.low FROM ${t.cl} l WHERE l.consumer_group_id = $1 AND l.token = $2)
             AND m.id <= (SELECT l.high FROM ${t.cl} l WHERE l.consumer_group_id = $1 AND l.token = $2)
             AND (m.compaction_rank IS NULL OR EXISTS (
                   SELECT 1 FROM ${t.ch} h WHERE h.compaction_key = m.message_key AND h.message_id = m.id))
           ORDER BY m.id
           LIMIT $3`;
}

export function recordRange(t: Tables): string {
  return `SELECT ${t.fn("record_range")}($1, $2, $3, $4, $5::jsonb, $6::jsonb, $7::jsonb)::text AS committed`;
}

/**
 * A keyed chain's previous range recorded and the next range's first keys taken, in one statement
 * (docs/poll-cycle.md#keyed-ranges-claimed-ahead): $1 group, $2..$6 the record (token, exception rows,
 * delivery-log rows as recordRange; the key token and a JSON array of its keys to release), $7..$10
 * the take (as takeKeys). The first row is the record's (recorded, and what the load would say);
 * the rest are the keys not taken.
 */
export function recordTakeKeys(t: Tables): string {
  return `SELECT recorded, paused, reclaimable, expirable, reservable, k, kind, pred_id::text AS pred_id
            FROM ${t.fn("record_take_keys")}($1, $2, $3::jsonb, $4::jsonb, $5, $6::jsonb, $7, $8, $9, $10::jsonb)`;
}

export function takeKey(t: Tables): string {
  return `SELECT kind, ref::text AS ref FROM ${t.fn("take_key")}($1, $2, $3, $4, $5, $6, $7, $8, $9)`;
}

/** The keys not taken (kind 'busy' or 'pred'); decoded with decodeKeyTakes (sql/results.ts). */
export function takeKeys(t: Tables): string {
  return `SELECT k, kind, pred_id::text AS pred_id FROM ${t.fn("take_keys")}($1, $2, $3, $4, $5::jsonb)`;
}

/** Keeps an abandoned run's key lease alive: $1 group, $2 key, $3 token, $4 ms. */
export function renewKeyLease(t: Tables): string {
  return `UPDATE ${t.kl} SET expires_at = now() + $4 * interval '1 millisecond'
           WHERE consumer_group_id = $1 AND message_key = $2 AND token = $3 RETURNING 1`;
}

/** Releases one key lease if it is still held under the token: $1 group, $2 key, $3 token. */
export function releaseKeyLease(t: Tables): string {
  return `DELETE FROM ${t.kl} WHERE consumer_group_id = $1 AND message_key = $2 AND token = $3`;
}

export function extendRange(t: Tables): string {
  return `UPDATE ${t.cl} SET expires_at = now() + $3 * interval '1 millisecond'
           WHERE consumer_group_id = $1 AND token = $2 RETURNING 1`;
}

export function lockExpiredRange(t: Tables): string {
  return `SELECT token::text, low::text, high::text, reclaims, released FROM ${t.cl}
           WHERE consumer_group_id = $1 AND expires_at < now()
           ORDER BY low LIMIT 1 FOR UPDATE SKIP LOCKED`;
}

/** The messages of (low, high] this group would deliver (the compaction read filter). */
export function readRange(t: Tables): string {
  return `SELECT m.id::text AS id, m.message_key, m.compaction_rank::text AS compaction_rank, m.payload, m.options, m.created_at
            FROM ${t.ml} m
           WHERE m.id > $1 AND m.id <= $2
             AND (m.compaction_rank IS NULL OR EXISTS (
                   SELECT 1 FROM ${t.ch} h WHERE h.compaction_key = m.message_key AND h.message_id = m.id))
           ORDER BY m.id`;
}

/**
 * A range lease of the group by its token (finding a poll's own work after a lost reply), with the
 * milliseconds left of it by the database clock.
 */
export function leaseByToken(t: Tables): string {
  return `SELECT low::text, high::text, reclaims, released,
                 GREATEST(0, date_part('epoch', expires_at - now()) * 1000)::float8 AS left_ms
            FROM ${t.cl} WHERE consumer_group_id = $1 AND token = $2`;
}

/** The ids (and what the lease and quarantine need) of (low, high], without payloads. */
export function readRangeIds(t: Tables): string {
  return `SELECT m.id::text AS id, m.message_key, m.compaction_rank::text AS compaction_rank, m.options
            FROM ${t.ml} m
           WHERE m.id > $1 AND m.id <= $2
             AND (m.compaction_rank IS NULL OR EXISTS (
                   SELECT 1 FROM ${t.ch} h WHERE h.compaction_key = m.message_key AND h.message_id = m.id))
           ORDER BY m.id`;
}

/**
 * Takes an expired range over under a new token: $1 group, $2 old token, $3 new token, $4 reclaims,
 * and the lease (lease_ms_N, docs/poll-cycle.md#the-range-lease) from $5 Tmax, $6 n, $7 concurrency,
 * $8 recordMargin, $9 cap ms (or NULL). Returns the lease's length.
 */
export function takeOverRange(t: Tables): string {
  return `UPDATE ${t.cl} l SET token = $3, reclaims = $4, released = false,
                 expires_at = now() + x.ms * interval '1 millisecond'
            FROM (SELECT ${t.fn("lease_ms")}($5::bigint, $6::bigint, $7::integer, $8::bigint, $9::bigint) AS ms) x
           WHERE l.consumer_group_id = $1 AND l.token = $2
       RETURNING x.ms::float8 AS lease_ms`;
}

export function deleteRange(t: Tables): string {
  return `DELETE FROM ${t.cl} WHERE consumer_group_id = $1 AND token = $2`;
}

/** Quarantine rows: $2 is a JSON array of {message_id, message_key, concurrency}. */
export function quarantineRows(t: Tables): string {
  return `INSERT INTO ${t.eq} (consumer_group_id, message_id, status, message_key, concurrency, attempts, delays, can_run_after, last_error)
          SELECT $1, r.message_id, 'ready', r.message_key, r.concurrency, 0, 0, now(), $3
            FROM jsonb_to_recordset($2::jsonb) AS r(message_id BIGINT, message_key TEXT, concurrency TEXT)
          ON CONFLICT DO NOTHING
          RETURNING message_id::text`;
}

/** Delivery-log rows: $2 is a JSON array of {message_id, attempt, status, error}. */
export function insertDeliveryLog(t: Tables): string {
  return `INSERT INTO ${t.dl} (consumer_group_id, message_id, attempt, status, error)
          SELECT $1, r.message_id, r.attempt, r.status, r.error
            FROM jsonb_to_recordset($2::jsonb) AS r(message_id BIGINT, attempt INTEGER, status TEXT, error TEXT)`;
}

export function lockExpiredRuns(t: Tables): string {
  return `SELECT e.message_id::text AS message_id, e.attempts, e.delays, e.last_error, e.message_key,
                 m.options, m.compaction_rank IS NOT NULL AS compacted
            FROM ${t.eq} e LEFT JOIN ${t.ml} m ON m.id = e.message_id
           WHERE e.consumer_group_id = $1 AND e.status = 'inflight' AND e.lease_expires_at < now()
           ORDER BY e.message_id LIMIT 1000
           FOR UPDATE OF e SKIP LOCKED`;
}

/** Applies expiry outcomes: $2 is a JSON array of {message_id, status, attempts, run_after_ms, last_error}. */
export function applyExpired(t: Tables): string {
  return `UPDATE ${t.eq} e
             SET status = r.status, attempts = r.attempts,
                 can_run_after = CASE WHEN r.run_after_ms IS NULL THEN e.can_run_after
                                      ELSE now() + r.run_after_ms * interval '1 millisecond' END,
                 last_error = r.last_error, lease_token = NULL, lease_expires_at = NULL, updated_at = now()
            FROM jsonb_to_recordset($2::jsonb) AS r(message_id BIGINT, status TEXT, attempts INTEGER, run_after_ms BIGINT, last_error TEXT)
           WHERE e.consumer_group_id = $1 AND e.message_id = r.message_id AND e.status = 'inflight'`;
}

/**
 * Reservation and the first starts, in one round trip (docs/poll-cycle.md#the-exception-phase): reserve_exceptions_N.
 * $1 group, $2 batchLimit, $3..$5 timeout default/min/max, $6 concurrency, $7 recordMargin, $8 cap ms
 * (or NULL), $9 reservation token, $10 rows to start now, $11 ms before the deadline (or NULL),
 * $12 keys not to start (an abandoned run of theirs still runs here), $13 true when repeating a call
 * whose reply was lost (it then finds its own reservation instead of reserving).
 */
export function reserveExceptions(t: Tables): string {
  return `SELECT message_id::text AS message_id, message_key, concurrency, attempts, delays, payload, options,
                 compaction_rank::text AS compaction_rank, created_at, kind, reason, ref::text AS ref,
                 key_token::text AS key_token, run_ms::float8 AS run_ms
            FROM ${t.fn("reserve_exceptions")}($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::text[], $13)`;
}

/**
 * One round trip of the exception phase (docs/poll-cycle.md#the-exception-phase): records the
 * outcomes $3 and starts the reserved rows $4 (JSON arrays, see migrations/stream/functions/exception_step.sql), all
 * under the reservation token $2, in one transaction. $1 group. Decoded by decodeExceptionStep.
 */
export function exceptionStep(t: Tables): string {
  return `SELECT step, message_id::text AS message_id, kind, reason, ref::text AS ref
            FROM ${t.fn("exception_step")}($1, $2, $3::jsonb, $4::jsonb)`;
}

export function releaseReservations(t: Tables): string {
  return `UPDATE ${t.eq} SET lease_token = NULL, lease_expires_at = NULL
           WHERE consumer_group_id = $1 AND lease_token = $2 AND status IN ('ready', 'deferred')`;
}
