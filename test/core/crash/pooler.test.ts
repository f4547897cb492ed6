// Poolers for real (docs/guide/troubleshooting.md#poolers, docs/guide/operations.md#credentials): a real PgBouncer in transaction
// mode, started by the test with SCRAM checked by PgBouncer itself.
// - Rotation: ALTER ROLE … PASSWORD while two "containers" (DatabaseProvider) keep polling; their
//   connections then drop and the next login with the cached password is rejected — by Postgres
//   with 28P01, by PgBouncer with 08P01 — so each fetches the secret again and carries on.
// - A server connection that crashes under PgBouncer (08P01 "server conn crashed?"): a poll
//   statement is retried and the poll succeeds; a produce reports an unknown outcome (SQL0024).
import { setTimeout as sleep } from "node:timers/promises";
import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SqlStreams, type SqlStreamsError } from "@sqlstreams/core";
import { DatabaseProvider, isAuthFailure } from "@sqlstreams/aws";
import { query, serverChecksPasswords, useFreshDatabase } from "../../support/db.js";
import { PGBOUNCER_BIN, type PgBouncer, startPgBouncer } from "../../support/pgbouncer.js";
import { type TcpProxy, startProxy } from "../../support/proxy.js";

const url = useFreshDatabase();
const ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:sqlstreams-pooler-AbCdEf";
const role = "pool_" + randomBytes(6).toString("hex");
const password1 = "p1-" + randomBytes(12).toString("hex");
/** The role's password now (the rotation test changes it). */
let rolePassword = password1;

let admin: SqlStreams;
const cleanups: (() => Promise<unknown>)[] = [];

function roleUrl(base: string, password: string): string {
  const u = new URL(base);
  u.username = role;
  u.password = password;
  return u.toString();
}

beforeAll(async () => {
  admin = new SqlStreams({ connectionString: url(), logger: () => {} });
  await admin.migrate();
  const db = decodeURIComponent(new URL(url()).pathname.slice(1));
  await query(url(), `CREATE ROLE ${role} LOGIN PASSWORD '${password1}'`);
  for (const g of [
    `GRANT ALL PRIVILEGES ON DATABASE ${pg.escapeIdentifier(db)} TO ${role}`,
    `GRANT USAGE ON SCHEMA sqlstreams TO ${role}`,
  ]) await query(url(), g);
});

afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => {});
  await admin?.close();
  await query(url(), `DROP OWNED BY ${role}`).catch(() => {});
  await query(url(), `DROP ROLE IF EXISTS ${role}`).catch(() => {});
});

async function registered(name: string, k: number) {
  const s = admin.stream<{ n: number }>(name);
  await s.register();
  await s.consumer("g").register({ message: { timeout: 2_000 } });
  if (k > 0) await s.produceBatch(Array.from({ length: k }, (_, i) => ({ payload: { n: i + 1 } })));
  await query(url(), `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA sqlstreams TO ${role}`);
  await query(url(), `GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA sqlstreams TO ${role}`);
  await query(url(), `GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA sqlstreams TO ${role}`);
  return s;
}

async function waitFor(what: string, done: () => boolean | Promise<boolean>, ms = 45_000): Promise<void> {
  const until = Date.now() + ms;
  while (!(await done())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

async function rotationWhilePolling(name: string, front: (u: string) => Promise<TcpProxy>): Promise<void> {
  const s = await registered(name, 10);
  const proxy = await front(url());
  cleanups.push(() => proxy.close());
  let current = rolePassword;
  const next = "p-" + randomBytes(12).toString("hex");
  const readSecret = async () => {
    const u = new URL(url());
    return JSON.stringify({ username: role, password: current, host: "127.0.0.1", port: proxy.port, dbname: decodeURIComponent(u.pathname.slice(1)) });
  };
  const containers = [0, 1].map(() => new DatabaseProvider({ env: { SQLSTREAMS_DB_SECRET_ARN: ARN, SQLSTREAMS_DB_SSL: "disable" }, readSecret, logger: () => {} }));
  for (const p of containers) cleanups.push(() => p.close());
  const handled = new Set<number>();
  const errors: unknown[] = [];
  let stop = false;
  const pollers = containers.map(async (p) => {
    while (!stop) {
      try {
        await p.use((c) => c.stream<{ n: number }>(name).consumer("g").drain((m) => void handled.add(m.payload.n), { deadline: Date.now() + 8_000, recordMargin: 1_000 }));
      } catch (e) {
        errors.push(e);
      }
      await sleep(50);
    }
  });
  try {
    await waitFor("the first ten messages", () => handled.size === 10).catch((e: unknown) => {
      throw new Error(`${(e as Error).message}; invocation errors: ${errors.slice(0, 3).map(String).join(" | ")}`);
    });
    expect(containers.map((p) => p.credentialLoads)).toEqual([1, 1]);
    // Rotation: the password and the secret change together while the pollers run; then the
    // containers' connections drop (recycled, idle-killed), so the next login uses the cached one.
    await query(url(), `ALTER ROLE ${role} PASSWORD '${next}'`);
    current = rolePassword = next;
    await s.produceBatch(Array.from({ length: 10 }, (_, i) => ({ payload: { n: 11 + i } })));
    proxy.closeExisting();
    await waitFor("all twenty messages after the rotation", () => handled.size === 20);
    await waitFor("both containers to log in again", () => containers.every((p) => p.credentialLoads === 2), 20_000);
  } finally {
    stop = true;
    await Promise.all(pollers);
  }
  // Connections dropping mid-poll may fail an invocation (SQL0033, nothing lost); the rejected
  // password never does: it is refetched.
  for (const e of errors) {
    expect((e as SqlStreamsError).code, String(e)).not.toBe("SQL0032");
    expect(isAuthFailure(e), String(e)).toBe(false);
  }
  expect(containers.map((p) => p.credentialLoads)).toEqual([2, 2]);
}

describe.skipIf(!PGBOUNCER_BIN)("through a real PgBouncer (transaction mode)", () => {
  let bouncer: PgBouncer;
  beforeAll(async () => {
    bouncer = await startPgBouncer(url());
    cleanups.push(() => bouncer.stop());
  });

  it("PgBouncer rejects a wrong password with 08P01, which counts as an authentication failure", async () => {
    const c = new pg.Client({ connectionString: bouncer.urlFor(roleUrl(url(), "wrong")) });
    c.on("error", () => {});
    const e = await c.connect().then(() => null, (x: unknown) => x as { code?: string });
    await c.end().catch(() => {});
    expect(e?.code).toBe("08P01");
    expect(isAuthFailure(e)).toBe(true);
  });

  it("a password rotated while pollers run: each container refetches the secret once and nothing is lost", async () => {
    await rotationWhilePolling("rotation.bouncer", async () => startProxy(bouncer.urlFor(url())));
  });

  it("a server connection that crashes under PgBouncer (08P01): a poll retries and succeeds; a produce reports SQL0024", async () => {
    // client → PgBouncer → proxy → Postgres: closing the proxy's connections crashes PgBouncer's server connections.
    const serverSide = await startProxy(url());
    cleanups.push(() => serverSide.close());
    const b = await startPgBouncer(url(), { serverHost: "127.0.0.1", serverPort: serverSide.port });
    cleanups.push(() => b.stop());
    await registered("crash.bouncer", 3);
    const n = (await query<{ id: string }>(url(), `SELECT id::text FROM sqlstreams.stream_config WHERE name = 'crash.bouncer'`))[0].id;
    const app = new SqlStreams({ connectionString: b.urlFor(roleUrl(url(), rolePassword)), maxConnections: 1, logger: () => {} });
    cleanups.push(() => app.close());
    const appStream = app.stream<{ n: number }>("crash.bouncer");
    await appStream.produce({ n: 4 }); // warm: the stream is cached, the connection open

    // A produce blocked on a lock when the server connection crashes: its outcome is unknown.
    const holder = new pg.Client({ connectionString: url() });
    holder.on("error", () => {});
    await holder.connect();
    try {
      await holder.query("BEGIN");
      await holder.query(`LOCK TABLE sqlstreams.message_log_${n} IN ACCESS EXCLUSIVE MODE`);
      const produced = appStream.produce({ n: 5 }).then(() => null, (e: unknown) => e as SqlStreamsError);
      await waitFor("the produce to wait on the lock", async () => (await query(url(), `SELECT 1 FROM pg_stat_activity WHERE usename = $1 AND wait_event_type = 'Lock'`, [role])).length > 0);
      serverSide.closeExisting();
      const e = await produced;
      expect(e?.code).toBe("SQL0024");
      expect(String((e?.cause as { code?: string } | undefined)?.code ?? (e?.cause as Error | undefined)?.message)).toMatch(/08P01|terminated|crashed/);
    } finally {
      await holder.query("ROLLBACK").catch(() => {});
    }

    // A poll whose statement is in flight when the server connection crashes: retried, it succeeds.
    const seen: number[] = [];
    await holder.query("BEGIN");
    try {
      await holder.query(`LOCK TABLE sqlstreams.stream_config IN ACCESS EXCLUSIVE MODE`);
      const polled = app.stream<{ n: number }>("crash.bouncer").consumer("g").poll((m) => void seen.push(m.payload.n), { batchLimit: 10 });
      await waitFor("the poll to wait on the lock", async () => (await query(url(), `SELECT 1 FROM pg_stat_activity WHERE usename = $1 AND wait_event_type = 'Lock'`, [role])).length > 0);
      serverSide.closeExisting();
      await sleep(300);
      await holder.query("ROLLBACK");
      const r = await polled;
      expect(r.succeeded).toBeGreaterThanOrEqual(4);
    } finally {
      await holder.query("ROLLBACK").catch(() => {});
      await holder.end();
    }
    expect(seen.slice(0, 4)).toEqual([1, 2, 3, 4]);
  });
});

describe("directly against Postgres", () => {
  it("a password rotated while pollers run: each container refetches the secret once (28P01) and nothing is lost", async (ctx) => {
    if (!(await serverChecksPasswords(roleUrl(url(), "wrong-" + password1)))) ctx.skip(); // a trust-auth server accepts any password
    await rotationWhilePolling("rotation.direct", async (u) => startProxy(u));
  });
});
