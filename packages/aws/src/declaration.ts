// The deployment's declaration of streams and groups (functions/groups.ts): its type and the
// checks every reader of it shares (the migrate function, the poll handlers, sst.config.ts tests
// and `sqlstreams dev`). Pure: no database, no clock, no AWS.
import { SqlStreamsError, type ConsumerConfig, type ErrorCode, type StreamOptions } from "@sqlstreams/core";
import { POLL_OPTION_RANGES } from "@sqlstreams/core/internal";

/** `drain`: exit when the group is idle (pay only for work). `continuous`: keep polling with a
 * short idle wait until the invocation budget ends (sub-minute latency from a 1-minute schedule). */
export type PollMode = "drain" | "continuous";

/** A group's alarm settings in functions/groups.ts (`alarms`); `false` turns them off. */
export interface GroupAlarms {
  /** Alarm when the oldest unresolved message is older than this, in ms. Default 15 minutes. */
  oldestUnresolvedMs?: number;
  /** Email addresses subscribed to the alarms' SNS topic (each confirms once by email). */
  email?: string[];
  /** An existing SNS topic ARN the alarms notify (instead of, or beside, `email`). */
  topicArn?: string;
}

/** One consumer group of the deployment: which Lambda runs it, when, and with which options. */
export interface GroupDeclaration {
  /** Stream name, as registered. */
  stream: string;
  /** Consumer group name, unique within the stream. */
  group: string;
  /** Handler path relative to the repository root: `functions/handlers/<file>.<export>`. */
  function: string;
  /** EventBridge Scheduler expression: `rate(1 minute)`, `cron(0/5 * * * ? *)`. */
  schedule: string;
  /** The group's configuration, registered by the migrate function on every deploy. */
  config?: ConsumerConfig;
  /** Default `drain`. */
  mode?: PollMode;
  /** Invocations started per schedule tick (overlapping polls of one group are safe). Default 1. */
  parallelism?: number;
  /** Lambda timeout in ms (the invocation budget). Default 60 000. */
  timeout?: number;
  /** Lambda memory in MB. Default 256. */
  memory?: number;
  /** Poll option: ids per fresh range and rows per exception claim (docs/protocol/poll-cycle.md#options). Default 10. */
  batchLimit?: number;
  /** Poll option: handlers running at once (docs/protocol/poll-cycle.md#options). Default 1. */
  concurrency?: number;
  /** Poll option: time allowed to record an outcome (docs/protocol/poll-cycle.md#options). Default 2 000. */
  recordMargin?: number;
  /** Continuous mode: pause after an idle drain before polling again, in ms. Default 1 000. */
  idleWait?: number;
  /** CloudWatch alarms of the group (docs/guide/operations.md#alarms); default on with a 15-minute threshold. */
  alarms?: GroupAlarms | false;
  /** Backlog-driven scaling (docs/guide/deployment.md#backlog-driven-scaling); needs config.maxConcurrency. */
  scale?: GroupScale;
}

/** A group's scaling in functions/groups.ts. */
export interface GroupScale {
  /** The most drains of the group continuations bring it to (≤ the group's maxConcurrency). */
  max: number;
  /** Continue only while the lag at the end of an invocation is above this many ids. */
  continueAboveLag: number;
}

/** Options of streams named by the declaration, keyed by stream name (registered on deploy). */
export type StreamDeclarations = Record<string, StreamOptions>;

export const DEFAULTS = {
  mode: "drain" as PollMode,
  parallelism: 1,
  timeout: 60_000,
  memory: 256,
  recordMargin: 2_000,
  idleWait: 1_000,
  /** Message timeout a group uses when its config sets none (docs/guide/configuration.md#the-stored-document). */
  messageTimeout: 30_000,
};

const NAME = /^[a-z0-9][a-z0-9._-]{0,199}$/;
const FUNCTION_PATH = /^[A-Za-z0-9_][A-Za-z0-9_./-]*\.[A-Za-z_$][A-Za-z0-9_$]*$/;
const SCHEDULE = /^(rate|cron)\(.+\)$/;
const KEYS = [
  "stream", "group", "function", "schedule", "config", "mode", "parallelism", "timeout", "memory",
  "batchLimit", "concurrency", "recordMargin", "idleWait", "alarms", "scale",
];
const RANGES: Record<string, readonly [number, number]> = {
  parallelism: [1, 50],
  timeout: [3_000, 900_000],
  memory: [128, 10_240],
  // The poll options a group passes on to drain(): the ranges drain() itself checks.
  batchLimit: POLL_OPTION_RANGES.batchLimit,
  concurrency: POLL_OPTION_RANGES.concurrency,
  recordMargin: POLL_OPTION_RANGES.recordMargin,
  idleWait: [0, 60_000],
};

function bad(code: ErrorCode, path: string, value: unknown, rule: string): never {
  let shown: string;
  try {
    shown = JSON.stringify(value) ?? String(value);
  } catch {
    shown = String(value);
  }
  throw new SqlStreamsError(code, `${path} = ${shown}: ${rule}`, { path, value, rule });
}

/** Checks a stream and group name pair (SQL0006 / SQL0008). */
export function checkNames(stream: unknown, group: unknown, at = "options"): void {
  if (typeof stream !== "string" || !NAME.test(stream)) bad("SQL0006", `${at}.stream`, stream, "must match ^[a-z0-9][a-z0-9._-]{0,199}$");
  if (typeof group !== "string" || !NAME.test(group)) bad("SQL0008", `${at}.group`, group, "must match ^[a-z0-9][a-z0-9._-]{0,199}$");
}

/** A stable, human-readable identity of a group: `stream/group`. */
export function groupKey(stream: string, group: string): string {
  return `${stream}/${group}`;
}

/** The Lambda timeout, message timeout and record margin a declaration implies. */
export function resolvedDeclaration(d: GroupDeclaration) {
  return {
    mode: d.mode ?? DEFAULTS.mode,
    parallelism: d.parallelism ?? DEFAULTS.parallelism,
    timeout: d.timeout ?? DEFAULTS.timeout,
    memory: d.memory ?? DEFAULTS.memory,
    recordMargin: d.recordMargin ?? DEFAULTS.recordMargin,
    idleWait: d.idleWait ?? DEFAULTS.idleWait,
    batchLimit: d.batchLimit,
    concurrency: d.concurrency,
  };
}

/**
 * Checks a whole declaration before anything is deployed or registered: names, handler paths,
 * schedules, ranges, duplicates, and that each function's budget fits at least one message run.
 * Throws SqlStreamsError (SQL0006/SQL0008 for names, SQL0015 otherwise); returns the array.
 * The group's `config` itself is validated by `consumer.register()` (SQL0013/SQL0014).
 */
export function validateGroups<T extends readonly GroupDeclaration[]>(groups: T): T {
  if (!Array.isArray(groups)) bad("SQL0015", "groups", groups, "must be an array of group declarations");
  const seen = new Set<string>();
  groups.forEach((d: GroupDeclaration, i: number) => {
    const at = `groups[${i}]`;
    if (typeof d !== "object" || d === null || Array.isArray(d)) bad("SQL0015", at, d, "must be an object");
    for (const k of Object.keys(d)) {
      if (!KEYS.includes(k)) bad("SQL0015", `${at}.${k}`, (d as unknown as Record<string, unknown>)[k], `unknown key; allowed keys: ${KEYS.join(", ")}`);
    }
    checkNames(d.stream, d.group, at);
    if (typeof d.function !== "string" || !FUNCTION_PATH.test(d.function) || d.function.includes("..")) {
      bad("SQL0015", `${at}.function`, d.function, "must be a handler path relative to the repository root, like functions/handlers/fraud-scoring.handler");
    }
    if (typeof d.schedule !== "string" || !SCHEDULE.test(d.schedule.trim())) {
      bad("SQL0015", `${at}.schedule`, d.schedule, "must be an EventBridge Scheduler expression: rate(1 minute) or cron(...)");
    }
    if (d.mode !== undefined && d.mode !== "drain" && d.mode !== "continuous") {
      bad("SQL0015", `${at}.mode`, d.mode, "must be 'drain' or 'continuous'");
    }
    if (d.config !== undefined && (typeof d.config !== "object" || d.config === null || Array.isArray(d.config))) {
      bad("SQL0013", `${at}.config`, d.config, "must be a ConsumerConfig object");
    }
    for (const [k, [min, max]] of Object.entries(RANGES)) {
      const v = (d as unknown as Record<string, unknown>)[k];
      if (v === undefined) continue;
      if (typeof v !== "number" || !Number.isInteger(v) || v < min || v > max) {
        bad("SQL0015", `${at}.${k}`, v, `must be an integer between ${min} and ${max}`);
      }
    }
    checkAlarms(d.alarms, `${at}.alarms`);
    checkScale(d.scale, d.config?.maxConcurrency, `${at}.scale`);
    const r = resolvedDeclaration(d);
    // The poll handler stops starting work at `timeout - (recordMargin + 1000)` minus 2 x
    // recordMargin (docs/protocol/poll-cycle.md#the-report-and-drain, docs/protocol/crash-recovery.md#the-end-of-an-invocation); a message must fit inside that window or it never starts.
    const window = r.timeout - (r.recordMargin + 1_000);
    const messageTimeout = Math.max(
      d.config?.message?.timeout ?? DEFAULTS.messageTimeout,
      d.config?.messageMax?.timeout ?? 0,
    );
    // One more second for what precedes the first start (cold start, connecting, the load
    // statement): at the bare edge no message would ever start.
    const STARTUP = 1_000;
    if (window - 2 * r.recordMargin < 0 || messageTimeout + r.recordMargin + STARTUP > window) {
      bad(
        "SQL0015",
        `${at}.timeout`,
        r.timeout,
        `the function budget leaves ${window} ms per invocation, too short for a message timeout of ${messageTimeout} ms plus recordMargin ${r.recordMargin} ms; raise timeout to at least ${messageTimeout + 2 * r.recordMargin + 1_000 + STARTUP} or lower the message timeout`,
      );
    }
    const key = groupKey(d.stream, d.group);
    if (seen.has(key)) bad("SQL0015", at, key, "declares the same stream and group twice");
    seen.add(key);
  });
  return groups;
}

const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;
const TOPIC_ARN = /^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_-]{1,256}$/;

function checkAlarms(a: unknown, at: string): void {
  if (a === undefined || a === false) return;
  if (typeof a !== "object" || a === null || Array.isArray(a)) bad("SQL0015", at, a, "must be false or { oldestUnresolvedMs?, email?, topicArn? }");
  const o = a as Record<string, unknown>;
  for (const k of Object.keys(o)) if (!["oldestUnresolvedMs", "email", "topicArn"].includes(k)) bad("SQL0015", `${at}.${k}`, o[k], "unknown key; allowed keys: oldestUnresolvedMs, email, topicArn");
  const ms = o.oldestUnresolvedMs;
  if (ms !== undefined && (typeof ms !== "number" || !Number.isInteger(ms) || ms < 60_000 || ms > 7 * 86_400_000)) {
    bad("SQL0015", `${at}.oldestUnresolvedMs`, ms, "must be an integer number of ms between 60 000 (1 minute) and 7 days");
  }
  if (o.email !== undefined && (!Array.isArray(o.email) || !o.email.every((e) => typeof e === "string" && EMAIL.test(e)))) {
    bad("SQL0015", `${at}.email`, o.email, "must be an array of email addresses");
  }
  if (o.topicArn !== undefined && (typeof o.topicArn !== "string" || !TOPIC_ARN.test(o.topicArn))) bad("SQL0015", `${at}.topicArn`, o.topicArn, "must be an SNS topic ARN");
}

/** The declaration of one (stream, group) pair, or undefined. */
export function findGroup(
  groups: readonly GroupDeclaration[],
  stream: unknown,
  group: unknown,
): GroupDeclaration | undefined {
  return groups.find((g) => g.stream === stream && g.group === group);
}

/**
 * Checks a declaration's `scale` against its config (SQL0015): `max` needs the group's
 * maxConcurrency, the bound the running drains are counted against, and may not exceed it.
 */
function checkScale(s: unknown, maxConcurrency: unknown, at: string): void {
  if (s === undefined) return;
  if (typeof s !== "object" || s === null || Array.isArray(s)) bad("SQL0015", at, s, "must be { max, continueAboveLag }");
  const o = s as Record<string, unknown>;
  for (const k of Object.keys(o)) if (k !== "max" && k !== "continueAboveLag") bad("SQL0015", `${at}.${k}`, o[k], "unknown key; allowed keys: max, continueAboveLag");
  if (typeof o.max !== "number" || !Number.isInteger(o.max) || o.max < 1 || o.max > 1_000) bad("SQL0015", `${at}.max`, o.max, "must be an integer between 1 and 1000");
  const lag = o.continueAboveLag;
  if (typeof lag !== "number" || !Number.isInteger(lag) || lag < 0 || lag > 1e12) {
    bad("SQL0015", `${at}.continueAboveLag`, lag, "must be an integer number of ids between 0 and 1e12");
  }
  if (maxConcurrency === undefined) {
    bad("SQL0015", `${at}.max`, o.max, "needs config.maxConcurrency: continuations are counted against the group's drain slots; set maxConcurrency >= scale.max");
  }
  if (typeof maxConcurrency === "number" && o.max > maxConcurrency) bad("SQL0015", `${at}.max`, o.max, `must be <= config.maxConcurrency (${maxConcurrency})`);
}
