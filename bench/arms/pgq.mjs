// PgQ (Skytools' queue, Debian's postgresql-15-pgq3), the design closest to ours: an event log,
// consumer positions, batches between ticks. Only on DATABASE_URL (the embedded server does not
// ship the extension). The ticker is not a daemon here: the arm ticks itself, `SELECT
// pgq.ticker()` every `tickMs` on a connection of its own, from before the produce phase to the
// end of the consume phase, as pgqd would. A short sweep (tick interval, the queue's
// ticker_max_count, the fetch style) runs at the same N each, every point in every repetition;
// run.mjs reports the point with the best median over the repetitions (consume and produce
// chosen apart), at that median (`sweepPoints` carries each point's figures of this repetition).
import pg from "pg";
import { CpuMeter, Tally, beforeTimed, makePayload, parallel, rate, setBenchDatabase, sleep } from "../lib/common.mjs";

const QUEUE = "bench";
const CONSUMER = "c1";
const PRODUCE_CONNECTIONS = 4;
const PRODUCE_BATCH = 500;
const CURSOR_FETCH = 1000;

// The grid: tick every 20 or 100 ms; ticker_max_count 5,000 or 20,000 (a tick closes a batch once
// that many events arrived; ticker_max_lag stays at its default of 3 s); fetch style "events"
// (pgq.get_batch_events: the whole batch in one reply) or "cursor" (the batch's SQL from
// pgq.batch_event_sql under a cursor, as pgq.get_batch_cursor does, FETCH 1,000 at a time). A quick run tries two points.
export const PGQ_SWEEP = [
  { tickMs: 20, maxCount: 20_000, fetch: "events" },
  { tickMs: 20, maxCount: 20_000, fetch: "cursor" },
  { tickMs: 20, maxCount: 5_000, fetch: "events" },
  { tickMs: 100, maxCount: 20_000, fetch: "events" },
  { tickMs: 100, maxCount: 5_000, fetch: "cursor" },
  { tickMs: 20, maxCount: 5_000, fetch: "cursor" },
];

// Events inserted as one statement per 500 (the same JSON-array form as produceBatch and the insert
// floor), 4 connections at once.
const INSERT_SQL = `SELECT pgq.insert_event($1, 'bench', u.d)
  FROM jsonb_array_elements_text($2::jsonb) WITH ORDINALITY AS u(d, i) ORDER BY u.i`;
// The events of a batch, decoded as leanly as our ranges: data as text (parsed once), time as epoch ms.
const EVENT_COLUMNS = "ev_id::text AS id, ev_data AS payload, date_part('epoch', ev_time) * 1000 AS created_ms";

async function connect(url) {
  const c = new pg.Client({ connectionString: url });
  c.on("error", () => {});
  await c.connect();
  return c;
}

/** Ticks every `ms` on its own connection until stopped; `force()` ticks at once (the tail of a backlog). */
function startTicker(url, ms) {
  let stop = false;
  let ticks = 0;
  const run = (async () => {
    const c = await connect(url);
    try {
      while (!stop) {
        await c.query("SELECT pgq.ticker()");
        ticks++;
        await sleep(ms);
      }
    } finally {
      await c.end();
    }
  })();
  return {
    async stop() {
      stop = true;
      await run;
      return ticks;
    },
  };
}

async function forceTick(url) {
  const c = await connect(url);
  try {
    await c.query("SELECT pgq.force_tick($1)", [QUEUE]);
    await c.query("SELECT pgq.ticker()");
  } finally {
    await c.end();
  }
}

async function setupQueue(url, maxCount) {
  const c = await connect(url);
  try {
    await c.query("CREATE EXTENSION IF NOT EXISTS pgq");
    await c.query("SELECT pgq.create_queue($1)", [QUEUE]);
    await c.query("SELECT pgq.set_queue_config($1, 'ticker_max_count', $2)", [QUEUE, String(maxCount)]);
    await c.query("SELECT pgq.register_consumer($1, $2)", [QUEUE, CONSUMER]);
  } finally {
    await c.end();
  }
}

async function produceAll(url, n) {
  const pool = new pg.Pool({ connectionString: url, max: PRODUCE_CONNECTIONS });
  pool.on("error", () => {});
  try {
    await Promise.all(Array.from({ length: PRODUCE_CONNECTIONS }, () => pool.query("SELECT 1")));
    const cpu = new CpuMeter().start({ profile: false });
    await parallel(Math.ceil(n / PRODUCE_BATCH), PRODUCE_CONNECTIONS, async (b) => {
      const lo = b * PRODUCE_BATCH;
      const hi = Math.min(n, lo + PRODUCE_BATCH);
      const texts = new Array(hi - lo);
      for (let s = lo; s < hi; s++) texts[s - lo] = JSON.stringify(JSON.stringify(makePayload(s)));
      await pool.query(INSERT_SQL, [QUEUE, "[" + texts.join(",") + "]"]);
    });
    return cpu.stop();
  } finally {
    await pool.end();
  }
}

/** One consumer: next_batch → the batch's events → finish_batch, until every event was handled. */
async function consumeAll(url, n, fetch, timeoutMs, tally) {
  const c = await connect(url);
  const handler = (ev) => {
    tally.see(ev.payload.seq);
  };
  const deliver = (rows) => {
    for (const r of rows) handler({ id: r.id, payload: JSON.parse(r.payload), createdAt: new Date(r.created_ms) });
  };
  let batches = 0;
  let emptyPolls = 0;
  let statements = 0;
  try {
    await c.query("SELECT 1");
    const cpu = new CpuMeter().start();
    const end = Date.now() + timeoutMs;
    while (tally.distinct < n) {
      if (Date.now() > end) throw new Error(`timed out: ${tally.distinct}/${n} handled`);
      const id = (await c.query("SELECT pgq.next_batch($1, $2) AS id", [QUEUE, CONSUMER])).rows[0].id;
      statements++;
      if (id === null) {
        emptyPolls++;
        await sleep(2);
        continue;
      }
      batches++;
      if (fetch === "events") {
        deliver((await c.query(`SELECT ${EVENT_COLUMNS} FROM pgq.get_batch_events($1)`, [id])).rows);
        statements++;
      } else {
        // What pgq.get_batch_cursor does, with the lean columns: the batch's own SQL
        // (pgq.batch_event_sql) under a cursor, fetched 1,000 at a time in one transaction.
        await c.query("BEGIN");
        const sql = (await c.query("SELECT pgq.batch_event_sql($1) AS sql", [id])).rows[0].sql;
        await c.query(`DECLARE evs NO SCROLL CURSOR FOR SELECT ${EVENT_COLUMNS} FROM (${sql}) e ORDER BY e.ev_id`);
        statements += 3;
        for (;;) {
          const more = await c.query(`FETCH ${CURSOR_FETCH} FROM evs`);
          statements++;
          deliver(more.rows);
          if (more.rows.length < CURSOR_FETCH) break;
        }
        await c.query("CLOSE evs");
        await c.query("COMMIT");
        statements += 2;
      }
      await c.query("SELECT pgq.finish_batch($1)", [id]);
      statements++;
    }
    return { cpu: cpu.stop(), batches, emptyPolls, statements };
  } finally {
    await c.end();
  }
}

/** After consuming: no batch left open or pending, every event of the queue seen. */
async function verifyQueue(url) {
  const c = await connect(url);
  try {
    await c.query("SELECT pgq.force_tick($1)", [QUEUE]);
    await c.query("SELECT pgq.ticker()");
    const next = (await c.query("SELECT pgq.next_batch($1, $2) AS id", [QUEUE, CONSUMER])).rows[0].id;
    let leftover = 0;
    if (next !== null) {
      leftover = (await c.query("SELECT count(*)::int AS n FROM pgq.get_batch_events($1)", [next])).rows[0].n;
      await c.query("SELECT pgq.finish_batch($1)", [next]);
    }
    const info = (await c.query("SELECT current_batch, pending_events::int AS pending FROM pgq.get_consumer_info($1, $2)", [QUEUE, CONSUMER])).rows[0];
    return { leftoverEvents: leftover, openBatch: info.current_batch, pendingEvents: info.pending, ok: leftover === 0 && info.current_batch === null };
  } finally {
    await c.end();
  }
}

async function freshDatabase(ctx, suffix) {
  const name = `${ctx.dbName}_${suffix}`;
  const c = await connect(ctx.adminUrl);
  try {
    await c.query(`CREATE DATABASE ${name}`);
  } finally {
    await c.end();
  }
  const u = new URL(ctx.url);
  u.pathname = "/" + name;
  return { name, url: u.toString() };
}

async function dropDatabase(ctx, name) {
  const c = await connect(ctx.adminUrl);
  try {
    await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  } finally {
    await c.end();
  }
}

/** One point of the sweep on `url`: produce n events with the ticker running, then consume them. */
async function onePoint(url, n, point, timeoutMs) {
  await setupQueue(url, point.maxCount);
  await beforeTimed(url);
  const ticker = startTicker(url, point.tickMs);
  let produced;
  let consumed;
  const tally = new Tally(n);
  try {
    produced = await produceAll(url, n);
    await forceTick(url); // the backlog's tail: what ticker_max_lag would close a moment later
    await beforeTimed(url);
    consumed = await consumeAll(url, n, point.fetch, timeoutMs, tally);
  } finally {
    await ticker.stop();
  }
  const db = await verifyQueue(url);
  const check = tally.result();
  return { point, produced, consumed, db, check: { ...check, db, ok: check.ok && db.ok } };
}

export async function pgqArm(ctx) {
  const n = ctx.n;
  const grid = ctx.quick ? PGQ_SWEEP.slice(0, 2) : PGQ_SWEEP;
  const points = [];
  for (const [i, point] of grid.entries()) {
    // Each point in a database of its own, so that no point reads another's queue tables.
    const db = await freshDatabase(ctx, `p${i}`);
    setBenchDatabase(db.name, ctx.nice ?? null); // the Postgres CPU of this point's backends
    try {
      points.push(await onePoint(db.url, n, point, ctx.timeoutMs));
    } catch (e) {
      points.push({ point, failed: String(e?.message ?? e), check: { ok: false } });
    } finally {
      await dropDatabase(ctx, db.name);
    }
  }
  const good = points.filter((p) => p.check.ok && !p.failed);
  const best = good.reduce((a, p) => (!a || p.consumed.cpu.wallMs < a.consumed.cpu.wallMs ? p : a), null);
  const bestProduce = good.reduce((a, p) => (!a || p.produced.wallMs < a.produced.wallMs ? p : a), null);
  const sweep = points.map((p) => ({
    ...p.point,
    consume: p.consumed ? Math.round(rate(n, p.consumed.cpu.wallMs)) : null,
    produce: p.produced ? Math.round(rate(n, p.produced.wallMs)) : null,
    batches: p.consumed?.batches ?? null,
    ok: p.check.ok && !p.failed,
    failed: p.failed,
  }));
  const failedPoint = points.find((p) => !p.check.ok || p.failed);
  // Every point's figures of this repetition, for run.mjs's choice across repetitions.
  const consumeWhere = (p) => ({ ...p.consumed.cpu, roundTrips: p.consumed.statements, roundTripsPerMsg: +(p.consumed.statements / n).toFixed(4), ranges: p.consumed.batches, emptyPolls: p.consumed.emptyPolls, produce: p.produced });
  const sweepPoints = points.map((p) => {
    const ok = p.check.ok && !p.failed;
    return { point: p.point, ok, consume: ok ? rate(n, p.consumed.cpu.wallMs) : null, produce: ok ? rate(n, p.produced.wallMs) : null, where: ok ? consumeWhere(p) : null };
  });
  return {
    sweepPoints,
    metrics: best ? { consume: rate(n, best.consumed.cpu.wallMs), produce: rate(n, bestProduce.produced.wallMs) } : {},
    // Every point must be correct, not only the best.
    check: best && !failedPoint ? best.check : { ok: false, expected: n, missing: failedPoint?.check?.missing ?? n, duplicates: failedPoint?.check?.duplicates ?? 0, point: failedPoint?.point, failed: failedPoint?.failed, db: failedPoint?.db },
    where: best
      ? { ...best.consumed.cpu, roundTrips: best.consumed.statements, roundTripsPerMsg: +(best.consumed.statements / n).toFixed(4), ranges: best.consumed.batches, emptyPolls: best.consumed.emptyPolls, produce: best.produced, sweep, note: "consume phase of the best point; produce under produce" }
      : { sweep },
    // The point itself is chosen across repetitions (run.mjs); these hold for every point.
    settings: { produceConnections: PRODUCE_CONNECTIONS, produceBatch: PRODUCE_BATCH, grid },
  };
}
