// Statements of the command-line diagnostics (`sqlstreams doctor`, the CLI's group listing):
// read-only questions about the control plane, a stream's family and the server
// (docs/guide/operations.md#doctor). `q` is the quoted schema; family tables come from names.ts.
import { table } from "./names.js";

/** Whether the control plane exists: $1 is "<quoted schema>.migration_log". */
export const CONTROL_PLANE_PRESENT = "SELECT to_regclass($1) IS NOT NULL AS ok";

/** The control plane's applied version. */
export function systemVersion(q: string): string {
  return `SELECT COALESCE(max(version), 0)::int AS v FROM ${q}.migration_log WHERE scope = 'system' AND status = 'success'`;
}

/** Every stream with its partition size and its family's applied version, by id. */
export function streamFamilies(q: string): string {
  return `SELECT s.id::text, s.name, s.partition_size::text,
                 COALESCE((SELECT max(m.version) FROM ${q}.migration_log m
                            WHERE m.scope = 'stream' AND m.stream_id = s.id AND m.status = 'success'), 0)::int AS version
            FROM ${q}.stream_config s ORDER BY s.id`;
}

/** Open transactions holding the stream's fence (its own SQL function). */
export function fenceHolders(q: string, streamId: string): string {
  return `SELECT pid, xact_age_ms, application_name, statement FROM ${table(q, streamId, "fence_holders")}()`;
}

/**
 * Per group of stream $1: expired range leases (count, oldest), expired row leases, and in the
 * last $2 ms the quarantined rows (count, the first ten ids) and kill-backstop deaths.
 */
export function leaseHealth(q: string, streamId: string): string {
  const claimLease = table(q, streamId, "claim_lease");
  const exceptionQueue = table(q, streamId, "exception_queue");
  const deliveryLog = table(q, streamId, "delivery_log");
  const recent = "$2 * interval '1 millisecond'";
  return `SELECT g.name AS "group",
                 (SELECT count(*)::int FROM ${claimLease} l WHERE l.consumer_group_id = g.id AND l.expires_at < now() AND NOT l.released) AS expired_ranges,
                 (SELECT (EXTRACT(EPOCH FROM now() - min(l.expires_at)) * 1000)::float8 FROM ${claimLease} l
                   WHERE l.consumer_group_id = g.id AND l.expires_at < now() AND NOT l.released) AS oldest_range_ms,
                 (SELECT count(*)::int FROM ${exceptionQueue} e WHERE e.consumer_group_id = g.id AND e.status = 'inflight' AND e.lease_expires_at < now()) AS expired_rows,
                 (SELECT count(*)::int FROM ${exceptionQueue} e WHERE e.consumer_group_id = g.id AND e.last_error LIKE 'quarantined:%'
                     AND e.created_at > now() - ${recent}) AS quarantined,
                 (SELECT array_agg(x.message_id::text) FROM (SELECT e.message_id FROM ${exceptionQueue} e WHERE e.consumer_group_id = g.id
                     AND e.last_error LIKE 'quarantined:%' AND e.created_at > now() - ${recent} ORDER BY e.message_id LIMIT 10) x) AS quarantined_ids,
                 (SELECT count(*)::int FROM ${deliveryLog} d WHERE d.consumer_group_id = g.id AND d.status = 'killed'
                     AND d.attempted_at > now() - ${recent}) AS killed
            FROM ${q}.consumer_group_config g WHERE g.stream_id = $1 ORDER BY g.name`;
}

/** The message id sequence of the stream: the next id is last_value (+1 once called). */
export function idSequence(q: string, streamId: string): string {
  return `SELECT last_value::text, is_called FROM ${table(q, streamId, "message_log")}_id_seq`;
}

/** Whether partitions $2 and $2 + 1 exist; $1 is the log's name (partitions are "<log>_<k>"). */
export const PARTITIONS_EXIST =
  "SELECT k::text, to_regclass($1 || '_' || k::text) IS NOT NULL AS ok FROM unnest(ARRAY[$2::bigint, $2::bigint + 1]) AS k";

/** Registered (stream, group) pairs, optionally only stream $1 and/or group $2, by name. */
export function registeredGroups(q: string): string {
  return `SELECT s.name AS stream, g.name AS "group"
            FROM ${q}.stream_config s JOIN ${q}.consumer_group_config g ON g.stream_id = s.id
           WHERE ($1::text IS NULL OR s.name = $1) AND ($2::text IS NULL OR g.name = $2)
           ORDER BY s.name, g.name`;
}

/** max_connections, the superuser reserve, and client backends in use now. */
export const CONNECTIONS = `SELECT current_setting('max_connections')::int AS max, current_setting('superuser_reserved_connections')::int AS reserved,
         (SELECT count(*)::int FROM pg_catalog.pg_stat_activity WHERE backend_type = 'client backend') AS used`;
