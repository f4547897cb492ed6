import type { Outcome } from "../outcome.js";

export interface Message<T = unknown> {
  id: string;
  payload: T;
  key: string | null;
  /** Zero-based attempt number of this run. */
  attempt: number;
  /** Delay() outcomes recorded so far. */
  delays: number;
  stream: string;
  group: string;
  createdAt: Date;
  /** Aborted at the message timeout; pass it to blocking calls. */
  signal: AbortSignal;
}

export type Handler<T = unknown> = (msg: Message<T>) => Promise<void | Outcome | unknown> | void | Outcome | unknown;

export interface CycleReport {
  stream: string;
  group: string;
  polls: number;
  paused: boolean;
  idle: boolean;
  rangesClaimed: number;
  rangesReclaimed: number;
  rangesResumed: number;
  rangesQuarantined: number;
  rangesPartial: number;
  started: number;
  succeeded: number;
  failed: number;
  dead: number;
  delayed: number;
  deferred: number;
  superseded: number;
  notStarted: number;
  /** Messages not started before their expiry (docs/guide/producing.md#expiry), now in status expired. */
  expired: number;
  /** Exception runs whose lease expired before an outcome was recorded, charged as a failure. */
  leaseExpired: number;
  killed: number;
  leaseLost: number;
  /** Polls that found the group at its maxConcurrency and returned without claiming (docs/guide/configuration.md#maxconcurrency). */
  capped: number;
  /**
   * Claims and reservations the group's rateLimit cut short or left empty: the messages held back
   * wait, uncharged (docs/guide/configuration.md#ratelimit).
   */
  rateLimited: number;
  committedBefore: string;
  committedAfter: string;
  durationMs: number;
}

export const COUNTERS = [
  "rangesClaimed", "rangesReclaimed", "rangesResumed", "rangesQuarantined", "rangesPartial", "started",
  "succeeded", "failed", "dead", "delayed", "deferred", "superseded", "notStarted", "expired", "leaseExpired", "killed", "leaseLost", "capped", "rateLimited",
] as const;
export type Counter = (typeof COUNTERS)[number];

export function emptyCycleReport(stream: string, group: string): CycleReport {
  return {
    stream, group, polls: 0, paused: false, idle: false,
    rangesClaimed: 0, rangesReclaimed: 0, rangesResumed: 0, rangesQuarantined: 0, rangesPartial: 0,
    started: 0, succeeded: 0, failed: 0, dead: 0, delayed: 0, deferred: 0, superseded: 0,
    notStarted: 0, expired: 0, leaseExpired: 0, killed: 0, leaseLost: 0, capped: 0, rateLimited: 0,
    committedBefore: "0", committedAfter: "0", durationMs: 0,
  };
}

/**
 * Sums two reports of one group, the earlier first: counters, polls and durationMs add up,
 * committedBefore is the earlier one's (unless it ran no poll), everything else the later one's.
 * The one merge used by drain(), the poll function and `sqlstreams dev`.
 */
export function mergeReports(a: CycleReport, b: CycleReport): CycleReport {
  const out: CycleReport = { ...b, polls: a.polls + b.polls, durationMs: a.durationMs + b.durationMs };
  if (a.polls > 0) out.committedBefore = a.committedBefore;
  for (const k of COUNTERS) out[k] = a[k] + b[k];
  return out;
}
