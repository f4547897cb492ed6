// Wake on produce (docs/producing.md#wake-on-produce): after a produce commits, the client claims
// a wake for each group of the stream in Postgres (at most one per group per window across every
// producer) and hands the claimed ones to the waker, which starts the group's poller (a Lambda
// `Event` invocation, or `sqlstreams dev` locally). The schedule stays the safety net.
import { type Db, query } from "./db.js";
import { SqlStreamsError } from "./errors.js";
import * as W from "./sql/wake.js";

/** A group whose poller should start now. */
export interface WakeTarget {
  stream: string;
  group: string;
}

/** Starts pollers. Must return quickly (start, not run, the poller); a throw is logged (SQL0064). */
export interface Waker {
  wake(target: WakeTarget): Promise<void> | void;
}

export const DEFAULT_WAKE_WINDOW_MS = 1_000;

/**
 * The NOTIFY channel of the built-in `waker: "notify"`: the payload is JSON `{ schema, stream,
 * group }`, sent by the client's own connection. `sqlstreams dev` listens on it.
 */
export const WAKE_CHANNEL = "sqlstreams_wake";

export function validateWakeOptions(waker: unknown, window: unknown): void {
  if (waker !== undefined && waker !== "notify" && (typeof waker !== "object" || waker === null || typeof (waker as Waker).wake !== "function")) {
    throw new SqlStreamsError("SQL0063", "waker must be \"notify\" or an object with a wake({ stream, group }) function", { waker: typeof waker });
  }
  if (window !== undefined && (typeof window !== "number" || !Number.isInteger(window) || window < 100 || window > 600_000)) {
    throw new SqlStreamsError("SQL0063", `wakeWindow = ${String(window)}: must be an integer number of ms between 100 and 600000`, { wakeWindow: window });
  }
}

/** Claims the wakes of `stream`'s groups; returns the groups this call must wake. */
export async function claimWakes(db: Db, stream: string, windowMs: number): Promise<string[]> {
  const r = await query<{ name: string }>(db, db.pool, W.claimWakes(db.q), [stream, windowMs]);
  return r.rows.map((x) => x.name);
}

/** Releases a group's wake (its poller is idle); true when a produce asked for another drain meanwhile. */
export async function releaseWake(db: Db, stream: string, group: string): Promise<boolean> {
  const r = await query<{ pending: boolean }>(db, db.pool, W.releaseWake(db.q), [stream, group]);
  return r.rows[0]?.pending ?? false;
}

/** The built-in `waker: "notify"`: a NOTIFY on WAKE_CHANNEL (for local schedulers such as `sqlstreams dev`). */
export function notifyWaker(db: Db): Waker {
  return {
    async wake(t: WakeTarget): Promise<void> {
      await query(db, db.pool, "SELECT pg_notify($1, $2)", [WAKE_CHANNEL, JSON.stringify({ schema: db.schema, stream: t.stream, group: t.group })]);
    },
  };
}
