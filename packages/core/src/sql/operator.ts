// Statements of the operator tools: one message across groups, filtered exception rows, discard
// (docs/guide/operations.md#inspect, docs/guide/operations.md#failures, docs/guide/operations.md#discarding-dead-messages).
import type { Tables } from "./cycle.js";

/** Messages by id ($1) or by key ($2), newest first, at most $3. */
export function messagesById(t: Tables): string {
  return `SELECT m.id::text AS id, m.message_key, m.compaction_rank::text AS compaction_rank, m.payload, m.options, m.created_at
            FROM ${t.messageLog} m WHERE ($1::bigint IS NOT NULL AND m.id = $1::bigint)
                              OR ($2::text IS NOT NULL AND m.message_key = $2::text)
           ORDER BY m.id DESC LIMIT $3`;
}

/** Every group of stream $1 with its cursor, and the exception row of message $2 when there is one. */
export function groupStates(q: string, t: Tables): string {
  return `SELECT g.id::text AS group_id, g.name, g.paused, c.claimed::text, c.committed::text,
                 e.status, e.attempts, e.delays, e.can_run_after, e.last_error, e.lease_expires_at, e.concurrency,
                 e.created_at AS row_created_at, e.updated_at AS row_updated_at
            FROM ${q}.consumer_group_config g
            JOIN ${t.groupCursor} c ON c.consumer_group_id = g.id
            LEFT JOIN ${t.exceptionQueue} e ON e.consumer_group_id = g.id AND e.message_id = $2
           WHERE g.stream_id = $1
           ORDER BY g.name`;
}

/** The delivery_log rows of message $1, oldest first. */
export function timeline(t: Tables): string {
  return `SELECT consumer_group_id::text AS group_id, attempt, status, error, attempted_at
            FROM ${t.deliveryLog} WHERE message_id = $1 ORDER BY id`;
}

/**
 * A page of group $1's rows of status $2, newest update first: $3 rows from offset $9, filtered by
 * $4 error text, $5 key, $6 since, $7 before, $8 payload containment. With a keyset cursor ($10 the
 * row's updated_at, $11 its id) the rows after it ("after") or, in reverse, before it ("before",
 * returned oldest first: the caller reverses them), read from the exception_queue_N_page index.
 * Each row carries its cursor: updated_at in UTC to the microsecond, "~", the id.
 */
export function filteredRows(t: Tables, keyset: "after" | "before" | null = null): string {
  const desc = keyset !== "before";
  const seek = keyset === null ? "" : `AND (e.updated_at, e.message_id) ${desc ? "<" : ">"} ($10::timestamptz, $11::bigint)`;
  return `SELECT e.message_id::text AS message_id, e.message_key, e.status, m.payload, e.attempts, e.delays, e.last_error,
                 e.can_run_after, m.created_at, e.updated_at,
                 to_char(e.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') || '~' || e.message_id::text AS cursor
            FROM ${t.exceptionQueue} e JOIN ${t.messageLog} m ON m.id = e.message_id
           WHERE e.consumer_group_id = $1 AND e.status = $2 ${seek}
             AND ($4::text IS NULL OR strpos(lower(COALESCE(e.last_error, '')), lower($4::text)) > 0)
             AND ($5::text IS NULL OR e.message_key = $5::text)
             AND ($6::timestamptz IS NULL OR e.updated_at >= $6::timestamptz)
             AND ($7::timestamptz IS NULL OR e.updated_at < $7::timestamptz)
             AND ($8::jsonb IS NULL OR m.payload @> $8::jsonb)
           ORDER BY e.updated_at ${desc ? "DESC" : "ASC"}, e.message_id ${desc ? "DESC" : "ASC"}
           LIMIT $3 OFFSET $9`;
}

/**
 * How many rows the same filter matches ($1 group, $2 status, $3 … $7 as filteredRows' $4 … $8),
 * counting no further than $8: the answer is min(matching, $8).
 */
export function countRows(t: Tables): string {
  return `SELECT count(*)::int AS n FROM (
            SELECT 1
              FROM ${t.exceptionQueue} e JOIN ${t.messageLog} m ON m.id = e.message_id
             WHERE e.consumer_group_id = $1 AND e.status = $2
               AND ($3::text IS NULL OR strpos(lower(COALESCE(e.last_error, '')), lower($3::text)) > 0)
               AND ($4::text IS NULL OR e.message_key = $4::text)
               AND ($5::timestamptz IS NULL OR e.updated_at >= $5::timestamptz)
               AND ($6::timestamptz IS NULL OR e.updated_at < $6::timestamptz)
               AND ($7::jsonb IS NULL OR m.payload @> $7::jsonb)
             LIMIT $8) x`;
}

/**
 * Dead rows of group $1, locked, selected by ids ($2) or by the filter: $2 error text, $3 since,
 * $4 before, $5 limit, $6 key, $7 payload containment, $8 only ids above (resumable batches).
 */
export function selectDead(t: Tables, byIds: boolean): string {
  const where = byIds
    ? "e.message_id = ANY($2::bigint[])"
    : `($2::text IS NULL OR strpos(lower(COALESCE(e.last_error, '')), lower($2::text)) > 0)
       AND ($3::timestamptz IS NULL OR e.updated_at >= $3::timestamptz)
       AND ($4::timestamptz IS NULL OR e.updated_at < $4::timestamptz)
       AND ($6::text IS NULL OR e.message_key = $6::text)
       AND ($7::jsonb IS NULL OR m.payload @> $7::jsonb)
       AND e.message_id > $8::bigint`;
  return `SELECT e.message_id::text AS message_id, e.attempts, e.message_key, m.id IS NOT NULL AS exists,
                 m.options, m.compaction_rank IS NOT NULL AS compacted
            FROM ${t.exceptionQueue} e LEFT JOIN ${t.messageLog} m ON m.id = e.message_id
           WHERE e.consumer_group_id = $1 AND e.status = 'dead' AND ${where}
           ORDER BY e.message_id
           ${byIds ? "" : "LIMIT $5"}
           FOR UPDATE OF e`;
}

/** Deletes the dead rows $2 (bigint[]) of group $1 and writes their 'discarded' audit rows ($3 reason). */
export function discardRows(t: Tables): string {
  return `WITH gone AS (
            DELETE FROM ${t.exceptionQueue} e WHERE e.consumer_group_id = $1 AND e.message_id = ANY($2::bigint[]) AND e.status = 'dead'
            RETURNING e.message_id, e.attempts)
          INSERT INTO ${t.deliveryLog} (consumer_group_id, message_id, attempt, status, error)
          SELECT $1, message_id, attempts, 'discarded', 'discarded: ' || $3::text FROM gone
          RETURNING message_id::text`;
}

/**
 * The blocked keys of the group `group` (an SQL expression) (docs/guide/operations.md#blocked-keys): per key, its lowest
 * unresolved ordered exception row (ready — due or in backoff —, deferred or inflight) that has
 * something waiting behind it: unresolved exception rows of the key above it, plus messages of the
 * key the group has not claimed yet (above the cursor's claimed). Dead and superseded rows are
 * resolved and block nothing (a dead predecessor releases the ones behind it). Oldest block first.
 */
export function blockedRows(t: Tables, group: string): string {
  return `SELECT b.* FROM (
    SELECT e.message_key AS key, e.message_id, e.status, e.updated_at AS since, e.can_run_after, e.attempts,
           (SELECT count(*) FROM ${t.exceptionQueue} w
             WHERE w.consumer_group_id = e.consumer_group_id AND w.message_key = e.message_key AND w.message_id > e.message_id
               AND ${t.fn("unresolved")}(w.status))
         + (SELECT count(*) FROM ${t.messageLog} m WHERE m.message_key = e.message_key AND m.id > c.claimed) AS waiting
      FROM ${t.exceptionQueue} e
      JOIN ${t.groupCursor} c ON c.consumer_group_id = e.consumer_group_id
     WHERE e.consumer_group_id = ${group} AND e.message_key IS NOT NULL AND e.concurrency = 'ordered'
       AND ${t.fn("unresolved")}(e.status)
       AND NOT EXISTS (SELECT 1 FROM ${t.exceptionQueue} p
                        WHERE p.consumer_group_id = e.consumer_group_id AND p.message_key = e.message_key
                          AND p.message_id < e.message_id AND ${t.fn("unresolved")}(p.status))
  ) b WHERE b.waiting > 0`;
}

/** Up to $2 blocked keys of group $1, oldest block first. */
export function blockedKeys(t: Tables): string {
  return `${blockedRows(t, "$1")}
   ORDER BY b.since, b.message_id LIMIT $2`;
}

