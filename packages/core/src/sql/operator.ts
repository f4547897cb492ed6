// Statements of the operator tools: one message across groups, filtered exception rows, discard
// (docs/guide/operations.md#inspect, docs/guide/operations.md#failures, docs/guide/operations.md#discarding-dead-messages).
import type { MessageOptions } from "../config.js";
import type { Tables } from "./names.js";
import { defineStatement } from "./statement.js";

/** An exception row's status. */
export type ExceptionRowStatus = "ready" | "deferred" | "inflight" | "dead" | "superseded";

/** Messages by id, or by key, newest first, at most `limit`. */
export const messagesById = defineStatement<
  { id: string | null; key: string | null; limit: number },
  { id: string; message_key: string | null; compaction_rank: string | null; payload: unknown; options: Record<string, unknown> | null; created_at: Date }
>(["id", "key", "limit"], (t, p) =>
  `SELECT m.id::text AS id, m.message_key, m.compaction_rank::text AS compaction_rank, m.payload, m.options, m.created_at
            FROM ${t.messageLog} m WHERE (${p.id}::bigint IS NOT NULL AND m.id = ${p.id}::bigint)
                              OR (${p.key}::text IS NOT NULL AND m.message_key = ${p.key}::text)
           ORDER BY m.id DESC LIMIT ${p.limit}`);

export interface GroupStateRow {
  group_id: string;
  name: string;
  paused: boolean;
  claimed: string;
  committed: string;
  status: ExceptionRowStatus | null;
  attempts: number;
  delays: number;
  can_run_after: Date;
  last_error: string | null;
  lease_expires_at: Date | null;
  concurrency: string;
  row_created_at: Date;
  row_updated_at: Date;
}

/** Every group of the stream with its cursor, and the exception row of message `messageId` when there is one. */
export const groupStates = defineStatement<{ streamId: string; messageId: string }, GroupStateRow>(["streamId", "messageId"], (t, p) =>
  `SELECT g.id::text AS group_id, g.name, g.paused, c.claimed::text, c.committed::text,
                 e.status, e.attempts, e.delays, e.can_run_after, e.last_error, e.lease_expires_at, e.concurrency,
                 e.created_at AS row_created_at, e.updated_at AS row_updated_at
            FROM ${t.schema}.consumer_group_config g
            JOIN ${t.groupCursor} c ON c.consumer_group_id = g.id
            LEFT JOIN ${t.exceptionQueue} e ON e.consumer_group_id = g.id AND e.message_id = ${p.messageId}
           WHERE g.stream_id = ${p.streamId}
           ORDER BY g.name`);

/** The delivery_log rows of message `messageId`, oldest first. */
export const timeline = defineStatement<
  { messageId: string },
  { group_id: string; attempt: number; status: string; error: string; attempted_at: Date }
>(["messageId"], (t, p) =>
  `SELECT consumer_group_id::text AS group_id, attempt, status, error, attempted_at
            FROM ${t.deliveryLog} WHERE message_id = ${p.messageId} ORDER BY id`);

/** The filter of failures() and countFailures(): error text, key, updated since/before, payload containment (null: any). */
export interface FailureFilterParams {
  groupId: string;
  status: string;
  errorContains: string | null;
  key: string | null;
  since: Date | null;
  before: Date | null;
  payload: string | null;
}

function failureFilter(p: { [K in keyof FailureFilterParams]: string }): string {
  return `e.consumer_group_id = ${p.groupId} AND e.status = ${p.status}
             AND (${p.errorContains}::text IS NULL OR strpos(lower(COALESCE(e.last_error, '')), lower(${p.errorContains}::text)) > 0)
             AND (${p.key}::text IS NULL OR e.message_key = ${p.key}::text)
             AND (${p.since}::timestamptz IS NULL OR e.updated_at >= ${p.since}::timestamptz)
             AND (${p.before}::timestamptz IS NULL OR e.updated_at < ${p.before}::timestamptz)
             AND (${p.payload}::jsonb IS NULL OR m.payload::jsonb @> ${p.payload}::jsonb)`;
}

const FILTER_PARAMS = ["groupId", "status", "errorContains", "key", "since", "before", "payload"] as const;

export interface FailureRowRow {
  message_id: string;
  message_key: string | null;
  status: ExceptionRowStatus;
  payload: unknown;
  attempts: number;
  delays: number;
  last_error: string | null;
  can_run_after: Date;
  created_at: Date;
  updated_at: Date;
  /** updated_at in UTC to the microsecond, "~", the id. */
  cursor: string;
}

type PageParams = FailureFilterParams & { limit: number; offset: number };
type KeysetParams = PageParams & { cursorUpdatedAt: string; cursorId: string };

function failurePage(t: Tables, p: { [K in keyof KeysetParams]: string }, keyset: "after" | "before" | null): string {
  const desc = keyset !== "before";
  const seek = keyset === null ? "" : `AND (e.updated_at, e.message_id) ${desc ? "<" : ">"} (${p.cursorUpdatedAt}::timestamptz, ${p.cursorId}::bigint)`;
  return `SELECT e.message_id::text AS message_id, e.message_key, e.status, m.payload, e.attempts, e.delays, e.last_error,
                 e.can_run_after, m.created_at, e.updated_at,
                 to_char(e.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') || '~' || e.message_id::text AS cursor
            FROM ${t.exceptionQueue} e JOIN ${t.messageLog} m ON m.id = e.message_id
           WHERE ${failureFilter(p)} ${seek}
           ORDER BY e.updated_at ${desc ? "DESC" : "ASC"}, e.message_id ${desc ? "DESC" : "ASC"}
           LIMIT ${p.limit} OFFSET ${p.offset}`;
}

/**
 * A page of a group's rows of one status, newest update first, filtered: `page` from an offset;
 * with a keyset cursor (the row's updated_at and id) the rows after it (`after`) or, in reverse,
 * before it (`before`, returned oldest first: the caller reverses them), read from the
 * exception_queue_N_page index. Each row carries its cursor.
 */
export const failureRows = {
  page: defineStatement<PageParams, FailureRowRow>([...FILTER_PARAMS, "limit", "offset"], (t, p) =>
    failurePage(t, { ...p, cursorUpdatedAt: "", cursorId: "" }, null)),
  after: defineStatement<KeysetParams, FailureRowRow>([...FILTER_PARAMS, "limit", "offset", "cursorUpdatedAt", "cursorId"], (t, p) =>
    failurePage(t, p, "after")),
  before: defineStatement<KeysetParams, FailureRowRow>([...FILTER_PARAMS, "limit", "offset", "cursorUpdatedAt", "cursorId"], (t, p) =>
    failurePage(t, p, "before")),
};

/** How many rows the same filter matches, counting no further than `cap`: the answer is min(matching, cap). */
export const countRows = defineStatement<FailureFilterParams & { cap: number }, { n: number }>([...FILTER_PARAMS, "cap"], (t, p) =>
  `SELECT count(*)::int AS n FROM (
            SELECT 1
              FROM ${t.exceptionQueue} e JOIN ${t.messageLog} m ON m.id = e.message_id
             WHERE ${failureFilter(p)}
             LIMIT ${p.cap}) x`);

/** A dead row as discard() and redrive() select it. */
export interface DeadRow {
  message_id: string;
  attempts: number;
  message_key: string | null;
  exists: boolean;
  options: MessageOptions | null;
  compacted: boolean | null;
}

function selectDead(t: Tables, groupId: string, where: string, limit: string): string {
  return `SELECT e.message_id::text AS message_id, e.attempts, e.message_key, m.id IS NOT NULL AS exists,
                 m.options, m.compaction_rank IS NOT NULL AS compacted
            FROM ${t.exceptionQueue} e LEFT JOIN ${t.messageLog} m ON m.id = e.message_id
           WHERE e.consumer_group_id = ${groupId} AND e.status IN ('dead', 'expired') AND ${where}
           ORDER BY e.message_id
           ${limit}
           FOR UPDATE OF e`;
}

/** A group's dead or expired rows of the given ids, locked. */
export const selectDeadByIds = defineStatement<{ groupId: string; ids: string[] }, DeadRow>(["groupId", "ids"], (t, p) =>
  selectDead(t, p.groupId, `e.message_id = ANY(${p.ids}::bigint[])`, ""));

/** A group's dead (or expired: `status`) rows by the filter, locked: at most `limit`, only ids above `after` (resumable batches). */
export const selectDeadByFilter = defineStatement<
  { groupId: string; errorContains: string | null; since: Date | null; before: Date | null; limit: number; key: string | null; payload: string | null; after: string; status: string },
  DeadRow
>(["groupId", "errorContains", "since", "before", "limit", "key", "payload", "after", "status"], (t, p) =>
  selectDead(t, p.groupId, `(${p.errorContains}::text IS NULL OR strpos(lower(COALESCE(e.last_error, '')), lower(${p.errorContains}::text)) > 0)
       AND (${p.since}::timestamptz IS NULL OR e.updated_at >= ${p.since}::timestamptz)
       AND (${p.before}::timestamptz IS NULL OR e.updated_at < ${p.before}::timestamptz)
       AND (${p.key}::text IS NULL OR e.message_key = ${p.key}::text)
       AND (${p.payload}::jsonb IS NULL OR m.payload::jsonb @> ${p.payload}::jsonb)
       AND e.message_id > ${p.after}::bigint AND e.status = ${p.status}::text`, `LIMIT ${p.limit}`));

/** Deletes the group's dead or expired rows `ids` and writes their 'discarded' audit rows. */
export const discardRows = defineStatement<{ groupId: string; ids: string[]; reason: string }, { message_id: string }>(
  ["groupId", "ids", "reason"], (t, p) =>
    `WITH gone AS (
            DELETE FROM ${t.exceptionQueue} e WHERE e.consumer_group_id = ${p.groupId} AND e.message_id = ANY(${p.ids}::bigint[]) AND e.status IN ('dead', 'expired')
            RETURNING e.message_id, e.attempts)
          INSERT INTO ${t.deliveryLog} (consumer_group_id, message_id, attempt, status, error)
          SELECT ${p.groupId}, message_id, attempts, 'discarded', 'discarded: ' || ${p.reason}::text FROM gone
          RETURNING message_id::text`);

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

/** Up to `limit` blocked keys of the group, oldest block first. */
export const blockedKeys = defineStatement<
  { groupId: string; limit: number },
  { key: string; message_id: string; status: "ready" | "deferred" | "inflight"; since: Date; can_run_after: Date; attempts: number; waiting: string }
>(["groupId", "limit"], (t, p) =>
  `${blockedRows(t, p.groupId)}
   ORDER BY b.since, b.message_id LIMIT ${p.limit}`);
