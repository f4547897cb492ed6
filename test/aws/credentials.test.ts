// Credentials of the Lambda adapter: Secrets Manager (mocked with aws-sdk-client-mock, never AWS)
// against a real Postgres role whose password is rotated with ALTER ROLE; DATABASE_URL; SQL0032.
process.env.AWS_EC2_METADATA_DISABLED = "true";
process.env.AWS_REGION ??= "us-east-1";
process.env.AWS_ACCESS_KEY_ID ??= "AKIDTESTONLY";
process.env.AWS_SECRET_ACCESS_KEY ??= "test-only";

import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type AddressInfo, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { TLSSocket } from "node:tls";
import { GetSecretValueCommand, ResourceNotFoundException, SecretsManagerClient } from "@aws-sdk/client-secrets-manager";
import { mockClient } from "aws-sdk-client-mock";
import pg from "pg";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { SqlStreams, SqlStreamsError } from "@sqlstreams/core";
import {
  DatabaseProvider,
  createPollHandler,
  isAuthFailure,
  loadConnectionSettings,
  localContext,
  parseRdsSecret,
  rdsCaBundle,
  sslSettings,
  type LogLine,
} from "@sqlstreams/aws";
import { query, serverChecksPasswords, useFreshDatabase } from "../support/db.js";

const url = useFreshDatabase();
const sm = mockClient(SecretsManagerClient);
const ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:sqlstreams-test-AbCdEf";

const role = "rot_" + randomBytes(6).toString("hex");
const password1 = "p1-" + randomBytes(12).toString("hex");
const password2 = "p2-" + randomBytes(12).toString("hex");
let admin: SqlStreams;
const providers: DatabaseProvider[] = [];

function secretFor(password: string, extra: Record<string, unknown> = {}): string {
  const u = new URL(url());
  return JSON.stringify({
    engine: "postgres",
    username: role,
    password,
    host: u.hostname,
    port: Number(u.port || 5432),
    dbname: decodeURIComponent(u.pathname.slice(1)),
    ...extra,
  });
}

/** A provider configured like the deployed functions: the secret ARN only, no TLS locally. */
function secretDatabase(): DatabaseProvider {
  const p = new DatabaseProvider({ env: { SQLSTREAMS_DB_SECRET_ARN: ARN, SQLSTREAMS_DB_SSL: "disable" }, logger: () => {} });
  providers.push(p);
  return p;
}

function expectNoSecretIn(value: unknown): void {
  const text = JSON.stringify(value, (_k, v) => (v instanceof Error ? { ...v, message: v.message, stack: v.stack } : v)) + String(value);
  for (const p of [password1, password2]) expect(text).not.toContain(p);
}

beforeAll(async () => {
  admin = new SqlStreams({ connectionString: url(), logger: () => {} });
  await admin.migrate();
  const s = admin.stream<{ n: number }>("rotation.stream");
  await s.register();
  await s.consumer("g").register({ message: { timeout: 5_000 } });
  const db = decodeURIComponent(new URL(url()).pathname.slice(1));
  await query(url(), `CREATE ROLE ${role} LOGIN PASSWORD '${password1}'`);
  await query(url(), `GRANT ALL PRIVILEGES ON DATABASE ${pg.escapeIdentifier(db)} TO ${role}`);
  await query(url(), `GRANT USAGE ON SCHEMA sqlstreams TO ${role}`);
  await query(url(), `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA sqlstreams TO ${role}`);
  await query(url(), `GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA sqlstreams TO ${role}`);
  await query(url(), `GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA sqlstreams TO ${role}`);
});

afterEach(() => {
  sm.reset();
});

afterAll(async () => {
  for (const p of providers) await p.close();
  await admin?.close();
  await query(url(), `DROP OWNED BY ${role}`).catch(() => {});
  await query(url(), `DROP ROLE IF EXISTS ${role}`).catch(() => {});
  sm.restore();
});

describe("secret parsing and sources", () => {
  it("parses the RDS secret JSON; TLS verifies the server by default", () => {
    const s = parseRdsSecret(JSON.stringify({ username: "u", password: "pw", host: "db.example", port: 5433, dbname: "app" }), ARN, {});
    expect(s.source).toBe("secret");
    expect(s.config).toMatchObject({ user: "u", password: "pw", host: "db.example", port: 5433, database: "app" });
    expect(s.config.ssl).toEqual({ rejectUnauthorized: true, servername: "db.example" });
    // RDS-managed master secrets hold only username and password: the environment fills the rest,
    // and SQLSTREAMS_DB_HOST points at an RDS Proxy.
    const t = parseRdsSecret(JSON.stringify({ username: "u", password: "pw" }), ARN, { SQLSTREAMS_DB_HOST: "proxy.example", SQLSTREAMS_DB_NAME: "app", SQLSTREAMS_DB_SSL: "require" });
    expect(t.config).toMatchObject({ host: "proxy.example", port: 5432, database: "app", ssl: { rejectUnauthorized: false } });
  });

  it("malformed secrets fail with SQL0032 and never show the password", () => {
    const cases = [
      undefined,
      "",
      "not json " + password1,
      JSON.stringify([password1]),
      JSON.stringify({ password: password1, host: "h" }),
      JSON.stringify({ username: "u", host: "h" }),
      JSON.stringify({ username: "u", password: password1 }),
      JSON.stringify({ username: "u", password: password1, host: "h", port: "nope" }),
    ];
    for (const text of cases) {
      let err: unknown;
      try {
        parseRdsSecret(text, ARN, {});
      } catch (e) {
        err = e;
      }
      expect(err, String(text)).toBeInstanceOf(SqlStreamsError);
      expect((err as SqlStreamsError).code).toBe("SQL0032");
      expectNoSecretIn(err);
      expectNoSecretIn((err as SqlStreamsError).details);
    }
  });

  it("neither SQLSTREAMS_DB_SECRET_ARN nor DATABASE_URL ⇒ SQL0032; DATABASE_URL is used locally", async () => {
    await expect(loadConnectionSettings({}, async () => "{}")).rejects.toMatchObject({ code: "SQL0032" });
    const s = await loadConnectionSettings({ DATABASE_URL: "postgres://u:p@h/db" }, async () => {
      throw new Error("must not read a secret");
    });
    expect(s).toEqual({ source: "url", config: { connectionString: "postgres://u:p@h/db" } });
  });

  it("an unreadable secret ⇒ SQL0032 (Secrets Manager mocked)", async () => {
    sm.on(GetSecretValueCommand).rejects(new ResourceNotFoundException({ message: "Secrets Manager can't find the specified secret.", $metadata: {} }));
    const lines: LogLine[] = [];
    const handler = createPollHandler({ stream: "rotation.stream", group: "g", handle: () => {}, database: secretDatabase(), log: (l) => lines.push(l) });
    const err = await handler({ stream: "rotation.stream", group: "g" }, localContext(30_000)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SqlStreamsError);
    expect((err as SqlStreamsError).code).toBe("SQL0032");
    expect((err as Error).message).toContain("ResourceNotFoundException");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ level: "error", error: { code: "SQL0032" } });
  });

  it("a secret with SecretBinary only, or malformed JSON ⇒ SQL0032", async () => {
    sm.on(GetSecretValueCommand).resolves({ SecretBinary: new Uint8Array([1, 2, 3]) });
    const db = secretDatabase();
    await expect(db.use(async () => 1)).rejects.toMatchObject({ code: "SQL0032" });
    sm.reset();
    sm.on(GetSecretValueCommand).resolves({ SecretString: `{"username":"x","password":"${password1}"` });
    const err = await db.use(async () => 1).catch((e: unknown) => e);
    expect((err as SqlStreamsError).code).toBe("SQL0032");
    expectNoSecretIn(err);
  });
});

/** The server's URL for the role with a wrong password. */
function wrongPasswordUrl(): string {
  const u = new URL(url());
  u.username = role;
  u.password = "certainly-not-the-password";
  return u.toString();
}

describe("rotation", () => {
  it("fetches the secret once per container, and once more after the database rejects a rotated password", async (ctx) => {
    // Rotation can only be observed where the server checks passwords (the embedded Postgres does).
    if (!(await serverChecksPasswords(wrongPasswordUrl()))) ctx.skip();
    sm.on(GetSecretValueCommand, { SecretId: ARN })
      .resolvesOnce({ SecretString: secretFor(password1) })
      .resolves({ SecretString: secretFor(password2) });
    const db = secretDatabase();
    const handled: number[] = [];
    const lines: LogLine[] = [];
    const handler = createPollHandler<{ n: number }>({
      stream: "rotation.stream",
      group: "g",
      handle: (m) => {
        handled.push(m.payload.n);
      },
      database: db,
      log: (l) => lines.push(l),
    });
    const event = { stream: "rotation.stream", group: "g" };
    const s = admin.stream<{ n: number }>("rotation.stream");

    await s.produce({ n: 1 });
    expect((await handler(event, localContext(30_000))).succeeded).toBe(1);
    await s.produce({ n: 2 });
    expect((await handler(event, localContext(30_000))).succeeded).toBe(1);
    // Warm invocations reuse the secret and the connection.
    expect(sm.commandCalls(GetSecretValueCommand)).toHaveLength(1);
    const who = await query<{ n: string }>(url(), `SELECT count(*)::text AS n FROM pg_stat_activity WHERE usename = $1`, [role]);
    expect(who[0].n).toBe("1");

    // Rotation: the password changes, and the container's connection goes away (as when the
    // container is recycled or the server drops it), so the next invocation must log in again.
    await query(url(), `ALTER ROLE ${role} PASSWORD '${password2}'`);
    await query(url(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, [role]);
    await s.produce({ n: 3 });
    const r = await handler(event, localContext(30_000));
    expect(r.succeeded).toBe(1);
    expect(handled).toEqual([1, 2, 3]);
    expect(sm.commandCalls(GetSecretValueCommand)).toHaveLength(2);
    expect(db.credentialLoads).toBe(2);
    for (const l of lines) expectNoSecretIn(l);

    // A rotation the secret does not reflect: fetched again once, then SQL0032 (no password shown).
    await query(url(), `ALTER ROLE ${role} PASSWORD 'elsewhere-${randomBytes(6).toString("hex")}'`);
    await query(url(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, [role]);
    await s.produce({ n: 4 });
    const err = await handler(event, localContext(30_000)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SqlStreamsError);
    expect((err as SqlStreamsError).code).toBe("SQL0032");
    expect(isAuthFailure(err)).toBe(true);
    expect(sm.commandCalls(GetSecretValueCommand)).toHaveLength(3);
    expectNoSecretIn(err);
    expectNoSecretIn(lines);
    expect(handled).toEqual([1, 2, 3]);

    // The secret catches up: the next invocation fetches it and resumes.
    await query(url(), `ALTER ROLE ${role} PASSWORD '${password2}'`);
    const after = await handler(event, localContext(30_000));
    expect(after.succeeded).toBe(1);
    expect(handled).toEqual([1, 2, 3, 4]);
    expect(sm.commandCalls(GetSecretValueCommand)).toHaveLength(4);
  });

  it("an RDS-managed master secret ({username, password} only; host, port, database from the environment) survives a rotation", async (ctx) => {
    if (!(await serverChecksPasswords(wrongPasswordUrl()))) ctx.skip();
    const u = new URL(url());
    const before = "m1-" + randomBytes(12).toString("hex");
    const after = "m2-" + randomBytes(12).toString("hex");
    await query(url(), `ALTER ROLE ${role} PASSWORD '${before}'`);
    await query(url(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, [role]);
    // What RDS stores for manageMasterUserPassword, and what the SqlStreams component puts into
    // the functions' environment (packages/aws/src/sst).
    const managed = (password: string) => JSON.stringify({ username: role, password });
    sm.on(GetSecretValueCommand, { SecretId: ARN }).resolvesOnce({ SecretString: managed(before) }).resolves({ SecretString: managed(after) });
    const env = {
      SQLSTREAMS_DB_SECRET_ARN: ARN,
      SQLSTREAMS_DB_HOST: u.hostname,
      SQLSTREAMS_DB_PORT: u.port || "5432",
      SQLSTREAMS_DB_NAME: decodeURIComponent(u.pathname.slice(1)),
      SQLSTREAMS_DB_SSL: "disable",
    };
    const db = new DatabaseProvider({ env, logger: () => {} });
    providers.push(db);
    const handled: number[] = [];
    const lines: LogLine[] = [];
    const handler = createPollHandler<{ n: number }>({ stream: "rotation.stream", group: "g", handle: (m) => void handled.push(m.payload.n), database: db, log: (l) => lines.push(l) });
    const event = { stream: "rotation.stream", group: "g" };
    const s = admin.stream<{ n: number }>("rotation.stream");

    await s.produce({ n: 101 });
    expect((await handler(event, localContext(30_000))).succeeded).toBe(1);
    const who = await query<{ n: string }>(url(), `SELECT count(*)::text AS n FROM pg_stat_activity WHERE usename = $1`, [role]);
    expect(who[0].n).toBe("1");

    // RDS rotates: new password on the role and in the secret; the old connection goes away.
    await query(url(), `ALTER ROLE ${role} PASSWORD '${after}'`);
    await query(url(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, [role]);
    await s.produce({ n: 102 });
    expect((await handler(event, localContext(30_000))).succeeded).toBe(1);
    expect(handled).toEqual([101, 102]);
    expect(sm.commandCalls(GetSecretValueCommand)).toHaveLength(2);
    expect(db.credentialLoads).toBe(2);
    const text = JSON.stringify(lines);
    for (const p of [before, after]) expect(text).not.toContain(p);
  });
});

describe("TLS verification (SQLSTREAMS_DB_CA)", () => {
  it("rds: only the pinned RDS CA bundle is trusted; system or unset: Node's CAs; anything else ⇒ SQL0032", () => {
    const bundle = rdsCaBundle();
    expect(bundle.length).toBeGreaterThan(50);
    for (const pem of bundle) expect(pem).toContain("-----BEGIN CERTIFICATE-----");
    expect(sslSettings({ SQLSTREAMS_DB_CA: "rds" }, "db.abc.eu-west-1.rds.amazonaws.com")).toEqual({ rejectUnauthorized: true, servername: "db.abc.eu-west-1.rds.amazonaws.com", ca: bundle });
    expect(sslSettings({ SQLSTREAMS_DB_CA: "rds" }, "10.0.0.5")).toEqual({ rejectUnauthorized: true, ca: bundle });
    expect(sslSettings({ SQLSTREAMS_DB_CA: "system" }, "ep-x.neon.tech")).toEqual({ rejectUnauthorized: true, servername: "ep-x.neon.tech" });
    expect(sslSettings({}, "ep-x.neon.tech")).toEqual({ rejectUnauthorized: true, servername: "ep-x.neon.tech" });
    // require/disable are explicit opt-outs and ignore the CA choice.
    expect(sslSettings({ SQLSTREAMS_DB_CA: "rds", SQLSTREAMS_DB_SSL: "require" }, "h")).toEqual({ rejectUnauthorized: false });
    expect(() => sslSettings({ SQLSTREAMS_DB_CA: "everything" }, "h")).toThrow(expect.objectContaining({ code: "SQL0032" }));
    // The secret path hands the option to pg.
    const s = parseRdsSecret(JSON.stringify({ username: "u", password: "pw" }), ARN, { SQLSTREAMS_DB_HOST: "db.example", SQLSTREAMS_DB_CA: "rds" });
    expect(s.config.ssl).toEqual({ rejectUnauthorized: true, servername: "db.example", ca: bundle });
  });

  it("a server whose certificate is not from an RDS CA is refused; the same server passes with its own CA (control)", async () => {
    const dir = mkdtempSync(join(tmpdir(), "sqlstreams-tls-"));
    const sockets = new Set<Socket>();
    // A Postgres-speaking TLS endpoint: answers the SSLRequest with 'S', then a TLS handshake
    // with a self-signed certificate for "localhost".
    execFileSync("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
      "-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem")], { stdio: "ignore" });
    const key = readFileSync(join(dir, "key.pem"));
    const cert = readFileSync(join(dir, "cert.pem"), "utf8");
    const server = createServer((socket) => {
      sockets.add(socket);
      socket.once("data", () => {
        socket.write("S");
        const tls = new TLSSocket(socket, { isServer: true, key, cert });
        tls.on("error", () => {});
        tls.once("secure", () => tls.destroy());
      });
      socket.on("error", () => {});
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const port = (server.address() as AddressInfo).port;
    const attempt = async (ssl: pg.ClientConfig["ssl"]): Promise<Error> => {
      const c = new pg.Client({ host: "localhost", port, user: "u", password: "p", database: "d", ssl, connectionTimeoutMillis: 30_000 });
      c.on("error", () => {});
      const e = await c.connect().then(() => new Error("connected"), (err: Error) => err);
      await c.end().catch(() => {});
      return e;
    };
    try {
      const refused = await attempt(sslSettings({ SQLSTREAMS_DB_CA: "rds" }, "localhost"));
      expect((refused as { code?: string }).code).toMatch(/SELF_SIGNED|UNABLE_TO_VERIFY|CERT/);
      // Control: trusting this certificate, the handshake succeeds and the server then hangs up.
      const control = await attempt({ ...(sslSettings({ SQLSTREAMS_DB_CA: "rds" }, "localhost") as object), ca: [cert] });
      expect((control as { code?: string }).code ?? "").not.toMatch(/SELF_SIGNED|UNABLE_TO_VERIFY|CERT/);
      expect(control.message).not.toBe("connected");
    } finally {
      for (const s of sockets) s.destroy();
      server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
