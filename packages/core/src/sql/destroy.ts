// Statements of destroyGroup() and destroyStream() (docs/guide/operations.md#destroy).
import { FAMILY_TABLES, type SchemaNames, type Tables, table } from "./names.js";
import { defineStatement } from "./statement.js";


/** A stream's id by name. FOR SHARE keeps a concurrent stream destroy out; FOR UPDATE is that destroy. */
export const streamIdByName = {
  share: defineStatement<{ stream: string }, { id: string }, SchemaNames>(["stream"], (t, p) =>
    `SELECT id::text FROM ${t.schema}.stream_config WHERE name = ${p.stream} FOR SHARE`),
  update: defineStatement<{ stream: string }, { id: string }, SchemaNames>(["stream"], (t, p) =>
    `SELECT id::text FROM ${t.schema}.stream_config WHERE name = ${p.stream} FOR UPDATE`),
};

export const lockGroup = defineStatement<{ streamId: string; group: string }, { id: string }, SchemaNames>(["streamId", "group"], (t, p) =>
  `SELECT id::text FROM ${t.schema}.consumer_group_config WHERE stream_id = ${p.streamId} AND name = ${p.group} FOR UPDATE`);

/** The names of a stream's groups. */
export const groupNames = defineStatement<{ streamId: string }, { name: string }, SchemaNames>(["streamId"], (t, p) =>
  `SELECT name FROM ${t.schema}.consumer_group_config WHERE stream_id = ${p.streamId} ORDER BY id`);

export interface LiveWorkRow {
  range_leases: number;
  key_leases: number;
  ready: number;
  deferred: number;
  inflight: number;
}

function liveWork(t: Tables, groups: string): string {
  const count = (status: string) => `(SELECT count(*) FROM ${t.exceptionQueue} e WHERE e.consumer_group_id ${groups} AND e.status = '${status}')::int AS ${status}`;
  return `SELECT
      (SELECT count(*) FROM ${t.claimLease} l WHERE l.consumer_group_id ${groups})::int AS range_leases,
      (SELECT count(*) FROM ${t.keyLease} k WHERE k.consumer_group_id ${groups} AND NOT ${t.fn("lease_expired")}(k.expires_at))::int AS key_leases,
      ${count("ready")},
      ${count("deferred")},
      ${count("inflight")}`;
}

/** The live work of one group (`id` its group id), or of every group of the stream (`id` the stream id). */
export const liveWorkOf = {
  group: defineStatement<{ id: string }, LiveWorkRow>(["id"], (t, p) => liveWork(t, `= ${p.id}`)),
  stream: defineStatement<{ id: string }, LiveWorkRow>(["id"], (t, p) =>
    liveWork(t, `IN (SELECT id FROM ${t.schema}.consumer_group_config WHERE stream_id = ${p.id})`)),
};

/**
 * Locks in the order the poll takes them: range leases (recording locks its lease, then the
 * cursor), then the cursor (a fresh claim locks it first, then waits for the destroy and finds no
 * group).
 */
export const lockGroupWork = [
  defineStatement<{ groupId: string }>(["groupId"], (t, p) => `SELECT 1 FROM ${t.claimLease} WHERE consumer_group_id = ${p.groupId} ORDER BY token FOR UPDATE`),
  defineStatement<{ groupId: string }>(["groupId"], (t, p) => `SELECT 1 FROM ${t.groupCursor} WHERE consumer_group_id = ${p.groupId} FOR UPDATE`),
] as const;

/** The family tables that hold a group's rows, in the order a group destroy deletes them. */
export const GROUP_TABLES = ["exception_queue", "delivery_log", "claim_lease", "message_key_lease", "consumer_group_cursor", "progress_history"] as const;

/** Each of GROUP_TABLES as its field of Tables. */
const GROUP_TABLE_NAMES = {
  exception_queue: "exceptionQueue",
  delivery_log: "deliveryLog",
  claim_lease: "claimLease",
  message_key_lease: "keyLease",
  consumer_group_cursor: "groupCursor",
  progress_history: "progressHistory",
} as const satisfies Record<(typeof GROUP_TABLES)[number], keyof Tables>;

/** Deletes a group's rows from each of GROUP_TABLES, in that order. */
export const deleteGroupRows = GROUP_TABLES.map((name) => ({
  name,
  statement: defineStatement<{ groupId: string }>(["groupId"], (t, p) =>
    `DELETE FROM ${t[GROUP_TABLE_NAMES[name]]} WHERE consumer_group_id = ${p.groupId}`),
}));

export const deleteGroup = defineStatement<{ groupId: string }, Record<string, unknown>, SchemaNames>(["groupId"], (t, p) =>
  `DELETE FROM ${t.schema}.consumer_group_config WHERE id = ${p.groupId}`);

export const lockLog = defineStatement<Record<string, never>>([], (t) => `LOCK TABLE ${t.messageLog} IN ACCESS EXCLUSIVE MODE`);

export const lockScheduled = defineStatement<Record<string, never>>([], (t) =>
  `LOCK TABLE ${t.fn("scheduled_message")} IN ACCESS EXCLUSIVE MODE`);

export const scheduledHasMessages = defineStatement<Record<string, never>, { any: boolean }>([], (t) =>
  `SELECT EXISTS (SELECT 1 FROM ${t.fn("scheduled_message")}) AS any`);

export const logHasMessages = defineStatement<Record<string, never>, { any: boolean }>([], (t) =>
  `SELECT EXISTS (SELECT 1 FROM ${t.messageLog}) AS any`);

export function dropFamily(q: string, streamId: string): string {
  return `DROP TABLE IF EXISTS ${FAMILY_TABLES.map((name) => table(q, streamId, name)).join(", ")}`;
}

/** The family's protocol functions, named <step>_<N>: every overload, by signature, in schema `schema` (unquoted). */
export const familyFunctions = defineStatement<{ schema: string; pattern: string }, { sig: string }, SchemaNames>(["schema", "pattern"], (_t, p) =>
  `SELECT p.oid::regprocedure::text AS sig FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
  WHERE n.nspname = ${p.schema} AND p.proname ~ ${p.pattern}`);

/** `sig` as the catalog wrote it (familyFunctions), never a user string. */
export function dropFunction(sig: string): string {
  return `DROP FUNCTION IF EXISTS ${sig}`;
}

/** The pattern of familyFunctions for one stream. */
export function familyFunctionPattern(streamId: string): string {
  return `^[a-z][a-z_]*_${streamId}$`;
}

/** Deletes a stream's config row; consumer_group_config and migration_log rows go by ON DELETE CASCADE. */
export const deleteStream = defineStatement<{ streamId: string }, Record<string, unknown>, SchemaNames>(["streamId"], (t, p) =>
  `DELETE FROM ${t.schema}.stream_config WHERE id = ${p.streamId}`);
