// Connection failures at the library's edges (docs/guide/operations.md#connection-errors): every public
// call against a database it cannot use fails with a coded SqlStreamsError whose cause is the pg
// error — a refused port, an unknown database, a server refusing new connections (a role at its
// CONNECTION LIMIT: 53300; a private server in smart shutdown: 57P03), rejected credentials — a
// malformed connection string says so before any connection, and a produce whose reply is lost
// after its commit is SQL0024. All against real servers: the test server, and this file's own
// embedded Postgres (password auth, shut down) for 28P01 and 57P03.
import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SqlStreams, SqlStreamsError } from "@sqlstreams/core";
import { baseDatabaseUrl, useFreshDatabase, withClient } from "../../support/db.js";
import { type PrivatePostgres, freePort, startPrivatePostgres } from "../../support/private-postgres.js";
import { startProxy } from "../../support/proxy.js";
import { codedError } from "../../support/streams.js";

const url = useFreshDatabase();
const clients: SqlStreams[] = [];
const silent = () => {};

function clientFor(connectionString: string): SqlStreams {
  const c = new SqlStreams({ connectionString, logger: silent, statementTimeout: 10_000 });
  clients.push(c);
  return c;
}

function withUrl(base: string, change: (u: URL) => void): string {
  const u = new URL(base);
  change(u);
  return u.toString();
}

const role = `sqls_nolimit_${randomBytes(4).toString("hex")}`;

beforeAll(async () => {
  // A registered stream and group, so that calls against a failing database are the only cause.
  const c = clientFor(url());
  await c.migrate();
  await c.stream("s").register();
  await c.stream("s").consumer("g").register();
  await withClient(url(), (db) => db.query(`CREATE ROLE ${role} LOGIN CONNECTION LIMIT 0 PASSWORD 'sqlstreams-test-role'`));
});

afterAll(async () => {
  await Promise.all(clients.map((c) => c.close().catch(() => {})));
  await withClient(baseDatabaseUrl(), (db) => db.query(`DROP ROLE IF EXISTS ${role}`)).catch(() => {});
});

/** Every public call that reaches the database, each against `c`. */
function calls(c: SqlStreams, tx: pg.Client): [string, () => Promise<unknown>][] {
  const s = c.stream("s");
  const g = s.consumer("g");
  return [
    ["migrate", () => c.migrate()],
    ["streamNames", () => c.streamNames()],
    ["consumerGroups", () => c.consumerGroups()],
    ["client.maintain", () => c.maintain()],
    ["stream.register", () => s.register()],
    ["produce", () => s.produce({ n: 1 })],
    ["produceBatch", () => s.produceBatch([{ payload: { n: 1 } }])],
    ["produceInTx", () => s.produceInTx(tx, { n: 1 })],
    ["produceBatchInTx", () => s.produceBatchInTx(tx, [{ payload: { n: 1 } }])],
    ["stream.inspect", () => s.inspect({ id: "1" })],
    ["stream.maintain", () => s.maintain()],
    ["stream.destroy", () => s.destroy()],
    ["consumer.register", () => g.register()],
    ["poll", () => g.poll(() => {})],
    ["drain", () => g.drain(() => {})],
    ["progress", () => g.progress()],
    ["history", () => g.history()],
    ["failures", () => g.failures()],
    ["countFailures", () => g.countFailures()],
    ["pause", () => g.pause()],
    ["resume", () => g.resume()],
    ["seek", () => g.seek({ id: "0" })],
    ["redrive", () => g.redrive({ all: true })],
    ["discard", () => g.discard({ all: true })],
    ["consumer.destroy", () => g.destroy()],
  ];
}

/**
 * Runs every call against `connectionString`; each must fail with `code`, its cause carrying
 * `cause`. `fault` (if any) is made once the caller's transaction for produceInTx is open.
 */
async function everyCallFails(connectionString: string, code: string, cause: string | RegExp, text: RegExp, fault?: () => Promise<void>): Promise<void> {
  const c = clientFor(connectionString);
  const tx = new pg.Client({ connectionString: url() });
  await tx.connect();
  try {
    await tx.query("BEGIN");
    await fault?.();
    for (const [name, call] of calls(c, tx)) {
      const e = await codedError(call);
      expect(e.code, `${name}: ${e.message}`).toBe(code);
      expect(e.message, name).toMatch(text);
      const pgCode = (e.cause as { code?: string } | undefined)?.code;
      expect(pgCode, `${name}: cause of ${e.message}`).toMatch(cause);
    }
    await tx.query("ROLLBACK");
  } finally {
    await tx.end();
  }
}

describe("connection failures are coded at every edge", () => {
  it("a refused port: SQL0033 from every call, the pg error (ECONNREFUSED) as cause", async () => {
    const port = await freePort(); // nothing listens on it
    await everyCallFails(withUrl(url(), (u) => { u.hostname = "127.0.0.1"; u.port = String(port); }), "SQL0033", "ECONNREFUSED", /cannot reach the database/);
  });

  it("an unknown database: SQL0033 (3D000) that names the missing database", async () => {
    const name = `missing_${randomBytes(4).toString("hex")}`;
    await everyCallFails(withUrl(url(), (u) => { u.pathname = `/${name}`; }), "SQL0033", "3D000", new RegExp(`the database does not exist: database "${name}" does not exist`));
  });

  it("a server refusing new connections (a role at its CONNECTION LIMIT: 53300): SQL0033", async () => {
    await everyCallFails(withUrl(url(), (u) => { u.username = role; u.password = "sqlstreams-test-role"; }), "SQL0033", "53300", /refuses new connections now.*too many connections/);
  });

  it("a database closed to new connections (ALLOW_CONNECTIONS false: 55000): SQL0033, refuses new connections", async () => {
    const db = pg.escapeIdentifier(new URL(url()).pathname.slice(1));
    const allow = async (on: boolean) => void (await withClient(baseDatabaseUrl(), (a) => a.query(`ALTER DATABASE ${db} ALLOW_CONNECTIONS ${on}`)));
    try {
      await everyCallFails(url(), "SQL0033", /^55000$/, /refuses new connections now.*not currently accepting connections/, () => allow(false));
    } finally {
      await allow(true);
    }
  });

  it("a malformed connection string says it is malformed (SQL0001), before any connection, without repeating it", () => {
    for (const bad of ["postgres://user@host:notaport/db", "not a url", "mysql://u:secretpw@h/db", "postgres://u:secretpw@[::1/db"]) {
      let thrown: unknown;
      try {
        new SqlStreams({ connectionString: bad, logger: silent });
      } catch (e) {
        thrown = e;
      }
      expect(thrown, bad).toBeInstanceOf(SqlStreamsError);
      const e = thrown as SqlStreamsError;
      expect(e.code, bad).toBe("SQL0001");
      expect(e.message, bad).toMatch(/connectionString is malformed/);
      expect(e.message, bad).not.toMatch(/credential|password authentication/);
      expect(e.message, bad).not.toContain("secretpw");
    }
  });

  it("a given pool with a malformed connection string: SQL0001 malformed, from the constructor", async () => {
    for (const bad of ["postgres://user@host:notaport/db", "not a url"]) {
      const pool = new pg.Pool({ connectionString: bad });
      try {
        const e = await codedError(() => new SqlStreams({ pool, logger: silent }));
        expect(e.code, bad).toBe("SQL0001");
        expect(e.message, bad).toMatch(/connectionString is malformed/);
      } finally {
        await pool.end();
      }
    }
  });

  it("a connection string pg refuses only when it connects: SQL0001 malformed at the first call", async () => {
    const pool = new pg.Pool({ connectionString: url() });
    const c = new SqlStreams({ pool, logger: silent });
    // The pool's options are read at each new connection: one changed after the client was made
    // reaches pg's parser only then, and the classifier names it.
    (pool as unknown as { options: { connectionString: string } }).options.connectionString = "postgres://user@host:notaport/db";
    try {
      const e = await codedError(() => c.migrate());
      expect(e.code).toBe("SQL0001");
      expect(e.message).toMatch(/connection string is malformed/);
      expect((e.cause as { code?: string }).code).toBe("ERR_INVALID_URL");
    } finally {
      await pool.end();
    }
  });

  it("statement errors that are not about the connection pass unchanged", async () => {
    const c = clientFor(url());
    const tx = new pg.Client({ connectionString: url() });
    await tx.connect();
    try {
      // Not inside a transaction: the library's own coded error, not SQL0033.
      expect((await codedError(() => c.stream("s").produceInTx(tx, { n: 1 }))).code).toBe("SQL0015");
      await tx.query("BEGIN");
      await tx.query("SELECT 1/0").catch(() => {});
      // The caller's transaction is aborted (25P02): the pg error itself, uncoded.
      const e = await c.stream("s").produceInTx(tx, { n: 1 }).then(() => null, (x: unknown) => x);
      expect(e).not.toBeInstanceOf(SqlStreamsError);
      expect((e as { code?: string }).code).toBe("25P02");
      await tx.query("ROLLBACK");
    } finally {
      await tx.end();
    }
  });

  it("a produce whose reply is lost after its commit: SQL0024 with the pg error as cause", async () => {
    const proxy = await startProxy(url());
    try {
      const c = clientFor(proxy.url);
      const s = c.stream("s");
      await s.produce({ warm: true });
      const lost = proxy.loseReply((sql) => sql.includes("INSERT INTO"));
      const e = await codedError(() => s.produce({ n: 2 }));
      await lost;
      expect(e.code).toBe("SQL0024");
      expect(e.cause).toBeInstanceOf(Error);
      expect(e.cause).not.toBeInstanceOf(SqlStreamsError);
    } finally {
      await proxy.close();
    }
  });
});

describe("a private server: rejected credentials and a server shutting down", () => {
  let server: PrivatePostgres | undefined;
  let serverUrl = "";

  beforeAll(async () => {
    server = await startPrivatePostgres(["-c", "max_connections=20"], "sqlstreams-conn-");
    serverUrl = server.url("postgres");
    const c = clientFor(serverUrl);
    await c.migrate();
    await c.stream("s").register();
    await c.stream("s").consumer("g").register();
  }, 60_000);

  afterAll(async () => {
    await server?.stop();
  }, 60_000);

  it("a rejected password (28P01): SQL0032 from every call, the pg error as cause", async () => {
    await everyCallFails(withUrl(serverUrl, (u) => { u.password = "wrong-password"; }), "SQL0032", /^28P01$/, /the database rejected the credentials/);
  });

  it("a server in smart shutdown refuses new connections (57P03): SQL0033", async () => {
    // Smart shutdown (SIGTERM to the postmaster) waits for the open session and refuses every new one.
    const holder = new pg.Client({ connectionString: serverUrl });
    await holder.connect();
    const pid = Number((await readFile(join(server!.dataDir, "postmaster.pid"), "utf8")).split("\n")[0]);
    process.kill(pid, "SIGTERM");
    try {
      await everyCallFails(serverUrl, "SQL0033", /^57P03$/, /refuses new connections now.*shutting down/);
    } finally {
      await holder.end().catch(() => {});
    }
  });
});
