// The one place statements are sent: the query hook, transient-error retries and transactions.
import pg from "pg";
import { SqlStreamsError } from "./errors.js";
import type { EventLog } from "./log.js";
import { setTimeout as sleep } from "node:timers/promises";

export type Queryable = pg.Pool | pg.PoolClient;
export type QueryHook = (text: string, values: readonly unknown[] | undefined) => void;

export interface Db {
  pool: pg.Pool;
  schema: string;
  /** The validated schema name, double-quoted for SQL text. */
  q: string;
  onQuery?: QueryHook;
  events: EventLog;
  closed: boolean;
}

const TRANSIENT = new Set(["40001", "40P01", "55P03", "57P01", "57P02", "57P03", "08000", "08001", "08003", "08004", "08006", "53300"]);
const NETWORK = new Set(["ECONNREFUSED", "ECONNRESET", "EPIPE", "ETIMEDOUT", "ENOTFOUND", "EAI_AGAIN"]);
export const RETRY_PAUSES = [100, 200, 400];

/** True for errors worth repeating a statement that is safe to repeat (SPEC §3.8, §5.8). */
export function isTransient(e: unknown): boolean {
  const err = e as { code?: string; message?: string } | null;
  if (!err) return false;
  if (err.code && (TRANSIENT.has(err.code) || NETWORK.has(err.code))) return true;
  const m = String(err.message ?? "");
  return /Connection terminated|connection timeout|Client has encountered a connection error|terminating connection/i.test(m);
}

export function assertOpen(db: Db): void {
  if (db.closed) throw new SqlStreamsError("SQL0002", "the client was closed");
}

export async function query<R extends pg.QueryResultRow = pg.QueryResultRow>(
  db: Db,
  on: Queryable,
  text: string,
  values?: unknown[],
): Promise<pg.QueryResult<R>> {
  db.onQuery?.(text, values);
  return on.query<R>(text, values);
}

/** Runs a statement that is safe to repeat, retrying transient failures (100, 200, 400 ms). */
export async function queryRetry<R extends pg.QueryResultRow = pg.QueryResultRow>(
  db: Db,
  text: string,
  values?: unknown[],
): Promise<pg.QueryResult<R>> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await query<R>(db, db.pool, text, values);
    } catch (e) {
      if (attempt >= RETRY_PAUSES.length || !isTransient(e)) throw e;
      await sleep(RETRY_PAUSES[attempt]);
    }
  }
}

/** Runs fn inside BEGIN/COMMIT on one pooled connection; rolls back on error. */
export async function transaction<T>(db: Db, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  const c = await db.pool.connect();
  let broken = false;
  try {
    await query(db, c, "BEGIN");
    const out = await fn(c);
    await query(db, c, "COMMIT");
    return out;
  } catch (e) {
    try {
      await c.query("ROLLBACK");
    } catch {
      broken = true;
    }
    throw e;
  } finally {
    c.release(broken ? true : undefined);
  }
}

/** Like transaction(), retrying the whole transaction on transient errors before COMMIT is sent. */
export async function transactionRetry<T>(db: Db, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await transaction(db, fn);
    } catch (e) {
      if (attempt >= RETRY_PAUSES.length || !isTransient(e)) throw e;
      await sleep(RETRY_PAUSES[attempt]);
    }
  }
}
