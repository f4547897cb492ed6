// The maintenance Lambda (docs/protocol/retention.md): partitions, retention and sweeps for every stream, on its
// own schedule (every 5 minutes by default).
import type { MaintainReport } from "@sqlstreams/core";
import type { LambdaContext } from "./context.js";
import { DatabaseProvider, defaultDatabase } from "./database.js";
import { type LineWriter, errorFields, stdoutWriter, writeLine } from "./log.js";
import { maintainDocuments, metricsWriter, stageFromEnv } from "./metrics.js";

export interface MaintainHandlerOptions {
  /** Only these streams; default every registered stream. */
  streams?: string[];
  /** Time kept free at the end of the invocation, in ms. Default 3 000. */
  margin?: number;
  database?: DatabaseProvider;
  log?: LineWriter;
  /** Where the per-stream EMF documents go (docs/guide/operations.md#metrics); as for createPollHandler. */
  metrics?: LineWriter | false;
  /** The Stage dimension; default SQLSTREAMS_STAGE. */
  stage?: string;
}

export type MaintainHandler = (event: unknown, context: LambdaContext) => Promise<Record<string, MaintainReport>>;

export function createMaintainHandler(opts: MaintainHandlerOptions = {}): MaintainHandler {
  const margin = opts.margin ?? 3_000;
  const log = opts.log ?? stdoutWriter;
  const emf = metricsWriter(opts.metrics, stdoutWriter);
  const stage = opts.stage ?? stageFromEnv();
  return async function maintainHandler(_event: unknown, context: LambdaContext) {
    const started = Date.now();
    const requestId = context?.awsRequestId;
    try {
      const remaining = typeof context?.getRemainingTimeInMillis === "function" ? context.getRemainingTimeInMillis() : 60_000;
      const deadline = Date.now() + remaining - margin;
      const database = opts.database ?? defaultDatabase();
      const reports = await database.use((client) =>
        client.maintain({ deadline, ...(opts.streams ? { streams: opts.streams } : {}) }),
      );
      const totals = { partitionsCreated: 0, partitionsDropped: 0, rowsSwept: 0, idempotencyKeysDeleted: 0, keyLeasesDeleted: 0, emptyHeadsDeleted: 0, errors: 0 };
      for (const r of Object.values(reports)) {
        totals.partitionsCreated += r.partitionsCreated;
        totals.partitionsDropped += r.partitionsDropped;
        totals.rowsSwept += r.rowsSwept;
        totals.idempotencyKeysDeleted += r.idempotencyKeysDeleted;
        totals.keyLeasesDeleted += r.keyLeasesDeleted;
        totals.emptyHeadsDeleted += r.emptyHeadsDeleted;
        totals.errors += r.errors.length;
      }
      if (emf) for (const doc of maintainDocuments(reports, stage)) writeLine(emf, doc);
      writeLine(log, {
        level: totals.errors > 0 ? "warn" : "info",
        event: "sqlstreams.maintain",
        requestId,
        streams: Object.keys(reports).length,
        ...totals,
        failedSteps: Object.values(reports).flatMap((r) => r.errors.map((e) => ({ stream: r.stream, ...e }))),
        durationMs: Date.now() - started,
      });
      return reports;
    } catch (e) {
      writeLine(log, { level: "error", event: "sqlstreams.maintain", requestId, durationMs: Date.now() - started, ...errorFields(e) });
      throw e;
    }
  };
}
