// RDS IAM database authentication in the Lambda adapter (docs/guide/security.md#iam-database-authentication):
// the real @aws-sdk/rds-signer signs a token from static fake credentials without opening a
// socket; SQLSTREAMS_DB_IAM_USER settings give pg a password function that signs per connection;
// and through a real PgBouncer that checks SCRAM passwords, each new connection calls it and
// logs in with what it returns (a token the test's signer stands in for: the local server has
// no IAM), while a wrong one is refused.
process.env.AWS_EC2_METADATA_DISABLED = "true";

import net from "node:net";
import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { iamConnectionSettings, isAuthFailure, loadConnectionSettings, signIamTokenWithRdsSigner, type IamTokenRequest } from "@sqlstreams/aws";
import { useFreshDatabase } from "../support/db.js";
import { PGBOUNCER_BIN, type PgBouncer, startPgBouncer } from "../support/pgbouncer.js";

const url = useFreshDatabase();
const noSecret = () => Promise.reject(new Error("no secret in this test"));

describe("signing an IAM token", () => {
  it("@aws-sdk/rds-signer signs locally: a presigned rds-db:connect URL for the user, no socket opened", async () => {
    const saved = { id: process.env.AWS_ACCESS_KEY_ID, secret: process.env.AWS_SECRET_ACCESS_KEY, session: process.env.AWS_SESSION_TOKEN };
    process.env.AWS_ACCESS_KEY_ID = "AKIDFAKEFORTESTS0001";
    process.env.AWS_SECRET_ACCESS_KEY = "fake-secret-for-tests";
    delete process.env.AWS_SESSION_TOKEN;
    const connect = net.Socket.prototype.connect;
    let sockets = 0;
    net.Socket.prototype.connect = function (this: net.Socket, ...args: unknown[]) {
      sockets++;
      return (connect as (...a: unknown[]) => net.Socket).apply(this, args);
    } as typeof connect;
    try {
      const token = await signIamTokenWithRdsSigner({ hostname: "db.example.internal", port: 5432, username: "sqlstreams_worker", region: "eu-west-1" });
      expect(token.startsWith("db.example.internal:5432/?")).toBe(true);
      const q = new URLSearchParams(token.slice(token.indexOf("?") + 1));
      expect(Object.fromEntries(q)).toMatchObject({
        Action: "connect",
        DBUser: "sqlstreams_worker",
        "X-Amz-Algorithm": "AWS4-HMAC-SHA256",
        "X-Amz-Expires": "900",
        "X-Amz-SignedHeaders": "host",
      });
      expect(q.get("X-Amz-Credential")).toMatch(/^AKIDFAKEFORTESTS0001\/\d{8}\/eu-west-1\/rds-db\/aws4_request$/);
      expect(q.get("X-Amz-Date")).toMatch(/^\d{8}T\d{6}Z$/);
      expect(q.get("X-Amz-Signature")).toMatch(/^[0-9a-f]{64}$/);
      expect(sockets).toBe(0);
    } finally {
      net.Socket.prototype.connect = connect;
      process.env.AWS_ACCESS_KEY_ID = saved.id;
      process.env.AWS_SECRET_ACCESS_KEY = saved.secret;
      if (saved.session !== undefined) process.env.AWS_SESSION_TOKEN = saved.session;
      if (saved.id === undefined) delete process.env.AWS_ACCESS_KEY_ID;
      if (saved.secret === undefined) delete process.env.AWS_SECRET_ACCESS_KEY;
    }
  });

  it("SQLSTREAMS_DB_IAM_USER settings: the user, host, port, database and a password function; TLS required; SQL0032 for what is missing", async () => {
    const asked: IamTokenRequest[] = [];
    const env = {
      SQLSTREAMS_DB_IAM_USER: "sqlstreams_reader", SQLSTREAMS_DB_HOST: "proxy.example.internal", SQLSTREAMS_DB_NAME: "app",
      AWS_REGION: "us-east-2", DATABASE_URL: "postgres://ignored@nowhere/x", SQLSTREAMS_DB_SECRET_ARN: "arn:ignored",
    };
    const s = await loadConnectionSettings(env, noSecret, async (r) => {
      asked.push(r);
      return `token-${asked.length}`;
    });
    expect(s.source).toBe("iam");
    expect(s.config).toMatchObject({ host: "proxy.example.internal", port: 5432, user: "sqlstreams_reader", database: "app" });
    expect(s.config.ssl).toMatchObject({ rejectUnauthorized: true, servername: "proxy.example.internal" });
    const password = s.config.password as () => Promise<string>;
    expect(await password()).toBe("token-1");
    expect(await password()).toBe("token-2");
    expect(asked[0]).toEqual({ hostname: "proxy.example.internal", port: 5432, username: "sqlstreams_reader", region: "us-east-2" });

    const refused = (e: Record<string, string | undefined>) => {
      try {
        iamConnectionSettings({ SQLSTREAMS_DB_IAM_USER: "u", ...e });
      } catch (err) {
        return err as { code: string; message: string };
      }
      throw new Error("expected SQL0032");
    };
    expect(refused({ AWS_REGION: "us-east-1" })).toMatchObject({ code: "SQL0032", message: expect.stringContaining("SQLSTREAMS_DB_HOST") });
    expect(refused({ SQLSTREAMS_DB_HOST: "h" })).toMatchObject({ code: "SQL0032", message: expect.stringContaining("AWS_REGION") });
    expect(refused({ SQLSTREAMS_DB_HOST: "h", AWS_REGION: "us-east-1", SQLSTREAMS_DB_SSL: "disable" })).toMatchObject({ code: "SQL0032", message: expect.stringContaining("needs TLS") });
    const failing = iamConnectionSettings({ SQLSTREAMS_DB_IAM_USER: "u", SQLSTREAMS_DB_HOST: "h", AWS_REGION: "us-east-1" }, () => Promise.reject(new Error("no credentials")));
    await expect((failing.config.password as () => Promise<string>)()).rejects.toMatchObject({ code: "SQL0032" });
  });
});

describe.skipIf(!PGBOUNCER_BIN)("a pool with the IAM password function, through a PgBouncer that checks passwords", () => {
  const role = `iam_${randomBytes(5).toString("hex")}`;
  const token = `tok-${randomBytes(16).toString("hex")}`;
  let admin: pg.Pool;
  let bouncer: PgBouncer;

  beforeAll(async () => {
    admin = new pg.Pool({ connectionString: url(), max: 1 });
    await admin.query(`CREATE ROLE ${role} LOGIN PASSWORD '${token}'`);
    bouncer = await startPgBouncer(url());
  });

  afterAll(async () => {
    await bouncer?.stop();
    await admin?.query(`DROP ROLE IF EXISTS ${role}`).catch(() => {});
    await admin?.end();
  });

  it("calls the signer for every new connection and logs in with its token; a wrong token is an auth failure", async () => {
    const asked: IamTokenRequest[] = [];
    const env = { SQLSTREAMS_DB_IAM_USER: role, SQLSTREAMS_DB_HOST: "127.0.0.1", SQLSTREAMS_DB_PORT: String(bouncer.port), SQLSTREAMS_DB_NAME: new URL(url()).pathname.slice(1), AWS_REGION: "us-east-1" };
    const s = iamConnectionSettings(env, async (r) => {
      asked.push(r);
      return token;
    });
    // The local pooler has no TLS; on RDS the settings' ssl stays as built.
    const pool = new pg.Pool({ ...s.config, ssl: false, max: 2 });
    try {
      const [a, b] = await Promise.all([pool.connect(), pool.connect()]);
      expect((await a.query<{ u: string }>("SELECT current_user AS u")).rows[0].u).toBe(role);
      a.release();
      b.release();
      expect(asked).toHaveLength(2);
      expect(asked[0]).toEqual({ hostname: "127.0.0.1", port: bouncer.port, username: role, region: "us-east-1" });
    } finally {
      await pool.end();
    }
    const wrong = iamConnectionSettings(env, async () => "tok-wrong");
    const bad = new pg.Pool({ ...wrong.config, ssl: false, max: 1 });
    bad.on("error", () => {});
    try {
      const e = await bad.connect().then(() => null, (err: unknown) => err);
      expect(e).not.toBeNull();
      expect(isAuthFailure(e)).toBe(true);
    } finally {
      await bad.end();
    }
  });
});
