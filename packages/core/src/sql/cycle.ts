// Every statement of the poll cycle (docs/protocol/poll-cycle.md), built from the quoted schema and the numeric
// stream id only, each with its named parameters and its row type. The protocol functions they
// call live in migrations/stream/functions/, one file each.
import type { ConsumerConfig, DeliveryLogMode, MessageOptions } from "../config.js";
import { defineStatement } from "./statement.js";

export { type Tables, tables } from "./names.js";

/** A message as the cycle reads it (claim_N's rows, readRange, reserve_exceptions_N). */
export interface MessageRow {
  id: string;
  message_key: string | null;
  compaction_rank: string | null;
  payload: unknown;
  options: MessageOptions | null;
  /** A Date, or epoch milliseconds where claim_N returns it so. */
  created_at: Date | number;
  /**
   * Milliseconds left before the message's expiry by the database clock when it was read
   * (expires_in_N; negative: expired), null when it never expires. Read by the claim and the
   * reclaim, which check it before each start (docs/guide/producing.md#expiry).
   */
  expires_in?: number | null;
}

/** The range's messages as claim_N's read answers them: payloads as JSON text (creation times as epoch ms). */
export interface ClaimedMessageRow extends MessageRow {
  payload: string;
}


export interface LoadRow {
  group_id: string;
  config: ConsumerConfig | null;
  paused: boolean;
  mode: DeliveryLogMode;
  claimed: string;
  committed: string;
  settled_head: string;
  pending_head: string;
  head: string;
  has_cursor: boolean;
  reclaimable: boolean;
  expirable: boolean;
  reservable: boolean;
  target: string;
  obs: string;
  /** A scheduled message of the stream is due: the poll runs the mover first (moveScheduled). */
  scheduled_due: boolean;
}

/**
 * Statement 1 of a poll (docs/protocol/poll-cycle.md#load), autocommit and read-only: the group row and its
 * config, the cursor, the head, what work exists, the cursor target (cursor_target_N), and the observation id
 * (allocated only when the range phase is not idle and the group is not paused).
 */
export const load = defineStatement<{ streamId: string; group: string }, LoadRow>(["streamId", "group"], (t, p) =>
  `SELECT g.id::text AS group_id, g.config, g.paused, s.delivery_log_mode AS mode,
       c.claimed::text, c.committed::text, c.settled_head::text, c.pending_head::text,
       h.head::text AS head,
       c.consumer_group_id IS NOT NULL AS has_cursor,
       f.reclaimable, f.expirable, f.reservable,
       ${t.fn("cursor_target")}(g.id)::text AS target,
       EXISTS (SELECT 1 FROM ${t.scheduledMessage} sm WHERE sm.due_at <= now()) AS scheduled_due,
       (CASE WHEN g.paused OR c.consumer_group_id IS NULL
                  OR (h.head <= c.settled_head AND c.pending_head <= c.settled_head AND c.claimed = c.settled_head)
             THEN '0'::xid8 ELSE pg_current_xact_id() END)::text AS obs
  FROM ${t.schema}.stream_config s
  JOIN ${t.schema}.consumer_group_config g ON g.stream_id = s.id AND g.name = ${p.group}
  LEFT JOIN ${t.groupCursor} c ON c.consumer_group_id = g.id
  CROSS JOIN LATERAL ${t.fn("group_flags")}(g.id) f
  CROSS JOIN LATERAL (SELECT COALESCE(max(m.id), 0) AS head FROM ${t.messageLog} m) h
 WHERE s.id = ${p.streamId}`);

export const advance = defineStatement<{ groupId: string }, { committed: string }>(["groupId"], (t, p) =>
  `SELECT ${t.fn("advance")}(${p.groupId})::text AS committed`);

/** What every fresh claim and reclaim sizes its lease with (lease_ms_N, docs/protocol/poll-cycle.md#the-range-lease). */
export interface LeaseParams {
  concurrency: number;
  recordMargin: number;
  /** deadline + recordMargin, and a drain's lease bound (ms), or null for none. */
  leaseCapMs: number | null;
}

/** A message's timeout bounds in the group (timeoutBounds). */
export interface TimeoutParams {
  timeoutDefault: number;
  timeoutMin: number | null;
  timeoutMax: number;
}

/** A range's record as record_range_N takes it: JSON arrays of its exception, delivery-log and key-lease rows. */
export interface RecordParams {
  /** The range's token (null: claim only). */
  recordToken: string | null;
  recordExceptions: string | null;
  recordDeliveries: string | null;
  recordKeys: string | null;
}

export interface ClaimParams extends LeaseParams, TimeoutParams, RecordParams {
  groupId: string;
  batchLimit: number;
  /** The head and observation of the load (null for a claim after the first: up to the last proven head). */
  head: string | null;
  observation: string | null;
  token: string;
  batchBytes: number;
  /** Claim even when the record finds due exception rows (docs/protocol/poll-cycle.md#due-rows-and-the-chain). */
  pastDue: boolean;
  /**
   * The range leases this poll still holds while it claims (a claim ahead): the claim does not count
   * them as another poll's range holding keys (docs/protocol/ordering.md#ranges-of-several-pollers).
   * Not empty, the lease it writes is `released` until its range starts; with a record, the claim
   * marks these leases started (docs/protocol/poll-cycle.md#claiming-ahead).
   */
  own: string[];
  /** The group's resolved rateLimit as JSON, or null: no token is taken (docs/protocol/poll-cycle.md#rate-limit). */
  rate: string | null;
}

/**
 * A row of claim_N's answer (docs/protocol/poll-cycle.md#the-claims-answer), one of four: the record row
 * (recorded set), a message (read behind it: ClaimedMessageRow), the header (low set) or a fence
 * holder (options set, payload its JSON). Decoded by decodeClaim (sql/claim.ts).
 */
export interface ClaimRow {
  low: string | null;
  high: string | null;
  id: string | null;
  message_key: string | null;
  compaction_rank: string | null;
  payload: string | null;
  options: MessageOptions | null;
  created_at: number | null;
  lease_ms: number | null;
  recorded: boolean | null;
  committed: string | null;
  paused: boolean | null;
  reclaimable: boolean | null;
  expirable: boolean | null;
  reservable: boolean | null;
}

/**
 * The fresh claim (docs/protocol/poll-cycle.md#the-fence), optionally after recording the previous range in
 * the same transaction (docs/protocol/poll-cycle.md#the-steady-state). The answer holds no messages:
 * claimRead, sent behind it in the same transaction, reads them
 * (docs/protocol/poll-cycle.md#the-claims-answer).
 */
export const claim = defineStatement<ClaimParams, ClaimRow>([
  "groupId", "batchLimit", "head", "observation", "token", "timeoutDefault", "timeoutMin", "timeoutMax", "concurrency",
  "recordMargin", "leaseCapMs", "batchBytes", "recordToken", "recordExceptions", "recordDeliveries", "recordKeys", "pastDue", "own", "rate",
], (t, p) =>
  `SELECT r_low::text AS low, r_high::text AS high, id::text AS id, message_key,
                 compaction_rank::text AS compaction_rank, payload, options, created_ms AS created_at,
                 lease_ms::float8 AS lease_ms, recorded, committed::text AS committed, paused,
                 reclaimable, expirable, reservable
            FROM ${t.fn("claim")}(${p.groupId}, ${p.batchLimit}, ${p.head}, ${p.observation}::xid8, ${p.token}, ${p.timeoutDefault}, ${p.timeoutMin}, ${p.timeoutMax}, ${p.concurrency}, ${p.recordMargin}, ${p.leaseCapMs}, ${p.batchBytes}, ${p.recordToken}, ${p.recordExceptions}::jsonb, ${p.recordDeliveries}::jsonb, ${p.recordKeys}::jsonb, ${p.pastDue}, ${p.own}::uuid[], ${p.rate}::jsonb)`);

/**
 * The messages of the range a claim just leased, read by the statement after the claim in the same
 * transaction (docs/protocol/poll-cycle.md#the-claims-answer). No rows when the claim leased nothing.
 * Payloads as JSON text and creation times as epoch ms, as claim_N's rows. A range spans at most
 * batchLimit ids, so the LIMIT never cuts it; it makes the planner read the id index in order even
 * on a partition without statistics yet (default estimates choose a bitmap scan and a sort of the
 * range's payloads, twice the time). The lease's bounds reach deliverable_N as the columns of a
 * subquery: written as its arguments, subqueries would keep the planner from inlining it, and a
 * join with the lease row would lose the bounds as index conditions; this way each is one init plan.
 */
export const claimRead = defineStatement<{ groupId: string; token: string; batchLimit: number }, ClaimedMessageRow>(
  ["groupId", "token", "batchLimit"], (t, p) =>
    `SELECT m.id::text AS id, m.message_key, m.compaction_rank::text AS compaction_rank, m.payload::text AS payload,
                 m.options, date_part('epoch', m.created_at) * 1000 AS created_at,
                 ${t.fn("expires_in")}(m.options, m.created_at) AS expires_in
            FROM (SELECT (SELECT l.low FROM ${t.claimLease} l WHERE l.consumer_group_id = ${p.groupId} AND l.token = ${p.token}) AS low,
                         (SELECT l.high FROM ${t.claimLease} l WHERE l.consumer_group_id = ${p.groupId} AND l.token = ${p.token}) AS high) b
           CROSS JOIN LATERAL ${t.fn("deliverable")}(b.low, b.high) m
           ORDER BY m.id
           LIMIT ${p.batchLimit}`);

/** `start`: the poll's range claimed ahead that starts after this record (docs/protocol/poll-cycle.md#claiming-ahead), or null. */
export const recordRange = defineStatement<
  RecordParams & { groupId: string; keepFrom: string | null; newToken: string | null; start: string | null },
  { committed: string | null }
>(["groupId", "recordToken", "keepFrom", "newToken", "recordExceptions", "recordDeliveries", "recordKeys", "start"], (t, p) =>
  `SELECT ${t.fn("record_range")}(${p.groupId}, ${p.recordToken}, ${p.keepFrom}, ${p.newToken}, ${p.recordExceptions}::jsonb, ${p.recordDeliveries}::jsonb, ${p.recordKeys}::jsonb, ${p.start}::uuid)::text AS committed`);

/** The keys to take as take_keys_N reads them: a JSON array of {k, id, ordered, ms, held?}. */
export interface TakeKeysParams {
  groupId: string;
  keyToken: string;
  low: string;
  high: string;
  wanted: string;
}

/** A row of take_keys_N: a key it did not take, kind 'busy' or 'pred' (pred_id set); decoded by decodeKeyTakes. */
export interface KeyRefusalRow {
  k: string;
  kind: string;
  pred_id: string | null;
}

/** The flags of a record row: recorded, and what the load would say after it. */
export interface RecordFlagsRow {
  recorded: boolean | null;
  paused: boolean | null;
  reclaimable: boolean | null;
  expirable: boolean | null;
  reservable: boolean | null;
}

/**
 * Whether a record row ends a drain's chain (docs/protocol/poll-cycle.md#due-rows-and-the-chain): the
 * record did not land, or the group is paused, or has a range to reclaim, runs to expire, or due
 * rows when the range recorded was keyed (`pastDue` false). claim_N applies the same rule before
 * it claims.
 */
export function recordEndsChain(row: RecordFlagsRow, pastDue: boolean): boolean {
  return !row.recorded || row.paused === true || row.reclaimable === true || row.expirable === true || (row.reservable === true && !pastDue);
}

/**
 * A keyed chain's previous range recorded and the next range's first keys taken, in one statement
 * (docs/protocol/poll-cycle.md#keyed-ranges-claimed-ahead): the record (as recordRange; the key token and a
 * JSON array of its keys to release, or "all"), then the take (as takeKeys). The first row is the
 * record's (recorded, and what the load would say); the rest are the keys not taken.
 */
export const recordTakeKeys = defineStatement<
  TakeKeysParams & Omit<RecordParams, "recordKeys" | "recordToken"> & {
    recordToken: string; recordKeyToken: string | null; releasedKeys: string | null; start: string | null;
  },
  RecordFlagsRow & KeyRefusalRow
>(["groupId", "recordToken", "recordExceptions", "recordDeliveries", "recordKeyToken", "releasedKeys", "keyToken", "low", "high", "wanted", "start"], (t, p) =>
  `SELECT recorded, paused, reclaimable, expirable, reservable, k, kind, pred_id::text AS pred_id
            FROM ${t.fn("record_take_keys")}(${p.groupId}, ${p.recordToken}, ${p.recordExceptions}::jsonb, ${p.recordDeliveries}::jsonb, ${p.recordKeyToken}, ${p.releasedKeys}::jsonb, ${p.keyToken}, ${p.low}, ${p.high}, ${p.wanted}::jsonb, ${p.start}::uuid)`);

export interface TakeKeyParams {
  groupId: string;
  key: string;
  keyToken: string;
  ms: number;
  messageId: string;
  ordered: boolean;
  low: string;
  high: string;
  compacted: boolean;
}

/** take_key_N's row; decoded by decodeKeyTake (sql/results.ts). */
export const takeKey = defineStatement<TakeKeyParams, { kind: string; ref: string | null }>(
  ["groupId", "key", "keyToken", "ms", "messageId", "ordered", "low", "high", "compacted"], (t, p) =>
    `SELECT kind, ref::text AS ref FROM ${t.fn("take_key")}(${p.groupId}, ${p.key}, ${p.keyToken}, ${p.ms}, ${p.messageId}, ${p.ordered}, ${p.low}, ${p.high}, ${p.compacted})`);

/** The keys not taken (kind 'busy' or 'pred'); decoded with decodeKeyTakes (sql/results.ts). */
export const takeKeys = defineStatement<TakeKeysParams, KeyRefusalRow>(["groupId", "keyToken", "low", "high", "wanted"], (t, p) =>
  `SELECT k, kind, pred_id::text AS pred_id FROM ${t.fn("take_keys")}(${p.groupId}, ${p.keyToken}, ${p.low}, ${p.high}, ${p.wanted}::jsonb)`);

/** Keeps an abandoned run's key lease alive. */
export const renewKeyLease = defineStatement<{ groupId: string; key: string; keyToken: string; ms: number }, { "?column?": number }>(
  ["groupId", "key", "keyToken", "ms"], (t, p) =>
    `UPDATE ${t.keyLease} SET expires_at = now() + ${p.ms} * interval '1 millisecond'
           WHERE consumer_group_id = ${p.groupId} AND message_key = ${p.key} AND token = ${p.keyToken} RETURNING 1`);

/** Releases one key lease if it is still held under the token. */
export const releaseKeyLease = defineStatement<{ groupId: string; key: string; keyToken: string }>(["groupId", "key", "keyToken"], (t, p) =>
  `DELETE FROM ${t.keyLease} WHERE consumer_group_id = ${p.groupId} AND message_key = ${p.key} AND token = ${p.keyToken}`);

export const extendRange = defineStatement<{ groupId: string; token: string; ms: number }, { "?column?": number }>(
  ["groupId", "token", "ms"], (t, p) =>
    `UPDATE ${t.claimLease} SET expires_at = now() + ${p.ms} * interval '1 millisecond'
           WHERE consumer_group_id = ${p.groupId} AND token = ${p.token} RETURNING 1`);

/**
 * A range lease row: its bounds, how often it was reclaimed, and whether nothing of it is started
 * (released unstarted, or claimed ahead and not started yet): taking it over is no reclaim.
 */
export interface LeaseRow {
  token: string;
  low: string;
  high: string;
  reclaims: number;
  released: boolean;
}

export const lockExpiredRange = defineStatement<{ groupId: string }, LeaseRow>(["groupId"], (t, p) =>
  `SELECT l.token::text, l.low::text, l.high::text, l.reclaims, l.released FROM ${t.claimLease} l
           WHERE l.consumer_group_id = ${p.groupId} AND ${t.fn("lease_expired")}(l.expires_at)
           ORDER BY l.low LIMIT 1 FOR UPDATE SKIP LOCKED`);

/** The messages of (low, high] this group would deliver (the compaction read filter). */
export const readRange = defineStatement<{ low: string; high: string }, MessageRow>(["low", "high"], (t, p) =>
  `SELECT m.id::text AS id, m.message_key, m.compaction_rank::text AS compaction_rank, m.payload, m.options, m.created_at,
                 ${t.fn("expires_in")}(m.options, m.created_at) AS expires_in
            FROM ${t.fn("deliverable")}(${p.low}, ${p.high}) m
           ORDER BY m.id`);

/**
 * A range lease of the group by its token (finding a poll's own work after a lost reply), with the
 * milliseconds left of it by the database clock.
 */
export const leaseByToken = defineStatement<{ groupId: string; token: string }, Omit<LeaseRow, "token"> & { left_ms: number }>(
  ["groupId", "token"], (t, p) =>
    `SELECT low::text, high::text, reclaims, released,
                 GREATEST(0, date_part('epoch', expires_at - now()) * 1000)::float8 AS left_ms
            FROM ${t.claimLease} WHERE consumer_group_id = ${p.groupId} AND token = ${p.token}`);

/** The ids (and what the lease and quarantine need) of (low, high], without payloads. */
export const readRangeIds = defineStatement<{ low: string; high: string }, Omit<MessageRow, "payload" | "created_at">>(["low", "high"], (t, p) =>
  `SELECT m.id::text AS id, m.message_key, m.compaction_rank::text AS compaction_rank, m.options
            FROM ${t.fn("deliverable")}(${p.low}, ${p.high}) m
           ORDER BY m.id`);

/**
 * Takes an expired range over under a new token, with a new reclaim count and lease (lease_ms_N,
 * docs/protocol/poll-cycle.md#the-range-lease, from the range's longest timeout and its size). Returns the
 * lease's length.
 */
export const takeOverRange = defineStatement<
  LeaseParams & { groupId: string; oldToken: string; token: string; reclaims: number; timeoutMax: number; size: number },
  { lease_ms: number }
>(["groupId", "oldToken", "token", "reclaims", "timeoutMax", "size", "concurrency", "recordMargin", "leaseCapMs"], (t, p) =>
  `UPDATE ${t.claimLease} l SET token = ${p.token}, reclaims = ${p.reclaims}, released = false,
                 expires_at = now() + x.ms * interval '1 millisecond'
            FROM (SELECT ${t.fn("lease_ms")}(${p.timeoutMax}::bigint, ${p.size}::bigint, ${p.concurrency}::integer, ${p.recordMargin}::bigint, ${p.leaseCapMs}::bigint) AS ms) x
           WHERE l.consumer_group_id = ${p.groupId} AND l.token = ${p.oldToken}
       RETURNING x.ms::float8 AS lease_ms`);

export const deleteRange = defineStatement<{ groupId: string; token: string }>(["groupId", "token"], (t, p) =>
  `DELETE FROM ${t.claimLease} WHERE consumer_group_id = ${p.groupId} AND token = ${p.token}`);

/** Quarantine rows: `rows` is a JSON array of {message_id, message_key, concurrency}. */
export const quarantineRows = defineStatement<{ groupId: string; rows: string; error: string }, { message_id: string }>(
  ["groupId", "rows", "error"], (t, p) =>
    `INSERT INTO ${t.exceptionQueue} (consumer_group_id, message_id, status, message_key, concurrency, attempts, delays, can_run_after, last_error)
          SELECT ${p.groupId}, r.message_id, 'ready', r.message_key, r.concurrency, 0, 0, now(), ${p.error}
            FROM jsonb_to_recordset(${p.rows}::jsonb) AS r(message_id BIGINT, message_key TEXT, concurrency TEXT)
          ON CONFLICT DO NOTHING
          RETURNING message_id::text`);

/** Delivery-log rows (write_outcome_rows_N): `rows` is a JSON array of {message_id, attempt, status, error}. */
export const insertDeliveryLog = defineStatement<{ groupId: string; rows: string }>(["groupId", "rows"], (t, p) =>
  `SELECT ${t.fn("write_outcome_rows")}(${p.groupId}, NULL, ${p.rows}::jsonb)`);

/** An inflight run whose lease expired, with what its resolution needs. */
export interface ExpiredRunRow {
  message_id: string;
  attempts: number;
  delays: number;
  last_error: string | null;
  message_key: string | null;
  options: MessageOptions | null;
  compacted: boolean | null;
  /** A later row of a group whose lower row of the key, under the same token, is inflight too: it never ran. */
  chained: boolean;
}

export const lockExpiredRuns = defineStatement<{ groupId: string }, ExpiredRunRow>(["groupId"], (t, p) =>
  `SELECT e.message_id::text AS message_id, e.attempts, e.delays, e.last_error, e.message_key,
                 m.options, m.compaction_rank IS NOT NULL AS compacted,
                 e.message_key IS NOT NULL AND e.concurrency <> 'parallel' AND EXISTS (
                   SELECT 1 FROM ${t.exceptionQueue} o
                    WHERE o.consumer_group_id = e.consumer_group_id AND o.message_key = e.message_key
                      AND o.message_id < e.message_id AND o.concurrency <> 'parallel'
                      AND o.lease_token = e.lease_token AND o.status = 'inflight') AS chained
            FROM ${t.exceptionQueue} e LEFT JOIN ${t.messageLog} m ON m.id = e.message_id
           WHERE e.consumer_group_id = ${p.groupId} AND ${t.fn("run_expired")}(e.status, e.lease_expires_at)
           ORDER BY e.message_id LIMIT 1000
           FOR UPDATE OF e SKIP LOCKED`);

/** Applies expiry outcomes: `rows` is a JSON array of {message_id, status, attempts, run_after_ms, last_error}. */
export const applyExpired = defineStatement<{ groupId: string; rows: string }>(["groupId", "rows"], (t, p) =>
  `UPDATE ${t.exceptionQueue} e
             SET status = r.status, attempts = r.attempts,
                 can_run_after = CASE WHEN r.run_after_ms IS NULL THEN e.can_run_after
                                      ELSE now() + r.run_after_ms * interval '1 millisecond' END,
                 last_error = r.last_error, lease_token = NULL, lease_expires_at = NULL, updated_at = now()
            FROM jsonb_to_recordset(${p.rows}::jsonb) AS r(message_id BIGINT, status TEXT, attempts INTEGER, run_after_ms BIGINT, last_error TEXT)
           WHERE e.consumer_group_id = ${p.groupId} AND e.message_id = r.message_id AND e.status = 'inflight'`);

export interface ReserveParams extends LeaseParams, TimeoutParams {
  groupId: string;
  batchLimit: number;
  token: string;
  /** Rows to start with the reservation. */
  startNow: number;
  /** Ms before the deadline, or null. */
  budgetMs: number | null;
  /** Keys not to start (an abandoned run of theirs still runs here). */
  abandonedKeys: string[];
  /** Repeating a call whose reply was lost: find the own reservation instead of reserving. */
  repeat: boolean;
  /** The group's resolved rateLimit as JSON, or null (docs/protocol/poll-cycle.md#rate-limit). */
  rate: string | null;
  /** The batch before's reservation token, when its last outcomes travel with this reservation. */
  recordToken: string | null;
  /** Those outcomes (record_exceptions_N's input), or null. */
  outcomes: string | null;
}

/** A reserved row: the message, its exception row, and, when reserve_exceptions_N started it, what the start decided. */
export interface ReservedRow extends MessageRow {
  message_id: string;
  concurrency: string;
  attempts: number;
  delays: number;
  /** Set when reserve_exceptions_N started the row already (null: the phase starts it). */
  kind: string | null;
  reason: string | null;
  ref: string | null;
  key_token: string | null;
  run_ms: number | null;
  /** 'record' for an outcome of the batch before (message_id and kind as record_exceptions_N), else null. */
  step: string | null;
}

/**
 * The batch before's last outcomes, the reservation and the first starts, in one round trip
 * (docs/protocol/poll-cycle.md#the-exception-phase): reserve_exceptions_N.
 */
export const reserveExceptions = defineStatement<ReserveParams, Omit<ReservedRow, "id">>([
  "groupId", "batchLimit", "timeoutDefault", "timeoutMin", "timeoutMax", "concurrency", "recordMargin", "leaseCapMs", "token",
  "startNow", "budgetMs", "abandonedKeys", "repeat", "rate", "recordToken", "outcomes",
], (t, p) =>
  `SELECT message_id::text AS message_id, message_key, concurrency, attempts, delays, payload, options,
                 compaction_rank::text AS compaction_rank, created_at, kind, reason, ref::text AS ref,
                 key_token::text AS key_token, run_ms::float8 AS run_ms, step
            FROM ${t.fn("reserve_exceptions")}(${p.groupId}, ${p.batchLimit}, ${p.timeoutDefault}, ${p.timeoutMin}, ${p.timeoutMax}, ${p.concurrency}, ${p.recordMargin}, ${p.leaseCapMs}, ${p.token}, ${p.startNow}, ${p.budgetMs}, ${p.abandonedKeys}::text[], ${p.repeat}, ${p.rate}::jsonb, ${p.recordToken}::uuid, ${p.outcomes}::jsonb)`);

/** One row of exception_step_N's answer: a start's or a record's result for one message. */
export interface ExceptionStepRow {
  step: string;
  message_id: string;
  kind: string;
  reason: string | null;
  ref: string | null;
}

/**
 * One round trip of the exception phase (docs/protocol/poll-cycle.md#the-exception-phase): records the
 * outcomes and starts the reserved rows (JSON arrays, see exception_step_N), all under the
 * reservation token, in one transaction. Decoded by decodeExceptionStep (sql/results.ts).
 */
export const exceptionStep = defineStatement<{ groupId: string; token: string; outcomes: string; starts: string }, ExceptionStepRow>(
  ["groupId", "token", "outcomes", "starts"], (t, p) =>
    `SELECT step, message_id::text AS message_id, kind, reason, ref::text AS ref
            FROM ${t.fn("exception_step")}(${p.groupId}, ${p.token}, ${p.outcomes}::jsonb, ${p.starts}::jsonb)`);

export const releaseReservations = defineStatement<{ groupId: string; token: string }>(["groupId", "token"], (t, p) =>
  `UPDATE ${t.exceptionQueue} SET lease_token = NULL, lease_expires_at = NULL
           WHERE consumer_group_id = ${p.groupId} AND lease_token = ${p.token} AND status IN ('ready', 'deferred')`);
