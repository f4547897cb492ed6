// Wake on produce (docs/guide/producing.md#wake-on-produce): after a produce commits, the client claims
// a wake for each group of the stream in Postgres (at most one per group per window across every
// producer) and hands the claimed ones to the waker, which starts the group's poller (a Lambda
// `Event` invocation, or `sqlstreams dev` locally). The schedule stays the safety net.
//
// A wake never holds a producer: the claim waits at most WAKE_LOCK_TIMEOUT_MS for a throttle
// row another session holds, and the waker at most WAKE_TIMEOUT_MS; past either, the produce
// returns (it has committed) with a SQL0064 warning, and the group's schedule polls the message.
import { type Db, query, transaction } from "./db.js";
import { SqlStreamsError } from "./errors.js";
import { localLockTimeout } from "./sql/catalog.js";
import { schemaNames } from "./sql/names.js";
import * as wakeStatements from "./sql/wake.js";

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

/** How long a produce waits for the waker before it returns (the wake goes on unobserved). */
export const WAKE_TIMEOUT_MS = 1_000;

/** How long the claim waits for a group's wake_throttle row locked by another session. */
export const WAKE_LOCK_TIMEOUT_MS = 250;

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

/**
 * Claims the wakes of `stream`'s groups; returns the groups this call must wake. A throttle row
 * locked by another session for longer than WAKE_LOCK_TIMEOUT_MS: no wake, a SQL0064 warning.
 */
export async function claimWakes(db: Db, stream: string, windowMs: number): Promise<string[]> {
  try {
    return await transaction(db, async (c) => {
      await query(db, c, localLockTimeout(`${WAKE_LOCK_TIMEOUT_MS}ms`));
      const r = await wakeStatements.claimWakes.query(db, c, schemaNames(db.q), { stream, windowMs });
      return r.rows.map((x) => x.name);
    });
  } catch (e) {
    if ((e as { code?: string })?.code !== "55P03") throw e;
    db.events.emit({ level: "warn", code: "SQL0064", stream, message: `no wake for ${stream}: another session has held its wake_throttle row for over ${WAKE_LOCK_TIMEOUT_MS} ms; the schedule picks the message up` });
    return [];
  }
}

/**
 * The waker as the client calls it: a wake that has not settled after `ms` rejects (logged as
 * SQL0064 by the caller) and is left to finish on its own, its late outcome ignored.
 */
export function boundWaker(w: Waker | undefined, ms: number = WAKE_TIMEOUT_MS): Waker | undefined {
  if (w === undefined) return undefined;
  return {
    wake(t: WakeTarget): Promise<void> {
      return new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`the waker did not answer within ${ms} ms (the schedule picks the message up)`)), ms);
        Promise.resolve()
          .then(() => w.wake(t))
          .then(
            () => {
              clearTimeout(timer);
              resolve();
            },
            (e: unknown) => {
              clearTimeout(timer);
              reject(e instanceof Error ? e : new Error(String(e)));
            },
          );
      });
    },
  };
}

/** Releases a group's wake (its poller is idle); true when a produce asked for another drain meanwhile. */
export async function releaseWake(db: Db, stream: string, group: string): Promise<boolean> {
  const r = await wakeStatements.releaseWake.query(db, db.pool, schemaNames(db.q), { stream, group });
  return r.rows[0]?.pending ?? false;
}

/** The built-in `waker: "notify"`: a NOTIFY on WAKE_CHANNEL (for local schedulers such as `sqlstreams dev`). */
export function notifyWaker(db: Db): Waker {
  return {
    async wake(t: WakeTarget): Promise<void> {
      await wakeStatements.notifyWake.query(db, db.pool, schemaNames(db.q), { channel: WAKE_CHANNEL, payload: JSON.stringify({ schema: db.schema, stream: t.stream, group: t.group }) });
    },
  };
}
