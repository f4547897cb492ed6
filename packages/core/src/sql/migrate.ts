// Applies migrations/ (embedded by scripts/gen-migrations.mjs) to the control plane and to each
// stream's table family. Text substitution is limited to the quoted schema and numeric values.
import type pg from "pg";
import { type Db, query } from "../db.js";
import { SqlStreamsError } from "../errors.js";
import { streamMigrations, systemMigrations } from "../generated/migrations.js";
import { LIBRARY_VERSION, STREAM_VERSION, SYSTEM_VERSION } from "../version.js";
import { streamIdText } from "./names.js";

export function renderSystem(sql: string, q: string): string {
  return sql.replaceAll("__SCHEMA__", q);
}

export function renderStream(sql: string, q: string, streamId: string, partitionSize: string): string {
  if (!/^[0-9]{1,19}$/.test(partitionSize)) throw new Error(`invalid partition size ${partitionSize}`);
  return sql
    .replaceAll("{{schema}}", q)
    .replaceAll("{{N}}", streamIdText(streamId))
    .replaceAll("{{partition_size}}", partitionSize);
}

export function asPermissionError(e: unknown): unknown {
  if ((e as { code?: string })?.code === "42501") {
    return new SqlStreamsError("SQL0005", `the database role lacks a privilege: ${(e as Error).message}`, {}, e);
  }
  return e;
}

/** Takes the schema-wide migration lock for the rest of the transaction. */
export async function lockMigrations(db: Db, c: pg.PoolClient): Promise<void> {
  await query(db, c, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", [`sqlstreams.migrate:${db.schema}`]);
}

export async function systemVersion(db: Db, c: pg.Pool | pg.PoolClient): Promise<number> {
  const present = await query<{ ok: boolean }>(db, c, "SELECT to_regclass($1) IS NOT NULL AS ok", [`${db.q}.migration_log`]);
  if (!present.rows[0].ok) return 0;
  const r = await query<{ v: number }>(
    db,
    c,
    `SELECT COALESCE(max(version), 0)::int AS v FROM ${db.q}.migration_log WHERE scope = 'system' AND status = 'success'`,
  );
  return r.rows[0].v;
}

/** Brings the control plane and every registered stream family up to this library's version. */
export async function migrateAll(db: Db, c: pg.PoolClient): Promise<void> {
  await lockMigrations(db, c);
  const current = await systemVersion(db, c);
  if (current > SYSTEM_VERSION) {
    throw new SqlStreamsError("SQL0004", `schema ${db.schema} is at version ${current}; this library understands ${SYSTEM_VERSION}`);
  }
  for (const m of systemMigrations) {
    if (m.version <= current) continue;
    await query(db, c, renderSystem(m.sql, db.q));
    await query(
      db,
      c,
      `INSERT INTO ${db.q}.migration_log (scope, version, status, library_version) VALUES ('system', $1, 'success', $2)`,
      [m.version, LIBRARY_VERSION],
    );
  }
  const streams = await query<{ id: string; partition_size: string }>(
    db,
    c,
    `SELECT id::text, partition_size::text FROM ${db.q}.stream_config ORDER BY id`,
  );
  for (const s of streams.rows) await migrateStream(db, c, s.id, s.partition_size);
}

/** Creates or upgrades one stream's family; the caller holds the migration lock or a stream lock. */
export async function migrateStream(db: Db, c: pg.PoolClient, streamId: string, partitionSize: string): Promise<void> {
  const r = await query<{ v: number }>(
    db,
    c,
    `SELECT COALESCE(max(version), 0)::int AS v FROM ${db.q}.migration_log
      WHERE scope = 'stream' AND stream_id = $1 AND status = 'success'`,
    [streamId],
  );
  const current = r.rows[0].v;
  if (current > STREAM_VERSION) {
    throw new SqlStreamsError("SQL0004", `stream family ${streamId} is at version ${current}; this library understands ${STREAM_VERSION}`);
  }
  for (const m of streamMigrations) {
    if (m.version <= current) continue;
    await query(db, c, renderStream(m.sql, db.q, streamId, partitionSize));
    await query(
      db,
      c,
      `INSERT INTO ${db.q}.migration_log (scope, stream_id, version, status, library_version) VALUES ('stream', $1, $2, 'success', $3)`,
      [streamId, m.version, LIBRARY_VERSION],
    );
  }
}
