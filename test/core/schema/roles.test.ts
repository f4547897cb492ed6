// Least privilege in the database (docs/guide/security.md), with real LOGIN roles connecting as
// themselves: a producer granted a stream with grant_produce() produces to it through
// sqlstreams.produce()/produce_batch() and to no other, writes no table and calls no other
// function; revoke_produce() takes it back; a function re-created by a migration keeps the grants
// and gives PUBLIC nothing. setup_roles(): the worker drains a stream registered after the setup
// and cannot create tables; the reader reads progress, failures and messages and cannot write.
import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SqlStreams, type Message } from "@sqlstreams/core";
import { DatabaseProvider, createMigrateHandler, localContext } from "@sqlstreams/aws";
import { useFreshDatabase } from "../../support/db.js";
import { spawnNode } from "../../support/processes.js";
import { SCHEMA } from "../../support/streams.js";

const url = useFreshDatabase();
const tag = randomBytes(5).toString("hex");
const role = (what: string) => `${what}_${tag}`;
const PRODUCER = role("producer");
const OTHER = role("other");
const APP = role("app");
const WORKER = role("worker");
const READER = role("reader");
const M_WORKER = role("mworker");
const M_READER = role("mreader");
const M_PRODUCER = role("mproducer");
const ROLES = [PRODUCER, OTHER, APP, WORKER, READER, M_WORKER, M_READER, M_PRODUCER];

let owner: pg.Pool;
let ownerClient: SqlStreams;
const pools: pg.Pool[] = [];

/** Every role this file logs in as has this password (the embedded server checks passwords; trust auth ignores it). */
const ROLE_PASSWORD = "sqlstreams-test-role";

async function givePassword(...roles: string[]): Promise<void> {
  for (const r of roles) await owner.query(`ALTER ROLE ${r} PASSWORD '${ROLE_PASSWORD}'`);
}

/** A pool connecting as `user`. */
function as(user: string): pg.Pool {
  const u = new URL(url());
  u.username = user;
  u.password = ROLE_PASSWORD;
  const p = new pg.Pool({ connectionString: u.toString(), max: 2 });
  pools.push(p);
  return p;
}

async function raised(p: Promise<unknown>): Promise<{ message: string; code: string }> {
  try {
    await p;
  } catch (e) {
    const err = e as { message: string; code: string };
    return { message: err.message, code: err.code };
  }
  throw new Error("expected the statement to raise");
}

async function streamId(name: string): Promise<string> {
  return (await owner.query<{ id: string }>(`SELECT id::text FROM ${SCHEMA}.stream_config WHERE name = $1`, [name])).rows[0].id;
}

beforeAll(async () => {
  owner = new pg.Pool({ connectionString: url(), max: 4 });
  for (const r of ROLES) await owner.query(`DROP ROLE IF EXISTS ${r}`);
  await owner.query(`CREATE ROLE ${PRODUCER} LOGIN PASSWORD '${ROLE_PASSWORD}'`);
  await owner.query(`CREATE ROLE ${OTHER} LOGIN PASSWORD '${ROLE_PASSWORD}'`);
  await owner.query(`CREATE ROLE ${APP} LOGIN PASSWORD '${ROLE_PASSWORD}' IN ROLE ${PRODUCER}`);
  ownerClient = new SqlStreams({ pool: owner });
  await ownerClient.migrate();
  for (const s of ["a", "b"]) {
    await ownerClient.stream(s).register();
    await ownerClient.stream(s).produce({ seed: true }); // creates the first partition
  }
});

afterAll(async () => {
  await ownerClient?.close();
  for (const p of pools) await p.end();
  for (const r of ROLES) {
    await owner?.query(`DROP OWNED BY ${r}`).catch(() => {});
    await owner?.query(`DROP ROLE IF EXISTS ${r}`).catch(() => {});
  }
  await owner?.end();
});

describe("grant_produce: producers need no table privilege", () => {
  it("a granted role produces to its stream and is refused every other stream, table and function", async () => {
    const p = as(PRODUCER);
    // Before any grant: PUBLIC has no EXECUTE on the schema's functions.
    expect((await raised(p.query(`SELECT ${SCHEMA}.produce('a', '{"n": 0}')`))).code).toBe("42501");

    await owner.query(`SELECT ${SCHEMA}.grant_produce($1, 'a')`, [PRODUCER]);
    await owner.query(`SELECT ${SCHEMA}.grant_produce($1, 'a')`, [PRODUCER]); // idempotent
    const one = await p.query<{ id: string }>(`SELECT ${SCHEMA}.produce('a', '{"n": 1}', key => 'k')::text AS id`);
    expect(Number(one.rows[0].id)).toBeGreaterThan(1);
    const batch = await p.query(`SELECT ${SCHEMA}.produce_batch('a', '[{"payload": 1}, {"payload": 2}]')`);
    expect(batch.rowCount).toBe(2);
    const a = await streamId("a");
    const b = await streamId("b");
    expect((await owner.query(`SELECT count(*)::int AS n FROM ${SCHEMA}.message_log_${a}`)).rows[0].n).toBe(4);

    // Another stream, or one that does not exist: the same refusal, with the fix.
    for (const stream of ["b", "nope"]) {
      const e = await raised(p.query(`SELECT ${SCHEMA}.produce($1, '{"n": 1}')`, [stream]));
      expect(e.code).toBe("42501");
      expect(e.message).toContain(`SQL0095 role ${PRODUCER} may not produce to stream "${stream}"`);
      expect(e.message).toContain(`grant_produce('${PRODUCER}', '${stream}')`);
    }
    expect((await raised(p.query(`SELECT ${SCHEMA}.produce_batch('b', '[{"payload": 1}]')`))).message).toMatch(/^SQL0095 /);
    expect((await owner.query(`SELECT count(*)::int AS n FROM ${SCHEMA}.message_log_${b}`)).rows[0].n).toBe(1);

    // No table: forging an id, moving a cursor, granting itself another stream.
    const writes = [
      `INSERT INTO ${SCHEMA}.message_log_${a} (id, payload) VALUES (500, '{}')`,
      `INSERT INTO ${SCHEMA}.message_log_${b} (payload) VALUES ('{}')`,
      `UPDATE ${SCHEMA}.message_log_${a} SET payload = '{}'`,
      `DELETE FROM ${SCHEMA}.message_log_${a}`,
      `UPDATE ${SCHEMA}.stream_config SET max_payload_bytes = 1`,
      `INSERT INTO ${SCHEMA}.produce_grant (stream_id, role_oid) SELECT ${b}, oid FROM pg_roles WHERE rolname = current_user`,
      `SELECT * FROM ${SCHEMA}.message_log_${a}`,
      `SELECT setval('${SCHEMA}.message_log_${a}_id_seq', 1000)`,
    ];
    for (const w of writes) {
      const e = await p.query(w).then(() => ({ code: "none (it ran)" }), (err: { code: string }) => err);
      expect(e.code, w).toBe("42501");
    }

    // No other function of the schema: every one but produce/produce_batch is refused EXECUTE.
    const fns = await owner.query<{ name: string; args: string; strict: boolean; may: boolean }>(
      `SELECT p.proname AS name, p.proisstrict AS strict, has_function_privilege($2, p.oid, 'EXECUTE') AS may, coalesce(string_agg('NULL::' || format_type(t, NULL), ', ' ORDER BY i), '') AS args
         FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         LEFT JOIN LATERAL unnest(p.proargtypes::oid[]) WITH ORDINALITY AS x(t, i) ON true
        WHERE n.nspname = $1 AND p.proname NOT IN ('produce', 'produce_batch') AND p.prokind = 'f'
        GROUP BY p.oid, p.proname ORDER BY 1`,
      [SCHEMA, PRODUCER],
    );
    const names = fns.rows.map((f) => f.name);
    expect(names).toEqual(expect.arrayContaining(["grant_produce", "revoke_produce", "setup_roles", `claim_${a}`, `advance_${a}`, "raise_coded"]));
    for (const f of fns.rows) {
      expect(f.may, f.name).toBe(false);
      // A STRICT function called with NULLs is folded to NULL by the planner, never called.
      if (f.strict) continue;
      const e = await p.query(`SELECT ${SCHEMA}.${f.name}(${f.args})`).then(() => ({ code: "none (it ran)", message: "" }), (err: { code: string; message: string }) => err);
      expect(e.code, f.name).toBe("42501");
      expect(e.message, f.name).toContain("permission denied for function");
    }
  });

  it("a login role produces through its membership in a granted role, also after SET ROLE", async () => {
    const p = as(APP);
    await owner.query(`SELECT ${SCHEMA}.grant_produce($1, 'a')`, [PRODUCER]);
    await p.query(`SELECT ${SCHEMA}.produce('a', '{"via": "membership"}')`);
    const c = await p.connect();
    try {
      await c.query(`SET ROLE ${PRODUCER}`);
      await c.query(`SELECT ${SCHEMA}.produce('a', '{"via": "set role"}')`);
      expect((await raised(c.query(`SELECT ${SCHEMA}.produce('b', '{}')`))).message).toMatch(/^SQL0095 role /);
    } finally {
      c.release();
    }
  });

  it("only the owner grants and revokes; revoke takes the stream back", async () => {
    const p = as(PRODUCER);
    await owner.query(`SELECT ${SCHEMA}.grant_produce($1, 'a')`, [PRODUCER]);
    await owner.query(`SELECT ${SCHEMA}.grant_produce($1, 'b')`, [PRODUCER]);
    await p.query(`SELECT ${SCHEMA}.produce('b', '{}')`);
    expect((await raised(p.query(`SELECT ${SCHEMA}.grant_produce($1, 'b')`, [OTHER]))).code).toBe("42501");

    await owner.query(`SELECT ${SCHEMA}.revoke_produce($1, 'b')`, [PRODUCER]);
    expect((await raised(p.query(`SELECT ${SCHEMA}.produce('b', '{}')`))).message).toMatch(/^SQL0095 /);
    await p.query(`SELECT ${SCHEMA}.produce('a', '{}')`); // a is still granted
    await owner.query(`SELECT ${SCHEMA}.revoke_produce($1, 'a')`, [PRODUCER]);
    await owner.query(`SELECT ${SCHEMA}.revoke_produce($1, 'a')`, [PRODUCER]); // idempotent
    // No stream left: EXECUTE is gone too.
    expect((await raised(p.query(`SELECT ${SCHEMA}.produce('a', '{}')`))).message).toContain("permission denied for function produce");

    const missingRole = await raised(owner.query(`SELECT ${SCHEMA}.grant_produce('no_such_role_${tag}', 'a')`));
    expect(missingRole.message).toMatch(/^SQL0096 role "no_such_role_/);
    expect((await raised(owner.query(`SELECT ${SCHEMA}.grant_produce($1, 'nope')`, [PRODUCER]))).message).toMatch(/^SQL0009 /);
  });

  it("the grants of a dropped role are removed at the next grant or revoke", async () => {
    const gone = role("gone");
    await owner.query(`CREATE ROLE ${gone} LOGIN`);
    await owner.query(`SELECT ${SCHEMA}.grant_produce($1, 'a')`, [gone]);
    const oid = (await owner.query<{ oid: string }>(`SELECT oid::text FROM pg_roles WHERE rolname = $1`, [gone])).rows[0].oid;
    await owner.query(`DROP OWNED BY ${gone}; DROP ROLE ${gone}`);
    expect((await owner.query(`SELECT 1 FROM ${SCHEMA}.produce_grant WHERE role_oid = $1`, [oid])).rowCount).toBe(1);
    await owner.query(`SELECT ${SCHEMA}.grant_produce($1, 'a')`, [PRODUCER]);
    expect((await owner.query(`SELECT 1 FROM ${SCHEMA}.produce_grant WHERE role_oid = $1`, [oid])).rowCount).toBe(0);
  });

  it("a migration that re-creates produce() keeps the grants and gives PUBLIC nothing", async () => {
    await owner.query(`SELECT ${SCHEMA}.grant_produce($1, 'a')`, [PRODUCER]);
    await owner.query(`UPDATE ${SCHEMA}.function_version SET hash = 'stale' WHERE stream_id IS NULL AND name IN ('produce', 'produce_batch', 'raise_coded')`);
    await ownerClient.migrate();
    await as(PRODUCER).query(`SELECT ${SCHEMA}.produce('a', '{"after": "migrate"}')`);
    const e = await raised(as(OTHER).query(`SELECT ${SCHEMA}.produce('a', '{}')`));
    expect(e.code).toBe("42501");
    const open = await owner.query(
      `SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = $1 AND has_function_privilege('public', p.oid, 'EXECUTE')`,
      [SCHEMA],
    );
    expect(open.rows).toEqual([]);
  });
});

/** `sqlstreams …` as a child process, connecting as `user`. */
async function cli(args: string[], user = "postgres"): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const u = new URL(url());
  if (user !== "postgres") {
    u.username = user;
    u.password = ROLE_PASSWORD;
  }
  const child = spawnNode({ script: "packages/cli/dist/bin.js", args, env: { DATABASE_URL: u.toString(), SQLSTREAMS_SCHEMA: undefined } });
  const exit = await child.waitForExit(30_000);
  return { code: exit.code, stdout: child.lines.join("\n"), stderr: child.stderr() };
}

describe("sqlstreams grant-produce / revoke-produce", () => {
  it("grants and revokes as the owner; a non-owner gets SQL0095, an unknown role SQL0096", async () => {
    await owner.query(`SELECT ${SCHEMA}.revoke_produce($1, 'b')`, [OTHER]);
    const g = await cli(["grant-produce", OTHER, "b"]);
    expect(g.stderr).toBe("");
    expect(g.code).toBe(0);
    expect(g.stdout).toContain(`role ${OTHER} may produce to b`);
    await as(OTHER).query(`SELECT ${SCHEMA}.produce('b', '{"cli": true}')`);
    const json = await cli(["revoke-produce", OTHER, "b", "--json"]);
    expect(JSON.parse(json.stdout)).toEqual({ role: OTHER, stream: "b", produce: false });
    expect((await raised(as(OTHER).query(`SELECT ${SCHEMA}.produce('b', '{}')`))).code).toBe("42501");

    const unknown = await cli(["grant-produce", `nobody_${tag}`, "b"]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain("SQL0096");
    // A role that may execute every function (as the worker may) still cannot grant.
    await owner.query(`GRANT USAGE ON SCHEMA ${SCHEMA} TO ${OTHER}; GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA ${SCHEMA} TO ${OTHER}`);
    const notOwner = await cli(["grant-produce", OTHER, "b"], OTHER);
    expect(notOwner.code).toBe(1);
    expect(notOwner.stderr).toContain("SQL0095");
    expect(notOwner.stderr).toContain("only the owner of schema");
    await owner.query(`REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA ${SCHEMA} FROM ${OTHER}`);
    const usage = await cli(["grant-produce", OTHER]);
    expect(usage.code).toBe(1);
  });
});

describe("setup_roles: a worker and a reader", () => {
  it("the worker drains a stream registered after the setup and creates no table; the reader reads and writes nothing", async () => {
    await owner.query(`SELECT ${SCHEMA}.setup_roles(worker => $1, reader => $2)`, [WORKER, READER]);
    await owner.query(`SELECT ${SCHEMA}.setup_roles(worker => $1, reader => $2)`, [WORKER, READER]); // idempotent
    await givePassword(WORKER, READER);
    await ownerClient.stream("late").register();
    await ownerClient.maintain({ streams: ["late"] }); // partitions are DDL: the owner's

    const worker = new SqlStreams({ pool: as(WORKER) });
    try {
      const s = worker.stream<{ n: number }>("late");
      await s.register(); // an existing stream: no DDL
      await s.consumer("g").register();
      await s.produce({ n: 1 });
      await s.produceBatch([{ payload: { n: 2 } }, { payload: { n: 3 } }]);
      const seen: number[] = [];
      await s.consumer("g").drain(async (m: Message<{ n: number }>) => {
        seen.push(m.payload.n);
        if (m.payload.n === 3) throw new Error("boom");
      });
      expect(seen.sort()).toEqual([1, 2, 3]);
      const wp = as(WORKER);
      expect((await raised(wp.query(`CREATE TABLE ${SCHEMA}.planted (x int)`))).code).toBe("42501");
      expect((await raised(wp.query(`SELECT ${SCHEMA}.grant_produce($1, 'late')`, [WORKER]))).message).toMatch(/^SQL0095 /);
      expect((await raised(wp.query(`INSERT INTO ${SCHEMA}.produce_grant (stream_id, role_oid) VALUES (1, 1)`))).code).toBe("42501");
    } finally {
      await worker.close();
    }

    const reader = new SqlStreams({ pool: as(READER) });
    try {
      const g = reader.stream("late").consumer("g");
      const progress = await g.progress();
      expect(progress).toBeTruthy();
      await g.failures();
      const msgs = await reader.stream("late").inspect({ id: "1" });
      expect(msgs.length).toBe(1);
      const rp = as(READER);
      expect((await raised(reader.stream("late").produce({ n: 9 }))).message).toMatch(/read-only|permission denied/);
      const n = await streamId("late");
      for (const w of [
        `INSERT INTO ${SCHEMA}.message_log_${n} (payload) VALUES ('{}')`,
        `UPDATE ${SCHEMA}.consumer_group_cursor_${n} SET committed = 0`,
        `BEGIN READ WRITE; UPDATE ${SCHEMA}.consumer_group_cursor_${n} SET committed = 0`,
      ]) {
        const e = await raised(rp.query(w));
        expect(["25006", "42501"], w).toContain(e.code);
        await rp.query("ROLLBACK").catch(() => {});
      }
      const ro = await rp.query<{ v: string }>("SELECT current_setting('default_transaction_read_only') AS v");
      expect(ro.rows[0].v).toBe("on");

      // The dashboard's pages, served as the reader (a dead letter on the group page).
      const ru = new URL(url());
      ru.username = READER;
      ru.password = ROLE_PASSWORD;
      const child = spawnNode({
        script: "packages/cli/dist/bin.js",
        args: ["dashboard", "--port", "0", "--json", "--read-only"],
        env: { DATABASE_URL: ru.toString(), SQLSTREAMS_SCHEMA: undefined },
      });
      try {
        const m = await child.waitFor((x) => typeof x.url === "string", { timeoutMs: 60_000 });
        // The printed URL's per-start token goes along with each page as a bearer token.
        const base = new URL(m.url as string);
        const token = base.searchParams.get("token");
        expect(token).toBeTruthy();
        for (const [path, text] of [["/", "late"], ["/group?stream=late&group=g&status=deferred", "late"], ["/message?stream=late&id=3", "boom"]]) {
          const target = new URL(path, base);
          const res = await fetch(target, { redirect: "manual", headers: { authorization: `Bearer ${token}` } });
          const body = await res.text();
          expect(res.status, `${path}: ${body.slice(0, 300)}`).toBe(200);
          expect(body, path).toContain(text);
        }
      } finally {
        await child.kill();
      }
    } finally {
      await reader.close();
    }
  });
});

describe("createMigrateHandler with roles", () => {
  it("creates and grants the worker, reader and producer roles of SQLSTREAMS_DB_ROLES after registering; iam needs rds_iam", async () => {
    const groups = [{ stream: "deploy", group: "g", function: "functions/handlers/g.handler", schedule: "rate(1 minute)" }];
    const env = {
      DATABASE_URL: url(),
      SQLSTREAMS_DB_ROLES: JSON.stringify({ worker: M_WORKER, reader: M_READER, producers: { [M_PRODUCER]: ["deploy"] } }),
    };
    const database = new DatabaseProvider({ env });
    try {
      const migrate = createMigrateHandler({ groups, database, env, log: () => {} });
      await migrate({}, localContext(60_000));
      await migrate({}, localContext(60_000)); // idempotent
      await givePassword(M_PRODUCER, M_WORKER, M_READER);
      await ownerClient.maintain({ streams: ["deploy"] });
      await as(M_PRODUCER).query(`SELECT ${SCHEMA}.produce('deploy', '{"from": "sql"}')`);
      expect((await raised(as(M_PRODUCER).query(`SELECT ${SCHEMA}.produce('a', '{}')`))).message).toMatch(/^SQL0095 /);
      const worker = new SqlStreams({ pool: as(M_WORKER) });
      try {
        let n = 0;
        await worker.stream("deploy").consumer("g").drain(async () => {
          n++;
        });
        expect(n).toBe(1);
      } finally {
        await worker.close();
      }
      expect((await raised(as(M_READER).query(`DELETE FROM ${SCHEMA}.stream_config`))).code).toMatch(/^(25006|42501)$/);

      const iamEnv = { ...env, SQLSTREAMS_DB_ROLES: JSON.stringify({ worker: M_WORKER, iam: true }) };
      const iam = createMigrateHandler({ groups, database, env: iamEnv, log: () => {} });
      await expect(iam({}, localContext(60_000))).rejects.toMatchObject({ code: "SQL0096", message: expect.stringContaining("rds_iam") });
      const bad = createMigrateHandler({ groups, database, env: { ...env, SQLSTREAMS_DB_ROLES: '{"workers": "x"}' }, log: () => {} });
      await expect(bad({}, localContext(60_000))).rejects.toMatchObject({ code: "SQL0096" });
    } finally {
      await database.close();
    }
  });
});
