import pg from "pg";
import { type Db, DEFAULT_STATEMENT_TIMEOUT_MS, type QueryHook, assertOpen, atEdge, transaction } from "./db.js";
import { SqlStreamsError } from "./errors.js";
import { EventLog, type Logger, consoleLogger } from "./log.js";
import { asPermissionError, migrateAll, systemVersion } from "./sql/migrate.js";
import { quoteIdent, schemaNames } from "./sql/names.js";
import * as Registry from "./sql/register.js";
import type { Runtime, StreamInfo } from "./runtime.js";
import { Stream } from "./stream.js";
import type { StreamDef } from "./typed.js";
import { validateSchemaName, validateStreamName } from "./validate.js";
import { SYSTEM_VERSION } from "./version.js";
import { type MaintainOptions, type MaintainReport, maintainStreams } from "./maintain/maintain.js";
import { DEFAULT_WAKE_WINDOW_MS, type Waker, boundWaker, claimWakes, notifyWaker, validateWakeOptions } from "./wake.js";

export interface SqlStreamsOptions {
  connectionString?: string;
  pool?: pg.Pool;
  schema?: string;
  /** Receives structured events (docs/guide/operations.md#log-events); default: one JSON line on stdout/stderr. */
  logger?: Logger;
  /** Called with every statement text before it is sent (inspection and tests). */
  onQuery?: QueryHook;
  /** Pool size when the client creates its pool (default 10). */
  maxConnections?: number;
  /**
   * Ceiling in ms of every statement outside a poll (inside a poll or drain the poll's deadline
   * bounds them too). A statement still unanswered then is abandoned, its connection destroyed,
   * and the call fails with SQL0050. Default 60 000; 100 to 3 600 000 (docs/guide/operations.md#timeouts).
   */
  statementTimeout?: number;
  /**
   * Wake on produce: after a produce or produceBatch commits, the groups of the stream whose wake
   * this client claims in Postgres are handed to the waker (docs/guide/producing.md#wake-on-produce).
   * A failing wake is logged (SQL0064), never thrown: the produce has committed.
   */
  waker?: Waker | "notify";
  /** At most one wake per group per this many ms, across every producer. Default 1 000; 100–600 000. */
  wakeWindow?: number;
}

export type { StreamInfo } from "./runtime.js";

const URL_SHAPE = "postgres://user@host:5432/database";

/**
 * SQL0001 for a connection string pg cannot use, before any connection: a postgres:// or
 * postgresql:// URL (or a socket path) that pg's own parser accepts. The string is never
 * repeated in the message: it may hold a password.
 */
function checkConnectionString(s: unknown): void {
  if (typeof s !== "string" || s.length === 0) throw new SqlStreamsError("SQL0001", "connectionString must be a non-empty string");
  if (!/^(postgres|postgresql|socket):/i.test(s) && !s.startsWith("/")) {
    throw new SqlStreamsError("SQL0001", `connectionString is malformed: expected a URL like ${URL_SHAPE}`);
  }
  try {
    // pg parses the string when a client is created (no connection is opened).
    new pg.Client({ connectionString: s });
  } catch (e) {
    throw new SqlStreamsError("SQL0001", `connectionString is malformed (${(e as Error).message}): expected a URL like ${URL_SHAPE}`, {}, e);
  }
}

export class SqlStreams implements Runtime {
  /** @internal */ readonly db: Db;
  private readonly ownsPool: boolean;
  private readyPromise: Promise<void> | undefined;
  private readonly streams = new Map<string, StreamInfo>();
  private waker: Waker | undefined;
  private readonly wakeWindow: number;

  constructor(opts: SqlStreamsOptions = {}) {
    if (typeof opts !== "object" || opts === null) throw new SqlStreamsError("SQL0001", "options must be an object");
    const hasUrl = opts.connectionString !== undefined;
    const hasPool = opts.pool !== undefined;
    if (hasUrl === hasPool) {
      throw new SqlStreamsError("SQL0001", "pass exactly one of connectionString and pool", {
        connectionString: hasUrl ? "(set)" : "(unset)",
        pool: hasPool ? "(set)" : "(unset)",
      });
    }
    if (hasUrl) checkConnectionString(opts.connectionString);
    // A given pool's own connection string, when it has one, is held to the same rule.
    const poolUrl = hasPool ? (opts.pool as { options?: { connectionString?: unknown } }).options?.connectionString : undefined;
    if (typeof poolUrl === "string" && poolUrl !== "") checkConnectionString(poolUrl);
    const schema = validateSchemaName(opts.schema ?? "sqlstreams");
    const statementTimeout = opts.statementTimeout ?? DEFAULT_STATEMENT_TIMEOUT_MS;
    if (typeof statementTimeout !== "number" || !Number.isInteger(statementTimeout) || statementTimeout < 100 || statementTimeout > 3_600_000) {
      throw new SqlStreamsError("SQL0051", `statementTimeout = ${String(statementTimeout)}: must be an integer number of ms between 100 and 3600000`, {
        statementTimeout: typeof statementTimeout === "number" ? statementTimeout : typeof statementTimeout,
      });
    }
    validateWakeOptions(opts.waker, opts.wakeWindow);
    this.wakeWindow = opts.wakeWindow ?? DEFAULT_WAKE_WINDOW_MS;
    let pool: pg.Pool;
    if (hasPool) {
      pool = opts.pool as pg.Pool;
      this.ownsPool = false;
    } else {
      pool = new pg.Pool({
        connectionString: opts.connectionString,
        max: opts.maxConnections ?? 10,
        // A connection attempt that hangs gives its pool slot back (the caller gave up at its bound).
        connectionTimeoutMillis: statementTimeout,
        // A peer that vanished (NAT drop, frozen container) is noticed in seconds, not the OS's 2 h.
        keepAlive: true,
        keepAliveInitialDelayMillis: 10_000,
      });
      this.ownsPool = true;
    }
    const events = new EventLog(opts.logger ?? consoleLogger);
    // An idle pooled connection that dies (server restart, pg_terminate_backend) must never crash
    // the process; the pool drops it and the next statement connects again.
    pool.on("error", (err) => {
      events.emit({ level: "warn", code: "SQL0033", message: `idle database connection failed: ${err.message}` });
    });
    // A connection that dies while checked out (inside transaction(), a produce, a partition
    // upkeep) emits "error" on the client, which the pool does not listen to while it is out:
    // without a listener that is an uncaught exception. The statement in flight (and every later
    // one on that client) still rejects, so the caller sees the failure and discards the client.
    pool.on("connect", (c: pg.PoolClient) => {
      c.on("error", () => {});
    });
    this.db = { pool, schema, q: quoteIdent(schema), onQuery: opts.onQuery, events, closed: false, statementTimeout };
    this.waker = boundWaker(opts.waker === "notify" ? notifyWaker(this.db) : opts.waker);
  }

  get schema(): string {
    return this.db.schema;
  }

  /** Creates or upgrades the control plane and every stream family. Idempotent; safe to race. */
  migrate(): Promise<void> {
    return atEdge("migrate()", async () => {
      assertOpen(this.db);
      try {
        await transaction(this.db, (c) => migrateAll(this.db, c));
      } catch (e) {
        throw asPermissionError(e);
      }
      this.readyPromise = Promise.resolve();
    });
  }

  /** Ends the pool this client created (never a pool it was given). */
  async close(): Promise<void> {
    if (this.db.closed) return;
    this.db.closed = true;
    if (this.ownsPool) await this.db.pool.end();
  }

  /** A stream handle, by name or by a typed stream's definition (defineStream). */
  stream<T = unknown>(name: string | StreamDef<T>): Stream<T> {
    if (typeof name === "object" && name !== null) return new Stream<T>(this, validateStreamName(name.name), name.schema);
    return new Stream<T>(this, validateStreamName(name));
  }

  /** Runs maintenance (partitions, retention, sweeps) for every stream or the named ones. */
  maintain(opts: MaintainOptions & { streams?: string[] } = {}): Promise<Record<string, MaintainReport>> {
    return atEdge("maintain()", async () => {
      await this.ready();
      return maintainStreams(this, opts);
    });
  }

  /**
   * Wakes the groups of `stream` whose wake is not in flight (claimed in Postgres: at most one per
   * group per wakeWindow across every producer); returns the groups this call woke. produce() and
   * produceBatch() call it after their commit; after produceInTx, call it once your transaction
   * has committed. Needs the `waker` option (SQL0063); a waker that throws is logged (SQL0064).
   */
  wake(stream: string): Promise<string[]> {
    return atEdge("wake()", async () => {
      const waker = this.waker;
      if (!waker) throw new SqlStreamsError("SQL0063", "wake() needs a client created with the waker option");
      await this.ready();
      const groups = await claimWakes(this.db, validateStreamName(stream), this.wakeWindow);
      const results = await Promise.allSettled(groups.map(async (group) => waker.wake({ stream, group })));
      results.forEach((r, i) => {
        if (r.status === "rejected") {
          const err = r.reason as Error;
          this.db.events.emit({ level: "warn", code: "SQL0064", stream, group: groups[i], message: `waking ${stream}/${groups[i]} failed: ${err?.message ?? String(err)}` });
        }
      });
      return groups;
    });
  }

  /** @internal After a produce committed: wake the stream's groups if a waker is set; never throws. */
  async afterProduce(stream: string): Promise<void> {
    if (!this.waker) return;
    try {
      await this.wake(stream);
    } catch (e) {
      this.db.events.emit({ level: "warn", code: "SQL0064", stream, message: `claiming wakes for ${stream} failed: ${(e as Error)?.message ?? String(e)}` });
    }
  }

  /** Names of every registered stream. */
  streamNames(): Promise<string[]> {
    return atEdge("streamNames()", async () => {
      await this.ready();
      const r = await Registry.streamNames.query(this.db, this.db.pool, schemaNames(this.db.q), {});
      return r.rows.map((x) => x.name);
    });
  }

  /** Every registered consumer group as { stream, group }, by stream then group name. */
  consumerGroups(): Promise<{ stream: string; group: string }[]> {
    return atEdge("consumerGroups()", async () => {
      await this.ready();
      const r = await Registry.consumerGroups.query(this.db, this.db.pool, schemaNames(this.db.q), {});
      return r.rows;
    });
  }

  /** @internal Checks the schema version once per client, before its first database action. */
  ready(): Promise<void> {
    assertOpen(this.db);
    if (!this.readyPromise) {
      const p = (async () => {
        const v = await systemVersion(this.db, this.db.pool);
        if (v === 0) throw new SqlStreamsError("SQL0003", `schema ${this.db.schema} has no SQLStreams control plane`);
        if (v < SYSTEM_VERSION) throw new SqlStreamsError("SQL0003", `schema ${this.db.schema} is at version ${v}; this library needs ${SYSTEM_VERSION}`);
        if (v > SYSTEM_VERSION) throw new SqlStreamsError("SQL0004", `schema ${this.db.schema} is at version ${v}; this library understands ${SYSTEM_VERSION}`);
      })();
      this.readyPromise = p;
      p.catch(() => {
        if (this.readyPromise === p) this.readyPromise = undefined;
      });
    }
    return this.readyPromise;
  }

  /** @internal */
  forgetStream(name: string): void {
    this.streams.delete(name);
  }

  /** @internal Whether the control plane exists (register() migrates when it does not). */
  async controlPlaneVersion(): Promise<number> {
    assertOpen(this.db);
    return systemVersion(this.db, this.db.pool);
  }

  /** @internal Looks a stream up by name, cached for the client's life (payload limit for 60 s). */
  async streamInfo(name: string, fresh = false): Promise<StreamInfo> {
    const cached = this.streams.get(name);
    if (cached && !fresh && Date.now() - cached.maxPayloadFetchedAt < 60_000) return cached;
    await this.ready();
    const r = await Registry.streamByName.query(this.db, this.db.pool, schemaNames(this.db.q), { name });
    if (r.rowCount === 0) {
      this.streams.delete(name);
      throw new SqlStreamsError("SQL0009", `stream ${JSON.stringify(name)} is not registered`, { stream: name });
    }
    const row = r.rows[0];
    const info: StreamInfo = {
      id: row.id,
      name,
      partitionSize: BigInt(row.partition_size),
      maxPayloadBytes: row.max_payload_bytes,
      maxPayloadFetchedAt: Date.now(),
    };
    this.streams.set(name, info);
    return info;
  }
}
