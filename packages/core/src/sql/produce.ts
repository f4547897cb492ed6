// Produce statements (docs/producing.md#the-xid-before-id-rule). Each is one statement. It makes its transaction hold a
// transaction id (the materialised CTE `x`) before it draws a message id, so that the snapshot
// fence's proof covers every id it can ever commit.
import { table } from "./names.js";

function headUpsert(q: string, n: string, source: string): string {
  const ch = table(q, n, "compaction_head");
  return `head AS (
    INSERT INTO ${ch} AS h (compaction_key, message_id, compaction_rank, schema_version)
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
  const ml = table(q, n, "message_log");
  return `WITH x AS MATERIALIZED (SELECT pg_current_xact_id() AS xid),
  ins AS (
    INSERT INTO ${ml} (id, message_key, compaction_rank, payload, options)
    SELECT nextval('${ml}_id_seq'), $1::text, $2::bigint, $3::jsonb, $4::jsonb FROM x
    RETURNING id, message_key, compaction_rank
  ),
  ${headUpsert(q, n, "SELECT message_key, id, compaction_rank, 1 FROM ins WHERE compaction_rank IS NOT NULL")}
  SELECT id::text AS id, false AS duplicate FROM ins`;
}

/** One message guarded by an idempotency key ($5 uuid). Returns id and duplicate. */
export function produceIdempotent(q: string, n: string): string {
  const ml = table(q, n, "message_log");
  const ik = table(q, n, "idempotency_key");
  return `WITH x AS MATERIALIZED (SELECT pg_current_xact_id() AS xid),
  k AS (
    INSERT INTO ${ik} (idempotency_key, message_id)
    SELECT $5::uuid, nextval('${ml}_id_seq') FROM x
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING message_id
  ),
  ins AS (
    INSERT INTO ${ml} (id, message_key, compaction_rank, payload, options)
    SELECT k.message_id, $1::text, $2::bigint, $3::jsonb, $4::jsonb FROM k
    RETURNING id, message_key, compaction_rank
  ),
  ${headUpsert(q, n, "SELECT message_key, id, compaction_rank, 1 FROM ins WHERE compaction_rank IS NOT NULL")}
  SELECT id::text AS id, false AS duplicate FROM ins
  UNION ALL
  SELECT e.message_id::text, true FROM ${ik} e
   WHERE e.idempotency_key = $5::uuid AND NOT EXISTS (SELECT 1 FROM k)`;
}

export function idempotencyLookup(q: string, n: string): string {
  return `SELECT message_id::text AS id FROM ${table(q, n, "idempotency_key")} WHERE idempotency_key = $1::uuid`;
}

/**
 * A batch in one statement: $1 is a JSON array of {p: payload, k: key, r: rank, o: options}.
 * Ids are drawn in item order; same-key compacted items are reduced to their winner.
 */
export function produceBatch(q: string, n: string): string {
  const ml = table(q, n, "message_log");
  return `WITH x AS MATERIALIZED (SELECT pg_current_xact_id() AS xid),
  items AS MATERIALIZED (
    SELECT nextval('${ml}_id_seq') AS id, t.e->>'k' AS message_key, (t.e->>'r')::bigint AS compaction_rank,
           t.e->'p' AS payload, NULLIF(t.e->'o', 'null'::jsonb) AS options, t.ord
      FROM x, jsonb_array_elements($1::jsonb) WITH ORDINALITY AS t(e, ord)
  ),
  ins AS (
    INSERT INTO ${ml} (id, message_key, compaction_rank, payload, options)
    SELECT id, message_key, compaction_rank, payload, options FROM items
  ),
  ${headUpsert(
    q,
    n,
    `SELECT DISTINCT ON (message_key) message_key, id, compaction_rank, 1 FROM items
      WHERE compaction_rank IS NOT NULL ORDER BY message_key, compaction_rank DESC, id DESC`,
  )}
  SELECT id::text AS id FROM items ORDER BY ord`;
}

const valuesCache = new Map<string, string>();

/**
 * A batch without compaction as one multi-row VALUES insert (the shape of a plain INSERT, which
 * is what the produce budget is measured against). With `meta`, each row carries key, payload
 * and options ($3i+1 .. $3i+3); without, only the payload ($i+1). Ids are drawn in row order.
 */
export function produceBatchValues(q: string, n: string, count: number, meta: boolean): string {
  const k = `${q}.${n}.${count}.${meta}`;
  let text = valuesCache.get(k);
  if (text) return text;
  const ml = table(q, n, "message_log");
  const rows: string[] = [];
  for (let i = 0; i < count; i++) {
    rows.push(meta ? `($${3 * i + 1}::text,$${3 * i + 2}::jsonb,$${3 * i + 3}::jsonb)` : `($${i + 1}::jsonb)`);
  }
  const cols = meta ? "v(k, p, o)" : "v(p)";
  const sel = meta ? "nextval('" + ml + "_id_seq'), v.k, v.p, v.o" : "nextval('" + ml + "_id_seq'), NULL, v.p, NULL";
  text = `WITH x AS MATERIALIZED (SELECT pg_current_xact_id() AS xid),
  ins AS (
    INSERT INTO ${ml} (id, message_key, payload, options)
    SELECT ${sel} FROM x, (VALUES ${rows.join(",")}) AS ${cols}
    RETURNING id
  )
  SELECT id::text AS id FROM ins`;
  if (valuesCache.size > 256) valuesCache.clear();
  valuesCache.set(k, text);
  return text;
}
