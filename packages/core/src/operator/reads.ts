// The operator reads of a consumer group (docs/guide/operations.md): progress(), history(), failures().
import { rateLimitOf } from "../config.js";
import { SqlStreamsError, groupNotRegistered } from "../errors.js";
import { retentionStatus } from "../maintain/floor.js";
import * as Admin from "../sql/admin.js";
import * as History from "../sql/history.js";
import * as OperatorSql from "../sql/operator.js";
import * as Scheduled from "../sql/scheduled.js";
import { type GroupRef, lookupGroup, streamTables } from "./group.js";
import type { BlockedKey, FailureFilter, FailureRow, Progress, ProgressSample } from "./types.js";
import { validateFailureFilter } from "./validate.js";

/** Where the group stands (docs/guide/operations.md#progress). */
export async function progress(ref: GroupRef): Promise<Progress> {
  const db = ref.client.db;
  const { id, t } = await streamTables(ref);
  const r = await Admin.progress.retry(db, t, { streamId: id, group: ref.group });
  if (r.rowCount === 0) throw groupNotRegistered(ref.stream, ref.group);
  const x = r.rows[0];
  const ret = await retentionStatus(db, id);
  const sch = (await Scheduled.scheduledSummary.retry(db, t, {})).rows[0];
  const lag = BigInt(x.head) - BigInt(x.committed);
  return {
    stream: ref.stream, group: ref.group, paused: x.paused, head: x.head, claimed: x.claimed, committed: x.committed,
    lag: (lag < 0n ? 0n : lag).toString(), openLeases: x.open_leases, expiredLeases: x.expired_leases,
    exceptions: { ready: 0, deferred: 0, inflight: 0, dead: 0, superseded: 0, expired: 0, ...x.counts },
    oldestUnresolvedAgeMs: x.oldest_ms === null ? null : Math.max(0, Math.round(x.oldest_ms)),
    retention: { floor: ret.floor.toString(), heldBy: ret.held ? ret.heldBy?.group ?? null : null, held: ret.held, heldForMs: ret.heldForMs },
    concurrency: { max: x.max_concurrency, running: x.drains_running, capped: x.capped, perKey: x.key_concurrency },
    blockedKeys: x.blocked_keys,
    scheduled: { waiting: Number(sch.waiting), overdue: Number(sch.overdue), nextDueAt: sch.next_due_at },
    rateLimit: rateProgress(x),
  };
}

/** The group's rateLimit (burst filled) and how often its bucket held work back, or null without one. */
function rateProgress(x: { rate_limit: unknown; rate_limited: number; rate_limited_at: Date | null }): Progress["rateLimit"] {
  const r = rateLimitOf({ rateLimit: x.rate_limit ?? undefined });
  return r === undefined ? null : { ...r, limited: x.rate_limited, limitedAt: x.rate_limited_at };
}

/**
 * The group's progress samples written by maintain() (docs/protocol/data-model.md#progress-history),
 * oldest first: the newest `limit` (default 288, one day of 5-minute runs) since `since`.
 */
export async function history(ref: GroupRef, opts: { since?: Date | string | number; limit?: number }): Promise<ProgressSample[]> {
  if (typeof opts !== "object" || opts === null) throw new SqlStreamsError("SQL0015", "history(options): options must be an object");
  const limit = opts.limit ?? 288;
  if (!Number.isInteger(limit) || limit < 1 || limit > History.HISTORY_MAX_ROWS) {
    throw new SqlStreamsError("SQL0015", `history({ limit }) must be an integer between 1 and ${History.HISTORY_MAX_ROWS}, got ${String(limit)}`, { path: "limit" });
  }
  let since: Date | null = null;
  if (opts.since !== undefined) {
    since = opts.since instanceof Date ? opts.since : new Date(opts.since);
    if (Number.isNaN(since.getTime())) throw new SqlStreamsError("SQL0015", `history({ since }) must be a Date, an ISO time or epoch ms, got ${String(opts.since)}`, { path: "since" });
  }
  const { t, groupId } = await lookupGroup(ref);
  const db = ref.client.db;
  const r = await History.readProgress.query(db, db.pool, t, { groupId, since, limit });
  return r.rows.map((x) => ({
    sampledAt: x.sampled_at, head: x.head, committed: x.committed, lag: x.lag,
    exceptions: { ready: x.ready, deferred: x.deferred, inflight: x.inflight, dead: x.dead, superseded: x.superseded, expired: x.expired },
    oldestUnresolvedAgeMs: x.oldest_unresolved_ms === null ? null : Math.max(0, Math.round(x.oldest_unresolved_ms)),
  }));
}

/** The group's exception rows, newest first (docs/guide/operations.md#failures). */
export async function failures<T>(ref: GroupRef, opts: FailureFilter): Promise<FailureRow<T>[]> {
  const f = validateFailureFilter(opts);
  const { t, groupId } = await lookupGroup(ref);
  const k = f.keyset;
  const filter = { groupId, status: f.status, errorContains: f.errorContains, key: f.key, since: f.since, before: f.before, payload: f.payload, limit: f.limit, offset: f.offset };
  const r = k === null
    ? await OperatorSql.failureRows.page.retry(ref.client.db, t, filter)
    : await OperatorSql.failureRows[k.dir].retry(ref.client.db, t, { ...filter, cursorUpdatedAt: k.updatedAt, cursorId: k.id });
  const rows = r.rows.map((x) => ({
    messageId: x.message_id, key: x.message_key, status: x.status, payload: x.payload as T, attempts: x.attempts, delays: x.delays,
    lastError: x.last_error, canRunAfter: x.can_run_after, createdAt: x.created_at, updatedAt: x.updated_at, cursor: x.cursor,
  }));
  // The page before a cursor is read oldest first from the index; it is shown newest first like any other.
  return k?.dir === "before" ? rows.reverse() : rows;
}

/** Counting stops here unless the caller asks for more: a count is exact up to it. */
const COUNT_CAP = 1_000_000_000;

/**
 * How many rows failures() with the same filter would page through, counted no further than
 * `cap` + 1: an answer above `cap` means "more than cap" (the dashboard shows "10,000+").
 */
export async function countFailures(ref: GroupRef, opts: Omit<FailureFilter, "limit" | "offset" | "after" | "beforeCursor">, cap = COUNT_CAP): Promise<number> {
  if (!Number.isInteger(cap) || cap < 1 || cap > COUNT_CAP) throw new SqlStreamsError("SQL0015", `countFailures() cap must be an integer 1 … ${COUNT_CAP}, got ${String(cap)}`);
  const f = validateFailureFilter(opts);
  const { t, groupId } = await lookupGroup(ref);
  const r = await OperatorSql.countRows.retry(ref.client.db, t, {
    groupId, status: f.status, errorContains: f.errorContains, key: f.key, since: f.since, before: f.before, payload: f.payload, cap: cap + 1,
  });
  return r.rows[0].n;
}

/** The keys waiting behind an unresolved earlier message, oldest block first (docs/guide/operations.md#blocked-keys). */
export async function blockedKeys(ref: GroupRef, opts: { limit?: number }): Promise<BlockedKey[]> {
  if (typeof opts !== "object" || opts === null) throw new SqlStreamsError("SQL0015", "blockedKeys(options): options must be an object");
  for (const k of Object.keys(opts)) {
    if (k !== "limit") throw new SqlStreamsError("SQL0015", `blockedKeys(): unknown option ${k}; allowed: limit`, { path: k });
  }
  const limit = opts.limit ?? 100;
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000) {
    throw new SqlStreamsError("SQL0015", `blockedKeys({ limit }) must be an integer 1 … 1000, got ${String(limit)}`, { path: "limit" });
  }
  const { t, groupId } = await lookupGroup(ref);
  const r = await OperatorSql.blockedKeys.retry(ref.client.db, t, { groupId, limit });
  return r.rows.map((x) => ({
    key: x.key, blockingId: x.message_id, status: x.status, since: x.since,
    runsAfter: x.status === "inflight" ? null : x.can_run_after, attempts: x.attempts, waiting: Number(x.waiting),
  }));
}
