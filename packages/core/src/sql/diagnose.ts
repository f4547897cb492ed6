// Statements of the command-line diagnostics (`sqlstreams doctor`, the CLI's group listing):
// read-only questions about the control plane, a stream's family and the server
// (docs/guide/operations.md#doctor). They run on a bare pg client (queryPlain), before or without a
// SqlStreams client.
import type { SchemaNames } from "./names.js";
import { defineStatement } from "./statement.js";

/** Whether the control plane exists: `migrationLog` is "<quoted schema>.migration_log". */
export const controlPlanePresent = defineStatement<{ migrationLog: string }, { ok: boolean }, SchemaNames>(["migrationLog"], (_t, p) =>
  `SELECT to_regclass(${p.migrationLog}) IS NOT NULL AS ok`);

/** The control plane's applied version. */
export const systemVersion = defineStatement<Record<string, never>, { v: number }, SchemaNames>([], (t) =>
  `SELECT COALESCE(max(version), 0)::int AS v FROM ${t.schema}.migration_log WHERE scope = 'system' AND status = 'success'`);

/** Every stream with its partition size and its family's applied version, by id. */
export const streamFamilies = defineStatement<Record<string, never>, { id: string; name: string; partition_size: string; version: number }, SchemaNames>(
  [], (t) =>
    `SELECT s.id::text, s.name, s.partition_size::text,
                 COALESCE((SELECT max(m.version) FROM ${t.schema}.migration_log m
                            WHERE m.scope = 'stream' AND m.stream_id = s.id AND m.status = 'success'), 0)::int AS version
            FROM ${t.schema}.stream_config s ORDER BY s.id`);

/** Open transactions holding the stream's fence (its own SQL function). */
export const fenceHolders = defineStatement<
  Record<string, never>,
  { pid: number; xact_age_ms: number | null; application_name: string | null; statement: string | null }
>([], (t) => `SELECT pid, xact_age_ms, application_name, statement FROM ${t.fn("fence_holders")}()`);

export interface LeaseHealthRow {
  group: string;
  expired_ranges: number;
  oldest_range_ms: number | null;
  expired_rows: number;
  quarantined: number;
  killed: number;
  quarantined_ids: string[] | null;
}

/**
 * Per group of the stream: expired range leases (count, oldest), expired row leases, and in the
 * last `recentMs` the quarantined rows (count, the first ten ids) and kill-backstop deaths.
 */
export const leaseHealth = defineStatement<{ streamId: string; recentMs: number }, LeaseHealthRow>(["streamId", "recentMs"], (t, p) => {
  const recent = `${p.recentMs} * interval '1 millisecond'`;
  return `SELECT g.name AS "group",
                 (SELECT count(*)::int FROM ${t.claimLease} l WHERE l.consumer_group_id = g.id AND ${t.fn("lease_expired")}(l.expires_at) AND NOT l.released) AS expired_ranges,
                 (SELECT (EXTRACT(EPOCH FROM now() - min(l.expires_at)) * 1000)::float8 FROM ${t.claimLease} l
                   WHERE l.consumer_group_id = g.id AND ${t.fn("lease_expired")}(l.expires_at) AND NOT l.released) AS oldest_range_ms,
                 (SELECT count(*)::int FROM ${t.exceptionQueue} e WHERE e.consumer_group_id = g.id AND ${t.fn("run_expired")}(e.status, e.lease_expires_at)) AS expired_rows,
                 (SELECT count(*)::int FROM ${t.exceptionQueue} e WHERE e.consumer_group_id = g.id AND e.last_error LIKE 'quarantined:%'
                     AND e.created_at > now() - ${recent}) AS quarantined,
                 (SELECT array_agg(x.message_id::text) FROM (SELECT e.message_id FROM ${t.exceptionQueue} e WHERE e.consumer_group_id = g.id
                     AND e.last_error LIKE 'quarantined:%' AND e.created_at > now() - ${recent} ORDER BY e.message_id LIMIT 10) x) AS quarantined_ids,
                 (SELECT count(*)::int FROM ${t.deliveryLog} d WHERE d.consumer_group_id = g.id AND d.status = 'killed'
                     AND d.attempted_at > now() - ${recent}) AS killed
            FROM ${t.schema}.consumer_group_config g WHERE g.stream_id = ${p.streamId} ORDER BY g.name`;
});

/** The message id sequence of the stream: the next id is last_value (+1 once called). */
export const idSequence = defineStatement<Record<string, never>, { last_value: string; is_called: boolean }>([], (t) =>
  `SELECT last_value::text, is_called FROM ${t.messageLog}_id_seq`);

/** Whether partitions k and k + 1 exist; `log` is the log's quoted name (partitions are "<log>_<k>"). */
export const partitionsExist = defineStatement<{ log: string; k: string }, { k: string; ok: boolean }, SchemaNames>(["log", "k"], (_t, p) =>
  `SELECT k::text, to_regclass(${p.log} || '_' || k::text) IS NOT NULL AS ok FROM unnest(ARRAY[${p.k}::bigint, ${p.k}::bigint + 1]) AS k`);

/** Registered (stream, group) pairs, optionally only of one stream and/or one group name, by name. */
export const registeredGroups = defineStatement<{ stream: string | null; group: string | null }, { stream: string; group: string }, SchemaNames>(
  ["stream", "group"], (t, p) =>
    `SELECT s.name AS stream, g.name AS "group"
            FROM ${t.schema}.stream_config s JOIN ${t.schema}.consumer_group_config g ON g.stream_id = s.id
           WHERE (${p.stream}::text IS NULL OR s.name = ${p.stream}) AND (${p.group}::text IS NULL OR g.name = ${p.group})
           ORDER BY s.name, g.name`);

/** max_connections, the superuser reserve, and client backends in use now. */
export const connections = defineStatement<Record<string, never>, { max: number; reserved: number; used: number }, SchemaNames>([], () =>
  `SELECT current_setting('max_connections')::int AS max, current_setting('superuser_reserved_connections')::int AS reserved,
         (SELECT count(*)::int FROM pg_catalog.pg_stat_activity WHERE backend_type = 'client backend') AS used`);
