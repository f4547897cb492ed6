// Produce statements (docs/guide/producing.md#the-xid-before-id-rule). Each is one statement. It makes its transaction hold a
// transaction id (the materialised CTE `x`) before it draws a message id, so that the snapshot
// fence's proof covers every id it can ever commit (docs/protocol/poll-cycle.md#the-fence). Ids come from
// the id column's default, evaluated per row as the insert reads its source rows from `x`, so
// after the xid: no statement calls nextval() itself, which would pin an RDS Proxy session.
import type { Tables } from "./names.js";
import { defineStatement } from "./statement.js";

function headUpsert(t: Tables, source: string): string {
  return `head AS (
    INSERT INTO ${t.compactionHead} AS h (compaction_key, message_id, compaction_rank, schema_version)
    ${source}
    ON CONFLICT (compaction_key) DO UPDATE
       SET message_id = EXCLUDED.message_id, compaction_rank = EXCLUDED.compaction_rank,
           schema_version = 1, updated_at = now()
     WHERE h.message_id IS NULL
        OR (h.compaction_rank, h.message_id) < (EXCLUDED.compaction_rank, EXCLUDED.message_id)
  )`;
}

/** One message's columns as a produce sends them: payload and options as JSON text. */
export interface MessageParams {
  key: string | null;
  rank: string | null;
  payload: string;
  options: string | null;
}

/** The row of a single produce: the message's id, and whether an idempotency key found it already. */
export interface ProducedRow {
  id: string;
  duplicate: boolean;
}

/** One message. Returns its id. */
export const produceOne = defineStatement<MessageParams, ProducedRow>(["key", "rank", "payload", "options"], (t, p) =>
  `WITH x AS MATERIALIZED (SELECT pg_current_xact_id() AS xid),
  ins AS (
    INSERT INTO ${t.messageLog} (message_key, compaction_rank, payload, options)
    SELECT ${p.key}::text, ${p.rank}::bigint, ${p.payload}::json, ${p.options}::jsonb FROM x
    RETURNING id, message_key, compaction_rank
  ),
  ${headUpsert(t, "SELECT message_key, id, compaction_rank, 1 FROM ins WHERE compaction_rank IS NOT NULL")}
  SELECT id::text AS id, false AS duplicate FROM ins`);

/**
 * One message guarded by an idempotency key (a uuid). Returns id and duplicate. The message is
 * inserted first (its id from the column default) and the key row then points at it, with no
 * ON CONFLICT: when a concurrent produce of the same key commits first, the key insert fails
 * with a unique violation and takes the message row down with it (isIdempotencyRace); the
 * caller then reads the winner (docs/guide/producing.md#idempotency-keys).
 */
export const produceIdempotent = defineStatement<MessageParams & { idempotencyKey: string }, ProducedRow>(
  ["key", "rank", "payload", "options", "idempotencyKey"], (t, p) =>
    `WITH x AS MATERIALIZED (SELECT pg_current_xact_id() AS xid),
  seen AS MATERIALIZED (SELECT e.message_id FROM ${t.idempotencyKey} e WHERE e.idempotency_key = ${p.idempotencyKey}::uuid),
  ins AS (
    INSERT INTO ${t.messageLog} (message_key, compaction_rank, payload, options)
    SELECT ${p.key}::text, ${p.rank}::bigint, ${p.payload}::json, ${p.options}::jsonb FROM x WHERE NOT EXISTS (SELECT 1 FROM seen)
    RETURNING id, message_key, compaction_rank
  ),
  k AS (
    INSERT INTO ${t.idempotencyKey} (idempotency_key, message_id)
    SELECT ${p.idempotencyKey}::uuid, id FROM ins
    RETURNING message_id
  ),
  ${headUpsert(t, "SELECT message_key, id, compaction_rank, 1 FROM ins WHERE compaction_rank IS NOT NULL")}
  SELECT k.message_id::text AS id, false AS duplicate FROM k
  UNION ALL
  SELECT seen.message_id::text, true FROM seen`);

/** The unique violation of a concurrent produce with the same idempotency key (see produceIdempotent). */
export function isIdempotencyRace(e: unknown): boolean {
  const err = e as { code?: string; constraint?: string } | null;
  return err?.code === "23505" && typeof err.constraint === "string" && err.constraint.startsWith("idempotency_key_");
}

/** The message an idempotency key names. */
export const idempotencyLookup = defineStatement<{ idempotencyKey: string | null }, { id: string }>(["idempotencyKey"], (t, p) =>
  `SELECT message_id::text AS id FROM ${t.idempotencyKey} WHERE idempotency_key = ${p.idempotencyKey}::uuid`);

/**
 * A batch in one statement: `payloads` is a JSON array of the payloads and `items` one of the
 * items' {k: key, r: rank, o: options}, zipped by position (batchRows). Ids are drawn in item order;
 * same-key compacted items are reduced to their winner.
 */
export const produceBatch = defineStatement<{ payloads: string; items: string }, { id: string }>(["payloads", "items"], (t, p) =>
  `WITH x AS MATERIALIZED (SELECT pg_current_xact_id() AS xid),
  ins AS (
    INSERT INTO ${t.messageLog} (message_key, compaction_rank, payload, options)
    SELECT t.m->>'k', (t.m->>'r')::bigint, t.p, NULLIF(t.m->'o', 'null'::jsonb)
      FROM x, ${batchRows(p.payloads, p.items)}
     ORDER BY t.ord
    RETURNING id, message_key, compaction_rank
  ),
  ${headUpsert(
    t,
    `SELECT DISTINCT ON (message_key) message_key, id, compaction_rank, 1 FROM ins
      WHERE compaction_rank IS NOT NULL ORDER BY message_key, compaction_rank DESC, id DESC`,
  )}
  SELECT id::text AS id FROM ins ORDER BY id`);

/**
 * A batch's rows t(p, m, ord) in item order: p each payload's JSON text (json), m its item's other
 * fields (jsonb), from two arrays of the same length. The payloads stay json, read in one pass and
 * stored as sent; the small items go as jsonb, whose fields are read without scanning the payload.
 * One document of {p, k, r, o} items was measured slower both ways: as jsonb every payload is parsed
 * into jsonb, and as json each field read (->, or json_to_recordset) rescans the item with its
 * payload (bench/README.md, 5 December 2026).
 */
export function batchRows(payloads: string, items: string): string {
  return `ROWS FROM (json_array_elements(${payloads}::json), jsonb_array_elements(${items}::jsonb)) WITH ORDINALITY AS t(p, m, ord)`;
}

/**
 * A batch without compaction as one INSERT from JSON arrays: `payloads` alone (payloadsOnly), or
 * with the keys (strings or null) and the options (objects or null), zipped by position
 * (withMeta). Each array is one parameter the client joins from the JSON texts
 * it has already made (jsonArray), so the statement's text and plan do not depend on the batch's
 * size and no payload is re-encoded. The payloads array is read as json, so each payload's text is
 * stored as sent, with no jsonb conversion. A multi-row VALUES with one parameter per payload would make
 * the planner fold every JSONB constant into the plan and copy it with the plan: 25 % (Postgres 18)
 * to 58 % (Postgres 15) more server time per message in the bench's produce arm (bench/README.md).
 * Ids are drawn in item order.
 */
export const produceBatchArrays = {
  payloadsOnly: defineStatement<{ payloads: string }, { id: string }>(["payloads"], (t, p) =>
    batchFromArrays(t, "NULL, u.p, NULL", `json_array_elements(${p.payloads}::json) WITH ORDINALITY AS u(p, i)`)),
  withMeta: defineStatement<{ payloads: string; keys: string; options: string }, { id: string }>(["payloads", "keys", "options"], (t, p) =>
    batchFromArrays(
      t,
      "u.k, u.p, NULLIF(u.o, 'null'::jsonb)",
      `ROWS FROM (json_array_elements(${p.payloads}::json), jsonb_array_elements_text(${p.keys}::jsonb), jsonb_array_elements(${p.options}::jsonb)) WITH ORDINALITY AS u(p, k, o, i)`,
    )),
};

function batchFromArrays(t: Tables, columns: string, from: string): string {
  return `WITH x AS MATERIALIZED (SELECT pg_current_xact_id() AS xid),
  ins AS (
    INSERT INTO ${t.messageLog} (message_key, payload, options)
    SELECT ${columns} FROM x, ${from}
     ORDER BY u.i
    RETURNING id
  )
  SELECT id::text AS id FROM ins ORDER BY id`;
}

/** A JSON array of JSON texts already made (null: JSON null), sent as one parameter. */
export function jsonArray(items: readonly (string | null)[]): string {
  let out = "[";
  for (let i = 0; i < items.length; i++) out += (i === 0 ? "" : ",") + (items[i] ?? "null");
  return out + "]";
}
