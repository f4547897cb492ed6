// produce-tx: the cost of produceInTx through each transaction adapter against plain
// produceInTx on a node-postgres client (docs/guide/producing.md#producing-inside-your-transaction).
// One connection, one message per transaction, sequential: BEGIN, produceInTx, COMMIT through
// the library's own transaction API, so the figure is each library's per-transaction overhead
// plus ours (a savepoint, the insert, its release). The SQL function sqlstreams.produce() in a
// node-postgres transaction runs alongside for comparison. Metrics are transactions per second.
import pg from "pg";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { build } from "esbuild";
import { beforeTimed, makePayload, rate } from "../lib/common.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.join(HERE, "..", "..");
const STREAM = "bench.tx";

/** The Prisma client generated for the tests (TypeScript) bundled to one ESM file, packages external. */
async function prismaClient(url) {
  const out = path.join(ROOT, ".cache", "bench-prisma", "client.mjs");
  await build({
    entryPoints: [path.join(ROOT, "test", "prisma", "generated", "client.ts")],
    bundle: true, platform: "node", format: "esm", packages: "external", outfile: out, logLevel: "error",
  });
  const { PrismaClient } = await import(pathToFileURL(out).href);
  const { PrismaPg } = await import("@prisma/adapter-pg");
  return new PrismaClient({ adapter: new PrismaPg({ connectionString: url, max: 1 }) });
}

/** Each adapter: open(url) → { tx(fn), close() } where tx runs fn(executorOrTx) in one transaction. */
function adapters() {
  return {
    pg: async (url) => {
      const pool = new pg.Pool({ connectionString: url, max: 1 });
      const c = await pool.connect();
      return {
        tx: async (fn) => { await c.query("BEGIN"); await fn(c); await c.query("COMMIT"); },
        close: async () => { c.release(); await pool.end(); },
      };
    },
    "sql-function": async (url) => {
      const pool = new pg.Pool({ connectionString: url, max: 1 });
      const c = await pool.connect();
      return {
        sql: true,
        tx: async (fn) => { await c.query("BEGIN"); await fn(c); await c.query("COMMIT"); },
        close: async () => { c.release(); await pool.end(); },
      };
    },
    "drizzle-pg": async (url) => {
      const { drizzle } = await import("drizzle-orm/node-postgres");
      const { drizzleExecutor } = await import("@sqlstreams/core/drizzle");
      const pool = new pg.Pool({ connectionString: url, max: 1 });
      const db = drizzle(pool);
      return { tx: (fn) => db.transaction((tx) => fn(drizzleExecutor(tx))), close: () => pool.end() };
    },
    "drizzle-postgres.js": async (url) => {
      const { default: postgres } = await import("postgres");
      const { drizzle } = await import("drizzle-orm/postgres-js");
      const { drizzleExecutor } = await import("@sqlstreams/core/drizzle");
      const sql = postgres(url, { max: 1, onnotice: () => {} });
      const db = drizzle(sql);
      return { tx: (fn) => db.transaction((tx) => fn(drizzleExecutor(tx))), close: () => sql.end() };
    },
    kysely: async (url) => {
      const { Kysely, PostgresDialect } = await import("kysely");
      const { kyselyExecutor } = await import("@sqlstreams/core/kysely");
      const db = new Kysely({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max: 1 }) }) });
      return { tx: (fn) => db.transaction().execute((trx) => fn(kyselyExecutor(trx))), close: () => db.destroy() };
    },
    prisma: async (url) => {
      const prisma = await prismaClient(url);
      return { tx: (fn) => prisma.$transaction((tx) => fn(tx)), close: () => prisma.$disconnect() };
    },
    "postgres.js": async (url) => {
      const { default: postgres } = await import("postgres");
      const sql = postgres(url, { max: 1, onnotice: () => {} });
      return { tx: (fn) => sql.begin((tx) => fn(tx)), close: () => sql.end() };
    },
  };
}

export async function produceTx(ctx) {
  const core = await import("@sqlstreams/core");
  const pool = new pg.Pool({ connectionString: ctx.url, max: 2 });
  const client = new core.SqlStreams({ pool });
  await client.migrate();
  const stream = client.stream(STREAM);
  await stream.register();
  const metrics = {};
  const errors = [];
  let total = 0;
  await beforeTimed(ctx.url);
  try {
    for (const [name, open] of Object.entries(adapters())) {
      let a;
      try {
        a = await open(ctx.url);
        const one = a.sql
          ? (c, i) => c.query("SELECT sqlstreams.produce($1, $2::jsonb)", [STREAM, JSON.stringify(makePayload(i))])
          : (tx, i) => stream.produceInTx(tx, makePayload(i));
        for (let i = 0; i < 50; i++) await a.tx((tx) => one(tx, i)); // warm-up, not timed
        total += 50;
        const t0 = performance.now();
        for (let i = 0; i < ctx.n; i++) await a.tx((tx) => one(tx, i));
        metrics[name] = rate(ctx.n, performance.now() - t0);
        total += ctx.n;
      } catch (e) {
        errors.push(`${name}: ${String(e?.message ?? e)}`);
      } finally {
        await a?.close();
      }
    }
    const id = (await pool.query("SELECT id::text FROM sqlstreams.stream_config WHERE name = $1", [STREAM])).rows[0].id;
    const rows = (await pool.query(`SELECT count(*)::int AS n FROM sqlstreams.message_log_${id}`)).rows[0].n;
    return { metrics, check: { ok: errors.length === 0 && rows === total, rows, expected: total }, errors, settings: { connections: 1, perTransaction: 1 } };
  } finally {
    await client.close();
    await pool.end();
  }
}
