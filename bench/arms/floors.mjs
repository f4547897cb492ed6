// The raw Postgres floors: what plain SQL through the same driver does with the same rows.
// Our arms are judged as a ratio of these.
import { StringDecoder } from "node:string_decoder";
import pg from "pg";
import { CpuMeter, QueryStats, Tally, WriteMeter, beforeTimed, instrumentedPool, makePayload, parallel, rate } from "../lib/common.mjs";
import { CONSUME } from "./ours.mjs";

export const INSERT_CONNECTIONS = 4;
export const INSERT_ROWS_PER_TX = 500;
// The read floor is the consume arm's job in its fastest honest form: ranges of the same size.
export const READ_RANGE = CONSUME.batchLimit;

const TABLE = `CREATE TABLE plain_log (
  id bigserial PRIMARY KEY,
  payload json NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
)`;

// The fastest honest insert: the form produceBatch uses, one statement whose single parameter is a
// JSON array of the payloads (the client joins JSON texts it already has; the statement's text and
// plan do not depend on the batch). A multi-row VALUES of one parameter per row was measured slower
// (the planner folds every row's constant into the plan). The payload column is json, as
// message_log_N's is, so the floors and our arms store and read the same type.
const INSERT_SQL = `INSERT INTO plain_log (payload)
  SELECT u.p FROM json_array_elements($1::json) WITH ORDINALITY AS u(p, i) ORDER BY u.i`;

/** Inserts payloads 0..n-1 in transactions of `perTx` rows over `conns` connections. */
async function insertAll(pool, n, conns, perTx) {
  const batches = Math.ceil(n / perTx);
  await parallel(batches, conns, async (b) => {
    const from = b * perTx;
    const to = Math.min(n, from + perTx);
    const texts = new Array(to - from);
    for (let s = from; s < to; s++) texts[s - from] = JSON.stringify(makePayload(s));
    // One statement is its own transaction (autocommit): one round trip per 500 rows.
    await pool.query(INSERT_SQL, ["[" + texts.join(",") + "]"]);
  });
}

async function verifyRows(pool, n) {
  const { rows } = await pool.query(
    "SELECT count(*)::int AS rows, count(DISTINCT (payload->>'seq')::int)::int AS distinct_seq, min((payload->>'seq')::int) AS lo, max((payload->>'seq')::int) AS hi FROM plain_log",
  );
  const r = rows[0];
  const ok = r.rows === n && r.distinct_seq === n && r.lo === 0 && r.hi === n - 1;
  return { expected: n, handled: r.rows, missing: n - r.distinct_seq, duplicates: r.rows - r.distinct_seq, ok };
}

export async function floorInsert(ctx) {
  const n = ctx.n;
  const stats = new QueryStats();
  await withPool(ctx.url, (p) => p.query(TABLE));
  await beforeTimed(ctx.url);
  const meter = await new WriteMeter(ctx).start();
  const pool = instrumentedPool(ctx.url, INSERT_CONNECTIONS, stats);
  let where;
  try {
    // Open the connections before the clock starts, as a long-lived producer would have them.
    await Promise.all(Array.from({ length: INSERT_CONNECTIONS }, () => pool.query("SELECT 1")));
    stats.reset();
    const cpu = new CpuMeter().start();
    await insertAll(pool, n, INSERT_CONNECTIONS, INSERT_ROWS_PER_TX);
    where = cpu.stop();
  } finally {
    await pool.end();
  }
  const writes = await meter.stop(n);
  const check = await withPool(ctx.url, (p) => verifyRows(p, n));
  return {
    metrics: { produce: rate(n, where.wallMs) },
    check,
    where: { ...where, roundTrips: stats.count, roundTripsPerMsg: stats.count / n, stmtMs: Math.round(stats.ms), ...writes },
    settings: { connections: INSERT_CONNECTIONS, rowsPerTx: INSERT_ROWS_PER_TX },
  };
}

async function withPool(url, fn) {
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  try {
    return await fn(pool);
  } finally {
    await pool.end();
  }
}

/** Setup for the read floor: fills the plain table, untimed. */
export async function floorReadSetup(ctx) {
  const pool = new pg.Pool({ connectionString: ctx.url, max: INSERT_CONNECTIONS });
  try {
    await pool.query(TABLE);
    await pool.query("CREATE TABLE plain_cursor (id int PRIMARY KEY, pos bigint NOT NULL)");
    await pool.query("INSERT INTO plain_cursor VALUES (1, 0), (2, 0)");
    await insertAll(pool, ctx.n, INSERT_CONNECTIONS, INSERT_ROWS_PER_TX);
    await pool.query("VACUUM ANALYZE plain_log");
  } finally {
    await pool.end();
  }
  await beforeTimed(ctx.url);
}

/**
 * The read floor: one poller reads ranges `WHERE id > $1 AND id <= $2`, hands each payload to a
 * no-op handler and moves a cursor row once per range. Decoded as leanly as the library decodes
 * its ranges: the payload as JSON text parsed once, created_at as epoch ms (no timestamp parsing
 * through pg-types), the id as text.
 */
export async function floorRead(ctx) {
  const n = ctx.n;
  const range = ctx.batchLimit ?? READ_RANGE;
  const stats = new QueryStats();
  const pool = instrumentedPool(ctx.url, 1, stats);
  const tally = new Tally(n);
  const handler = (msg) => {
    tally.see(msg.payload.seq);
  };
  const meter = await new WriteMeter(ctx).start();
  let where;
  let ranges = 0;
  const cursorId = ctx.cursorId ?? 1;
  try {
    await pool.query("SELECT 1");
    if (ctx.startSignal) await ctx.startSignal();
    stats.reset();
    const cpu = new CpuMeter().start();
    let pos = Number((await pool.query("SELECT pos FROM plain_cursor WHERE id = $1", [cursorId])).rows[0].pos);
    for (;;) {
      const hi = pos + range;
      const { rows } = await pool.query(
        "SELECT id::text AS id, payload::text AS payload, date_part('epoch', created_at) * 1000 AS created_ms FROM plain_log WHERE id > $1 AND id <= $2 ORDER BY id",
        [pos, hi],
      );
      if (rows.length === 0) break;
      for (const row of rows) handler({ id: row.id, payload: JSON.parse(row.payload), createdAt: new Date(row.created_ms) });
      await pool.query("UPDATE plain_cursor SET pos = $1 WHERE id = $2", [hi, cursorId]);
      pos = hi;
      ranges++;
    }
    where = cpu.stop();
  } finally {
    await pool.end();
  }
  const writes = await meter.stop(n);
  const roundTrips = stats.count;
  return {
    metrics: { consume: rate(n, where.wallMs) },
    check: tally.result(),
    where: { ...where, roundTrips, roundTripsPerMsg: roundTrips / n, ranges, statementsPerRange: roundTrips / Math.max(1, ranges), stmtMs: Math.round(stats.ms), ...writes, statements: stats.top(5) },
    settings: { range },
  };
}

/**
 * Two read floors at once, each in its own thread with its own cursor over the same table: the
 * machine's own scaling limit, the reference for the two-group arm (which cannot scale better
 * than plain SQL does on the same cores).
 */
export async function floorReadTwo(ctx) {
  const { runWorker } = await import("./ours.mjs");
  const shared = new SharedArrayBuffer(16);
  const base = { url: ctx.url, n: ctx.n, shared, parties: 2, dbName: ctx.dbName, nice: ctx.nice ?? null, batchLimit: ctx.batchLimit };
  const cpu = new CpuMeter().start({ profile: false });
  const [a, b] = await Promise.all([runWorker("floor-read", { ...base, cursorId: 1 }), runWorker("floor-read", { ...base, cursorId: 2 })]);
  const all = cpu.stop();
  const ra = a.metrics?.consume ?? null;
  const rb = b.metrics?.consume ?? null;
  return {
    metrics: { reader1: ra, reader2: rb, slowerReader: ra != null && rb != null ? Math.min(ra, rb) : null, total: rate(2 * ctx.n, all.wallMs) },
    check: { ok: a.check?.ok === true && b.check?.ok === true, expected: 2 * ctx.n, missing: (a.check?.missing ?? ctx.n) + (b.check?.missing ?? ctx.n), duplicates: (a.check?.duplicates ?? 0) + (b.check?.duplicates ?? 0), reader1: a.check, reader2: b.check },
    where: { ...all, roundTrips: (a.where?.roundTrips ?? 0) + (b.where?.roundTrips ?? 0), reader1: a.where, reader2: b.where },
    errors: [a.error, b.error].filter(Boolean),
    settings: { range: ctx.batchLimit ?? READ_RANGE },
  };
}

/**
 * The physical limit of reading the log: `COPY (SELECT id, payload FROM plain_log ORDER BY id) TO
 * STDOUT` streamed (pg-copy-streams) and parsed into the same message objects (text format: split
 * rows and columns, undo COPY's backslash escapes, JSON.parse the payload) for the same no-op
 * handler. No cursor, no transaction per range: what no consumer of a log can beat on this driver.
 */
export async function floorCopy(ctx) {
  const n = ctx.n;
  const { to: copyTo } = await import("pg-copy-streams");
  const client = new pg.Client({ connectionString: ctx.url });
  await client.connect();
  const tally = new Tally(n);
  const handler = (msg) => {
    tally.see(msg.payload.seq);
  };
  let where;
  try {
    await client.query("SELECT 1");
    const cpu = new CpuMeter().start();
    const stream = client.query(copyTo("COPY (SELECT id, payload FROM plain_log ORDER BY id) TO STDOUT"));
    const decoder = new StringDecoder("utf8"); // a chunk may end inside a multi-byte character
    let rest = "";
    for await (const chunk of stream) {
      const text = rest + decoder.write(chunk);
      let start = 0;
      for (;;) {
        const nl = text.indexOf("\n", start);
        if (nl < 0) break;
        const tab = text.indexOf("\t", start);
        const id = text.slice(start, tab);
        const raw = text.slice(tab + 1, nl);
        handler({ id, payload: JSON.parse(raw.includes("\\") ? unescapeCopy(raw) : raw) });
        start = nl + 1;
      }
      rest = text.slice(start);
    }
    where = cpu.stop();
  } finally {
    await client.end();
  }
  return {
    metrics: { consume: rate(n, where.wallMs) },
    check: tally.result(),
    where: { ...where, roundTrips: 1, roundTripsPerMsg: 1 / n },
    settings: { format: "text", parse: "split + JSON.parse" },
  };
}

/** COPY's text format escapes: \\ \t \n \r and friends. */
function unescapeCopy(s) {
  return s.replace(/\\(.)/g, (_, c) => ({ t: "\t", n: "\n", r: "\r", b: "\b", f: "\f", v: "\v" })[c] ?? c);
}
