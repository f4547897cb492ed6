// Produce statements (docs/guide/producing.md#the-xid-before-id-rule). Each is one statement. It makes its transaction hold a
// transaction id (the materialised CTE `x`) before it draws a message id, so that the snapshot
// fence's proof covers every id it can ever commit (docs/protocol/poll-cycle.md#the-fence). Ids come from
// the id column's default, evaluated per row as the insert reads its source rows from `x`, so
// after the xid: no statement calls nextval() itself, which would pin an RDS Proxy session.
import { table } from "./names.js";

function headUpsert(q: string, n: string, source: string): string {
  const compactionHead = table(q, n, "compaction_head");
  return `head AS (
    INSERT INTO ${compactionHead} AS h (compaction_key, message_id, compaction_rank, schema_version)
    ${source}
    ON CONFLICT (compaction_key) DO UPDATE
       SET message_id = EXCLUDED.message_id, compaction_rank = EXCLUDED.compaction_rank,
           schema_version = 1, updated_at = now()
     WHERE h.message_id IS NULL
        OR (h.compaction_rank, h.message_id) < (EXCLUDED.compaction_rank, EXCLUDED.message_id)
  )`;
}

/** One message: $1 key, $2 rank, $3 payload text, $4 options text. Returns id. */
export function produceOne(q: string, n: string): string {
  const messageLog = table(q, n, "message_log");
  return `WITH x AS MATERIALIZED (SELECT pg_current_xact_id() AS xid),
  ins AS (
    INSERT INTO ${messageLog} (message_key, compaction_rank, payload, options)
    SELECT $1::text, $2::bigint, $3::jsonb, $4::jsonb FROM x
    RETURNING id, message_key, compaction_rank
  ),
  ${headUpsert(q, n, "SELECT message_key, id, compaction_rank, 1 FROM ins WHERE compaction_rank IS NOT NULL")}
  SELECT id::text AS id, false AS duplicate FROM ins`;
}

/**
 * One message guarded by an idempotency key ($5 uuid). Returns id and duplicate. The message is
 * inserted first (its id from the column default) and the key row then points at it, with no
 * ON CONFLICT: when a concurrent produce of the same key commits first, the key insert fails
 * with a unique violation and takes the message row down with it (isIdempotencyRace); the
 * caller then reads the winner (docs/guide/producing.md#idempotency-keys).
 */
export function produceIdempotent(q: string, n: string): string {
  const messageLog = table(q, n, "message_log");
  const ik = table(q, n, "idempotency_key");
  return `WITH x AS MATERIALIZED (SELECT pg_current_xact_id() AS xid),
  seen AS MATERIALIZED (SELECT e.message_id FROM ${ik} e WHERE e.idempotency_key = $5::uuid),
  ins AS (
    INSERT INTO ${messageLog} (message_key, compaction_rank, payload, options)
    SELECT $1::text, $2::bigint, $3::jsonb, $4::jsonb FROM x WHERE NOT EXISTS (SELECT 1 FROM seen)
    RETURNING id, message_key, compaction_rank
  ),
  k AS (
    INSERT INTO ${ik} (idempotency_key, message_id)
    SELECT $5::uuid, id FROM ins
    RETURNING message_id
  ),
  ${headUpsert(q, n, "SELECT message_key, id, compaction_rank, 1 FROM ins WHERE compaction_rank IS NOT NULL")}
  SELECT k.message_id::text AS id, false AS duplicate FROM k
  UNION ALL
  SELECT seen.message_id::text, true FROM seen`;
}

/** The unique violation of a concurrent produce with the same idempotency key (see produceIdempotent). */
export function isIdempotencyRace(e: unknown): boolean {
  const err = e as { code?: string; constraint?: string } | null;
  return err?.code === "23505" && typeof err.constraint === "string" && err.constraint.startsWith("idempotency_key_");
}

export function idempotencyLookup(q: string, n: string): string {
  return `SELECT message_id::text AS id FROM ${table(q, n, "idempotency_key")} WHERE idempotency_key = $1::uuid`;
}

/**
 * A batch in one statement: $1 is a JSON array of {p: payload, k: key, r: rank, o: options}.
 * Ids are drawn in item order; same-key compacted items are reduced to their winner.
 */
export function produceBatch(q: string, n: string): string {
  const messageLog = table(q, n, "message_log");
  return `WITH x AS MATERIALIZED (SELECT pg_current_xact_id() AS xid),
  ins AS (
    INSERT INTO ${messageLog} (message_key, compaction_rank, payload, options)
    SELECT t.e->>'k', (t.e->>'r')::bigint, t.e->'p', NULLIF(t.e->'o', 'null'::jsonb)
      FROM x, jsonb_array_elements($1::jsonb) WITH ORDINALITY AS t(e, ord)
     ORDER BY t.ord
    RETURNING id, message_key, compaction_rank
  ),
  ${headUpsert(
    q,
    n,
    `SELECT DISTINCT ON (message_key) message_key, id, compaction_rank, 1 FROM ins
      WHERE compaction_rank IS NOT NULL ORDER BY message_key, compaction_rank DESC, id DESC`,
  )}
  SELECT id::text AS id FROM ins ORDER BY id`;
}

/**
 * A batch without compaction as one INSERT from JSON arrays: without `meta`, $1 is the array of
 * the payloads; with it, $1 the payloads, $2 the keys (strings or null), $3 the options (objects
 * or null), zipped by position. Each array is one parameter the client joins from the JSON texts
 * it has already made (jsonArray), so the statement's text and plan do not depend on the batch's
 * size and no payload is re-encoded. A multi-row VALUES with one parameter per payload would make
 * the planner fold every JSONB constant into the plan and copy it with the plan: 25 % (Postgres 18)
 * to 58 % (Postgres 15) more server time per message in the bench's produce arm (bench/README.md).
 * Ids are drawn in item order.
 */
export function produceBatchArrays(q: string, n: string, meta: boolean): string {
  const messageLog = table(q, n, "message_log");
  const from = meta
    ? "ROWS FROM (jsonb_array_elements($1::jsonb), jsonb_array_elements_text($2::jsonb), jsonb_array_elements($3::jsonb)) WITH ORDINALITY AS u(p, k, o, i)"
    : "jsonb_array_elements($1::jsonb) WITH ORDINALITY AS u(p, i)";
  const sel = meta ? "u.k, u.p, NULLIF(u.o, 'null'::jsonb)" : "NULL, u.p, NULL";
  return `WITH x AS MATERIALIZED (SELECT pg_current_xact_id() AS xid),
  ins AS (
    INSERT INTO ${messageLog} (message_key, payload, options)
    SELECT ${sel} FROM x, ${from}
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
