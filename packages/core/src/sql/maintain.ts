// Statements of maintain() (docs/protocol/retention.md#maintain): the stream list, partition state,
// the retention floor, partition drops, the row sweep and the batch deletes of steps 4–6.
import type { SchemaNames } from "./names.js";
import { defineStatement } from "./statement.js";

/** Rows per batch of every deleting step (docs/protocol/retention.md#maintain). */
export const BATCH = 1000;

/** Empty compaction heads idle for this long are deleted (docs/protocol/ordering.md#compaction). */
const EMPTY_HEAD_IDLE = "1 hour";

/** A stream's maintenance settings. */
export interface StreamSettingsRow {
  id: string;
  name: string;
  partition_size: string;
  retention_ms: string;
  idempotency_key_ttl_ms: string;
}

const STREAM_SETTINGS = "id::text, name, partition_size::text, retention_ms::text, idempotency_key_ttl_ms::text";

/** The maintenance settings of every stream, by id. */
export const allStreamSettings = defineStatement<Record<string, never>, StreamSettingsRow, SchemaNames>([], (t) =>
  `SELECT ${STREAM_SETTINGS} FROM ${t.schema}.stream_config ORDER BY id`);

/** The maintenance settings of the streams named (unknown names are left out), by id. */
export const streamSettingsByName = defineStatement<{ names: string[] }, StreamSettingsRow, SchemaNames>(["names"], (t, p) =>
  `SELECT ${STREAM_SETTINGS} FROM ${t.schema}.stream_config WHERE name = ANY(${p.names}::text[]) ORDER BY id`);

/** The id the sequence hands out next, and the relation names of the log's partitions (`log`: the log's quoted name). */
export const partitionState = defineStatement<{ log: string }, { next: string; parts: string[] | null }>(["log"], (t, p) =>
  `SELECT (SELECT CASE WHEN s.is_called THEN s.last_value + 1 ELSE s.last_value END FROM ${t.messageLog}_id_seq s)::text AS next,
            ARRAY(SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                   WHERE i.inhparent = to_regclass(${p.log})) AS parts`);

/** The retention floor's inputs: the head, the groups, and the group with the lowest floor (none: no group). */
export interface FloorRow {
  head: string;
  groups: string[] | null;
  id: string | null;
  name: string | null;
  paused: boolean | null;
  committed: string | null;
  unresolved: string | null;
  floor: string | null;
}

/** The retention floor of the stream (docs/protocol/retention.md#the-floor), in one read-only statement. */
export const floor = defineStatement<{ streamId: string }, FloorRow>(["streamId"], (t, p) =>
  `WITH g AS (
       SELECT cfg.id, cfg.name, cfg.paused, COALESCE(c.committed, 0) AS committed,
              (SELECT min(e.message_id) FROM ${t.exceptionQueue} e
                WHERE e.consumer_group_id = cfg.id AND ${t.fn("unresolved")}(e.status)) AS unresolved
         FROM ${t.schema}.consumer_group_config cfg
         LEFT JOIN ${t.groupCursor} c ON c.consumer_group_id = cfg.id
        WHERE cfg.stream_id = ${p.streamId}
     )
     SELECT (SELECT COALESCE(max(m.id), 0) FROM ${t.messageLog} m)::text AS head,
            (SELECT array_agg(g.id::text ORDER BY g.id) FROM g) AS groups,
            f.id::text, f.name, f.paused, f.committed::text, f.unresolved::text, f.floor::text
       FROM (SELECT 1) one
       LEFT JOIN LATERAL (
         SELECT g.*, LEAST(g.committed, g.unresolved - 1) AS floor FROM g
          ORDER BY LEAST(g.committed, g.unresolved - 1), g.id LIMIT 1
       ) f ON true`);

/** Whether the lowest message in (floor, below) is already past retention. */
export const expiredAboveFloor = defineStatement<{ floor: string; below: string; retentionMs: string }, { expired: boolean }>(
  ["floor", "below", "retentionMs"], (t, p) =>
    `SELECT COALESCE((SELECT m.created_at < now() - ${p.retentionMs}::bigint * interval '1 millisecond'
                        FROM ${t.messageLog} m WHERE m.id > ${p.floor} AND m.id < ${p.below} ORDER BY m.id LIMIT 1), false) AS expired`);

/** The stream's retention, and how far past it the first message above the floor is. */
export const retentionOverrun = defineStatement<{ streamId: string; floor: string }, { retention_ms: string; over_ms: number | null }>(
  ["streamId", "floor"], (t, p) =>
    `SELECT s.retention_ms::text,
            (SELECT EXTRACT(EPOCH FROM (now() - s.retention_ms * interval '1 millisecond' - m.created_at)) * 1000
               FROM ${t.messageLog} m WHERE m.id > ${p.floor} ORDER BY m.id LIMIT 1)::float8 AS over_ms
       FROM ${t.schema}.stream_config s WHERE s.id = ${p.streamId}`);

/**
 * Whether every row of `partition` (its quoted name) is older than now − retention (an empty
 * partition counts as expired). Text per partition, as a partition is not one of the stream's
 * Tables: `$1` is the retention in ms.
 */
export function partitionExpired(partition: string): string {
  return `WITH cut AS (SELECT now() - $1::bigint * interval '1 millisecond' AS t)
     SELECT CASE
              WHEN EXISTS (SELECT 1 FROM (SELECT m.created_at FROM ${partition} m ORDER BY m.id DESC LIMIT 1) top, cut
                            WHERE top.created_at >= cut.t) THEN false
              ELSE NOT EXISTS (SELECT 1 FROM ${partition} m, cut WHERE m.created_at >= cut.t)
            END AS expired`;
}

/** One batch of delivery-log rows of messages in [lo, hi), rows another session holds skipped. */
export const deleteDeliveryLogBatch = defineStatement<{ lo: string; hi: string }>(["lo", "hi"], (t, p) =>
  `DELETE FROM ${t.deliveryLog} WHERE id IN (
       SELECT d.id FROM ${t.deliveryLog} d WHERE d.message_id >= ${p.lo} AND d.message_id < ${p.hi} LIMIT ${BATCH} FOR UPDATE SKIP LOCKED)`);

/** The drop transaction's lock on the log itself (producers and pollers lock it before any row of the family). */
export const lockLogOnly = defineStatement<Record<string, never>>([], (t) => `LOCK TABLE ONLY ${t.messageLog} IN ACCESS EXCLUSIVE MODE`);

/** The ids of the stream's groups. */
export const groupIds = defineStatement<{ streamId: string }, { ids: string[] | null }, SchemaNames>(["streamId"], (t, p) =>
  `SELECT array_agg(id::text) AS ids FROM ${t.schema}.consumer_group_config WHERE stream_id = ${p.streamId}`);

/** The rows of messages in [lo, hi) a partition drop removes first: resolved exception rows, delivery-log rows, compaction heads emptied. */
export const deletePartitionRows = defineStatement<
  { lo: string; hi: string; groupIds: string[] },
  { exception_rows: string; delivery_rows: string; heads_emptied: string }
>(["lo", "hi", "groupIds"], (t, p) =>
  `WITH e AS (
       DELETE FROM ${t.exceptionQueue} WHERE consumer_group_id = ANY(${p.groupIds}::bigint[]) AND message_id >= ${p.lo} AND message_id < ${p.hi}
          AND status IN ('dead', 'superseded', 'expired') RETURNING 1
     ), d AS (
       DELETE FROM ${t.deliveryLog} WHERE message_id >= ${p.lo} AND message_id < ${p.hi} RETURNING 1
     ), h AS (
       UPDATE ${t.compactionHead} SET message_id = NULL, compaction_rank = NULL, updated_at = now()
        WHERE message_id >= ${p.lo} AND message_id < ${p.hi} RETURNING 1
     )
     SELECT (SELECT count(*) FROM e)::text AS exception_rows, (SELECT count(*) FROM d)::text AS delivery_rows, (SELECT count(*) FROM h)::text AS heads_emptied`);

/** The next ids after `after` up to `limit`, oldest first, each with whether it is past retention. */
export const sweepWindow = defineStatement<
  { after: string; limit: string; retentionMs: string },
  { id: string; message_key: string | null; compacted: boolean; expired: boolean }
>(["after", "limit", "retentionMs"], (t, p) =>
  `SELECT m.id::text, m.message_key, m.compaction_rank IS NOT NULL AS compacted,
            m.created_at < now() - ${p.retentionMs}::bigint * interval '1 millisecond' AS expired
       FROM ${t.messageLog} m WHERE m.id > ${p.after} AND m.id <= ${p.limit} ORDER BY m.id LIMIT ${BATCH}`);

/** Locks the exception rows of messages `ids` of every group of the stream, in a fixed order. */
export const lockSweepRows = defineStatement<{ streamId: string; ids: string[] }, { message_id: string; status: string }>(
  ["streamId", "ids"], (t, p) =>
    `SELECT e.message_id::text, e.status FROM ${t.exceptionQueue} e
      WHERE e.consumer_group_id IN (SELECT id FROM ${t.schema}.consumer_group_config WHERE stream_id = ${p.streamId})
        AND e.message_id = ANY(${p.ids}::bigint[])
      ORDER BY e.consumer_group_id, e.message_id FOR UPDATE OF e`);

/** The compaction heads of (keys, ids) pairs, each locked without waiting: locked false when a producer holds it. */
export const lockSweepHeads = defineStatement<{ keys: (string | null)[]; ids: string[] }, { message_id: string; compaction_key: string; locked: boolean }>(
  ["keys", "ids"], (t, p) =>
    `WITH h AS (
         SELECT compaction_key, message_id FROM ${t.compactionHead}
          WHERE compaction_key = ANY(${p.keys}::text[]) AND message_id = ANY(${p.ids}::bigint[])
       ), l AS MATERIALIZED (
         SELECT compaction_key FROM ${t.compactionHead}
          WHERE compaction_key = ANY(${p.keys}::text[]) AND message_id = ANY(${p.ids}::bigint[])
          ORDER BY compaction_key FOR UPDATE SKIP LOCKED
       )
       SELECT h.message_id::text, h.compaction_key, l.compaction_key IS NOT NULL AS locked
         FROM h LEFT JOIN l ON l.compaction_key = h.compaction_key`);

/** Deletes messages `ids` with their resolved exception rows and delivery-log rows, emptying the heads `headKeys` that point at them. */
export const sweepRows = defineStatement<{ streamId: string; ids: string[]; headKeys: string[] }, { m: string; e: string; d: string; h: string }>(
  ["streamId", "ids", "headKeys"], (t, p) =>
    `WITH m AS (
       DELETE FROM ${t.messageLog} WHERE id = ANY(${p.ids}::bigint[]) RETURNING 1
     ), e AS (
       DELETE FROM ${t.exceptionQueue}
        WHERE consumer_group_id IN (SELECT id FROM ${t.schema}.consumer_group_config WHERE stream_id = ${p.streamId})
          AND message_id = ANY(${p.ids}::bigint[]) AND status IN ('dead', 'superseded', 'expired') RETURNING 1
     ), d AS (
       DELETE FROM ${t.deliveryLog} WHERE message_id = ANY(${p.ids}::bigint[]) RETURNING 1
     ), h AS (
       UPDATE ${t.compactionHead} SET message_id = NULL, compaction_rank = NULL, updated_at = now()
        WHERE compaction_key = ANY(${p.headKeys}::text[]) AND message_id = ANY(${p.ids}::bigint[]) RETURNING 1
     )
     SELECT (SELECT count(*) FROM m)::text AS m, (SELECT count(*) FROM e)::text AS e,
            (SELECT count(*) FROM d)::text AS d, (SELECT count(*) FROM h)::text AS h`);

/** One batch of idempotency keys older than `ttlMs` (step 4). */
export const deleteIdempotencyKeys = defineStatement<{ ttlMs: string }>(["ttlMs"], (t, p) =>
  `DELETE FROM ${t.idempotencyKey} WHERE idempotency_key IN (
       SELECT k.idempotency_key FROM ${t.idempotencyKey} k WHERE k.created_at < now() - ${p.ttlMs}::bigint * interval '1 millisecond' AND k.message_id > 0
        ORDER BY k.created_at LIMIT ${BATCH} FOR UPDATE SKIP LOCKED)`);

/** One batch of expired message key leases (step 5). */
export const deleteExpiredKeyLeases = defineStatement<Record<string, never>>([], (t) =>
  `DELETE FROM ${t.keyLease} WHERE (consumer_group_id, message_key) IN (
       SELECT k.consumer_group_id, k.message_key FROM ${t.keyLease} k WHERE ${t.fn("lease_expired")}(k.expires_at)
        LIMIT ${BATCH} FOR UPDATE SKIP LOCKED)`);

/** One batch of compaction heads left empty for over an hour (step 6). */
export const deleteEmptyHeads = defineStatement<Record<string, never>>([], (t) =>
  `DELETE FROM ${t.compactionHead} WHERE compaction_key IN (
       SELECT h.compaction_key FROM ${t.compactionHead} h
        WHERE h.message_id IS NULL AND h.updated_at < now() - interval '${EMPTY_HEAD_IDLE}'
        ORDER BY h.updated_at LIMIT ${BATCH} FOR UPDATE SKIP LOCKED)`);
