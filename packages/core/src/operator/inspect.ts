// The operator's view of one message: the message itself and, for every consumer group of its
// stream, where it stands and its delivery_log timeline (docs/guide/operations.md#inspect).
import { SqlStreamsError } from "../errors.js";
import type { Runtime } from "../runtime.js";
import { tables } from "../sql/cycle.js";
import * as OperatorSql from "../sql/operator.js";
import { validateKey } from "../validate.js";
import { type ScheduledMessage, readScheduled } from "../produce/scheduled.js";

/**
 * Where a message stands for one group: `waiting` (above the claimed cursor, not yet reached),
 * `claimed` (inside a claimed range that has not committed yet), `resolved` (at or below the
 * committed cursor with no exception row), or `exception` (it has an exception row: see `row`).
 */
type ExceptionStatus = "ready" | "deferred" | "inflight" | "dead" | "superseded" | "expired";

export type MessagePosition = "waiting" | "claimed" | "resolved" | "exception";

export interface TimelineEntry {
  attempt: number;
  status: string;
  error: string;
  at: Date;
}

export interface GroupView {
  group: string;
  paused: boolean;
  position: MessagePosition;
  claimed: string;
  committed: string;
  row: null | {
    status: ExceptionStatus;
    attempts: number;
    delays: number;
    canRunAfter: Date;
    lastError: string | null;
    leaseExpiresAt: Date | null;
    concurrency: string;
    createdAt: Date;
    updatedAt: Date;
  };
  timeline: TimelineEntry[];
}

export interface InspectedMessage<T = unknown> {
  stream: string;
  id: string;
  key: string | null;
  compactionRank: string | null;
  payload: T;
  options: Record<string, unknown> | null;
  createdAt: Date;
  groups: GroupView[];
  /**
   * A message that waits for its due time (docs/guide/producing.md#scheduled-delivery): `id` is
   * its scheduled id, no group has seen it (`groups` is empty), and it enters the log at `deliverAt`.
   */
  scheduled?: { deliverAt: Date };
}

export interface InspectTarget {
  id?: string | number | bigint;
  key?: string;
  /** A waiting scheduled message by its scheduled id (what produce returned with scheduled: true). */
  scheduled?: string | number | bigint;
  /** With `key`: how many of the key's messages, newest first (1 … 100, default 10). */
  limit?: number;
}

export async function inspectMessages<T>(rt: Runtime, stream: string, target: InspectTarget): Promise<InspectedMessage<T>[]> {
  if (typeof target !== "object" || target === null || [target.id, target.key, target.scheduled].filter((x) => x !== undefined).length !== 1) {
    throw new SqlStreamsError("SQL0015", "inspect() takes exactly one of { id }, { key } or { scheduled }");
  }
  if (target.scheduled !== undefined) return inspectScheduled<T>(rt, stream, target.scheduled);
  let id: string | null = null;
  if (target.id !== undefined) {
    const s = typeof target.id === "bigint" || typeof target.id === "number" ? String(target.id) : target.id;
    if (typeof s !== "string" || !/^[0-9]{1,19}$/.test(s)) throw new SqlStreamsError("SQL0015", `inspect id must be a message id (a non-negative integer), got ${String(target.id)}`);
    id = s;
  }
  const key = target.key === undefined ? null : validateKey(target.key, "key");
  const limit = target.limit ?? 10;
  if (!Number.isInteger(limit) || limit < 1 || limit > 100) throw new SqlStreamsError("SQL0015", `inspect limit must be an integer 1 … 100, got ${String(limit)}`);
  const info = await rt.streamInfo(stream);
  const db = rt.db;
  const t = tables(db.q, info.id);
  const msgs = await OperatorSql.messagesById.query(db, db.pool, t, { id, key, limit: id !== null ? 1 : limit });
  // A key's messages still waiting for their due time come first: they are the key's latest.
  const waiting = key === null ? [] : (await readScheduled<T>(rt, stream, { key, limit })).map((m) => scheduledView(stream, m));
  if (msgs.rows.length === 0 && waiting.length === 0) {
    throw new SqlStreamsError(
      "SQL0058",
      id !== null ? `stream ${stream} has no message ${id}` : `stream ${stream} has no message with key ${JSON.stringify(key)}`,
      { stream, id, key },
    );
  }
  const out: InspectedMessage<T>[] = waiting;
  for (const m of msgs.rows) {
    const groups = await OperatorSql.groupStates.query(db, db.pool, t, { streamId: info.id, messageId: m.id });
    const log = await OperatorSql.timeline.query(db, db.pool, t, { messageId: m.id });
    const mid = BigInt(m.id);
    out.push({
      stream, id: m.id, key: m.message_key, compactionRank: m.compaction_rank, payload: m.payload as T, options: m.options, createdAt: m.created_at,
      groups: groups.rows.map((g) => ({
        group: g.name,
        paused: g.paused,
        claimed: g.claimed,
        committed: g.committed,
        position: g.status !== null ? "exception" : mid <= BigInt(g.committed) ? "resolved" : mid <= BigInt(g.claimed) ? "claimed" : "waiting",
        row: g.status === null ? null : {
          status: g.status, attempts: g.attempts, delays: g.delays, canRunAfter: g.can_run_after, lastError: g.last_error,
          leaseExpiresAt: g.lease_expires_at, concurrency: g.concurrency, createdAt: g.row_created_at, updatedAt: g.row_updated_at,
        },
        timeline: log.rows.filter((l) => l.group_id === g.group_id).map((l) => ({ attempt: l.attempt, status: l.status, error: l.error, at: l.attempted_at })),
      })),
    });
  }
  return out;
}

function scheduledView<T>(stream: string, m: ScheduledMessage<T>): InspectedMessage<T> {
  return { stream, id: m.id, key: m.key, compactionRank: null, payload: m.payload, options: m.options, createdAt: m.createdAt, groups: [], scheduled: { deliverAt: m.deliverAt } };
}

async function inspectScheduled<T>(rt: Runtime, stream: string, id: string | number | bigint): Promise<InspectedMessage<T>[]> {
  const found = await readScheduled<T>(rt, stream, { id, limit: 1 });
  if (found.length === 0) {
    throw new SqlStreamsError("SQL0058", `stream ${stream} has no scheduled message ${String(id)} waiting (delivered, cancelled, or never issued)`, { stream, scheduled: String(id) });
  }
  return found.map((m) => scheduledView(stream, m));
}
