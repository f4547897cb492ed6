// Statements of the deployment's database roles (docs/guide/security.md): the owner-only SQL
// functions that grant and revoke produce and set up the worker and reader roles, and the
// role lookups and grants setupRoles() makes itself.
import { type SchemaNames, quoteIdent } from "./names.js";
import { defineStatement } from "./statement.js";

export const grantProduce = defineStatement<{ role: string; stream: string }, Record<string, unknown>, SchemaNames>(["role", "stream"], (t, p) =>
  `SELECT ${t.schema}.grant_produce(${p.role}, ${p.stream})`);

export const revokeProduce = defineStatement<{ role: string; stream: string }, Record<string, unknown>, SchemaNames>(["role", "stream"], (t, p) =>
  `SELECT ${t.schema}.revoke_produce(${p.role}, ${p.stream})`);

export const setupRoles = defineStatement<{ worker: string | null; reader: string | null }, Record<string, unknown>, SchemaNames>(
  ["worker", "reader"], (t, p) => `SELECT ${t.schema}.setup_roles(${p.worker}, ${p.reader})`);

/** A row when the role exists. */
export const roleExists = defineStatement<{ role: string }, Record<string, unknown>, SchemaNames>(["role"], (_t, p) =>
  `SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = ${p.role}`);

/** `role` with LOGIN and no password; the name is quoted here, never spliced unquoted. */
export function createRole(role: string): string {
  return `CREATE ROLE ${quoteIdent(role)} LOGIN`;
}

/** Grants rds_iam (RDS IAM database authentication) to `role`. */
export function grantRdsIam(role: string): string {
  return `GRANT rds_iam TO ${quoteIdent(role)}`;
}
