// Scheduled messages that wait for their due time (docs/guide/producing.md#scheduled-delivery): cancelling
// one, counting them, reading them for inspect().
import type { Runtime } from "../runtime.js";
import { SqlStreamsError } from "../errors.js";
import { tables } from "../sql/names.js";
import * as S from "../sql/scheduled.js";

export interface CancelledScheduled {
  /** The scheduled id. */
  id: string;
  /** The due time it had (database clock). */
  deliverAt: Date;
}

export interface ScheduledMessage<T = unknown> {
  /** The scheduled id. */
  id: string;
  key: string | null;
  payload: T;
  options: Record<string, unknown> | null;
  deliverAt: Date;
  createdAt: Date;
}

function scheduledId(id: unknown, call: string): string {
  const s = typeof id === "bigint" || typeof id === "number" ? String(id) : id;
  if (typeof s !== "string" || !/^[1-9][0-9]{0,18}$/.test(s) || BigInt(s) > 9223372036854775807n) {
    throw new SqlStreamsError("SQL0015", `${call} takes a scheduled id (a positive integer, as produce returned it with scheduled: true), got ${String(id)}`);
  }
  return s;
}

/**
 * Deletes a waiting scheduled message (and its idempotency key) so that no group ever sees it.
 * SQL0071 when none with that id waits: delivered or cancelled already, or never issued.
 */
export async function cancelScheduled(rt: Runtime, stream: string, id: unknown): Promise<CancelledScheduled> {
  const sid = scheduledId(id, "cancelScheduled()");
  const info = await rt.streamInfo(stream);
  const r = (await S.cancelScheduled.retry(rt.db, tables(rt.db.q, info.id), { id: sid })).rows[0];
  if (r.id !== null && r.due_at !== null) return { id: r.id, deliverAt: r.due_at };
  if (BigInt(sid) <= BigInt(r.last)) {
    throw new SqlStreamsError(
      "SQL0071",
      `scheduled message ${sid} of stream ${stream} is not waiting: it was delivered at its due time (it is in the log under a new id) or cancelled already`,
      { stream, id: sid, reason: "gone" },
    );
  }
  throw new SqlStreamsError("SQL0071", `stream ${stream} never issued scheduled id ${sid} (its last is ${r.last})`, { stream, id: sid, reason: "unknown" });
}

/** One waiting message by scheduled id, or a key's waiting ones (earliest due first). */
export async function readScheduled<T>(rt: Runtime, stream: string, target: { id?: unknown; key?: string | null; limit: number }): Promise<ScheduledMessage<T>[]> {
  const id = target.id === undefined ? null : scheduledId(target.id, "inspect({ scheduled })");
  const info = await rt.streamInfo(stream);
  const r = await S.readScheduled.retry(rt.db, tables(rt.db.q, info.id), { id, key: target.key ?? null, limit: target.limit });
  return r.rows.map((x) => ({ id: x.id, key: x.message_key, payload: x.payload as T, options: x.options, deliverAt: x.due_at, createdAt: x.created_at }));
}
