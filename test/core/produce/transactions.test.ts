// produceInTx and produceBatchInTx through every transaction API the README names, each with
// its real library against real Postgres (docs/guide/producing.md#producing-inside-your-transaction):
// a commit makes the messages visible and consumable, a rollback leaves no message and no
// idempotency key, a duplicate idempotency key inside the transaction returns the first id with
// duplicate: true, and outside a transaction each library's error is recognised as SQL0015.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import pg from "pg";
import postgres from "postgres";
import { drizzle as drizzlePg } from "drizzle-orm/node-postgres";
import { drizzle as drizzlePostgresJs } from "drizzle-orm/postgres-js";
import { integer, pgTable, type PgDatabase, type PgQueryResultHKT } from "drizzle-orm/pg-core";
import { Kysely, PostgresDialect } from "kysely";
import { PrismaPg } from "@prisma/adapter-pg";
import type { Stream, Transactional } from "@sqlstreams/core";
import { drizzleExecutor } from "@sqlstreams/core/drizzle";
import { kyselyExecutor } from "@sqlstreams/core/kysely";
import { PrismaClient } from "../../prisma/generated/client.js";
import { useFreshDatabase } from "../../support/db.js";
import { SCHEMA, codeOf, count, streamIdOf, testClient, type TestClient } from "../../support/streams.js";

const url = useFreshDatabase();

/** One library: run fn in a transaction of its own making, commit or roll back, and tidy up. */
interface Adapter {
  name: string;
  /** Runs fn inside a transaction; rolls it back when commit is false. */
  inTx(commit: boolean, fn: (tx: Transactional, insertOrder: (id: number) => Promise<void>) => Promise<void>): Promise<void>;
  /** The library's object outside any transaction (produceInTx must refuse it with SQL0015). */
  outside(): Transactional;
  close(): Promise<void>;
}

class RolledBack extends Error {}

async function settle(commit: boolean, body: () => Promise<void>): Promise<void> {
  try {
    await body();
  } catch (e) {
    if (!commit && e instanceof RolledBack) return;
    throw e;
  }
}

const appOrders = pgTable("app_orders", { id: integer("id").primaryKey(), total: integer("total").notNull() });
interface AppDb {
  app_orders: { id: number; total: number };
}

function nodePostgres(): Adapter {
  const pool = new pg.Pool({ connectionString: url(), max: 2 });
  return {
    name: "node-postgres",
    async inTx(commit, fn) {
      const c = await pool.connect();
      try {
        await c.query("BEGIN");
        await fn(c, async (id) => void (await c.query("INSERT INTO app_orders VALUES ($1, 1)", [id])));
        await c.query(commit ? "COMMIT" : "ROLLBACK");
      } catch (e) {
        await c.query("ROLLBACK");
        throw e;
      } finally {
        c.release();
      }
    },
    outside: () => pool,
    close: () => pool.end(),
  };
}

/** Drizzle over either driver: one adapter, the driver is the only difference. */
function drizzle(driver: "node-postgres" | "postgres.js"): Adapter {
  const [db, close]: [PgDatabase<PgQueryResultHKT>, () => Promise<void>] = (() => {
    if (driver === "node-postgres") {
      const pool = new pg.Pool({ connectionString: url(), max: 2 });
      return [drizzlePg(pool), () => pool.end()];
    }
    const sql = postgres(url(), { max: 2, onnotice: () => {} });
    return [drizzlePostgresJs(sql), () => sql.end()];
  })();
  return {
    name: `drizzle (${driver})`,
    inTx: (commit, fn) =>
      settle(commit, () =>
        db.transaction(async (tx) => {
          await fn(drizzleExecutor(tx), async (id) => void (await tx.insert(appOrders).values({ id, total: 1 })));
          if (!commit) throw new RolledBack();
        }),
      ),
    outside: () => drizzleExecutor(db),
    close,
  };
}

function kysely(): Adapter {
  const pool = new pg.Pool({ connectionString: url(), max: 2 });
  const db = new Kysely<AppDb>({ dialect: new PostgresDialect({ pool }) });
  return {
    name: "kysely",
    inTx: (commit, fn) =>
      settle(commit, () =>
        db.transaction().execute(async (trx) => {
          await fn(kyselyExecutor(trx), async (id) => void (await trx.insertInto("app_orders").values({ id, total: 1 }).execute()));
          if (!commit) throw new RolledBack();
        }),
      ),
    outside: () => kyselyExecutor(db),
    close: () => db.destroy(),
  };
}

function prisma(): Adapter {
  const client = new PrismaClient({ adapter: new PrismaPg({ connectionString: url(), max: 2 }) });
  return {
    name: "prisma",
    inTx: (commit, fn) =>
      settle(commit, () =>
        client.$transaction(async (tx) => {
          await fn(tx, async (id) => void (await tx.appOrder.create({ data: { id, total: 1 } })));
          if (!commit) throw new RolledBack();
        }),
      ),
    outside: () => client,
    close: () => client.$disconnect(),
  };
}

function postgresJs(): Adapter {
  const sql = postgres(url(), { max: 2, onnotice: () => {} });
  return {
    name: "postgres.js",
    inTx: (commit, fn) =>
      settle(commit, async () => {
        await sql.begin(async (tx) => {
          await fn(tx, async (id) => void (await tx`INSERT INTO app_orders ${tx({ id, total: 1 })}`));
          if (!commit) throw new RolledBack();
        });
      }),
    outside: () => sql,
    close: () => sql.end(),
  };
}

const adapters: [string, () => Adapter][] = [
  ["node-postgres", nodePostgres],
  ["drizzle-node-postgres", () => drizzle("node-postgres")],
  ["drizzle-postgres-js", () => drizzle("postgres.js")],
  ["kysely", kysely],
  ["prisma", prisma],
  ["postgres-js", postgresJs],
];

let t: TestClient;
beforeAll(async () => {
  t = testClient(url());
  await t.client.migrate();
  await t.sql("CREATE TABLE app_orders (id int PRIMARY KEY, total int NOT NULL)");
});

async function appRows(id: number): Promise<number> {
  return (await t.sql("SELECT 1 FROM public.app_orders WHERE id = $1", [id])).length;
}

async function consumeAll(s: Stream, group: string): Promise<unknown[]> {
  const g = s.consumer(group);
  await g.register();
  const seen: { id: string; payload: unknown }[] = [];
  await g.drain((m) => void seen.push({ id: m.id, payload: m.payload }));
  return seen.sort((a, b) => Number(a.id) - Number(b.id)).map((m) => m.payload);
}

describe.each(adapters)("produce inside a %s transaction", (name, make) => {
  let a: Adapter;
  beforeAll(() => {
    a = make();
  });
  afterAll(async () => {
    await a?.close();
  });
  const base = adapters.findIndex(([n]) => n === name) * 100;
  const stream = `tx.${name}`;

  it("rollback leaves no message, no idempotency key and no application row", async () => {
    const s = t.client.stream(stream);
    await s.register();
    const n = await streamIdOf(t, stream);
    await a.inTx(false, async (tx, insertOrder) => {
      await insertOrder(base + 1);
      const r = await s.produceInTx(tx, { order: base + 1 }, { idempotencyKey: `${name}:1`, key: "customer-1" });
      expect(r.duplicate).toBe(false);
      const b = await s.produceBatchInTx(tx, [{ payload: { line: 1 } }, { payload: { line: 2 }, key: "customer-1" }]);
      expect(b.map((x) => Number(x.id))).toEqual([Number(r.id) + 1, Number(r.id) + 2]);
      expect(await count(t, `message_log_${n}`)).toBe(0); // not visible before the commit
    });
    expect(await count(t, `message_log_${n}`)).toBe(0);
    expect(await count(t, `idempotency_key_${n}`)).toBe(0);
    expect(await appRows(base + 1)).toBe(0);
  });

  it("commit makes the messages visible and consumable; a duplicate key returns the first id", async () => {
    const s = t.client.stream(stream);
    const n = await streamIdOf(t, stream);
    let first = "";
    await a.inTx(true, async (tx, insertOrder) => {
      await insertOrder(base + 2);
      const r = await s.produceInTx(tx, { order: base + 2 }, { idempotencyKey: `${name}:2`, message: { timeout: 5_000 } });
      const again = await s.produceInTx(tx, { order: "ignored" }, { idempotencyKey: `${name}:2` });
      expect(again).toEqual({ id: r.id, duplicate: true });
      // Bad input is refused before anything is written, and the transaction goes on.
      expect(await codeOf(s.produceInTx(tx, { big: 1n } as never))).toBe("SQL0016");
      expect(await codeOf(s.produceBatchInTx(tx, [{ payload: 1, idempotencyKey: "x" } as never]))).toBe("SQL0015");
      await s.produceBatchInTx(tx, [{ payload: { line: 1 }, key: "c", compaction: { rank: 2 } }, { payload: { line: 2 } }]);
      // A batch without compaction goes as JSON arrays, one string parameter each, whatever the driver.
      await s.produceBatchInTx(tx, [{ payload: { q: 'a"b\\{,}' } }, { payload: "NULL", key: 'k"\\' }]);
      first = r.id;
    });
    expect(await appRows(base + 2)).toBe(1);
    expect(await count(t, `message_log_${n}`)).toBe(5);
    expect(await t.sql(`SELECT message_id::text AS id FROM ${SCHEMA}.idempotency_key_${n}`)).toEqual([{ id: first }]);
    expect(await consumeAll(s, "g")).toEqual([{ order: base + 2 }, { line: 1 }, { line: 2 }, { q: 'a"b\\{,}' }, "NULL"]);
    expect(await t.sql(`SELECT message_key FROM ${SCHEMA}.message_log_${n} ORDER BY id DESC LIMIT 1`)).toEqual([{ message_key: 'k"\\' }]);
    // The rolled-back key was never stored, the committed one dedupes a later produce.
    expect((await s.produce({ x: 1 }, { idempotencyKey: `${name}:1` })).duplicate).toBe(false);
    expect(await s.produce({ x: 2 }, { idempotencyKey: `${name}:2` })).toEqual({ id: first, duplicate: true });
  });

  it("outside a transaction the library's error is SQL0015 and nothing is written", async () => {
    const s = t.client.stream(stream);
    const n = await streamIdOf(t, stream);
    const before = await count(t, `message_log_${n}`);
    expect(await codeOf(s.produceInTx(a.outside(), { x: 1 }))).toBe("SQL0015");
    expect(await count(t, `message_log_${n}`)).toBe(before);
  });
});

describe("what produceInTx accepts", () => {
  it("refuses an object that cannot run a statement with SQL0015", async () => {
    const s = t.client.stream("tx.none");
    expect(await codeOf(s.produceInTx({} as never, 1))).toBe("SQL0015");
    expect(await codeOf(s.produceBatchInTx(null as never, [{ payload: 1 }]))).toBe("SQL0015");
  });
});
