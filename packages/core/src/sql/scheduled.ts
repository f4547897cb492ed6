// Statements of scheduled delivery (docs/guide/producing.md#scheduled-delivery): parking a message
// in scheduled_message_N, moving due ones to the log (move_scheduled_N), cancelling and reading
// them. Due times are the database's: an absolute deliverAt is stored as given, a delay is added
// to the database's now(), never to the producer's clock.
import { batchRows } from "./produce.js";
import { defineStatement } from "./statement.js";

/** How many due rows one mover call appends to the log. */
export const MOVE_LIMIT = 1_000;

/** The due time of a schedule: epoch ms ($at) or ms after the database's now() ($delay), one of them non-null. */
const dueAt = (at: string, delay: string): string =>
  `COALESCE(to_timestamp(${at}::float8 / 1000), now() + ${delay}::float8 * interval '1 millisecond')`;

/** An idempotency key's stored message id for a scheduled message: the scheduled id negated. */
export interface ScheduledProduceRow {
  id: string;
  duplicate: boolean;
  scheduled: boolean;
  due_at: Date | null;
}

/**
 * One scheduled message: parked with its due time, and its idempotency key (when given) stored
 * pointing at -scheduled id. A key already stored answers its message (scheduled or in the log) as
 * a duplicate; a concurrent first use of the key fails on the key's primary key (isIdempotencyRace).
 */
export const produceScheduled = defineStatement<
  { key: string | null; rank: string | null; payload: string; options: string | null; idempotency: string | null; at: number | null; delay: number | null },
  ScheduledProduceRow
>(["key", "rank", "payload", "options", "idempotency", "at", "delay"], (t, p) => {
  const ik = t.fn("idempotency_key");
  return `WITH seen AS MATERIALIZED (
    SELECT e.message_id FROM ${ik} e WHERE ${p.idempotency}::uuid IS NOT NULL AND e.idempotency_key = ${p.idempotency}::uuid),
  sch AS (
    INSERT INTO ${t.scheduledMessage} (message_key, compaction_rank, payload, options, idempotency_key, due_at)
    SELECT ${p.key}::text, ${p.rank}::bigint, ${p.payload}::json, ${p.options}::jsonb, ${p.idempotency}::uuid, ${dueAt(p.at, p.delay)}
     WHERE NOT EXISTS (SELECT 1 FROM seen)
    RETURNING id, due_at, idempotency_key
  ),
  k AS (
    INSERT INTO ${ik} (idempotency_key, message_id)
    SELECT sch.idempotency_key, -sch.id FROM sch WHERE sch.idempotency_key IS NOT NULL
    RETURNING message_id
  )
  SELECT sch.id::text AS id, false AS duplicate, true AS scheduled, sch.due_at FROM sch
  UNION ALL
  SELECT abs(seen.message_id)::text, true, seen.message_id < 0,
         (SELECT s.due_at FROM ${t.scheduledMessage} s WHERE s.id = -seen.message_id)
    FROM seen`;
});

/**
 * A batch of which at least one item is scheduled: $1 the JSON array of the payloads, $2 one of
 * the items' {k, r, o, s} (batchRows), where s is null (append now) or {at} / {delay}. Both kinds
 * are written in one statement, each kind's ids drawn in item order; the rows say which kind each
 * id is.
 */
export const produceMixedBatch = defineStatement<{ payloads: string; items: string }, { id: string; scheduled: boolean; due_at: Date | null }>(["payloads", "items"], (t, p) => `WITH x AS MATERIALIZED (SELECT pg_current_xact_id() AS xid),
  items AS MATERIALIZED (SELECT t.p, t.m, t.ord FROM ${batchRows(p.payloads, p.items)}),
  ins AS (
    INSERT INTO ${t.messageLog} (message_key, compaction_rank, payload, options)
    SELECT i.m->>'k', (i.m->>'r')::bigint, i.p, NULLIF(i.m->'o', 'null'::jsonb)
      FROM x, items i WHERE jsonb_typeof(i.m->'s') IS DISTINCT FROM 'object'
     ORDER BY i.ord
    RETURNING id, message_key, compaction_rank
  ),
  sch AS (
    INSERT INTO ${t.scheduledMessage} (message_key, compaction_rank, payload, options, due_at)
    SELECT i.m->>'k', (i.m->>'r')::bigint, i.p, NULLIF(i.m->'o', 'null'::jsonb), ${dueAt("(i.m->'s'->>'at')", "(i.m->'s'->>'delay')")}
      FROM items i WHERE jsonb_typeof(i.m->'s') = 'object'
     ORDER BY i.ord
    RETURNING id, due_at
  ),
  head AS (
    INSERT INTO ${t.compactionHead} AS h (compaction_key, message_id, compaction_rank, schema_version)
    SELECT DISTINCT ON (message_key) message_key, id, compaction_rank, 1 FROM ins
     WHERE compaction_rank IS NOT NULL ORDER BY message_key, compaction_rank DESC, id DESC
    ON CONFLICT (compaction_key) DO UPDATE
       SET message_id = EXCLUDED.message_id, compaction_rank = EXCLUDED.compaction_rank,
           schema_version = 1, updated_at = now()
     WHERE h.message_id IS NULL
        OR (h.compaction_rank, h.message_id) < (EXCLUDED.compaction_rank, EXCLUDED.message_id)
  )
  SELECT id::text AS id, false AS scheduled, NULL::timestamptz AS due_at FROM ins
  UNION ALL
  SELECT id::text, true, due_at FROM sch`);

/** Runs the mover once (autocommit): rows moved, or -1 when the next log id's partition is missing. */
export const moveScheduled = defineStatement<{ limit: number }, { moved: number }>(["limit"], (t, p) =>
  `SELECT ${t.fn("move_scheduled")}(${p.limit}::int) AS moved`);

/**
 * Cancels one waiting scheduled message: deletes it and its idempotency key in one statement.
 * No row: `last` says whether the id was ever issued (the sequence's last value).
 */
export const cancelScheduled = defineStatement<{ id: string }, { id: string | null; due_at: Date | null; last: string }>(["id"], (t, p) => `WITH del AS (
    DELETE FROM ${t.scheduledMessage} s WHERE s.id = ${p.id}::bigint RETURNING s.id, s.due_at, s.idempotency_key
  ),
  k AS (
    DELETE FROM ${t.fn("idempotency_key")} e USING del
     WHERE e.idempotency_key = del.idempotency_key AND e.message_id = -del.id
  )
  SELECT (SELECT del.id::text FROM del) AS id, (SELECT del.due_at FROM del) AS due_at,
         (SELECT CASE WHEN q.is_called THEN q.last_value ELSE 0 END FROM ${t.fn("scheduled_message")}_id_seq q)::text AS last`);

/** How many messages wait and the earliest due time (the status counts). */
export const scheduledSummary = defineStatement<Record<string, never>, { waiting: string; next_due_at: Date | null; overdue: string }>([], (t) =>
  `SELECT count(*)::text AS waiting, min(s.due_at) AS next_due_at,
          count(*) FILTER (WHERE s.due_at <= now())::text AS overdue
     FROM ${t.scheduledMessage} s`);

export interface ScheduledRow {
  id: string;
  message_key: string | null;
  compaction_rank: string | null;
  payload: unknown;
  options: Record<string, unknown> | null;
  due_at: Date;
  created_at: Date;
}

/** One scheduled message by its scheduled id, or a key's waiting ones, earliest due first. */
export const readScheduled = defineStatement<{ id: string | null; key: string | null; limit: number }, ScheduledRow>(["id", "key", "limit"], (t, p) =>
  `SELECT s.id::text, s.message_key, s.compaction_rank::text, s.payload, s.options, s.due_at, s.created_at
     FROM ${t.scheduledMessage} s
    WHERE (${p.id}::bigint IS NULL OR s.id = ${p.id}::bigint)
      AND (${p.key}::text IS NULL OR s.message_key = ${p.key}::text)
    ORDER BY s.due_at, s.id
    LIMIT ${p.limit}::int`);
