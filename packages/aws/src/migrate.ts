// The migrate Lambda, invoked on every deploy: migrate the control plane, then register every
// stream and group of functions/groups.ts. Idempotent: registering again changes nothing but
// the stored configuration, and never moves a cursor.
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
      const database = opts.database ?? defaultDatabase();
      await database.use(async (client) => {
        await client.migrate();
        for (const name of streamNames) await client.stream(name).register(streamOptions[name] ?? {});
        for (const g of groups) await client.stream(g.stream).consumer(g.group).register(g.config ?? {});
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
