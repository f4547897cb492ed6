// One pg pool and one SqlStreams client per container, created on first use and reused across
// warm invocations. Credentials are fetched once; when Postgres (or PgBouncer, with 08P01)
// rejects them after a rotation, the secret is fetched again once and the pool is rebuilt.
// An idle connection is closed after a bound (docs/guide/deployment.md#idle-connections), so a
// poller that finished its drain gives its server slot to the others.
import pg from "pg";
import { SqlStreams, SqlStreamsError, type Logger, type Waker } from "@sqlstreams/core";
import { isTransient } from "@sqlstreams/core/internal";
import { wakerFromEnv } from "./wake.js";
import {
  type ConnectionSettings,
  type IamTokenSigner,
  type SecretReader,
  isAuthFailure,
  loadConnectionSettings,
  readSecretFromSecretsManager,
} from "./credentials.js";
import { setTimeout as sleep } from "node:timers/promises";

export interface DatabaseOptions {
  /** Where to read SQLSTREAMS_DB_SECRET_ARN / DATABASE_URL / SQLSTREAMS_* from. Default process.env. */
  env?: Record<string, string | undefined>;
  /** Schema of the SQLStreams tables. Default env SQLSTREAMS_SCHEMA, else the library default. */
  schema?: string;
  /** Pool size. Default 1: one connection per Lambda instance. */
  maxConnections?: number;
  /** Reads a secret's string. Default: Secrets Manager GetSecretValue. */
  readSecret?: SecretReader;
  /** Signs IAM authentication tokens (SQLSTREAMS_DB_IAM_USER). Default: @aws-sdk/rds-signer. */
  signIamToken?: IamTokenSigner;
  /** Receives the library's structured events. Default: the library's JSON-line logger. */
  logger?: Logger;
  /**
   * Wake on produce for the client's produces. Default: from the environment (SQLSTREAMS_WAKE=lambda
   * and SQLSTREAMS_WAKE_FUNCTIONS, set by `link: [streams]`); false: never.
   */
  waker?: Waker | "notify" | false;
  /**
   * Keep the connection open across warm invocations (default true: the next one skips the TLS
   * handshake). false closes it when the last running use() ends, so a database that scales to
   * zero (Neon, Aurora Serverless v2 with auto-pause) is not held awake by idle containers.
   * Default from SQLSTREAMS_DB_KEEP_CONNECTION (`false` to close).
   */
  keepConnection?: boolean;
  /**
   * Close the connection once no invocation has used it for this many milliseconds (default
   * 30 000; 0: keep it as long as the container lives). A running process closes it by timer; a
   * Lambda container is frozen between invocations, where no timer runs, so when the previous
   * wait between invocations already outlasted the bound the connection is closed as the
   * invocation ends instead. Never closed in the middle of an invocation. Cost: the next
   * invocation connects again (TCP + TLS + authentication). Default from
   * SQLSTREAMS_DB_IDLE_TIMEOUT_MS.
   */
  idleTimeout?: number;
  /** Extra pg pool settings (timeouts, application_name). Never pass credentials here. */
  pool?: Partial<pg.PoolConfig>;
}

interface Runtime {
  settings: ConnectionSettings;
  pool: pg.Pool;
  client: SqlStreams;
}

const CONNECT_PAUSES = [200, 500];
const DEFAULT_IDLE_TIMEOUT_MS = 30_000;
const IDLE_ENV = "SQLSTREAMS_DB_IDLE_TIMEOUT_MS";

function checkIdleTimeout(v: unknown, where: string): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0 || v > 2_147_483_647) {
    throw new SqlStreamsError(
      "SQL0015",
      `${where} must be a whole number of milliseconds from 0 (keep the connection) to 2147483647, got ${JSON.stringify(v) ?? String(v)}`,
      { path: where, value: typeof v === "string" ? v.slice(0, 100) : v },
    );
  }
  return v;
}

/**
 * Time since `at` in ms for a wait that may span a Lambda freeze: the larger of the monotonic and
 * the wall-clock reading, since a frozen container's monotonic clock may not advance.
 */
function elapsedSince(at: { mono: number; wall: number }): number {
  return Math.max(performance.now() - at.mono, Date.now() - at.wall);
}

/**
 * A failed connect worth trying again: what core repeats a statement for, and any timeout (pg's
 * pool reports "timeout exceeded when trying to connect" without a code).
 */
function isConnectTransient(e: unknown): boolean {
  return isTransient(e) || /timeout/i.test(String((e as { message?: string } | null)?.message ?? ""));
}

/** The database a function uses: lazily connected, cached, refreshed once after a rotation. */
export class DatabaseProvider {
  private readonly opts: DatabaseOptions;
  private settings: Promise<ConnectionSettings> | undefined;
  private runtime: Promise<Runtime> | undefined;
  private active = 0;
  /** When the last use() ended with no other running, for the wait before the next one. */
  private idleSince: { mono: number; wall: number } | undefined;
  /** The wait before the running use(), when there was one. */
  private lastWait: number | undefined;
  /** Closes the idle connection once the bound has passed with no use() running. */
  private idleTimer: NodeJS.Timeout | undefined;
  /** Number of times credentials were loaded (fetches of the secret or reads of DATABASE_URL). */
  credentialLoads = 0;

  constructor(opts: DatabaseOptions = {}) {
    if (opts.idleTimeout !== undefined) checkIdleTimeout(opts.idleTimeout, "DatabaseOptions.idleTimeout");
    this.opts = opts;
  }

  /** The idle bound in ms (0: none), from the options, else SQLSTREAMS_DB_IDLE_TIMEOUT_MS, else the default. */
  idleTimeout(): number {
    if (this.opts.idleTimeout !== undefined) return this.opts.idleTimeout;
    const raw = this.env()[IDLE_ENV]?.trim();
    if (!raw) return DEFAULT_IDLE_TIMEOUT_MS;
    return checkIdleTimeout(/^\d+$/.test(raw) ? Number(raw) : raw, IDLE_ENV);
  }

  private env(): Record<string, string | undefined> {
    return this.opts.env ?? process.env;
  }

  private loadSettings(): Promise<ConnectionSettings> {
    if (!this.settings) {
      this.credentialLoads++;
      const p = loadConnectionSettings(this.env(), this.opts.readSecret ?? readSecretFromSecretsManager, this.opts.signIamToken);
      this.settings = p;
      // A failed fetch is not cached: the next invocation tries again.
      p.catch(() => {
        if (this.settings === p) this.settings = undefined;
      });
    }
    return this.settings;
  }

  private async build(): Promise<Runtime> {
    const settings = await this.loadSettings();
    const env = this.env();
    const appName = (env.AWS_LAMBDA_FUNCTION_NAME ?? "sqlstreams").slice(0, 63);
    this.idleTimeout(); // an invalid SQLSTREAMS_DB_IDLE_TIMEOUT_MS fails before connecting
    const pool = new pg.Pool({
      application_name: appName,
      connectionTimeoutMillis: 10_000,
      // A peer that vanished (NAT drop, a container frozen between invocations) is noticed in
      // seconds; a statement that hangs anyway ends at its bound (docs/guide/troubleshooting.md#timeouts).
      keepAlive: true,
      keepAliveInitialDelayMillis: 10_000,
      // Between invocations the provider closes an idle connection itself (closeWhenIdle), so a
      // slow handler never loses its connection in the middle of an invocation.
      idleTimeoutMillis: 0,
      ...this.opts.pool,
      ...settings.config,
      max: this.opts.maxConnections ?? 1,
    });
    // An idle connection that dies while the container is frozen must not crash the runtime.
    pool.on("error", () => {});
    const schema = this.opts.schema ?? (env.SQLSTREAMS_SCHEMA || undefined);
    const waker = this.opts.waker === undefined ? wakerFromEnv(env) : this.opts.waker || undefined;
    const client = new SqlStreams({ pool, ...(schema ? { schema } : {}), ...(this.opts.logger ? { logger: this.opts.logger } : {}), ...(waker ? { waker } : {}) });
    try {
      await this.checkConnection(pool);
    } catch (e) {
      await pool.end().catch(() => {});
      throw e;
    }
    return { settings, pool, client };
  }

  /** Opens (or reuses) the pooled connection, so authentication fails here and not mid-poll. */
  private async checkConnection(pool: pg.Pool): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        const c = await pool.connect();
        c.release();
        return;
      } catch (e) {
        if (isAuthFailure(e) || attempt >= CONNECT_PAUSES.length || !isConnectTransient(e)) throw e;
        await sleep(CONNECT_PAUSES[attempt]);
      }
    }
  }

  private getRuntime(): Promise<Runtime> {
    if (!this.runtime) {
      const p = this.build();
      this.runtime = p;
      p.catch(() => {
        if (this.runtime === p) this.runtime = undefined;
      });
    }
    return this.runtime;
  }

  /** Drops the pool and, with `refetch`, the cached credentials. */
  async reset(refetch = false): Promise<void> {
    clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    const rt = this.runtime;
    this.runtime = undefined;
    if (refetch) this.settings = undefined;
    if (rt) {
      try {
        const r = await rt;
        await r.pool.end();
      } catch {
        // a runtime that never came up has nothing to end
      }
    }
  }

  /**
   * Runs `fn` with the container's client. On an authentication failure the credentials are
   * fetched again once and `fn` runs again; a second rejection ⇒ SQL0032.
   */
  async use<T>(fn: (client: SqlStreams) => Promise<T>): Promise<T> {
    if (this.active === 0 && this.idleSince) this.lastWait = elapsedSince(this.idleSince);
    clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    this.active++;
    try {
      return await this.useOnce(fn);
    } finally {
      this.active--;
      if (this.active === 0) {
        const keep = this.opts.keepConnection ?? (this.env().SQLSTREAMS_DB_KEEP_CONNECTION ?? "").trim().toLowerCase() !== "false";
        // Credentials stay cached; only the connection goes.
        if (!keep) await this.reset(false);
        else if (this.waitOutlastsBound()) await this.closeIdleConnections();
        else this.closeWhenIdle();
        this.idleSince = { mono: performance.now(), wall: Date.now() };
      }
    }
  }

  /**
   * Whether the wait before this invocation was longer than the idle bound: the next wait likely
   * is too, and a frozen container runs no timer, so the connection is closed now rather than held
   * through the freeze only to be dropped when the container wakes.
   */
  private waitOutlastsBound(): boolean {
    let bound: number;
    try {
      bound = this.idleTimeout();
    } catch {
      return false; // the invalid setting already failed this invocation
    }
    return bound > 0 && this.lastWait !== undefined && this.lastWait >= bound;
  }

  /** In a running process: closes the connection once it has been idle for the bound. */
  private closeWhenIdle(): void {
    let bound: number;
    try {
      bound = this.idleTimeout();
    } catch {
      return;
    }
    if (bound === 0) return;
    this.idleTimer = setTimeout(() => {
      this.idleTimer = undefined;
      if (this.active === 0) void this.closeIdleConnections();
    }, bound);
    this.idleTimer.unref(); // never keeps a local runner alive
  }

  /** Closes the pool's idle connections, keeping the pool and its client (and their caches). */
  private async closeIdleConnections(): Promise<void> {
    const rt = this.runtime;
    if (!rt) return;
    try {
      const { pool } = await rt;
      // connect() hands out idle connections first; release(true) destroys instead of returning.
      const idle = await Promise.all(Array.from({ length: pool.idleCount }, () => pool.connect()));
      // Wait until each has said goodbye ("remove" follows the socket's end): a Lambda container
      // is frozen as soon as the invocation returns, and the server must see the close before.
      const gone = idle.map((c) => new Promise<void>((resolve) => {
        const timer = setTimeout(done, 1_000);
        timer.unref();
        function done() {
          clearTimeout(timer);
          pool.off("remove", onRemove);
          resolve();
        }
        function onRemove(removed: pg.PoolClient) {
          if (removed === c) done();
        }
        pool.on("remove", onRemove);
      }));
      for (const c of idle) c.release(true);
      await Promise.all(gone);
    } catch {
      // a runtime that never came up, or a connection that failed as it closed: nothing is held
    }
  }

  private async useOnce<T>(fn: (client: SqlStreams) => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      let rt: Runtime | undefined;
      try {
        rt = await this.getRuntime().catch((e: unknown) => {
          // Not connected after the retries (the server is full, down or unreachable): coded like
          // a failing poll; authentication failures go on to the refetch below.
          if (e instanceof SqlStreamsError || isAuthFailure(e)) throw e;
          const err = e as { code?: string; message?: string };
          throw new SqlStreamsError(
            "SQL0033",
            `could not connect to the database: ${err?.code ? `[${err.code}] ` : ""}${err?.message ?? String(e)}`,
            { sqlstate: err?.code },
            e,
          );
        });
        return await fn(rt.client);
      } catch (e) {
        if (!isAuthFailure(e)) throw e;
        const settings = rt?.settings ?? (await this.settings?.catch(() => undefined));
        await this.reset(true);
        if (attempt === 0) continue;
        const source = settings?.source === "url" ? "DATABASE_URL"
          : settings?.source === "iam" ? `IAM authentication as ${settings.iamUser ?? "(unknown)"} (check the role has rds_iam and the function rds-db:connect)`
          : `secret ${settings?.secretArn ?? "(unknown)"}`;
        throw new SqlStreamsError(
          "SQL0032",
          `the database rejected the credentials from ${source} (SQLSTATE ${(e as { code?: string }).code ?? "28P01"}), also after fetching them again`,
          { source: settings?.source, secretArn: settings?.secretArn, sqlstate: (e as { code?: string }).code },
          e,
        );
      }
    }
  }

  /** Ends the pool (e.g. when a local runner shuts down). The provider can be used again. */
  async close(): Promise<void> {
    await this.reset(false);
  }
}

let shared: DatabaseProvider | undefined;

/** The container-wide provider the handler factories use by default (configured from process.env). */
export function defaultDatabase(): DatabaseProvider {
  shared ??= new DatabaseProvider();
  return shared;
}

/** Ends the default provider's pool and forgets its cached credentials. */
export async function closeDefaultDatabase(): Promise<void> {
  const p = shared;
  shared = undefined;
  await p?.reset(true);
}
