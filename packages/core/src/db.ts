// The one place statements are sent: the query hook, time bounds, transient-error retries and
// transactions. Every statement is bounded in time (docs/guide/operations.md#timeouts): by the
// remaining budget of the poll it belongs to, else by the client's statementTimeout. A
// statement still unanswered at its bound is abandoned: its connection is destroyed (a frozen
// backend or a silently dropped connection never answers) and the caller gets SQL0050.
import { AsyncLocalStorage } from "node:async_hooks";
import { performance } from "node:perf_hooks";
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
  /** Ceiling of every statement outside a poll's budget, ms (SqlStreamsOptions.statementTimeout). */
  statementTimeout: number;
}

export const DEFAULT_STATEMENT_TIMEOUT_MS = 60_000;

const TRANSIENT = new Set(["40001", "40P01", "55P03", "57P01", "57P02", "57P03", "08000", "08001", "08003", "08004", "08006", "53300"]);
const NETWORK = new Set(["ECONNREFUSED", "ECONNRESET", "EPIPE", "ETIMEDOUT", "ENOTFOUND", "EAI_AGAIN"]);
export const RETRY_PAUSES = [100, 200, 400];

/**
 * True when a pooler reports that the server connection behind it failed (PgBouncer's 08P01
 * "server conn crashed?", "server closed the connection unexpectedly", pooler login failures
 * other than a password), i.e. the statement did not run to completion.
 */
export function isPoolerServerFailure(e: unknown): boolean {
  const err = e as { code?: string; message?: string } | null;
  if (!err || err.code !== "08P01") return false;
  return !isPoolerAuthMessage(String(err.message ?? ""));
}

/**
 * True when a pooler refused the statement before any server saw it (PgBouncer's 08P01 for a
 * full pool or a server it cannot reach): repeating it is always safe.
 */
export function isPoolerNotSent(e: unknown): boolean {
  const err = e as { code?: string; message?: string } | null;
  if (!err || err.code !== "08P01") return false;
  return /query_wait_timeout|no more connections allowed|cannot connect to server|server login failed|pooler error: (no|too many)/i.test(String(err.message ?? ""));
}

/** PgBouncer reports a rejected password as 08P01 with this text (docs/guide/operations.md#credentials). */
export function isPoolerAuthMessage(m: string): boolean {
  return /password authentication failed|SASL authentication failed|no such user|authentication failed/i.test(m);
}

/** True for errors worth repeating a statement that is safe to repeat (docs/protocol/crash-recovery.md). */
export function isTransient(e: unknown): boolean {
  const err = e as { code?: string; message?: string } | null;
  if (!err) return false;
  if (err instanceof SqlStreamsError) return false; // SQL0050 and the like: the bound is spent
  if (err.code && (TRANSIENT.has(err.code) || NETWORK.has(err.code))) return true;
  if (isPoolerServerFailure(err)) return true;
  const m = String(err.message ?? "");
  return /Connection terminated|connection timeout|Client has encountered a connection error|terminating connection|server conn crashed|server closed the connection/i.test(m);
}

/** SQLSTATEs of a server that is there but takes no new connection now. */
const REFUSING = new Set(["53300", "57P03"]);
const UNREACHABLE_NETWORK = new Set([...NETWORK, "EHOSTUNREACH", "ENETUNREACH", "ECONNABORTED"]);

/**
 * The login refused because the database does not allow connections now (ALLOW_CONNECTIONS false,
 * as an operator sets it for maintenance): 55000 from CheckMyDatabase, a FATAL that ends the session.
 */
function isClosedDatabase(err: { code?: unknown; severity?: unknown; routine?: unknown }): boolean {
  return err.code === "55000" && (err.routine === "CheckMyDatabase" || err.severity === "FATAL");
}

/**
 * The one classifier of connection failures (docs/guide/operations.md#connection-errors): a database
 * that cannot be reached, does not exist, refuses new connections or the credentials, a
 * connection string pg cannot parse, or a connection lost mid-statement. Returns the coded error
 * (the pg error as its cause), or undefined for anything else (SqlStreamsErrors included).
 */
export function connectionFailure(e: unknown, what: string): SqlStreamsError | undefined {
  const err = e as { code?: unknown; message?: unknown } | null;
  if (typeof err !== "object" || err === null || e instanceof SqlStreamsError) return undefined;
  const code = typeof err.code === "string" ? err.code : "";
  const raw = typeof err.message === "string" && err.message ? err.message : code;
  const said = `${raw}${code && !raw.includes(code) ? ` (${code})` : ""}`;
  const coded = (c: "SQL0001" | "SQL0032" | "SQL0033", why: string) => new SqlStreamsError(c, `${what}: ${why}: ${said}`, code ? { reason: code } : {}, e);
  if (code === "ERR_INVALID_URL") return coded("SQL0001", "the connection string is malformed (expected a URL like postgres://user@host:5432/database)");
  if (code === "28P01" || code === "28000" || (code === "08P01" && isPoolerAuthMessage(raw))) return coded("SQL0032", "the database rejected the credentials");
  if (code === "3D000") return coded("SQL0033", "the database does not exist");
  if (REFUSING.has(code) || isClosedDatabase(err) || isPoolerNotSent(e)) return coded("SQL0033", "the database refuses new connections now (too many connections, starting up or shutting down, or closed to connections)");
  if (UNREACHABLE_NETWORK.has(code) || /timeout exceeded when trying to connect/i.test(raw)) return coded("SQL0033", "cannot reach the database");
  if (code.startsWith("08") || code === "57P01" || code === "57P02" || (!code && isTransient(e))) return coded("SQL0033", "the connection to the database failed");
  return undefined;
}

/**
 * Runs a public call: a connection failure leaves it as a coded error (connectionFailure), also
 * when a poll already reported it as SQL0033 (its cause is classified, so a drain and a produce
 * word the same failure alike, and the poll's details, its stream and group, are kept); every
 * other error passes unchanged.
 */
export async function atEdge<T>(what: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (e) {
    const poll = e instanceof SqlStreamsError && e.code === "SQL0033" ? e : undefined;
    const coded = connectionFailure(poll ? poll.cause : e, what);
    if (coded && poll) Object.assign(coded.details, { ...poll.details, ...coded.details });
    throw coded ?? e;
  }
}

export function assertOpen(db: Db): void {
  if (db.closed) throw new SqlStreamsError("SQL0002", "the client was closed");
}

/** The end of the current poll's budget, on the monotonic clock (performance.now()). */
interface Budget {
  end: number;
  what: string;
}
const budgets = new AsyncLocalStorage<Budget>();

/**
 * Runs fn with every statement it sends (directly or through awaited calls) bounded by
 * `deadline` + `margin`; without a deadline, fn runs with the client's statementTimeout only.
 * The deadline is already on the monotonic clock (performance.now(), clock.ts): the consumer
 * converted the caller's epoch ms once, so wall-clock steps cannot stretch or cut the budget.
 */
export function withBudget<T>(deadline: number | undefined, margin: number, what: string, fn: () => Promise<T>): Promise<T> {
  if (deadline === undefined) return fn();
  const end = deadline + margin;
  return budgets.run({ end, what }, fn);
}

/** Runs fn outside any poll's budget: for background work that outlives the poll (abandoned runs). */
export function outsideBudget<T>(fn: () => T): T {
  return budgets.exit(fn);
}

/** How long the next statement may take, ms; SQL0050 when the poll's budget is already spent. */
export function statementBound(db: Db): number {
  const b = budgets.getStore();
  if (!b) return db.statementTimeout;
  const left = Math.floor(b.end - performance.now());
  if (left <= 0) throw timeoutError(`${b.what}: its deadline has passed; the statement was not sent`, 0, false);
  return Math.min(left, db.statementTimeout);
}

function timeoutError(message: string, ms: number, sent: boolean, cause?: unknown): SqlStreamsError {
  return new SqlStreamsError("SQL0050", message, { timeoutMs: ms, sent }, cause);
}

/** Clients whose connection this module destroyed: they must leave the pool, never be reused. */
const destroyed = new WeakSet<pg.PoolClient>();

function destroy(c: pg.PoolClient): void {
  destroyed.add(c);
  const stream = (c as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream;
  try {
    stream?.destroy();
  } catch {
    // already gone
  }
}

export function isDestroyed(c: pg.PoolClient): boolean {
  return destroyed.has(c);
}

/** Races p against ms; on expiry calls onLate (with the late value, if it ever comes) and rejects. */
function within<T>(p: Promise<T>, ms: number, onExpire: () => void, expired: () => Error, onLate?: (v: T) => void): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let done = false;
    const timer = setTimeout(() => {
      done = true;
      onExpire();
      reject(expired());
    }, ms);
    p.then(
      (v) => {
        if (done) return onLate?.(v);
        done = true;
        clearTimeout(timer);
        resolve(v);
      },
      (e: unknown) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        reject(e instanceof Error ? e : new Error(String(e)));
      },
    );
  });
}

/** Takes a pooled connection within the statement's bound (a new one may hang in a dead network). */
export function connect(db: Db, ms: number = statementBound(db)): Promise<pg.PoolClient> {
  return within(
    db.pool.connect(),
    ms,
    () => {},
    () => timeoutError(`no database connection within ${ms} ms (network, pooler or server not answering); nothing was sent`, ms, false),
    (late) => late.release(true),
  );
}

/**
 * A statement sent behind another in the same round trip and transaction (see PairQuery), and how
 * its result joins the first's into the one answer the caller gets.
 */
export interface Then {
  text: string;
  values: unknown[];
  join: (first: pg.QueryResult, second: pg.QueryResult) => pg.QueryResult;
}

interface Wire {
  parse(m: { text: string }): void;
  bind(m: { values: unknown[]; valueMapper: (v: unknown) => unknown }): void;
  describe(m: { type: "P"; name: string }): void;
  execute(m: object): void;
  sync(): void;
}
type PgQueryClass = new (config: { text: string; values: unknown[]; callback: (err: Error | null, res: unknown) => void }) => { text: string; values: unknown[] };
const PgQuery = (pg as unknown as { Query: PgQueryClass }).Query;
/** pg's own mapping of a parameter to the wire, the one its Query binds with. */
const prepareValue = (pg as unknown as { utils: { prepareValue(v: unknown): unknown } }).utils.prepareValue;

/**
 * Two statements in one round trip and one transaction: pg's Query, whose extended-protocol
 * messages (Parse, Bind, Describe, Execute) are written for both statements before the one Sync
 * that ends them. Without a Sync between them they run in one implicit transaction: the second
 * runs only if the first succeeded, sees what the first wrote, and (READ COMMITTED) takes a newer
 * snapshot. pg answers such a query with one result per statement. Used by the claim and its read
 * (docs/protocol/poll-cycle.md#the-claims-answer).
 */
class PairQuery extends PgQuery {
  constructor(text: string, values: unknown[], private readonly then: Then, callback: (err: Error | null, res: unknown) => void) {
    super({ text, values, callback });
  }

  /** Called by pg's Query.submit (corked) in place of its own single-statement prepare. */
  prepare(connection: Wire): void {
    for (const [text, values] of [[this.text, this.values], [this.then.text, this.then.values]] as const) {
      connection.parse({ text });
      connection.bind({ values, valueMapper: prepareValue });
      connection.describe({ type: "P", name: "" });
      connection.execute({});
    }
    connection.sync();
  }
}

function sendPair(c: pg.PoolClient, text: string, values: unknown[], then: Then): Promise<pg.QueryResult> {
  return new Promise((resolve, reject) => {
    const q = new PairQuery(text, values, then, (err, res) => {
      if (err) return reject(err);
      const both = res as pg.QueryResult[];
      if (!Array.isArray(both) || both.length !== 2) return reject(new Error(`expected two results from a statement pair, got ${Array.isArray(both) ? both.length : 1}`));
      resolve(then.join(both[0], both[1]));
    });
    (c as unknown as { query(q: object): void }).query(q);
  });
}

async function send<R extends pg.QueryResultRow>(c: pg.PoolClient, text: string, values: unknown[] | undefined, ms: number, then?: Then): Promise<pg.QueryResult<R>> {
  if (destroyed.has(c)) throw timeoutError("the connection was abandoned after an earlier statement timed out", 0, false);
  return within(
    then ? (sendPair(c, text, values ?? [], then) as Promise<pg.QueryResult<R>>) : c.query<R>(text, values),
    ms,
    () => destroy(c),
    () => timeoutError(`no answer from the database within ${ms} ms; the connection was discarded and the outcome of the statement is unknown`, ms, true),
  );
}

/** Sends one statement, or with `then` two in one round trip and transaction (PairQuery); onQuery sees each. */
export async function query<R extends pg.QueryResultRow = pg.QueryResultRow>(
  db: Db,
  on: Queryable,
  text: string,
  values?: unknown[],
  then?: Then,
): Promise<pg.QueryResult<R>> {
  const ms = statementBound(db);
  db.onQuery?.(text, values);
  if (then) db.onQuery?.(then.text, then.values);
  // A connection given by the caller (a transaction's client, produceInTx's pg.Client or PoolClient).
  if (on !== db.pool) return send<R>(on as pg.PoolClient, text, values, ms, then);
  const started = performance.now();
  const c = await connect(db, ms);
  let broken: Error | undefined;
  try {
    return await send<R>(c, text, values, Math.max(1, ms - Math.floor(performance.now() - started)), then);
  } catch (e) {
    broken = e as Error;
    throw e;
  } finally {
    // A connection whose statement failed with a connection error (or was abandoned) is not reused.
    c.release(broken && (destroyed.has(c) || isTransient(broken) || isConnectionError(broken)) ? broken : undefined);
  }
}

function isConnectionError(e: unknown): boolean {
  const code = (e as { code?: string } | null)?.code;
  return typeof code === "string" && (code.startsWith("08") || NETWORK.has(code));
}

/** Set by queryRetry when an earlier attempt failed, so it may have committed unheard. */
export interface RetryState {
  retried: boolean;
  /**
   * Called before a repeat: may find the work of an attempt whose reply was lost and return
   * the answer to use instead of repeating the statement (null: repeat it).
   */
  recover?: () => Promise<pg.QueryResult | null>;
}

/**
 * Runs a statement that is safe to repeat, retrying transient failures (100, 200, 400 ms). A lost
 * reply can hide a commit: callers whose statement is not a pure repeat pass `state` and check
 * `retried` (docs/protocol/crash-recovery.md#unknown-commits).
 */
export async function queryRetry<R extends pg.QueryResultRow = pg.QueryResultRow>(
  db: Db,
  text: string,
  values?: unknown[],
  state?: RetryState,
  then?: Then,
): Promise<pg.QueryResult<R>> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await query<R>(db, db.pool, text, values, then);
    } catch (e) {
      if (attempt >= RETRY_PAUSES.length || !isTransient(e)) throw e;
      if (state) state.retried = true;
      await sleep(RETRY_PAUSES[attempt]);
      if (state?.recover) {
        try {
          const found = await state.recover();
          if (found) return found as pg.QueryResult<R>;
        } catch (e2) {
          if (!isTransient(e2)) throw e2;
        }
      }
    }
  }
}

/** Runs fn inside BEGIN/COMMIT on one pooled connection; rolls back on error. */
export async function transaction<T>(db: Db, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  const c = await connect(db, statementBound(db));
  let broken = false;
  try {
    await query(db, c, "BEGIN");
    const out = await fn(c);
    await query(db, c, "COMMIT");
    return out;
  } catch (e) {
    if (destroyed.has(c)) {
      broken = true;
    } else {
      try {
        // Bounded too: a ROLLBACK on a connection that stopped answering must not hang.
        await send(c, "ROLLBACK", undefined, Math.min(db.statementTimeout, 5_000));
      } catch {
        broken = true;
      }
    }
    throw e;
  } finally {
    c.release(broken || destroyed.has(c) ? true : undefined);
  }
}

/**
 * Like transaction(), retrying the whole transaction on transient errors. `attempt` > 0 tells fn
 * that an earlier attempt may have committed with its reply lost, so fn can look for its own work
 * first (docs/protocol/crash-recovery.md#unknown-commits).
 */
export async function transactionRetry<T>(db: Db, fn: (c: pg.PoolClient, attempt: number) => Promise<T>): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await transaction(db, (c) => fn(c, attempt));
    } catch (e) {
      if (attempt >= RETRY_PAUSES.length || !isTransient(e)) throw e;
      await sleep(RETRY_PAUSES[attempt]);
    }
  }
}
