// Planted functions never run inside the library's SQL functions (docs/protocol/data-model.md#migrations).
// An attacker role with CREATE on a writable `public` (the default before PostgreSQL 15) plants
// overloads of the built-ins the protocol functions call: better matches than pg_catalog's (for
// format(text, VARIADIC "any"), unnest(anyarray), nextval(regclass) …) and exact copies, which
// win when `public` comes before pg_catalog on the caller's search_path, as it does here for every
// connection of the victim (the database owner). Each planted function counts its call in a
// sequence (not rolled back with a failing statement) and a table the attacker owns.
// The victim then produces (library and SQL), drains with failures, retries, delays, dead
// letters, ordered and exclusive keys and compaction, runs maintain(), redrives, discards and
// inspects: no planted function may run.
import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Delay, Permanent, SqlStreams, type Message } from "@sqlstreams/core";
import { useFreshDatabase } from "../../support/db.js";
import { SCHEMA, makeDue } from "../../support/streams.js";

const url = useFreshDatabase();
const attacker = `atk_${randomBytes(6).toString("hex")}`;

/** Each planted function: [signature, return type, the pg_catalog expression it returns]. */
const PLANTED: [string, string, string][] = [
  ["now()", "timestamptz", "pg_catalog.now()"],
  ["clock_timestamp()", "timestamptz", "pg_catalog.clock_timestamp()"],
  ["format(text, bigint)", "text", "pg_catalog.format($1, $2)"],
  ["format(text, integer)", "text", "pg_catalog.format($1, $2)"],
  ["format(text, text)", "text", "pg_catalog.format($1, $2)"],
  ["format(text, jsonb)", "text", "pg_catalog.format($1, $2)"],
  ["format(text, bigint, bigint)", "text", "pg_catalog.format($1, $2, $3)"],
  ["format(text, text, text)", "text", "pg_catalog.format($1, $2, $3)"],
  ["format(text, integer, text, integer)", "text", "pg_catalog.format($1, $2, $3, $4)"],
  ["octet_length(text)", "integer", "pg_catalog.octet_length($1)"],
  ["md5(text)", "text", "pg_catalog.md5($1)"],
  ["lower(text)", "text", "pg_catalog.lower($1)"],
  ["left(text, integer)", "text", "pg_catalog.left($1, $2)"],
  ["nextval(text)", "bigint", "pg_catalog.nextval($1::regclass)"],
  ["to_regclass(text)", "regclass", "pg_catalog.to_regclass($1)"],
  ["to_jsonb(text)", "jsonb", "pg_catalog.to_jsonb($1)"],
  ["jsonb_build_object(text, text, text, bigint)", "jsonb", "pg_catalog.jsonb_build_object($1, $2, $3, $4)"],
  ["jsonb_build_array(jsonb)", "jsonb", "pg_catalog.jsonb_build_array($1)"],
  ["jsonb_array_length(jsonb)", "integer", "pg_catalog.jsonb_array_length($1)"],
  ["jsonb_typeof(jsonb)", "text", "pg_catalog.jsonb_typeof($1)"],
  ["cardinality(bigint[])", "integer", "pg_catalog.cardinality($1)"],
  ["pg_column_size(json)", "integer", "pg_catalog.pg_column_size($1)"],
  ["pg_current_xact_id()", "xid8", "pg_catalog.pg_current_xact_id()"],
  ["date_part(text, timestamptz)", "double precision", "pg_catalog.date_part($1, $2)"],
  ["trunc(numeric)", "numeric", "pg_catalog.trunc($1)"],
  ["abs(numeric)", "numeric", "pg_catalog.abs($1)"],
  ["ceil(numeric)", "numeric", "pg_catalog.ceil($1)"],
  ["encode(bytea, text)", "text", "pg_catalog.encode($1, $2)"],
];

/** Runs as the attacker: the tripwire, then every planted function, the set-returning ones and an aggregate. */
function plantSql(): string {
  const count = (what: string) =>
    `PERFORM pg_catalog.nextval('public.tripwire_calls');
     INSERT INTO public.tripwire (fn, stack) VALUES (${pg.escapeLiteral(what)}, public.planted_stack());`;
  const fns = PLANTED.map(
    ([sig, ret, expr]) => `CREATE FUNCTION public.${sig} RETURNS ${ret} LANGUAGE plpgsql SET search_path = pg_catalog AS $p$
       BEGIN ${count(sig)} RETURN ${expr}; END $p$;`,
  );
  return [
    "CREATE SEQUENCE public.tripwire_calls",
    "CREATE TABLE public.tripwire (fn text NOT NULL, stack text NOT NULL, at timestamptz NOT NULL DEFAULT pg_catalog.now())",
    `CREATE FUNCTION public.planted_stack() RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog AS $p$
       DECLARE v text; BEGIN GET DIAGNOSTICS v = PG_CONTEXT; RETURN v; END $p$`,
    "GRANT USAGE ON SEQUENCE public.tripwire_calls TO PUBLIC",
    "GRANT INSERT ON public.tripwire TO PUBLIC",
    ...fns,
    `CREATE FUNCTION public.unnest(bigint[]) RETURNS SETOF bigint LANGUAGE plpgsql SET search_path = pg_catalog AS $p$
       BEGIN ${count("unnest(bigint[])")} RETURN QUERY SELECT pg_catalog.unnest($1); END $p$`,
    `CREATE FUNCTION public.jsonb_array_elements_text(jsonb) RETURNS SETOF text LANGUAGE plpgsql SET search_path = pg_catalog AS $p$
       BEGIN ${count("jsonb_array_elements_text(jsonb)")} RETURN QUERY SELECT pg_catalog.jsonb_array_elements_text($1); END $p$`,
    `CREATE FUNCTION public.jsonb_object_keys(jsonb) RETURNS SETOF text LANGUAGE plpgsql SET search_path = pg_catalog AS $p$
       BEGIN ${count("jsonb_object_keys(jsonb)")} RETURN QUERY SELECT pg_catalog.jsonb_object_keys($1); END $p$`,
    `CREATE FUNCTION public.planted_min(bigint, bigint) RETURNS bigint LANGUAGE plpgsql SET search_path = pg_catalog AS $p$
       BEGIN ${count("min(bigint)")} RETURN LEAST($1, $2); END $p$`,
    "CREATE AGGREGATE public.min(bigint) (SFUNC = public.planted_min, STYPE = bigint)",
    `CREATE FUNCTION public.planted_cat(text, bigint) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog AS $p$
       BEGIN ${count("||(text, bigint)")} RETURN $1 OPERATOR(pg_catalog.||) $2::text; END $p$`,
    "CREATE OPERATOR public.|| (LEFTARG = text, RIGHTARG = bigint, FUNCTION = public.planted_cat)",
  ].join(";\n");
}

let owner: pg.Pool;

beforeAll(async () => {
  owner = new pg.Pool({ connectionString: url(), max: 2 });
  await owner.query(`CREATE ROLE ${attacker} NOLOGIN`);
  // PostgreSQL 13 and 14 grant this to PUBLIC in every new database.
  await owner.query(`GRANT CREATE, USAGE ON SCHEMA public TO ${attacker}`);
  const c = await owner.connect();
  try {
    await c.query(`SET ROLE ${attacker}`);
    await c.query(plantSql());
  } finally {
    await c.query("RESET ROLE");
    c.release();
  }
});

afterAll(async () => {
  await owner?.query(`DROP OWNED BY ${attacker}`).catch(() => {});
  await owner?.query(`DROP ROLE IF EXISTS ${attacker}`).catch(() => {});
  await owner?.end();
});

/** A call stack (PG_CONTEXT) that passes through one of the library's functions. */
const INSIDE = `stack ~ '(function ${SCHEMA}\\.[a-z_]+\\(|SQL function "[a-z_]+(_[0-9]+)?")'`;

/**
 * The planted calls so far: the count (which includes calls whose statement failed and rolled
 * back), the functions called from inside a library function, and those called by a statement
 * the library sends itself (`outside`).
 */
async function tripped(): Promise<{ calls: number; inside: string[]; outside: string[] }> {
  const seq = await owner.query<{ n: string }>("SELECT CASE WHEN is_called THEN last_value ELSE 0 END::text AS n FROM public.tripwire_calls");
  const rows = await owner.query<{ fn: string; inside: boolean }>(`SELECT DISTINCT fn, ${INSIDE} AS inside FROM public.tripwire ORDER BY fn`);
  return {
    calls: Number(seq.rows[0].n),
    inside: rows.rows.filter((r) => r.inside).map((r) => r.fn),
    outside: rows.rows.filter((r) => !r.inside).map((r) => r.fn),
  };
}

async function resetTripwire(): Promise<void> {
  await owner.query("TRUNCATE public.tripwire");
  await owner.query("SELECT setval('public.tripwire_calls', 1, false)");
}

/** Drains until a drain starts nothing, making retries due in between. */
async function drainAll<T>(g: ReturnType<ReturnType<SqlStreams["stream"]>["consumer"]>, sid: string, h: (m: Message<T>) => unknown) {
  for (let i = 0; i < 40; i++) {
    const r = await g.drain(h as (m: Message) => unknown, { batchLimit: 10 });
    await makeDue({ sql: async (text: string) => (await owner.query(text)).rows } as never, sid);
    if (r.started === 0 && r.idle) {
      const due = await owner.query(`SELECT 1 FROM ${SCHEMA}.exception_queue_${sid} WHERE status IN ('ready', 'deferred', 'inflight')`);
      if (due.rowCount === 0) return;
    }
  }
  throw new Error("the group did not settle");
}

/**
 * The victim's pool and client, every connection with `path` as its search_path; migrated after
 * the functions were planted, so the tables and functions are created under that path too.
 */
function victimOf(path: string) {
  const v: { pool: pg.Pool; client: SqlStreams } = {} as never;
  beforeAll(async () => {
    v.pool = new pg.Pool({ connectionString: url(), max: 8, options: `-c search_path=${path}` });
    v.client = new SqlStreams({ pool: v.pool });
    await v.client.migrate();
  });
  afterAll(async () => {
    await v.client?.close();
    await v.pool?.end();
  });
  return v;
}

describe.each([
  // The default search_path with PostgreSQL's implicit pg_catalog first: overloads that match
  // better than pg_catalog's win. Nothing the library sends may run one.
  { path: '"$user",public', prefix: "default", everywhere: true },
  // `public` before pg_catalog: even exact copies of built-ins win. The library's own statements
  // (TypeScript) name built-ins unqualified and do call these; its SQL functions must not.
  { path: "public,pg_catalog", prefix: "first", everywhere: false },
])("planted functions in a writable public, search_path $path", ({ path, prefix, everywhere }) => {
  const victim = victimOf(path);
  /** The planted calls that count as a failure in this configuration. */
  const found = async () => {
    const t = await tripped();
    return everywhere ? [...t.inside, ...t.outside] : t.inside;
  };

  it("are visible to the victim's own statements (the attack is real)", async () => {
    await resetTripwire();
    await victim.pool.query("SELECT now(), format('%s', 1::bigint), min(x) FROM (VALUES (1::bigint)) v(x)");
    const after = await tripped();
    expect(after.calls).toBeGreaterThan(0);
    expect(after.outside).toEqual(expect.arrayContaining(everywhere ? ["format(text, bigint)"] : ["now()", "format(text, bigint)", "min(bigint)"]));
    await resetTripwire();
  });

  it("never run in SQL produce, produce_batch, or their refusals", async () => {
    const s = victim.client.stream(`${prefix}.sql`);
    await s.register();
    await resetTripwire();
    const q = (text: string) => victim.pool.query(text);
    await q(`SELECT ${SCHEMA}.produce('${prefix}.sql', '{"a": 1}')`);
    await q(`SELECT ${SCHEMA}.produce('${prefix}.sql', '{"a": 2}', key => 'k', idempotency_key => 'idem-1',
             options => '{"message": {"timeout": 5000, "concurrency": "exclusive", "retry": {"maxRetries": 2, "baseDelay": 10}}}')`);
    await q(`SELECT ${SCHEMA}.produce('${prefix}.sql', '{"a": 3}', key => 'k', idempotency_key => 'idem-1')`);
    await q(`SELECT ${SCHEMA}.produce('${prefix}.sql', '{"a": 4}', 'c', NULL, '{"compaction": {"rank": 3}}')`);
    await q(`SELECT ${SCHEMA}.produce('${prefix}.sql', '{"a": 5}', idempotency_key => '3F2504E0-4F89-11D3-9A0C-0305E82C3301')`);
    await q(`SELECT ${SCHEMA}.produce_batch('${prefix}.sql', '[{"payload": {"b": 1}}, {"payload": {"b": 2}, "key": "k2", "options": {"message": {"concurrency": "ordered"}}}]')`);
    const refusals = [
      `SELECT ${SCHEMA}.produce('${prefix}.sql', '{}', options => '{"message": {"timeout": -1}}')`,
      `SELECT ${SCHEMA}.produce('${prefix}.sql', '{}', options => '{"message": {"retry": {"baseDelay": 100, "maxDelay": 10}}}')`,
      `SELECT ${SCHEMA}.produce('${prefix}.sql', '{}', options => '{"bogus": 1}')`,
      `SELECT ${SCHEMA}.produce('${prefix}.sql', '{}', key => '')`,
      `SELECT ${SCHEMA}.produce('nope', '{}')`,
      `SELECT ${SCHEMA}.produce_batch('${prefix}.sql', '[{"payload": 1, "bogus": 2}]')`,
    ];
    for (const r of refusals) await expect(q(r)).rejects.toThrow(/^SQL00/);
    // Each statement here is a call of produce or produce_batch: any planted call ran inside one.
    expect(await tripped()).toEqual({ calls: 0, inside: [], outside: [] });
  });

  it("never run in library produce, drains with failures, retries, delays, dead letters, keys and compaction", async () => {
    await resetTripwire();
    const s = victim.client.stream(`${prefix}.lib`);
    await s.register();
    const g = s.consumer("g");
    await g.register({ message: { retry: { maxRetries: 2, baseDelay: 10, maxDelay: 20 } }, exceptionInitialBackoff: 10 });
    const sid = (await owner.query<{ id: string }>(`SELECT id::text FROM ${SCHEMA}.stream_config WHERE name = $1`, [`${prefix}.lib`])).rows[0].id;
    await s.produce({ i: 0 });
    await s.produce({ i: 1 }, { idempotencyKey: "once" });
    await s.produce({ i: 1 }, { idempotencyKey: "once" });
    await s.produceBatch([
      { payload: { i: 2, fail: 1 } },
      { payload: { i: 3, delay: 1 } },
      { payload: { i: 4, dead: true } },
      { payload: { i: 5, fail: 1 }, key: "o", message: { concurrency: "ordered" } },
      { payload: { i: 6 }, key: "o", message: { concurrency: "ordered" } },
      { payload: { i: 7 }, key: "x", message: { concurrency: "exclusive" } },
      { payload: { i: 8 }, key: "x", message: { concurrency: "exclusive" } },
      { payload: { i: 9 }, key: "c", compaction: { rank: 1 } },
      { payload: { i: 10 }, key: "c", compaction: { rank: 2 } },
      { payload: { i: 11, always: true } },
    ]);
    const h = (m: Message<{ fail?: number; delay?: number; dead?: boolean; always?: boolean }>) => {
      const p = m.payload;
      if (p.dead) return Permanent(new Error("no"));
      if (p.always) throw new Error("always fails");
      if (p.fail !== undefined && m.attempt < p.fail) throw new Error("fails once");
      if (p.delay !== undefined && m.delays < p.delay) return Delay(10);
      return undefined;
    };
    await drainAll(g, sid, h);
    const dead = await owner.query(`SELECT message_id FROM ${SCHEMA}.exception_queue_${sid} WHERE status = 'dead'`);
    expect(dead.rowCount).toBe(2);
    expect(await found()).toEqual([]);

    // The operator paths, then the redriven messages drained again.
    await s.inspect({ key: "o" });
    await g.failures();
    await g.redrive({ errorContains: "always" });
    await drainAll(g, sid, () => undefined);
    await g.discard({ all: true });
    await g.progress();
    await victim.client.maintain();
    await g.history();
    expect(await found()).toEqual([]);
  });
});
