// Read-only diagnostics for the command line (`sqlstreams doctor`, the CLI's group listing), so
// the CLI asks questions instead of writing SQL against the control plane. Each takes a pool or
// connection and the (unquoted) schema; the statements are in sql/diagnose.ts.
import pg from "pg";
import * as Diagnose from "../sql/diagnose.js";
import { staleFunctions as staleFunctionsIn } from "../sql/migrate.js";
import { schemaNames, tables } from "../sql/names.js";
import type { PlainQueryable as Queryable } from "../sql/statement.js";
import { validateSchemaName } from "../validate.js";

export interface StreamFamily {
  id: string;
  name: string;
  partitionSize: string;
  /** The family's applied migration version. */
  version: number;
}

export interface FenceHolder {
  pid: number;
  xactAgeMs: number | null;
  applicationName: string | null;
  /** The first word of its statement, never the text (literals can carry secrets). */
  statement: string | null;
}

export interface GroupLeaseHealth {
  group: string;
  expiredRanges: number;
  oldestRangeMs: number | null;
  expiredRows: number;
  quarantined: number;
  quarantinedIds: string[];
  killed: number;
}

export interface PartitionState {
  nextId: bigint;
  /** The partition index of the next id (k); k and k + 1 should exist. */
  current: bigint;
  missing: string[];
}

function quoted(schema: string): string {
  return pg.escapeIdentifier(validateSchemaName(schema));
}

/** Whether the schema holds a SQLStreams control plane. */
export async function controlPlanePresent(db: Queryable, schema: string): Promise<boolean> {
  const q = quoted(schema);
  const r = await Diagnose.controlPlanePresent.queryPlain(db, schemaNames(q), { migrationLog: `${q}.migration_log` });
  return r.rows[0].ok;
}

/** The control plane's applied version and every stream family's. */
export async function migrationState(db: Queryable, schema: string): Promise<{ system: number; streams: StreamFamily[] }> {
  const q = quoted(schema);
  const sys = await Diagnose.systemVersion.queryPlain(db, schemaNames(q), {});
  const r = await Diagnose.streamFamilies.queryPlain(db, schemaNames(q), {});
  return { system: sys.rows[0].v, streams: r.rows.map((s) => ({ id: s.id, name: s.name, partitionSize: s.partition_size, version: s.version })) };
}

/** Transactions holding the stream's fence now; one row per backend (the oldest lock's age). */
export async function fenceHolders(db: Queryable, schema: string, streamId: string): Promise<FenceHolder[]> {
  const r = await Diagnose.fenceHolders.queryPlain(db, tables(quoted(schema), streamId), {});
  // One row per lock (the log and each partition the transaction wrote).
  const byPid = new Map(r.rows.map((h) => [h.pid, { pid: h.pid, xactAgeMs: h.xact_age_ms, applicationName: h.application_name, statement: h.statement }]));
  return [...byPid.values()];
}

/** Expired leases and, within `recentMs`, quarantines and kills, per group of the stream. */
export async function leaseHealth(db: Queryable, schema: string, streamId: string, recentMs: number): Promise<GroupLeaseHealth[]> {
  const r = await Diagnose.leaseHealth.queryPlain(db, tables(quoted(schema), streamId), { streamId, recentMs });
  return r.rows.map((g) => ({
    group: g.group, expiredRanges: g.expired_ranges, oldestRangeMs: g.oldest_range_ms, expiredRows: g.expired_rows,
    quarantined: g.quarantined, quarantinedIds: g.quarantined_ids ?? [], killed: g.killed,
  }));
}

/** The next id of the stream and which of its partitions k (the next id's) and k + 1 are missing. */
export async function partitionState(db: Queryable, schema: string, streamId: string, partitionSize: string): Promise<PartitionState> {
  const q = quoted(schema);
  const t = tables(q, streamId);
  const seq = await Diagnose.idSequence.queryPlain(db, t, {});
  const nextId = seq.rows[0].is_called ? BigInt(seq.rows[0].last_value) + 1n : BigInt(seq.rows[0].last_value);
  const current = nextId / BigInt(partitionSize);
  const parts = await Diagnose.partitionsExist.queryPlain(db, t, { log: t.messageLog, k: current.toString() });
  return { nextId, current, missing: parts.rows.filter((p) => !p.ok).map((p) => p.k) };
}

/** Registered (stream, group) pairs by name, optionally of one stream and/or one group name. */
export async function registeredGroups(db: Queryable, schema: string, filter: { stream?: string; group?: string } = {}): Promise<{ stream: string; group: string }[]> {
  const r = await Diagnose.registeredGroups.queryPlain(db, schemaNames(quoted(schema)), { stream: filter.stream ?? null, group: filter.group ?? null });
  return r.rows;
}

/** The server's connection limits and the client backends in use now. */
export async function connectionUse(db: Queryable): Promise<{ max: number; reserved: number; used: number }> {
  const r = await Diagnose.connections.queryPlain(db, schemaNames(""), {});
  return r.rows[0];
}

/** The functions whose definition in the database differs from this library's (`sqlstreams migrate` re-creates them). */
export async function staleFunctions(db: pg.Pool, schema: string): Promise<{ streamId: string | null; name: string }[]> {
  return staleFunctionsIn(db, quoted(schema));
}
