// Statements about the catalog and session state that several steps share: whether a relation
// exists, and transaction-scoped advisory locks keyed by a text (hashed with hashtextextended).
import type { SchemaNames } from "./names.js";
import { defineStatement } from "./statement.js";

/** Whether the relation `name` (regclass text: a quoted, schema-qualified name) exists. */
export const relationExists = defineStatement<{ name: string }, { ok: boolean }, SchemaNames>(["name"], (_t, p) =>
  `SELECT to_regclass(${p.name}) IS NOT NULL AS ok`);

/** Waits for the transaction-scoped advisory lock named `lockKey`. */
export const advisoryXactLock = defineStatement<{ lockKey: string }, Record<string, unknown>, SchemaNames>(["lockKey"], (_t, p) =>
  `SELECT pg_advisory_xact_lock(hashtextextended(${p.lockKey}, 0))`);

/** Takes the transaction-scoped advisory lock named `lockKey` if it is free (ok false: another session holds it). */
export const tryAdvisoryXactLock = defineStatement<{ lockKey: string }, { ok: boolean }, SchemaNames>(["lockKey"], (_t, p) =>
  `SELECT pg_try_advisory_xact_lock(hashtextextended(${p.lockKey}, 0)) AS ok`);

/** Bounds the lock waits of the rest of the transaction (`timeout` as Postgres reads it: "2000ms"). */
export function localLockTimeout(timeout: string): string {
  if (!/^[0-9]+ms$/.test(timeout)) throw new Error(`invalid lock timeout ${timeout}`);
  return `SET LOCAL lock_timeout = '${timeout}'`;
}

/** Drops the table `name` (a quoted name built from catalog names, never a user string). */
export function dropTable(name: string): string {
  return `DROP TABLE ${name}`;
}
