// Handler outcomes: Delay, Permanent, classification, error texts and the backoff curve
// (docs/protocol/exception-lifecycle.md#attempts-and-budget, docs/protocol/exception-lifecycle.md#running-a-handler). Pure.
import { SqlStreamsError } from "./errors.js";

const OUTCOME = Symbol.for("sqlstreams.outcome");
const MAX_DELAY_MS = 31_536_000_000;
const MAX_ERROR_TEXT = 8_000;
/** What Delay(ms) waits for ms <= 0. */
export const DELAY_FLOOR_MS = 1_000;

export interface Outcome {
  readonly [OUTCOME]: "delay" | "permanent";
}

export class DelayOutcome extends Error implements Outcome {
  readonly [OUTCOME] = "delay" as const;
  override readonly name = "Delay";
  constructor(readonly ms: number) {
    super(`SQL0025 delayed: run again in ${ms} ms`);
  }
}

export class PermanentOutcome extends Error implements Outcome {
  readonly [OUTCOME] = "permanent" as const;
  override readonly name = "Permanent";
  constructor(readonly reason: unknown) {
    super(`SQL0026 permanent: ${errorText(reason)}`, { cause: reason });
  }
}

/**
 * "Run me again later": not a failure; counts a delay. `ms` is a finite number of milliseconds
 * up to one year (NaN or Infinity: SQL0015). Zero or less waits DELAY_FLOOR_MS (1 000 ms), so a
 * delay computed from a time already past (`Delay(retryAt - Date.now())`) cannot run the message
 * again in a loop (docs/protocol/exception-lifecycle.md#attempts-and-budget).
 */
export function Delay(ms: number): Outcome & Error {
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms > MAX_DELAY_MS) {
    throw new SqlStreamsError("SQL0015", `Delay(ms) needs a finite number of milliseconds up to ${MAX_DELAY_MS}, got ${String(ms)}`, { value: ms });
  }
  return new DelayOutcome(delayMs(ms));
}

/** What Delay(ms) waits: whole milliseconds, DELAY_FLOOR_MS for zero or less. */
function delayMs(ms: number): number {
  return ms <= 0 ? DELAY_FLOOR_MS : Math.ceil(ms);
}

/** The message cannot succeed: dead at once, no retries. */
export function Permanent(cause: unknown): Outcome & Error {
  return new PermanentOutcome(cause);
}

export type Classified =
  | { kind: "success" }
  | { kind: "failure"; error: string }
  | { kind: "permanent"; error: string }
  | { kind: "delay"; ms: number; error: string };

/** Whether `v` is a Delay or Permanent outcome. */
export function isOutcome(v: unknown): v is DelayOutcome | PermanentOutcome {
  return typeof v === "object" && v !== null && OUTCOME in v;
}

/** Every plain success is this one frozen object: a hot-path run allocates no outcome. */
const SUCCESS: Classified = Object.freeze({ kind: "success" });

/** Classifies what a handler returned (`threw` false) or threw (`threw` true). */
export function classify(value: unknown, threw: boolean): Classified {
  if (isOutcome(value)) {
    if (value[OUTCOME] === "delay") {
      const ms = delayMs((value as DelayOutcome).ms);
      return { kind: "delay", ms, error: `SQL0025 delayed: run again in ${ms} ms` };
    }
    return { kind: "permanent", error: cut((value as PermanentOutcome).message) };
  }
  if (!threw) return SUCCESS;
  return { kind: "failure", error: errorText(value) };
}

function cut(s: string): string {
  return s.length > MAX_ERROR_TEXT ? s.slice(0, MAX_ERROR_TEXT - 1) + "…" : s;
}

function oneError(e: Error): string {
  return `${e.name}: ${e.message}`;
}

/** The stored text of a thrown value (docs/protocol/exception-lifecycle.md#running-a-handler). */
export function errorText(e: unknown): string {
  if (!(e instanceof Error)) return cut(`non-error thrown: ${safeString(e)}`);
  const lines = [oneError(e)];
  const frames = (e.stack ?? "").split("\n").filter((l) => /^\s+at /.test(l)).slice(0, 10);
  lines.push(...frames.map((f) => f.trimEnd()));
  let cause: unknown = e.cause;
  for (let depth = 0; cause !== undefined && depth < 10; depth++) {
    lines.push(cause instanceof Error ? `caused by: ${oneError(cause)}` : `caused by: ${safeString(cause)}`);
    cause = cause instanceof Error ? cause.cause : undefined;
  }
  return cut(lines.join("\n"));
}

/**
 * A thrown value that is not an Error, readably: a string as itself, an object or array as JSON
 * (bigints as digits), anything JSON cannot show (a cycle, a hostile getter, undefined) by String().
 */
function safeString(v: unknown): string {
  if (typeof v === "string") return v;
  if (typeof v === "object" && v !== null) {
    try {
      const json = JSON.stringify(v, (_k, x: unknown) => (typeof x === "bigint" ? x.toString() : x));
      if (typeof json === "string") return json;
    } catch {
      // not JSON: String() below
    }
  }
  try {
    return String(v);
  } catch {
    return Object.prototype.toString.call(v);
  }
}

/**
 * Milliseconds until the next start after a failed run at attempt `a` with `d` delays
 * (docs/protocol/exception-lifecycle.md#attempts-and-budget): the initial backoff for the first failure, else baseDelay * exponent^n capped.
 */
export function backoffMs(
  a: number,
  d: number,
  p: { exceptionInitialBackoff: number; baseDelay: number; exponent: number; maxDelay: number },
): number {
  const used = a - d;
  if (used <= 0) return p.exceptionInitialBackoff;
  const n = used - 1;
  const v = Math.floor(p.baseDelay * Math.pow(p.exponent, n));
  if (!Number.isFinite(v)) return p.maxDelay;
  return Math.min(v, p.maxDelay);
}
