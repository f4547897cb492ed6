// Statements of destroyGroup() and destroyStream() (docs/guide/operations.md#destroy).
import { FAMILY_TABLES, table } from "./names.js";

/** Bounds every lock wait of the destroy transaction. */
export function lockTimeout(ms: number): string {
  return `SET LOCAL lock_timeout = '${Math.trunc(ms)}ms'`;
}

/** $1 the stream's retention lock key: waits for a partition drop or sweep batch of a running maintain(). */
export const waitForRetention = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))";

/** $1 stream name. FOR SHARE keeps a concurrent stream destroy out; FOR UPDATE is that destroy. */
export function streamIdByName(q: string, lock: "FOR SHARE" | "FOR UPDATE"): string {
  return `SELECT id::text FROM ${q}.stream_config WHERE name = $1 ${lock}`;
}

/** $1 stream id, $2 group name. */
export function lockGroup(q: string): string {
  return `SELECT id::text FROM ${q}.consumer_group_config WHERE stream_id = $1 AND name = $2 FOR UPDATE`;
}

/** $1 stream id. The names of its groups. */
export function groupNames(q: string): string {
  return `SELECT name FROM ${q}.consumer_group_config WHERE stream_id = $1 ORDER BY id`;
}

/** The live work of one group ($1 group id), or of every group of the stream ($1 stream id). */
export function liveWork(q: string, streamId: string, of: "group" | "stream"): string {
  const groups = of === "group" ? "= $1" : `IN (SELECT id FROM ${q}.consumer_group_config WHERE stream_id = $1)`;
  const exceptionQueue = table(q, streamId, "exception_queue");
  const count = (status: string) => `(SELECT count(*) FROM ${exceptionQueue} e WHERE e.consumer_group_id ${groups} AND e.status = '${status}')::int AS ${status}`;
  return `SELECT
      (SELECT count(*) FROM ${table(q, streamId, "claim_lease")} l WHERE l.consumer_group_id ${groups})::int AS range_leases,
      (SELECT count(*) FROM ${table(q, streamId, "message_key_lease")} k WHERE k.consumer_group_id ${groups} AND k.expires_at > now())::int AS key_leases,
      ${count("ready")},
      ${count("deferred")},
      ${count("inflight")}`;
}

/**
 * $1 group id. Locks in the order the poll takes them: range leases (recording locks its lease,
 * then the cursor), then the cursor (a fresh claim locks it first, then waits for the destroy and
 * finds no group).
 */
export function lockGroupWork(q: string, streamId: string): string[] {
  return [
    `SELECT 1 FROM ${table(q, streamId, "claim_lease")} WHERE consumer_group_id = $1 ORDER BY token FOR UPDATE`,
    `SELECT 1 FROM ${table(q, streamId, "consumer_group_cursor")} WHERE consumer_group_id = $1 FOR UPDATE`,
  ];
}

/** The family tables that hold a group's rows, in the order a group destroy deletes them. */
export const GROUP_TABLES = ["exception_queue", "delivery_log", "claim_lease", "message_key_lease", "consumer_group_cursor", "progress_history"] as const;

/** $1 group id. */
export function deleteGroupRows(q: string, streamId: string, t: (typeof GROUP_TABLES)[number]): string {
  return `DELETE FROM ${table(q, streamId, t)} WHERE consumer_group_id = $1`;
}

/** $1 group id. */
export function deleteGroup(q: string): string {
  return `DELETE FROM ${q}.consumer_group_config WHERE id = $1`;
}

/** $1 the log's regclass text. */
export const relationExists = "SELECT to_regclass($1) IS NOT NULL AS ok";

export function lockLog(q: string, streamId: string): string {
  return `LOCK TABLE ${table(q, streamId, "message_log")} IN ACCESS EXCLUSIVE MODE`;
}

export function lockScheduled(q: string, streamId: string): string {
  return `LOCK TABLE ${table(q, streamId, "scheduled_message")} IN ACCESS EXCLUSIVE MODE`;
}

export function scheduledHasMessages(q: string, streamId: string): string {
  return `SELECT EXISTS (SELECT 1 FROM ${table(q, streamId, "scheduled_message")}) AS any`;
}

export function logHasMessages(q: string, streamId: string): string {
  return `SELECT EXISTS (SELECT 1 FROM ${table(q, streamId, "message_log")}) AS any`;
}

export function dropFamily(q: string, streamId: string): string {
  return `DROP TABLE IF EXISTS ${FAMILY_TABLES.map((t) => table(q, streamId, t)).join(", ")}`;
}

/** $1 schema name, $2 pattern. The family's protocol functions are named <step>_<N>: every overload. */
export const familyFunctions = `SELECT p.oid::regprocedure::text AS sig FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
  WHERE n.nspname = $1 AND p.proname ~ $2`;

/** `sig` as the catalog wrote it (familyFunctions), never a user string. */
export function dropFunction(sig: string): string {
  return `DROP FUNCTION IF EXISTS ${sig}`;
}

/** The pattern of familyFunctions for one stream. */
export function familyFunctionPattern(streamId: string): string {
  return `^[a-z][a-z_]*_${streamId}$`;
}

/** $1 stream id. consumer_group_config and migration_log rows go by ON DELETE CASCADE. */
export function deleteStream(q: string): string {
  return `DELETE FROM ${q}.stream_config WHERE id = $1`;
}
