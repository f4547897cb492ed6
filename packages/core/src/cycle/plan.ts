// What an outcome writes (docs/protocol/exception-lifecycle.md#first-delivery and docs/protocol/exception-lifecycle.md#retries), in one place. Pure: a first delivery is the
// exception table's row at attempts 0, delays 0 that does not exist yet.
import type { DeliveryLogMode, ResolvedMessage } from "../config.js";
import { type Classified, backoffMs } from "../outcome.js";
import type { Counter } from "./types.js";

export type RunOutcome =
  | Classified
  | { kind: "deferred"; reason: string }
  | { kind: "superseded"; head: string }
  /** Not started before the message's expiry (docs/guide/producing.md#expiry): never run. */
  | { kind: "expired" };

export interface RowWrite {
  /** "delete" removes the row (or writes none on a first delivery). */
  status: "delete" | "ready" | "dead" | "deferred" | "superseded" | "expired";
  attempts: number;
  delays: number;
  /** Milliseconds from now() until can_run_after; null keeps it. */
  runAfterMs: number | null;
  /** New last_error; null keeps the stored one. */
  lastError: string | null;
}
export interface LogWrite {
  attempt: number;
  status: "failure" | "delayed" | "deferred" | "superseded" | "success" | "expired" | "killed";
  error: string;
}
export interface Plan {
  row: RowWrite;
  log: LogWrite | null;
  counter: Counter;
}

/** The last_error of a message that expired before this group started it. */
export const EXPIRED_TEXT = "expired: not started by this group before its expiry";

export function plan(
  o: RunOutcome,
  a: number,
  d: number,
  m: ResolvedMessage,
  initialBackoff: number,
  mode: DeliveryLogMode,
): Plan {
  const log = (l: LogWrite): LogWrite | null => (mode === "off" || (mode === "failures" && l.status === "success") ? null : l);
  switch (o.kind) {
    case "success":
      return { row: { status: "delete", attempts: a, delays: d, runAfterMs: null, lastError: null }, log: log({ attempt: a, status: "success", error: "" }), counter: "succeeded" };
    case "failure": {
      const dead = a - d >= m.maxRetries;
      return dead
        ? { row: { status: "dead", attempts: a, delays: d, runAfterMs: null, lastError: o.error }, log: log({ attempt: a, status: "failure", error: o.error }), counter: "dead" }
        : {
            row: { status: "ready", attempts: a + 1, delays: d, runAfterMs: backoffMs(a, d, { exceptionInitialBackoff: initialBackoff, ...m }), lastError: o.error },
            log: log({ attempt: a, status: "failure", error: o.error }),
            counter: "failed",
          };
    }
    case "permanent":
      return { row: { status: "dead", attempts: a, delays: d, runAfterMs: null, lastError: o.error }, log: log({ attempt: a, status: "failure", error: o.error }), counter: "dead" };
    case "delay": {
      if (m.maxDelays > 0 && d >= m.maxDelays) {
        const text = `SQL0025 delay limit reached: ${m.maxDelays} delays`;
        return { row: { status: "dead", attempts: a, delays: d, runAfterMs: null, lastError: text }, log: log({ attempt: a, status: "failure", error: text }), counter: "dead" };
      }
      return { row: { status: "ready", attempts: a + 1, delays: d + 1, runAfterMs: o.ms, lastError: o.error }, log: log({ attempt: a, status: "delayed", error: o.error }), counter: "delayed" };
    }
    case "deferred":
      return { row: { status: "deferred", attempts: a, delays: d, runAfterMs: 0, lastError: null }, log: log({ attempt: a, status: "deferred", error: o.reason }), counter: "deferred" };
    case "expired":
      return { row: { status: "expired", attempts: a, delays: d, runAfterMs: null, lastError: EXPIRED_TEXT }, log: null, counter: "expired" };
    case "superseded":
      return { row: { status: "superseded", attempts: a, delays: d, runAfterMs: null, lastError: null }, log: log({ attempt: a, status: "superseded", error: `superseded by ${o.head}` }), counter: "superseded" };
  }
}

/** The row of an inflight run whose lease expired (docs/protocol/crash-recovery.md#the-kill-backstop). */
export function planExpired(
  a: number,
  d: number,
  lastError: string | null,
  m: ResolvedMessage,
  initialBackoff: number,
): { status: "ready" | "dead"; attempts: number; runAfterMs: number | null; lastError: string | null; log: LogWrite } {
  if (a - d >= m.maxRetries) {
    const text = `${lastError ?? ""} [killed: crash-loop hit max attempts]`;
    return { status: "dead", attempts: a, runAfterMs: null, lastError: text, log: { attempt: a, status: "killed", error: text } };
  }
  return {
    status: "ready",
    attempts: a + 1,
    runAfterMs: backoffMs(a, d, { exceptionInitialBackoff: initialBackoff, ...m }),
    lastError,
    log: { attempt: a, status: "expired", error: "lease expired before an outcome was recorded" },
  };
}
