// Per-file databases on the server chosen by the global setup.
//
//   import { useFreshDatabase } from "./support/db.js";
//   const dbUrl = useFreshDatabase();          // at the top level of the test file
//   it("...", async () => { const client = createClient({ connectionString: dbUrl() }); ... });
//
// Each call creates `t_<16 hex>` with CREATE DATABASE and drops it WITH (FORCE) afterwards,
// so lingering pools or SIGKILLed pollers never block the cleanup.
import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, inject } from "vitest";
import { BASE_URL_ENV } from "./provided.js";

export interface FreshDatabase {
  /** The database name, `t_<16 hex chars>`. */
  name: string;
  /** Connection string for the new database (same server, user and options as the base URL). */
  url: string;
  /** Drop the database, terminating any remaining connections. Idempotent. */
  drop(): Promise<void>;
}

/** Connection string of the server's maintenance database (do not create test objects in it). */
export function baseDatabaseUrl(): string {
  let url: string | undefined;
  try {
    url = inject("baseDatabaseUrl");
  } catch {
    // not inside a vitest worker
  }
  url ??= process.env[BASE_URL_ENV];
  if (!url) {
    throw new Error(
      "no test database server: run through vitest (its globalSetup provides one) or set " + BASE_URL_ENV,
    );
  }
  return url;
}

/** The same connection string pointed at another database on the same server. */
export function urlForDatabase(name: string, base: string = baseDatabaseUrl()): string {
  const url = new URL(base);
  url.pathname = "/" + encodeURIComponent(name);
  return url.toString();
}

/**
 * Set by .ci/run's pooler leg to a PgBouncer in front of the test server: the URLs of fresh
 * databases then go through it (library and test traffic alike), while CREATE/DROP DATABASE
 * still go to the server directly.
 */
export const POOLER_URL_ENV = "SQLSTREAMS_TEST_POOLER_URL";

/** `url` routed through the pooler of POOLER_URL_ENV when it is set. */
export function throughPooler(url: string): string {
  const pooler = process.env[POOLER_URL_ENV];
  if (!pooler) return url;
  const x = new URL(url);
  const p = new URL(pooler);
  x.hostname = p.hostname;
  x.port = p.port;
  return x.toString();
}

/** Create a new, empty database with a random name on the test server. */
export async function freshDatabase(): Promise<FreshDatabase> {
  const base = baseDatabaseUrl();
  const name = "t_" + randomBytes(8).toString("hex");
  await withClient(base, (c) => c.query(`CREATE DATABASE ${pg.escapeIdentifier(name)}`));
  let dropped: Promise<void> | undefined;
  return {
    name,
    url: throughPooler(urlForDatabase(name, base)),
    drop() {
      dropped ??= withClient(base, async (c) => {
        await c.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(name)} WITH (FORCE)`);
      });
      return dropped;
    },
  };
}

/**
 * Register beforeAll/afterAll hooks that give the current file (or describe block) its own
 * database, and return a getter for its URL. Call it at the top level of a test file.
 */
export function useFreshDatabase(): () => string {
  let db: FreshDatabase | undefined;
  beforeAll(async () => {
    db = await freshDatabase();
  });
  afterAll(async () => {
    await db?.drop();
  });
  return () => {
    if (!db) throw new Error("useFreshDatabase(): the database exists only once beforeAll has run");
    return db.url;
  };
}

/** Open a single connection, run `fn`, and always close it. Handy for assertions on tables. */
export async function withClient<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, application_name: "sqlstreams-test" });
  // A server-side termination (e.g. DROP ... WITH (FORCE)) must not crash the worker.
  client.on("error", () => {});
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => {});
  }
}

/** Run one statement on its own connection and return the rows. */
export async function query<R extends pg.QueryResultRow = Record<string, unknown>>(
  url: string,
  sql: string,
  params: unknown[] = [],
): Promise<R[]> {
  return withClient(url, async (c) => (await c.query<R>(sql, params)).rows);
}

/**
 * Whether the server refuses `wrongPasswordUrl` (a URL whose password is wrong): false on servers
 * that let the role in whatever its password (trust auth, as on CI's PG 15).
 */
export async function serverChecksPasswords(wrongPasswordUrl: string): Promise<boolean> {
  const c = new pg.Client({ connectionString: wrongPasswordUrl });
  c.on("error", () => {});
  try {
    await c.connect();
    await c.end();
    return false;
  } catch {
    return true;
  }
}
