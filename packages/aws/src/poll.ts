// The poll Lambda (docs/guide/operations.md#the-poll-function): one invocation drains one group until it is idle (`drain` mode)
// or until its budget ends (`continuous` mode), with the deadline of docs/protocol/crash-recovery.md#the-end-of-an-invocation.
import { SqlStreamsError, mergeReports, type BatchHandler, type CycleReport, type Handler, type Progress, type SqlStreams, type StreamDef } from "@sqlstreams/core";
import type { LambdaContext } from "./context.js";
import { DatabaseProvider, defaultDatabase } from "./database.js";
import { DEFAULTS, type GroupDeclaration, type GroupScale, type PollMode, checkNames, findGroup, groupKey, validateGroups } from "./declaration.js";
import type { LambdaClient, LambdaClientConfig } from "@aws-sdk/client-lambda";
import { Continuer, continuationsOf } from "./scale.js";
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
  /** The stream's name, or its typed definition (defineStream): then msg.payload is T, checked by its schema. */
  stream: string | StreamDef<T>;
  group: string;
  /** The message handler (or handleBatch: exactly one of them). */
  handle?: Handler<T>;
  /**
   * A batch handler instead of `handle` (docs/guide/consuming.md#batch-handlers): the invocation
   * drains with drainBatch, up to `maxBatch` messages a call.
   */
  handleBatch?: BatchHandler<T>;
  /** With handleBatch: messages per call, default 100. */
  maxBatch?: number;
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
   * Where the per-invocation EMF document goes (docs/guide/operations.md#metrics): default stdout when
   * running in Lambda, nowhere elsewhere; `false` turns it off.
   */
  metrics?: LineWriter | false;
  /** The Stage dimension of the metrics; default SQLSTREAMS_STAGE, none when unset. */
  stage?: string;
  /**
   * Backlog-driven scaling (docs/guide/deployment.md#backlog-driven-scaling); default the
   * declaration's `scale`. Needs the group's maxConcurrency.
   */
  scale?: GroupScale;
  /** The Lambda client continuations are started with (a client, or options of the default one). */
  lambda?: { client?: LambdaClient; clientConfig?: LambdaClientConfig };
}

function isThenable(v: unknown): v is PromiseLike<unknown> {
  return v !== null && (typeof v === "object" || typeof v === "function") && typeof (v as PromiseLike<unknown>).then === "function";
}

/** The handler (of a message or of a batch), timed into `hist`; a synchronous handler stays synchronous. */
function timed<A, R>(handle: (arg: A) => R, hist: DurationHistogram): (arg: A) => R {
  return (msg): R => {
    const t0 = performance.now();
    let r: R;
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
    ) as R;
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

/** What a poll handler is bound to, validated once when the function module loads. */
interface Binding<T> {
  stream: string;
  /** The typed stream's definition, when the handler was bound to one. */
  def: StreamDef<T> | undefined;
  group: string;
  /** Exactly one of handle and handleBatch. */
  handle: Handler<T> | undefined;
  handleBatch: BatchHandler<T> | undefined;
  maxBatch: number | undefined;
  mode: PollMode;
  recordMargin: number;
  idleWait: number;
  batchLimit: number | undefined;
  concurrency: number | undefined;
  scale: GroupScale | undefined;
  /** Where the binding came from, for SQL0031's message. */
  declared: string;
}

function bind<T>(opts: PollHandlerOptions<T>): Binding<T> {
  if (typeof opts !== "object" || opts === null) {
    throw new SqlStreamsError("SQL0015", "createPollHandler(options): options must be an object");
  }
  const def = typeof opts.stream === "object" && opts.stream !== null ? opts.stream : undefined;
  const stream = def ? def.name : (opts.stream as string);
  opts = { ...opts, stream };
  const { group, handle, handleBatch } = opts;
  if ((handle === undefined) === (handleBatch === undefined)) {
    throw new SqlStreamsError("SQL0015", "createPollHandler: pass exactly one of handle (one message) and handleBatch (a batch)", { path: "handle" });
  }
  const path = handle === undefined ? "handleBatch" : "handle";
  if (typeof (handle ?? handleBatch) !== "function") {
    throw new SqlStreamsError("SQL0015", `createPollHandler: ${path} must be a function, got ${typeof (handle ?? handleBatch)}`, { path });
  }
  if (opts.maxBatch !== undefined && handleBatch === undefined) {
    throw new SqlStreamsError("SQL0015", "createPollHandler: maxBatch goes with handleBatch", { path: "maxBatch" });
  }
  const declaration = declarationOf(opts);
  const mode: PollMode = opts.mode ?? declaration?.mode ?? DEFAULTS.mode;
  if (mode !== "drain" && mode !== "continuous") {
    throw new SqlStreamsError("SQL0015", `createPollHandler: mode must be 'drain' or 'continuous', got ${JSON.stringify(mode)}`);
  }
  return {
    stream, def, group, handle, handleBatch, maxBatch: opts.maxBatch, mode,
    recordMargin: opts.recordMargin ?? declaration?.recordMargin ?? DEFAULTS.recordMargin,
    idleWait: opts.idleWait ?? declaration?.idleWait ?? DEFAULTS.idleWait,
    batchLimit: opts.batchLimit ?? declaration?.batchLimit,
    concurrency: opts.concurrency ?? declaration?.concurrency,
    scale: opts.scale ?? declaration?.scale,
    declared: declaration ? "declared in functions/groups.ts" : "bound by createPollHandler",
  };
}

/** The group's declaration when `groups` is given (it must declare the group: SQL0031). */
function declarationOf<T>(opts: PollHandlerOptions<T>): GroupDeclaration | undefined {
  const { stream, group } = opts;
  if (opts.groups === undefined) {
    checkNames(stream, group, "createPollHandler");
    return undefined;
  }
  validateGroups(opts.groups);
  const declaration = findGroup(opts.groups, stream, group);
  if (!declaration) {
    throw new SqlStreamsError(
      "SQL0031",
      `${groupKey(String(stream), String(group))} is not declared in the deployment's groups (${opts.groups.map((g) => groupKey(g.stream, g.group)).join(", ") || "none"})`,
      { stream, group },
    );
  }
  return declaration;
}

/** Releases the group's wake; a failure only means no extra drain (the schedule is the safety net). */
async function releaseWakeSafely(consumer: { releaseWake(): Promise<boolean> }): Promise<boolean> {
  try {
    return await consumer.releaseWake();
  } catch {
    return false;
  }
}

/** The invocation's handler: timed when metrics are written. */
type Run<T> = { handle: Handler<T> } | { handleBatch: BatchHandler<T>; maxBatch: number | undefined };

/**
 * One invocation's work on an open client: a drain (continuous mode: drains while another idle
 * wait and drain fit before the deadline), then the group's progress for the gauges when time is left.
 */
async function pollInvocation<T>(
  client: SqlStreams, b: Binding<T>, run: Run<T>, context: LambdaContext, started: number,
): Promise<{ report: CycleReport; progress: Progress | null }> {
  const { recordMargin, idleWait } = b;
  // docs/protocol/crash-recovery.md#the-end-of-an-invocation: leave recordMargin + 1 s so recording and releasing finish before the stop.
  const deadline = Date.now() + context.getRemainingTimeInMillis() - (recordMargin + 1_000);
  const pollOpts = {
    deadline,
    recordMargin,
    ...(b.batchLimit !== undefined ? { batchLimit: b.batchLimit } : {}),
    ...(b.concurrency !== undefined ? { concurrency: b.concurrency } : {}),
  };
  const consumer = client.stream<T>(b.def ?? b.stream).consumer(b.group);
  const drain = () =>
    "handle" in run
      ? consumer.drain(run.handle, pollOpts)
      : consumer.drainBatch(run.handleBatch, { ...pollOpts, ...(run.maxBatch !== undefined ? { maxBatch: run.maxBatch } : {}) });
  let total = await drain();
  let last = total;
  // A drain that could not start a message for the deadline ends it: later ones could not either.
  while (b.mode === "continuous" && !last.paused && last.notStarted === 0 && deadline - Date.now() - idleWait >= 2 * recordMargin) {
    await sleep(idleWait);
    last = await drain();
    total = mergeReports(total, last);
  }
  // Wake on produce (docs/guide/producing.md#wake-on-produce): idle now, so release the group's wake; a
  // produce that found it in flight meanwhile marked it pending: drain once more.
  while (!last.paused && last.notStarted === 0 && deadline - Date.now() >= 2 * recordMargin && (await releaseWakeSafely(consumer))) {
    last = await drain();
    total = mergeReports(total, last);
  }
  let progress: Progress | null = null;
  if (context.getRemainingTimeInMillis() > recordMargin) progress = await consumer.progress().catch(() => null);
  return { report: { ...total, durationMs: Date.now() - started }, progress };
}

/**
 * Starts the continuations an invocation that ended at its budget with a backlog calls for
 * (docs/guide/deployment.md#backlog-driven-scaling), as Event invocations of this very function.
 * Returns how many Lambda accepted; a failure starts none and leaves the backlog to the schedule.
 */
async function continueGroup(
  continuer: Continuer, scale: GroupScale, context: LambdaContext, report: CycleReport, progress: Progress | null, stream: string, group: string,
): Promise<number> {
  const n = continuationsOf(scale, report, progress);
  if (n > 0 && typeof context.onContinue === "function") {
    context.onContinue(n);
    return n;
  }
  const self = context.invokedFunctionArn ?? context.functionName;
  if (n === 0 || !self) return 0;
  return continuer.start(self, stream, group, n).catch(() => 0);
}

/**
 * Builds the Lambda handler of one group: `(event, context) => Promise<CycleReport>`.
 * The event must be `{ stream, group }` of this function, else SQL0031 before any database access.
 */
export function createPollHandler<T = unknown>(opts: PollHandlerOptions<T>): PollHandler {
  const b = bind(opts);
  const { stream, group, mode } = b;
  const log = opts.log ?? stdoutWriter;
  const emf = metricsWriter(opts.metrics, stdoutWriter);
  const stage = opts.stage ?? stageFromEnv();
  const continuer = b.scale ? new Continuer(opts.lambda) : undefined;

  return async function pollHandler(event: PollEvent, context: LambdaContext): Promise<CycleReport> {
    const started = Date.now();
    const requestId = context?.awsRequestId;
    const durations = new DurationHistogram();
    const time = <A, R>(f: (a: A) => R) => (emf ? timed(f, durations) : f);
    const run: Run<T> = b.handle !== undefined ? { handle: time(b.handle) } : { handleBatch: time(b.handleBatch as BatchHandler<T>), maxBatch: b.maxBatch };
    try {
      checkEvent(event, stream, group, b.declared);
      if (typeof context?.getRemainingTimeInMillis !== "function") {
        throw new SqlStreamsError("SQL0015", "the handler needs a Lambda context with getRemainingTimeInMillis()");
      }
      const database = opts.database ?? defaultDatabase();
      const { report, progress } = await database.use((client) => pollInvocation(client, b, run, context, started));
      const continued = continuer && b.scale ? await continueGroup(continuer, b.scale, context, report, progress, stream, group) : undefined;
      if (emf) writeLine(emf, pollDocument({ stream, group, stage, report, progress, durations, durationMs: report.durationMs, continued }));
      const remainingMs = context.getRemainingTimeInMillis();
      writeLine(log, { level: "info", event: "sqlstreams.poll", requestId, mode, ...report, lag: progress?.lag ?? null, remainingMs, ...(continued === undefined ? {} : { continued }) });
      return report;
    } catch (e) {
      const durationMs = Date.now() - started;
      if (emf) writeLine(emf, pollDocument({ stream, group, stage, durations, durationMs, error: true }));
      writeLine(log, { level: "error", event: "sqlstreams.poll", requestId, mode, stream, group, durationMs, ...errorFields(e) });
      throw e;
    }
  };
}
