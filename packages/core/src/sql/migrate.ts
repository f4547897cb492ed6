// Applies migrations/ (embedded by scripts/gen-migrations.mjs) to the control plane and to each
// stream's table family (docs/protocol/data-model.md#upgrades): the numbered table migrations not yet in
// migration_log, then every function whose file hash differs from function_version's, re-created
// after every overload of its name is dropped. Text substitution is limited to the quoted schema
// and numeric values.
import type pg from "pg";
import { type Db, query } from "../db.js";
import { SqlStreamsError } from "../errors.js";
import { type FunctionFile, streamFunctions, streamMigrations, systemFunctions, systemMigrations } from "../generated/migrations.js";
import { LIBRARY_VERSION, STREAM_VERSION, SYSTEM_VERSION } from "../version.js";
import { quoteIdent, streamIdText } from "./names.js";

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

/**
 * Takes the schema-wide migration lock for the rest of the transaction, and pins its search_path
 * to pg_catalog, pg_temp: the DDL that follows resolves every built-in its defaults and checks
 * name (now(), nextval(…)) in pg_catalog, whatever the caller's search_path holds.
 */
export async function lockMigrations(db: Db, c: pg.PoolClient): Promise<void> {
  await query(db, c, "SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true)");
  await query(db, c, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", [`sqlstreams.migrate:${db.schema}`]);
}

export async function systemVersion(db: Db, c: pg.Pool | pg.PoolClient): Promise<number> {
  const present = await query<{ ok: boolean }>(db, c, "SELECT pg_catalog.to_regclass($1) IS NOT NULL AS ok", [`${db.q}.migration_log`]);
  if (!present.rows[0].ok) return 0;
  const r = await query<{ v: number }>(
    db,
    c,
    `SELECT COALESCE(pg_catalog.max(version), 0)::int AS v FROM ${db.q}.migration_log WHERE scope = 'system' AND status = 'success'`,
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
  await applyFunctions(db, c, null, systemFunctions, (sql) => renderSystem(sql, db.q), (name) => name);
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
  const n = streamIdText(streamId);
  await applyFunctions(
    db,
    c,
    streamId,
    streamFunctions,
    (sql) => renderStream(sql, db.q, streamId, partitionSize),
    (name) => `${name}_${n}`,
  );
}

/**
 * Re-creates the functions (of the control plane, or of one stream family) whose file hash differs
 * from the one recorded in function_version, and drops those no file defines any more. Every
 * overload of a re-created name is dropped first, so a signature change leaves no stale overload.
 * The statements touch only this family's functions and rows (index lookups by name), so the
 * cost of a family's migration does not grow with the number of streams registered.
 */
async function applyFunctions(
  db: Db,
  c: pg.PoolClient,
  streamId: string | null,
  files: FunctionFile[],
  render: (sql: string) => string,
  procName: (name: string) => string,
): Promise<void> {
  const applied = await query<{ name: string; hash: string }>(
    db,
    c,
    `SELECT name, hash FROM ${db.q}.function_version WHERE COALESCE(stream_id, 0) = COALESCE($1::bigint, 0)`,
    [streamId],
  );
  const have = new Map(applied.rows.map((r) => [r.name, r.hash]));
  const stale = files.filter((f) => have.get(f.name) !== f.hash);
  const gone = [...have.keys()].filter((name) => !files.some((f) => f.name === name));
  if (stale.length === 0 && gone.length === 0) return;
  const overloads = await functionOverloads(db, c, [...stale.map((f) => f.name), ...gone].map(procName));
  for (const f of stale) {
    await dropOverloads(db, c, procName(f.name), overloads);
    await query(db, c, render(f.sql));
  }
  for (const name of gone) await dropOverloads(db, c, procName(name), overloads);
  await query(
    db,
    c,
    `DELETE FROM ${db.q}.function_version WHERE COALESCE(stream_id, 0) = COALESCE($1::bigint, 0) AND name = ANY($2::text[])`,
    [streamId, [...stale.map((f) => f.name), ...gone]],
  );
  if (stale.length === 0) return;
  await query(
    db,
    c,
    `INSERT INTO ${db.q}.function_version (stream_id, name, hash, library_version)
     SELECT $1, n.name, h.hash, $4
       FROM pg_catalog.unnest($2::text[]) WITH ORDINALITY AS n (name, i)
       JOIN pg_catalog.unnest($3::text[]) WITH ORDINALITY AS h (hash, i) USING (i)`,
    [streamId, stale.map((f) => f.name), stale.map((f) => f.hash), LIBRARY_VERSION],
  );
  const created = stale.map((f) => f.name);
  await restoreFunctionPrivileges(db, c, created.map(procName), streamId === null && created.some((n) => n.startsWith("produce")));
}

/**
 * A function created anew carries Postgres's default EXECUTE for PUBLIC, and none of the grants
 * its predecessor had (docs/guide/security.md): PUBLIC loses EXECUTE on every function just
 * created (the worker and reader roles get theirs back from the owner's default privileges), and
 * when produce()/produce_batch() were re-created, each role granted a stream regains EXECUTE.
 */
async function restoreFunctionPrivileges(db: Db, c: pg.PoolClient, procNames: string[], produce: boolean): Promise<void> {
  const created = await functionOverloads(db, c, procNames);
  const signatures = [...created].flatMap(([name, args]) => args.map((a) => `${db.q}.${quoteIdent(name)}(${a})`));
  if (signatures.length > 0) await query(db, c, `REVOKE EXECUTE ON FUNCTION ${signatures.join(", ")} FROM PUBLIC`);
  if (!produce) return;
  const roles = await query<{ rolname: string }>(
    db,
    c,
    `SELECT DISTINCT r.rolname FROM ${db.q}.produce_grant g JOIN pg_catalog.pg_roles r ON r.oid = g.role_oid ORDER BY 1`,
  );
  for (const r of roles.rows) {
    await query(
      db,
      c,
      `GRANT EXECUTE ON FUNCTION ${db.q}.produce(TEXT, JSONB, TEXT, TEXT, JSONB), ${db.q}.produce_batch(TEXT, JSONB) TO ${quoteIdent(r.rolname)}`,
    );
  }
}

/** The schema's functions of these names, each name with the identity arguments of its overloads. */
async function functionOverloads(db: Db, c: pg.PoolClient, names: string[]): Promise<Map<string, string[]>> {
  const r = await query<{ name: string; args: string }>(
    db,
    c,
    `SELECT p.proname AS name, pg_catalog.pg_get_function_identity_arguments(p.oid) AS args
       FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
      WHERE n.nspname = $1 AND p.proname = ANY($2::text[])
      ORDER BY p.oid`,
    [db.schema, names],
  );
  const out = new Map<string, string[]>();
  for (const f of r.rows) out.set(f.name, [...(out.get(f.name) ?? []), f.args]);
  return out;
}

/** Drops every function of the schema named `name` found in `overloads` (never CASCADE). */
async function dropOverloads(db: Db, c: pg.PoolClient, name: string, overloads: Map<string, string[]>): Promise<void> {
  for (const args of overloads.get(name) ?? []) await query(db, c, `DROP FUNCTION ${db.q}.${quoteIdent(name)}(${args})`);
}

/**
 * The functions of the control plane and of each stream family that differ from this library's
 * (missing, or another file hash): `migrate` re-creates them. `q` is the quoted schema.
 */
export async function staleFunctions(c: pg.Pool | pg.PoolClient, q: string): Promise<{ streamId: string | null; name: string }[]> {
  const r = await c.query<{ stream_id: string | null; name: string; hash: string }>(
    `SELECT stream_id::text, name, hash FROM ${q}.function_version`,
  );
  const have = new Map(r.rows.map((x) => [`${x.stream_id ?? ""}:${x.name}`, x.hash]));
  const streams = await c.query<{ id: string }>(`SELECT id::text FROM ${q}.stream_config ORDER BY id`);
  const out: { streamId: string | null; name: string }[] = [];
  for (const f of systemFunctions) if (have.get(`:${f.name}`) !== f.hash) out.push({ streamId: null, name: f.name });
  for (const s of streams.rows) {
    for (const f of streamFunctions) if (have.get(`${s.id}:${f.name}`) !== f.hash) out.push({ streamId: s.id, name: f.name });
  }
  return out;
}
