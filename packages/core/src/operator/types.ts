// The public types of the operator calls on a consumer group (docs/guide/operations.md): what progress(),
// history() and failures() return, and what seek(), redrive() and discard() take.

export type ExceptionStatus = "ready" | "deferred" | "inflight" | "dead" | "superseded" | "expired";

export interface Progress {
  stream: string;
  group: string;
  paused: boolean;
  head: string;
  claimed: string;
  committed: string;
  /** head − committed, in ids. Lag 0 does not prove success: read exceptions.dead and exceptions.expired too. */
  lag: string;
  openLeases: number;
  expiredLeases: number;
  exceptions: Record<ExceptionStatus, number>;
  oldestUnresolvedAgeMs: number | null;
  /**
   * Retention of the whole stream: nothing above `floor` is removed. `heldBy` names the group
   * whose position holds expired messages back (this one or another), `heldForMs` for how long.
   */
  retention: { floor: string; heldBy: string | null; held: boolean; heldForMs: number | null };
  /**
   * maxConcurrency (docs/guide/configuration.md#maxconcurrency): the limit (null: unlimited),
   * the drains holding a live slot now, and the polls that found the group at its cap, ever;
   * `perKey` is keyConcurrency (docs/guide/configuration.md#keyconcurrency), 1 unless set.
   */
  concurrency: { max: number | null; running: number; capped: number; perKey: number };
  /** How many keys blockedKeys() would list without a limit (docs/guide/operations.md#blocked-keys). */
  blockedKeys: number;
  /**
   * The stream's messages waiting for their due time (docs/guide/producing.md#scheduled-delivery),
   * the same for every group of the stream: not in `head` or `lag` until they are moved to the log.
   */
  scheduled: { waiting: number; overdue: number; nextDueAt: Date | null };
  /**
   * rateLimit (docs/guide/configuration.md#ratelimit), null without one: the limit (burst filled),
   * how many claims and reservations its bucket cut short, ever, and when it last did.
   */
  rateLimit: { perSecond: number; burst: number; limited: number; limitedAt: Date | null } | null;
}

/**
 * A key whose next message waits behind an unresolved earlier one (docs/guide/operations.md#blocked-keys).
 * `waiting`: unresolved exception rows of the key after the blocking one, plus messages of the key
 * the group has not claimed yet.
 */
export interface BlockedKey {
  key: string;
  /** The key's lowest unresolved ordered message: the one the others wait for. */
  blockingId: string;
  /** ready (a retry, due or in backoff), deferred (a Delay) or inflight (running now). */
  status: "ready" | "deferred" | "inflight";
  /** When the blocking row entered its present state (the database clock). */
  since: Date;
  /** When it may run again (null while it runs). */
  runsAfter: Date | null;
  /** Attempts charged to the blocking message so far. */
  attempts: number;
  waiting: number;
}

/** One sample of progress_history_N (docs/protocol/data-model.md#progress-history). */
export interface ProgressSample {
  sampledAt: Date;
  head: string;
  committed: string;
  lag: string;
  exceptions: Record<ExceptionStatus, number>;
  oldestUnresolvedAgeMs: number | null;
}

export interface FailureRow<T = unknown> {
  messageId: string;
  key: string | null;
  status: ExceptionStatus;
  payload: T;
  attempts: number;
  delays: number;
  lastError: string | null;
  canRunAfter: Date;
  createdAt: Date;
  updatedAt: Date;
  /** This row's place in the newest-first order: pass it as failures({ after }) or ({ before }) for the next or previous page. */
  cursor: string;
}

/**
 * Which dead rows redrive() and discard() act on: ids, or a filter (every criterion given must
 * match; `all: true` when there is none). `limit` caps a filter (default 1000; unlimited with a rate).
 */
export type RedriveSelector =
  | { ids: (string | number | bigint)[] }
  | {
      errorContains?: string; key?: string; payloadContains?: unknown; deadSince?: Date | string | number;
      deadBefore?: Date | string | number; all?: boolean; limit?: number;
      /** Which rows the filter selects: dead (default) or expired (docs/guide/producing.md#expiry). By ids, both. */
      status?: "dead" | "expired";
    };

export type DeadSelector = RedriveSelector;

/** Filters of failures() (docs/guide/operations.md#failures): each one given must match. */
export interface FailureFilter {
  status?: "dead" | "expired" | "ready" | "deferred" | "inflight";
  /** 1 … 1000 rows (default 100), from `offset` (default 0) in newest-first order. */
  limit?: number;
  offset?: number;
  /**
   * Keyset paging, served by an index however deep the page (instead of `offset`): the rows after
   * the row whose `cursor` this is (the next page), or before it (the previous page, still newest first).
   */
  after?: string;
  beforeCursor?: string;
  /** The last error contains this text (case-insensitive). */
  errorContains?: string;
  key?: string;
  /** Rows last updated at or after / before. */
  since?: Date | string | number;
  before?: Date | string | number;
  /** jsonb containment: the payload contains this JSON (an object or array, e.g. { customer: 7 }). */
  payloadContains?: unknown;
}

/** How redrive() and discard() run: one transaction, or batches at a rate (docs/guide/operations.md#redrive). */
export interface BatchOptions {
  /** Recorded in the delivery log. */
  reason?: string;
  /** Rows per second: small transactions of `batchSize` rows, paced; each batch commits on its own. */
  rate?: number;
  /** Rows per transaction with a rate (default min(rate, 100)). */
  batchSize?: number;
  /** Stops between batches (what committed stays committed). */
  signal?: AbortSignal;
  /** Called after every committed batch with the running totals. */
  onBatch?: (progress: { done: number; skipped: number; batches: number }) => void;
}

export interface SeekTarget {
  id?: string | number | bigint;
  time?: Date | string | number;
}
