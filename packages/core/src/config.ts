// Types, defaults, validation and per-message resolution of configuration (docs/guide/producing.md#registration, docs/guide/configuration.md, docs/protocol/poll-cycle.md#options).
// Pure: no database, no clock.
import { SqlStreamsError, type ErrorCode } from "./errors.js";

export type Concurrency = "parallel" | "exclusive" | "ordered";
export type DeliveryLogMode = "failures" | "all" | "off";

export interface RetryPolicy {
  maxRetries?: number;
  maxDelays?: number;
  baseDelay?: number;
  maxDelay?: number;
  exponent?: number;
}
export interface MessageOptions {
  timeout?: number;
  concurrency?: Concurrency;
  retry?: RetryPolicy;
}
export interface ConsumerConfig {
  message?: MessageOptions;
  messageMin?: MessageOptions;
  messageMax?: MessageOptions;
  concurrencyOverride?: Concurrency;
  start?: "beginning" | "head";
  exceptionInitialBackoff?: number;
  maxRangeReclaims?: number;
  /** Drains of the group running at once across every process and invocation (docs/guide/configuration.md#maxconcurrency). */
  maxConcurrency?: number;
  /** Exclusive groups: messages of one key running at once, default 1 (docs/guide/configuration.md#keyconcurrency). */
  keyConcurrency?: number;
  /** Messages started per second across every poller of the group (docs/guide/configuration.md#ratelimit). */
  rateLimit?: RateLimit;
}
/** A group's rate limit: `perSecond` tokens a second, up to `burst` at once (default ceil(perSecond), at least 1). */
export interface RateLimit {
  perSecond: number;
  burst?: number;
}
export interface StreamOptions {
  partitionSize?: number;
  retention?: number;
  deliveryLog?: DeliveryLogMode;
  idempotencyKeyTtl?: number;
  maxPayloadBytes?: number;
}
export interface PollOptions {
  batchLimit?: number;
  /** Payload bytes one range may hand out (the first message always goes); default 16 MiB. */
  batchBytes?: number;
  concurrency?: number;
  deadline?: number;
  recordMargin?: number;
  signal?: AbortSignal;
}

/** The fully resolved options a message runs with. */
export interface ResolvedMessage {
  timeout: number;
  concurrency: Concurrency;
  maxRetries: number;
  maxDelays: number;
  baseDelay: number;
  maxDelay: number;
  exponent: number;
}

export const DEFAULT_MESSAGE: ResolvedMessage = {
  timeout: 30_000,
  concurrency: "parallel",
  maxRetries: 3,
  maxDelays: 0,
  baseDelay: 1_000,
  maxDelay: 300_000,
  exponent: 2,
};
export const DEFAULT_EXCEPTION_INITIAL_BACKOFF = 5_000;
export const DEFAULT_MAX_RANGE_RECLAIMS = 3;

const CONCURRENCIES: readonly string[] = ["parallel", "exclusive", "ordered"];

interface NumRule { min: number; max: number; integer: boolean }
const R = (min: number, max: number, integer = true): NumRule => ({ min, max, integer });

const MESSAGE_RULES: Record<"timeout", NumRule> = { timeout: R(1, 86_400_000) };
const RETRY_RULES: Record<keyof RetryPolicy, NumRule> = {
  maxRetries: R(0, 1_000),
  maxDelays: R(0, 1_000_000),
  baseDelay: R(1, 86_400_000),
  maxDelay: R(1, 604_800_000),
  exponent: R(1, 10, false),
};
const GROUP_RULES = {
  exceptionInitialBackoff: R(0, 604_800_000),
  maxRangeReclaims: R(1, 100),
  maxConcurrency: R(1, 1_000),
  keyConcurrency: R(1, 1_000),
};
const STREAM_RULES: Record<Exclude<keyof StreamOptions, "deliveryLog">, NumRule> = {
  partitionSize: R(2, 1e12),
  retention: R(0, 3_153_600_000_000),
  idempotencyKeyTtl: R(1_000, 31_536_000_000),
  maxPayloadBytes: R(1_024, 67_108_864),
};

function describe(v: unknown): string {
  if (typeof v === "string") return JSON.stringify(v);
  if (typeof v === "bigint") return `${v}n`;
  try {
    return String(JSON.stringify(v) ?? String(v));
  } catch {
    return String(v);
  }
}

function fail(code: ErrorCode, path: string, value: unknown, rule: string): never {
  throw new SqlStreamsError(code, `${path} = ${describe(value)}: ${rule}`, { path, value, rule });
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function checkNumber(code: ErrorCode, path: string, v: unknown, rule: NumRule): number {
  if (typeof v !== "number" || !Number.isFinite(v)) fail(code, path, v, `must be a finite number`);
  if (rule.integer && !Number.isInteger(v)) fail(code, path, v, "must be an integer");
  if (v < rule.min || v > rule.max) fail(code, path, v, `must be between ${rule.min} and ${rule.max}`);
  return v;
}

function checkKeys(code: ErrorCode, path: string, obj: Record<string, unknown>, allowed: readonly string[]): void {
  for (const k of Object.keys(obj)) {
    if (!allowed.includes(k)) {
      fail(code, path ? `${path}.${k}` : k, obj[k], `unknown key; allowed keys: ${allowed.join(", ")}`);
    }
  }
}

/** Validates one MessageOptions object (SQL0013 / SQL0014). Returns a sparse copy. */
export function validateMessageOptions(
  v: unknown,
  path: string,
  opts: { allowConcurrency: boolean } = { allowConcurrency: true },
): MessageOptions {
  if (v === undefined) return {};
  if (!isPlainObject(v)) fail("SQL0013", path, v, "must be an object");
  checkKeys("SQL0013", path, v, ["timeout", "concurrency", "retry"]);
  const out: MessageOptions = {};
  if (v.timeout !== undefined) out.timeout = checkNumber("SQL0013", `${path}.timeout`, v.timeout, MESSAGE_RULES.timeout);
  if (v.concurrency !== undefined) {
    if (!opts.allowConcurrency) fail("SQL0014", `${path}.concurrency`, v.concurrency, "messageMin and messageMax must not hold concurrency");
    if (typeof v.concurrency !== "string" || !CONCURRENCIES.includes(v.concurrency)) {
      fail("SQL0013", `${path}.concurrency`, v.concurrency, "must be one of parallel, exclusive, ordered");
    }
    out.concurrency = v.concurrency as Concurrency;
  }
  if (v.retry !== undefined) {
    if (!isPlainObject(v.retry)) fail("SQL0013", `${path}.retry`, v.retry, "must be an object");
    checkKeys("SQL0013", `${path}.retry`, v.retry, Object.keys(RETRY_RULES));
    const retry: RetryPolicy = {};
    for (const k of Object.keys(RETRY_RULES) as (keyof RetryPolicy)[]) {
      if (v.retry[k] !== undefined) retry[k] = checkNumber("SQL0013", `${path}.retry.${k}`, v.retry[k], RETRY_RULES[k]);
    }
    if (retry.baseDelay !== undefined && retry.maxDelay !== undefined && retry.maxDelay < retry.baseDelay) {
      fail("SQL0014", `${path}.retry.maxDelay`, retry.maxDelay, `must be >= retry.baseDelay (${retry.baseDelay})`);
    }
    out.retry = retry;
  }
  return out;
}

/** Overlays a sparse MessageOptions onto a resolved set. */
function overlay(base: ResolvedMessage, o: MessageOptions | undefined): ResolvedMessage {
  if (!o) return base;
  const r = o.retry ?? {};
  return {
    timeout: o.timeout ?? base.timeout,
    concurrency: o.concurrency ?? base.concurrency,
    maxRetries: r.maxRetries ?? base.maxRetries,
    maxDelays: r.maxDelays ?? base.maxDelays,
    baseDelay: r.baseDelay ?? base.baseDelay,
    maxDelay: r.maxDelay ?? base.maxDelay,
    exponent: r.exponent ?? base.exponent,
  };
}

type NumField = Exclude<keyof ResolvedMessage, "concurrency">;
const NUM_FIELDS: NumField[] = ["timeout", "maxRetries", "maxDelays", "baseDelay", "maxDelay", "exponent"];

function field(o: MessageOptions | undefined, f: NumField): number | undefined {
  if (!o) return undefined;
  return f === "timeout" ? o.timeout : o.retry?.[f];
}

/** maxDelays treats 0 as "unlimited" in every comparison. */
function cmpValue(f: NumField, v: number): number {
  return f === "maxDelays" && v === 0 ? Infinity : v;
}

/**
 * keyConcurrency above 1 only for a group whose policy is exclusive (docs/guide/configuration.md#keyconcurrency):
 * an ordered key runs one message at a time by definition, a parallel one has no per-key bound.
 */
function checkKeyConcurrency(c: ConsumerConfig): void {
  if (c.keyConcurrency === undefined || c.keyConcurrency === 1) return;
  const policy = c.concurrencyOverride ?? c.message?.concurrency ?? DEFAULT_MESSAGE.concurrency;
  if (policy === "exclusive") return;
  fail("SQL0014", "keyConcurrency", c.keyConcurrency,
    `needs an exclusive group, and this group's policy is ${policy}: set concurrencyOverride: "exclusive" (or message.concurrency: "exclusive"), or drop keyConcurrency`);
}

/** Validates a whole ConsumerConfig (docs/guide/configuration.md#the-stored-document) and returns the sparse document to store. */
export function validateConsumerConfig(v: unknown): ConsumerConfig {
  if (v === undefined) return {};
  if (!isPlainObject(v)) fail("SQL0013", "config", v, "must be an object");
  checkKeys("SQL0013", "", v, [
    "message", "messageMin", "messageMax", "concurrencyOverride", "start", "exceptionInitialBackoff", "maxRangeReclaims", "maxConcurrency", "keyConcurrency",
    "rateLimit",
  ]);
  const out: ConsumerConfig = {};
  if (v.message !== undefined) out.message = validateMessageOptions(v.message, "message");
  if (v.messageMin !== undefined) out.messageMin = validateMessageOptions(v.messageMin, "messageMin", { allowConcurrency: false });
  if (v.messageMax !== undefined) out.messageMax = validateMessageOptions(v.messageMax, "messageMax", { allowConcurrency: false });
  if (v.concurrencyOverride !== undefined) {
    if (typeof v.concurrencyOverride !== "string" || !CONCURRENCIES.includes(v.concurrencyOverride)) {
      fail("SQL0013", "concurrencyOverride", v.concurrencyOverride, "must be one of parallel, exclusive, ordered");
    }
    out.concurrencyOverride = v.concurrencyOverride as Concurrency;
  }
  if (v.start !== undefined) {
    if (v.start !== "beginning" && v.start !== "head") fail("SQL0013", "start", v.start, "must be 'beginning' or 'head'");
    out.start = v.start;
  }
  for (const k of ["exceptionInitialBackoff", "maxRangeReclaims", "maxConcurrency", "keyConcurrency"] as const) {
    if (v[k] !== undefined) out[k] = checkNumber("SQL0013", k, v[k], GROUP_RULES[k]);
  }
  checkKeyConcurrency(out);
  if (v.rateLimit !== undefined) out.rateLimit = validateRateLimit(v.rateLimit);
  // Bounds: messageMin <= group default <= messageMax, per field, where set.
  const gd = overlay(DEFAULT_MESSAGE, out.message);
  if (gd.maxDelay < gd.baseDelay) {
    fail("SQL0014", "message.retry.maxDelay", gd.maxDelay, `the filled group default must be >= baseDelay (${gd.baseDelay})`);
  }
  for (const f of NUM_FIELDS) {
    const lo = field(out.messageMin, f);
    const hi = field(out.messageMax, f);
    const path = f === "timeout" ? f : `retry.${f}`;
    if (lo !== undefined && cmpValue(f, lo) > cmpValue(f, gd[f])) {
      fail("SQL0014", `messageMin.${path}`, lo, `must be <= the group default ${gd[f]}`);
    }
    if (hi !== undefined && cmpValue(f, hi) < cmpValue(f, gd[f])) {
      fail("SQL0014", `messageMax.${path}`, hi, `must be >= the group default ${gd[f]}`);
    }
  }
  return out;
}

const RATE_RULES = { perSecond: R(0, 1_000_000, false), burst: R(1, 1_000_000) };

/** Validates a group's rateLimit (SQL0013): perSecond > 0 and finite, burst an integer >= 1. Returns a sparse copy. */
function validateRateLimit(v: unknown): RateLimit {
  if (!isPlainObject(v)) fail("SQL0013", "rateLimit", v, "must be an object { perSecond, burst? }");
  checkKeys("SQL0013", "rateLimit", v, ["perSecond", "burst"]);
  if (v.perSecond === undefined) fail("SQL0013", "rateLimit.perSecond", v.perSecond, "is required: messages started per second, > 0");
  const perSecond = checkNumber("SQL0013", "rateLimit.perSecond", v.perSecond, RATE_RULES.perSecond);
  if (perSecond <= 0) fail("SQL0013", "rateLimit.perSecond", perSecond, "must be > 0 (leave rateLimit out for no limit, or pause() the group)");
  const out: RateLimit = { perSecond };
  if (v.burst !== undefined) out.burst = checkNumber("SQL0013", "rateLimit.burst", v.burst, RATE_RULES.burst);
  return out;
}

/** A group's rateLimit from its stored configuration, with burst filled (undefined: no limit). */
export function rateLimitOf(config: unknown): Required<RateLimit> | undefined {
  const r = (config as { rateLimit?: RateLimit } | null)?.rateLimit;
  if (r === undefined || r === null || typeof r.perSecond !== "number" || !(r.perSecond > 0)) return undefined;
  return { perSecond: r.perSecond, burst: r.burst ?? Math.max(1, Math.ceil(r.perSecond)) };
}

export interface ResolvedStreamOptions {
  partitionSize: number | undefined;
  retentionMs: number;
  deliveryLog: DeliveryLogMode;
  idempotencyKeyTtlMs: number;
  maxPayloadBytes: number;
}

/** Validates stream.register() options (docs/guide/producing.md#registration, SQL0012). */
export function validateStreamOptions(v: unknown): ResolvedStreamOptions {
  if (v === undefined) v = {};
  if (!isPlainObject(v)) fail("SQL0012", "options", v, "must be an object");
  checkKeys("SQL0012", "", v, ["partitionSize", "retention", "deliveryLog", "idempotencyKeyTtl", "maxPayloadBytes"]);
  const num = (k: keyof typeof STREAM_RULES) => (v[k] === undefined ? undefined : checkNumber("SQL0012", k, v[k], STREAM_RULES[k]));
  const retention = num("retention") ?? 0;
  if (retention !== 0 && retention < 1_000) fail("SQL0012", "retention", retention, "must be 0 (forever) or at least 1000 ms");
  if (v.deliveryLog !== undefined && !["failures", "all", "off"].includes(v.deliveryLog as string)) {
    fail("SQL0012", "deliveryLog", v.deliveryLog, "must be one of failures, all, off");
  }
  return {
    partitionSize: num("partitionSize"),
    retentionMs: retention,
    deliveryLog: (v.deliveryLog as DeliveryLogMode | undefined) ?? "failures",
    idempotencyKeyTtlMs: num("idempotencyKeyTtl") ?? 86_400_000,
    maxPayloadBytes: num("maxPayloadBytes") ?? 1_048_576,
  };
}

export interface ResolvedPollOptions {
  batchLimit: number;
  batchBytes: number;
  concurrency: number;
  /** Epoch ms as validated; the consumer moves it onto the monotonic clock of clock.ts. */
  deadline: number | undefined;
  recordMargin: number;
  signal: AbortSignal | undefined;
  /**
   * Internal (set by drain, never by a caller): the most a fresh or reclaimed range's lease is
   * claimed for, or one run when that is longer (docs/protocol/poll-cycle.md#range-size-in-a-drain).
   */
  rangeLeaseBound?: number;
}

/** Payload bytes a range hands out by default: safe for a 256 MB Lambda (docs/protocol/poll-cycle.md#the-byte-bound). */
export const DEFAULT_BATCH_BYTES = 16 * 1_048_576;

/**
 * The ranges of the numeric poll()/drain() options (docs/protocol/poll-cycle.md#options): validatePollOptions
 * checks them, and so does the deployment's declaration (@sqlstreams/aws) for the options it passes on.
 */
export const POLL_OPTION_RANGES = {
  batchLimit: [1, 10_000],
  batchBytes: [1_024, 1_073_741_824],
  concurrency: [1, 64],
  recordMargin: [100, 60_000],
} as const satisfies Record<string, readonly [number, number]>;

const P = (k: keyof typeof POLL_OPTION_RANGES): NumRule => R(POLL_OPTION_RANGES[k][0], POLL_OPTION_RANGES[k][1]);

/** Validates poll()/drain() options (docs/protocol/poll-cycle.md#options, SQL0015). */
export function validatePollOptions(v: unknown): ResolvedPollOptions {
  if (v === undefined) v = {};
  if (!isPlainObject(v)) fail("SQL0015", "options", v, "must be an object");
  checkKeys("SQL0015", "", v, ["batchLimit", "batchBytes", "concurrency", "deadline", "recordMargin", "signal"]);
  const out: ResolvedPollOptions = {
    batchBytes: v.batchBytes === undefined ? DEFAULT_BATCH_BYTES : checkNumber("SQL0045", "batchBytes", v.batchBytes, P("batchBytes")),
    batchLimit: v.batchLimit === undefined ? 10 : checkNumber("SQL0015", "batchLimit", v.batchLimit, P("batchLimit")),
    concurrency: v.concurrency === undefined ? 1 : checkNumber("SQL0015", "concurrency", v.concurrency, P("concurrency")),
    deadline: undefined,
    recordMargin: v.recordMargin === undefined ? 2_000 : checkNumber("SQL0015", "recordMargin", v.recordMargin, P("recordMargin")),
    signal: undefined,
  };
  if (v.deadline !== undefined) {
    if (typeof v.deadline !== "number" || !Number.isFinite(v.deadline)) fail("SQL0015", "deadline", v.deadline, "must be a finite epoch time in ms");
    out.deadline = v.deadline;
  }
  if (v.signal !== undefined) {
    if (!(v.signal instanceof AbortSignal)) fail("SQL0015", "signal", v.signal, "must be an AbortSignal");
    out.signal = v.signal;
  }
  return out;
}

/** pollBatch()/drainBatch() options: the poll options and the most messages per call of the batch handler. */
export interface BatchPollOptions extends PollOptions {
  /** Messages per call of the batch handler, 1 to 1 000 (default 100). */
  maxBatch?: number;
}

/** A batch poll's concurrency may reach maxBatch's ceiling: the dispatcher starts a batch's messages on it. */
const BATCH_RANGE: NumRule = R(1, 1_000);

/**
 * Validates pollBatch()/drainBatch() options (docs/guide/consuming.md#batch-handlers, SQL0015):
 * maxBatch defaults to 100, concurrency (up to 1 000 here) to maxBatch; a pollBatch's batchLimit
 * defaults to maxBatch, and so does the size a drainBatch without batchLimit starts its ranges at.
 */
export function validateBatchPollOptions(v: unknown, defaultMaxBatch: number): { options: ResolvedPollOptions; maxBatch: number; batchLimitGiven: boolean } {
  if (v === undefined) v = {};
  if (!isPlainObject(v)) fail("SQL0015", "options", v, "must be an object");
  const { maxBatch: mb, concurrency: c, ...rest } = v;
  const maxBatch = mb === undefined ? defaultMaxBatch : checkNumber("SQL0015", "maxBatch", mb, BATCH_RANGE);
  const concurrency = c === undefined ? maxBatch : checkNumber("SQL0015", "concurrency", c, BATCH_RANGE);
  const options = validatePollOptions(rest);
  options.concurrency = concurrency;
  const batchLimitGiven = rest.batchLimit !== undefined;
  if (!batchLimitGiven) options.batchLimit = maxBatch;
  return { options, maxBatch, batchLimitGiven };
}

/** The group's view used by a poll: defaults, ceilings and floors resolved once (docs/guide/configuration.md#resolving-a-messages-options). */
export interface GroupResolution {
  config: ConsumerConfig;
  defaults: ResolvedMessage; // Gd
  max: ResolvedMessage; // Max = Gd overlaid with messageMax
  min: MessageOptions; // floors, sparse
  exceptionInitialBackoff: number;
  maxRangeReclaims: number;
  /** Messages of one exclusive key a holder of its lease runs at once (docs/protocol/ordering.md#key-concurrency). */
  keyConcurrency: number;
}

export function groupResolution(config: ConsumerConfig): GroupResolution {
  const defaults = overlay(DEFAULT_MESSAGE, config.message);
  return {
    config,
    defaults,
    max: overlay(defaults, config.messageMax),
    min: config.messageMin ?? {},
    exceptionInitialBackoff: config.exceptionInitialBackoff ?? DEFAULT_EXCEPTION_INITIAL_BACKOFF,
    maxRangeReclaims: config.maxRangeReclaims ?? DEFAULT_MAX_RANGE_RECLAIMS,
    keyConcurrency: config.keyConcurrency ?? 1,
  };
}

export interface Resolution {
  resolved: ResolvedMessage;
  /** Fields whose produced value was changed by a clamp (for SQL0039). */
  clamped: NumField[];
}

/**
 * Resolves the options one message runs with: fill from the group defaults, clamp into
 * [messageMin, messageMax], then the concurrency override (docs/guide/configuration.md#resolving-a-messages-options).
 */
export function resolveMessage(
  g: GroupResolution,
  stored: MessageOptions | null | undefined,
  hasKey: boolean,
  compacted: boolean,
): Resolution {
  const clamped: NumField[] = [];
  const out = { ...g.defaults };
  for (const f of NUM_FIELDS) {
    const requested = field(stored ?? undefined, f);
    let v = requested ?? g.defaults[f];
    const lo = field(g.min, f);
    const hi = g.max[f];
    if (f === "maxDelays") {
      const cv = cmpValue(f, v);
      if (lo !== undefined && cv < cmpValue(f, lo)) v = lo;
      if (cmpValue(f, v) > cmpValue(f, hi)) v = hi;
    } else {
      if (lo !== undefined && v < lo) v = lo;
      if (v > hi) v = hi;
    }
    if (requested !== undefined && v !== requested) clamped.push(f);
    out[f] = v;
  }
  if (out.maxDelay < out.baseDelay) out.maxDelay = out.baseDelay;
  let c: Concurrency = g.config.concurrencyOverride ?? stored?.concurrency ?? g.defaults.concurrency;
  if (!hasKey) c = "parallel";
  else if (compacted && c === "ordered") c = "exclusive";
  out.concurrency = c;
  return { resolved: out, clamped };
}

/** Parameters the SQL lease computation needs to compute Tmax like resolveMessage does. */
export function timeoutBounds(g: GroupResolution): { def: number; min: number | null; max: number } {
  return { def: g.defaults.timeout, min: g.min.timeout ?? null, max: g.max.timeout };
}
