// The poll Lambda (SPEC §11.7): one invocation drains one group until it is idle (`drain` mode)
// or until its budget ends (`continuous` mode), with the deadline of SPEC §9.2.
import { SqlStreamsError, mergeReports, type CycleReport, type Handler, type Progress } from "@sqlstreams/core";
import type { LambdaContext } from "./context.js";
import { DatabaseProvider, defaultDatabase } from "./database.js";
import { DEFAULTS, type GroupDeclaration, type PollMode, checkNames, findGroup, groupKey, validateGroups } from "./declaration.js";
import { type LineWriter, errorFields, stdoutWriter, writeLine } from "./log.js";
import { setTimeout as sleep } from "node:timers/promises";
import { DurationHistogram, metricsWriter, pollDocument, stageFromEnv } from "./metrics.js";

/** The schedule's payload: which group to poll. */
export interface PollEvent {
  stream: string;
  group: string;
}

export type PollHandler = (event: PollEvent, context: LambdaContext) => Promise<CycleReport>;

export interface PollHandlerOptions<T = unknown> {
  stream: string;
  group: string;
  /** The message handler. */
  handle: Handler<T>;
  /**
   * The deployment's declaration (functions/groups.ts). When given, the pair must be declared in
   * it and its mode and poll options apply (explicit options below win).
   */
  groups?: readonly GroupDeclaration[];
  mode?: PollMode;
  batchLimit?: number;
  concurrency?: number;
  recordMargin?: number;
  /** Continuous mode: pause between an idle drain and the next one. Default 1 000 ms. */
  idleWait?: number;
  /** The database; default the container-wide provider configured from the environment. */
  database?: DatabaseProvider;
  /** Where the per-invocation JSON line goes; default stdout. */
  log?: LineWriter;
  /**
   * Where the per-invocation EMF document goes (docs/operations.md#metrics): default stdout when
   * running in Lambda, nowhere elsewhere; `false` turns it off.
   */
  metrics?: LineWriter | false;
  /** The Stage dimension of the metrics; default SQLSTREAMS_STAGE, none when unset. */
  stage?: string;
}

function isThenable(v: unknown): v is PromiseLike<unknown> {
  return v !== null && (typeof v === "object" || typeof v === "function") && typeof (v as PromiseLike<unknown>).then === "function";
}

/** The handler, timed into `hist`; a synchronous handler stays synchronous. */
function timed<T>(handle: Handler<T>, hist: DurationHistogram): Handler<T> {
  return (msg) => {
    const t0 = performance.now();
    let r: unknown;
    try {
      r = handle(msg);
    } catch (e) {
      hist.add(performance.now() - t0);
      throw e;
    }
    if (!isThenable(r)) {
      hist.add(performance.now() - t0);
      return r;
    }
    return Promise.resolve(r).then(
      (v) => {
        hist.add(performance.now() - t0);
        return v;
      },
      (e: unknown) => {
        hist.add(performance.now() - t0);
        throw e;
      },
    );
  };
}



function checkEvent(event: unknown, stream: string, group: string, declared: string): void {
  const e = event as Partial<PollEvent> | null | undefined;
  const ok = typeof e === "object" && e !== null && e.stream === stream && e.group === group;
  if (!ok) {
    let shown: string;
    try {
      shown = JSON.stringify(event) ?? String(event);
    } catch {
      shown = String(event);
    }
    throw new SqlStreamsError(
      "SQL0031",
      `event ${shown.slice(0, 300)} does not name a group this function polls; expected {"stream":${JSON.stringify(stream)},"group":${JSON.stringify(group)}} (${declared})`,
      { event: shown.slice(0, 300), expected: { stream, group } },
    );
  }
}

/**
 * Builds the Lambda handler of one group: `(event, context) => Promise<CycleReport>`.
 * The event must be `{ stream, group }` of this function, else SQL0031 before any database access.
 */
export function createPollHandler<T = unknown>(opts: PollHandlerOptions<T>): PollHandler {
  if (typeof opts !== "object" || opts === null) {
    throw new SqlStreamsError("SQL0015", "createPollHandler(options): options must be an object");
  }
  const { stream, group, handle } = opts;
  if (typeof handle !== "function") {
    throw new SqlStreamsError("SQL0015", `createPollHandler: handle must be a function, got ${typeof handle}`, { path: "handle" });
  }
  let declaration: GroupDeclaration | undefined;
  if (opts.groups !== undefined) {
    validateGroups(opts.groups);
    declaration = findGroup(opts.groups, stream, group);
    if (!declaration) {
      throw new SqlStreamsError(
        "SQL0031",
        `${groupKey(String(stream), String(group))} is not declared in the deployment's groups (${opts.groups.map((g) => groupKey(g.stream, g.group)).join(", ") || "none"})`,
        { stream, group },
      );
    }
  } else {
    checkNames(stream, group, "createPollHandler");
  }
  const mode: PollMode = opts.mode ?? declaration?.mode ?? DEFAULTS.mode;
  if (mode !== "drain" && mode !== "continuous") {
    throw new SqlStreamsError("SQL0015", `createPollHandler: mode must be 'drain' or 'continuous', got ${JSON.stringify(mode)}`);
  }
  const recordMargin = opts.recordMargin ?? declaration?.recordMargin ?? DEFAULTS.recordMargin;
  const idleWait = opts.idleWait ?? declaration?.idleWait ?? DEFAULTS.idleWait;
  const batchLimit = opts.batchLimit ?? declaration?.batchLimit;
  const concurrency = opts.concurrency ?? declaration?.concurrency;
  const log = opts.log ?? stdoutWriter;
  const declared = declaration ? "declared in functions/groups.ts" : "bound by createPollHandler";
  const emf = metricsWriter(opts.metrics, stdoutWriter);
  const stage = opts.stage ?? stageFromEnv();

  return async function pollHandler(event: PollEvent, context: LambdaContext): Promise<CycleReport> {
    const started = Date.now();
    const requestId = context?.awsRequestId;
    const durations = new DurationHistogram();
    const run = emf ? timed(handle, durations) : handle;
    try {
      checkEvent(event, stream, group, declared);
      if (typeof context?.getRemainingTimeInMillis !== "function") {
        throw new SqlStreamsError("SQL0015", "the handler needs a Lambda context with getRemainingTimeInMillis()");
      }
      // SPEC §9.2: leave recordMargin + 1 s so recording and releasing finish before the stop.
      const deadline = Date.now() + context.getRemainingTimeInMillis() - (recordMargin + 1_000);
      const pollOpts = {
        deadline,
        recordMargin,
        ...(batchLimit !== undefined ? { batchLimit } : {}),
        ...(concurrency !== undefined ? { concurrency } : {}),
      };
      const database = opts.database ?? defaultDatabase();
      const { report, progress } = await database.use(async (client) => {
        const consumer = client.stream<T>(stream).consumer(group);
        let total = await consumer.drain(run, pollOpts);
        let last = total;
        if (mode === "continuous") {
          // Keep polling while another idle wait and a drain still fit before the deadline.
          // A drain that could not start a message for the deadline ends it: later ones could not either.
          while (!last.paused && last.notStarted === 0 && deadline - Date.now() - idleWait >= 2 * recordMargin) {
            await sleep(idleWait);
            last = await consumer.drain(run, pollOpts);
            total = mergeReports(total, last);
          }
        }
        let progress: Progress | null = null;
        if (context.getRemainingTimeInMillis() > recordMargin) {
          try {
            progress = await consumer.progress();
          } catch {
            progress = null;
          }
        }
        return { report: { ...total, durationMs: Date.now() - started }, progress };
      });
      const lag = progress?.lag ?? null;
      if (emf) writeLine(emf, pollDocument({ stream, group, stage, report, progress, durations, durationMs: report.durationMs }));
      writeLine(log, {
        level: "info",
        event: "sqlstreams.poll",
        requestId,
        mode,
        ...report,
        lag,
        remainingMs: context.getRemainingTimeInMillis(),
      });
      return report;
    } catch (e) {
      if (emf) writeLine(emf, pollDocument({ stream, group, stage, durations, durationMs: Date.now() - started, error: true }));
      writeLine(log, {
        level: "error",
        event: "sqlstreams.poll",
        requestId,
        mode,
        stream,
        group,
        durationMs: Date.now() - started,
        ...errorFields(e),
      });
      throw e;
    }
  };
}
