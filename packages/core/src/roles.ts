// Database roles of a deployment (docs/guide/security.md): per-stream produce grants for roles
// that produce through SQL, and the worker and reader roles. Each is one call of the schema's
// owner-only SQL function; a coded error raised there comes back as the same SqlStreamsError.
import type { SqlStreams } from "./client.js";
import { query } from "./db.js";
import { ERROR_CODES, type ErrorCode, SqlStreamsError } from "./errors.js";
import { validateStreamName } from "./validate.js";
import { type SchemaNames, schemaNames } from "./sql/names.js";
import * as RoleSql from "./sql/roles.js";
import type { Statement } from "./sql/statement.js";

/** A role name as Postgres stores it: 1–63 bytes, no U+0000 (the SQL side quotes it). */
function roleName(role: unknown, what: string): string {
  if (typeof role !== "string" || role.length === 0 || role.includes("\u0000") || Buffer.byteLength(role) > 63) {
    throw new SqlStreamsError("SQL0096", `${what} must be a role name of 1 to 63 bytes without U+0000, got ${JSON.stringify(role)}`);
  }
  return role;
}

/** "SQLnnnn what (fix: how)" raised by raise_coded() → the SqlStreamsError it names. */
function coded(e: unknown): unknown {
  const m = /^(SQL\d{4}) (.*) \(fix: .*\)$/s.exec((e as { message?: string } | null)?.message ?? "");
  if (m && m[1] in ERROR_CODES) return new SqlStreamsError(m[1] as ErrorCode, m[2], {}, e);
  return e;
}

async function call<P>(client: SqlStreams, statement: Statement<P, Record<string, unknown>, SchemaNames>, params: P): Promise<void> {
  const db = client.db;
  try {
    await statement.query(db, db.pool, schemaNames(db.q), params);
  } catch (e) {
    // No such function or schema: a control plane missing or older than this library (SQL0003).
    if (["42883", "3F000"].includes((e as { code?: string }).code ?? "")) await client.ready();
    throw coded(e);
  }
}

/**
 * Lets `role` produce to `stream` through the SQL functions produce()/produce_batch(), and
 * nothing else. Run as the schema's owner (SQL0095 otherwise); the role must exist (SQL0096).
 */
export async function grantProduce(client: SqlStreams, role: string, stream: string): Promise<void> {
  await call(client, RoleSql.grantProduce, { role: roleName(role, "role"), stream: validateStreamName(stream) });
}

/** Withdraws grantProduce(role, stream); with no stream left, the role's EXECUTE goes too. */
export async function revokeProduce(client: SqlStreams, role: string, stream: string): Promise<void> {
  await call(client, RoleSql.revokeProduce, { role: roleName(role, "role"), stream: validateStreamName(stream) });
}

export interface RoleSetup {
  /** Pollers: DML on the schema's tables, EXECUTE on its functions, no DDL. */
  worker?: string;
  /** The dashboard and read-only operators: SELECT, and default_transaction_read_only. */
  reader?: string;
  /** Roles that produce through SQL, each with the streams it may produce to (grantProduce). */
  producers?: Record<string, readonly string[]>;
  /** Grant each role rds_iam, for RDS IAM database authentication (SQL0096 where there is none). */
  iam?: boolean;
}

/** Creates `role` with LOGIN (and no password) unless it exists. */
async function ensureRole(client: SqlStreams, role: string): Promise<void> {
  const db = client.db;
  const r = await RoleSql.roleExists.query(db, db.pool, schemaNames(db.q), { role });
  if (r.rowCount === 0) {
    await query(db, db.pool, RoleSql.createRole(role)).catch((e: unknown) => {
      if ((e as { code?: string }).code !== "42710") throw e; // created meanwhile
    });
  }
}

/**
 * Creates (LOGIN, no password) and grants the worker and reader roles, with default privileges
 * that cover streams registered later; creates each producer role and grants it its streams;
 * with `iam`, grants every one of them rds_iam. Idempotent; run as the schema's owner after
 * migrate() and the streams' register().
 */
export async function setupRoles(client: SqlStreams, roles: RoleSetup): Promise<void> {
  const worker = roles.worker === undefined ? null : roleName(roles.worker, "worker");
  const reader = roles.reader === undefined ? null : roleName(roles.reader, "reader");
  if (worker !== null && worker === reader) throw new SqlStreamsError("SQL0096", `the worker and the reader must be different roles, got ${JSON.stringify(worker)} for both`);
  const producers = Object.entries(roles.producers ?? {}).map(([role, streams]) => {
    if (!Array.isArray(streams)) throw new SqlStreamsError("SQL0096", `producers.${role} must be an array of stream names`);
    return [roleName(role, "a producer role"), streams.map((x) => validateStreamName(x))] as const;
  });
  if (worker !== null || reader !== null) await call(client, RoleSql.setupRoles, { worker, reader });
  for (const [role, streams] of producers) {
    await ensureRole(client, role);
    for (const stream of streams) await grantProduce(client, role, stream);
  }
  if (roles.iam) {
    const db = client.db;
    const all = [worker, reader, ...producers.map(([r]) => r)].filter((r): r is string => r !== null);
    const iam = await RoleSql.roleExists.query(db, db.pool, schemaNames(db.q), { role: "rds_iam" });
    if (iam.rowCount === 0) throw new SqlStreamsError("SQL0096", "role rds_iam does not exist: IAM database authentication needs an RDS or Aurora PostgreSQL database");
    for (const r of all) await query(db, db.pool, RoleSql.grantRdsIam(r));
  }
}
