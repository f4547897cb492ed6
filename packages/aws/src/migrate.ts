// The migrate Lambda, invoked on every deploy: migrate the control plane, then register every
// stream and group of functions/groups.ts. Idempotent: registering again changes nothing but
// the stored configuration, and never moves a cursor. Then, when configured, the deployment's
// database roles (docs/guide/security.md#roles).
import { type RoleSetup, SqlStreamsError, setupRoles } from "@sqlstreams/core";
import type { LambdaContext } from "./context.js";
import { DatabaseProvider, defaultDatabase } from "./database.js";
import { type GroupDeclaration, type StreamDeclarations, groupKey, validateGroups } from "./declaration.js";
import { type LineWriter, errorFields, stdoutWriter, writeLine } from "./log.js";

export interface MigrateHandlerOptions {
  groups: readonly GroupDeclaration[];
  /** Stream options by stream name (retention, partition size...). Default: library defaults. */
  streams?: StreamDeclarations;
  database?: DatabaseProvider;
  log?: LineWriter;
  /**
   * The deployment's database roles, created and granted after the streams are registered
   * (setupRoles). Default: the JSON of SQLSTREAMS_DB_ROLES, e.g.
   * {"worker":"sqlstreams_worker","reader":"sqlstreams_reader","producers":{"orders_api":["orders.placed"]},"iam":true};
   * unset, no roles are touched. false: never.
   */
  roles?: RoleSetup | false;
  env?: Record<string, string | undefined>;
}

/** SQLSTREAMS_DB_ROLES, parsed (SQL0096 when it is not a JSON object). */
export function rolesFromEnv(env: Record<string, string | undefined>): RoleSetup | undefined {
  const text = env.SQLSTREAMS_DB_ROLES?.trim();
  if (!text) return undefined;
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    throw new SqlStreamsError("SQL0096", "SQLSTREAMS_DB_ROLES is not JSON: expected {\"worker\"?: name, \"reader\"?: name, \"producers\"?: {role: [streams]}, \"iam\"?: boolean}");
  }
  if (typeof doc !== "object" || doc === null || Array.isArray(doc)) throw new SqlStreamsError("SQL0096", "SQLSTREAMS_DB_ROLES must be a JSON object");
  const unknown = Object.keys(doc).filter((k) => !["worker", "reader", "producers", "iam"].includes(k));
  if (unknown.length > 0) throw new SqlStreamsError("SQL0096", `SQLSTREAMS_DB_ROLES: unknown key ${unknown[0]}; allowed: worker, reader, producers, iam`);
  return doc as RoleSetup;
}

export interface MigrateResult {
  streams: string[];
  groups: string[];
  durationMs: number;
}

export type MigrateHandler = (event: unknown, context?: LambdaContext) => Promise<MigrateResult>;

export function createMigrateHandler(opts: MigrateHandlerOptions): MigrateHandler {
  const groups = validateGroups(opts?.groups);
  const streamOptions = opts.streams ?? {};
  const log = opts.log ?? stdoutWriter;
  const streamNames = [...new Set([...groups.map((g) => g.stream), ...Object.keys(streamOptions)])];
  return async function migrateHandler(_event: unknown, context?: LambdaContext) {
    const started = Date.now();
    const requestId = context?.awsRequestId;
    try {
      const roles = opts.roles === false ? undefined : (opts.roles ?? rolesFromEnv(opts.env ?? process.env));
      const database = opts.database ?? defaultDatabase();
      await database.use(async (client) => {
        await client.migrate();
        for (const name of streamNames) await client.stream(name).register(streamOptions[name] ?? {});
        for (const g of groups) await client.stream(g.stream).consumer(g.group).register(g.config ?? {});
        if (roles) await setupRoles(client, roles);
      });
      const result: MigrateResult = {
        streams: streamNames,
        groups: groups.map((g) => groupKey(g.stream, g.group)),
        durationMs: Date.now() - started,
      };
      writeLine(log, { level: "info", event: "sqlstreams.migrate", requestId, ...result });
      return result;
    } catch (e) {
      writeLine(log, { level: "error", event: "sqlstreams.migrate", requestId, durationMs: Date.now() - started, ...errorFields(e) });
      throw e;
    }
  };
}
