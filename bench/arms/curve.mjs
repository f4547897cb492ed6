// The cost curve: does a consumer or a producer slow down as the tables grow, and what does an
// idle fleet of groups cost? Same public API and the same tuned settings as the consume arm.
import pg from "pg";
import { CpuMeter, QueryStats, WriteMeter, beforeTimed, median, nowMs, parallel, rate, settledStats } from "../lib/common.mjs";
import { CONSUME as TUNED, PRODUCE_BATCH, PRODUCE_CONNECTIONS, STREAM, openClient, produceRange, runWorker } from "./ours.mjs";

// The consume arm's settings with ranges of 1,000: each window (9,000 of a 10k backlog) is built
// to leave one full range behind it for the drain to claim ahead, which a range of consume's
// tuned size would not fit.
const CONSUME = { ...TUNED, batchLimit: 1_000 };

/** Backlogs of the consume-curve arms; a quick run divides them by 100. */
export const CURVE_BACKLOG = { "consume-10k": 10_000, "consume-100k": 100_000, "consume-1m": 1_000_000 };
/**
 * Every backlog arm measures the same windows, so the table size is the only thing that differs
 * between them: WINDOWS fresh groups, one after another, each consuming the first WINDOW messages
 * of the backlog in one drain; the arm's rate is the median window's. WINDOW is a range short of
 * the smallest backlog, so behind every window's last range there is a full range to claim ahead,
 * as in a drain that keeps finding work (with a 10,000-message window the 10k backlog had none,
 * and its last range ran without a claim beside it).
 * (Until 3 Dec 2026 the 10k arm timed its whole 10k in one window while the others timed 100k, so
 * a drain's fixed costs and the first ranges' warm-up weighed ten times more in the 10k arm.)
 */
const WINDOW = 9_000;
const WINDOWS = 15;
/** Untimed warm-up windows before the timed ones (see "Why the backlog arms time equal windows" in bench/README.md). */
const WARMUPS = 3;
const QUICK_WINDOW = 100;
const QUICK_WINDOWS = 2;
/** Rows already in the log before produce-1m measures. */
const PRESENT = 1_000_000;
/** Prefill batches: bigger than the produce arm's so a million rows load in tens of seconds. */
const PREFILL_BATCH = 1_000;

async function withPg(url, fn) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

/** Untimed: schema, one stream, its groups, `produce` messages, VACUUM ANALYZE, CHECKPOINT. Returns the stream id. */
async function prefill(ctx, groups, produce) {
  const { client, close } = await openClient(ctx.url, PRODUCE_CONNECTIONS, null, ctx.errors);
  try {
    await client.migrate();
    const stream = client.stream(STREAM);
    await stream.register({});
    for (const g of groups) await stream.consumer(g).register({ start: "beginning" });
  } finally {
    await close();
  }
  // In a thread of its own: producing a million messages in the measuring thread would leave its
  // heap grown and its garbage collector busier during the windows than in the smaller arms.
  if (produce > 0) {
    const r = await runWorker("prefill", { url: ctx.url, dbName: ctx.dbName, nice: ctx.nice ?? null, from: 0, to: produce, batch: PREFILL_BATCH });
    if (r.error || r.ok !== true) throw new Error(`prefill failed: ${r.error ?? JSON.stringify(r.errors)}`);
  }
  const id = await withPg(ctx.url, async (c) => {
    const { rows } = await c.query("SELECT id::text AS id FROM sqlstreams.stream_config WHERE name = $1", [STREAM]);
    if (produce > 0) await c.query(`VACUUM ANALYZE sqlstreams.message_log_${rows[0].id}`);
    return rows[0].id;
  });
  // Every arm's ANALYZE + CHECKPOINT. A million rows are over a gigabyte of WAL: the checkpoint
  // they start would otherwise write the prefill's pages out during the timed windows.
  await beforeTimed(ctx.url);
  return id;
}

// ---------------------------------------------------------------------------------------------
// consume-10k / consume-100k / consume-1m: the first WINDOW messages of a backlog, by each of
// WINDOWS fresh groups in turn, after a warm-up group did the same untimed

/** One drain of a fresh group over the first `window` messages; stops through the signal. */
async function consumeWindow(consumer, window, backlog, timeoutMs) {
  const seen = new Uint8Array(backlog + 2); // by message id (ids are 1..backlog)
  let handled = 0;
  let duplicates = 0;
  let ranges = 0;
  const stop = new AbortController();
  const end = Date.now() + timeoutMs;
  const t0 = nowMs();
  // The window ends when its last message is handled. What the drain does after the abort (record
  // the range, release the one claimed ahead) is not timed: it is not consuming, and when its
  // release was timed (windows of 10k) the larger backlogs, whose range claimed ahead held 1,000
  // messages while the 10k backlog's was empty, looked about a tenth slower than the table made them.
  let tDone = 0;
  while (handled < window) {
    if (Date.now() > end) throw new Error(`timed out: ${handled}/${window} handled`);
    const r = await consumer.drain(
      (msg) => {
        const id = Number(msg.id);
        if (seen[id]++ > 0) duplicates++;
        else if (++handled >= window) {
          tDone = nowMs();
          stop.abort();
        }
      },
      { batchLimit: CONSUME.batchLimit, concurrency: CONSUME.concurrency, signal: stop.signal },
    );
    ranges += r.rangesClaimed;
    if (r.started === 0 && r.rangesClaimed === 0) break;
  }
  const wallMs = (tDone || nowMs()) - t0;
  // Untimed: the committed cursor, and every id up to it handled.
  const committed = Number((await consumer.progress()).committed);
  let missing = 0;
  for (let id = 1; id <= committed; id++) if (seen[id] === 0) missing++;
  return { wallMs, handled, duplicates, ranges, committed, missing };
}

export async function consumeCurve(ctx) {
  const backlog = Math.max(1, Math.round(CURVE_BACKLOG[ctx.arm] / (ctx.quick ? 100 : 1)));
  const window = Math.min(backlog, ctx.quick ? QUICK_WINDOW : WINDOW);
  const windows = ctx.quick ? QUICK_WINDOWS : WINDOWS;
  const warmups = ctx.quick ? 1 : WARMUPS;
  const groups = [...Array.from({ length: warmups }, (_, i) => `warm${i + 1}`), ...Array.from({ length: windows }, (_, i) => `g${i + 1}`)];
  await prefill(ctx, groups, backlog);
  const meter = await new WriteMeter(ctx).start();
  const stats = new QueryStats();
  const { client, pool, close } = await openClient(ctx.url, CONSUME.poolMax, stats, ctx.errors);
  const runs = [];
  let cpu;
  try {
    const stream = client.stream(STREAM);
    await Promise.all(Array.from({ length: CONSUME.poolMax }, () => pool.query("SELECT 1")));
    // Warm up outside the windows on the same stream and table: the client's first poll checks
    // the schema and looks the stream up, and the first ranges run cold code and prepare this
    // stream's statements. One warm-up window was not enough: in the full run of 4 December 2026
    // the first four timed windows ran 35-45 % below the others in every arm, on both servers.
    for (const g of groups.slice(0, warmups)) {
      const warm = await consumeWindow(stream.consumer(g), window, backlog, ctx.timeoutMs);
      if (warm.missing > 0 || warm.duplicates > 0 || warm.handled < window) throw new Error(`warm-up window failed its check: ${JSON.stringify(warm)}`);
    }
    stats.reset();
    const c = new CpuMeter().start();
    for (const g of groups.slice(warmups)) runs.push(await consumeWindow(stream.consumer(g), window, backlog, ctx.timeoutMs));
    cpu = c.stop();
  } finally {
    await close();
  }
  // Every consumed message counts, the warm-ups' too: it is the same work as a window's.
  const consumed = window * (windows + warmups);
  const writes = await meter.stop(consumed);
  const measured = window * windows;
  const ranges = runs.reduce((n, r) => n + r.ranges, 0);
  const handled = Math.min(...runs.map((r) => r.handled));
  const committed = Math.min(...runs.map((r) => r.committed));
  const missing = runs.reduce((n, r) => n + r.missing, 0);
  const duplicates = runs.reduce((n, r) => n + r.duplicates, 0);
  const check = {
    expected: window, windows, handled, committed, missing, duplicates,
    ok: runs.length === windows && missing === 0 && duplicates === 0 && handled >= window && committed >= window - CONSUME.batchLimit,
  };
  const rates = runs.map((r) => rate(window, r.wallMs));
  return {
    metrics: { consume: median(rates) },
    check,
    where: {
      ...cpu, windowRates: rates.map(Math.round), roundTrips: stats.count, roundTripsPerMsg: +(stats.count / measured).toFixed(4), stmtMs: Math.round(stats.ms), ranges,
      statementsPerRange: +(stats.count / Math.max(1, ranges)).toFixed(2), backlog, window, windows, ...writes, statements: stats.top(10),
    },
    settings: { ...CONSUME, backlog, window, windows },
  };
}

// ---------------------------------------------------------------------------------------------
// produce-1m: the produce arm with a million rows already in the log

export async function produceCurve(ctx) {
  const present = ctx.quick ? PRESENT / 100 : PRESENT;
  const n = ctx.n;
  const streamId = await prefill(ctx, [], present);
  const meter = await new WriteMeter(ctx).start();
  const stats = new QueryStats();
  const { client, pool, close } = await openClient(ctx.url, PRODUCE_CONNECTIONS, stats, ctx.errors);
  let cpu;
  try {
    const stream = client.stream(STREAM);
    await Promise.all(Array.from({ length: PRODUCE_CONNECTIONS }, () => pool.query("SELECT 1")));
    stats.reset();
    const c = new CpuMeter().start();
    await produceRange(stream, present, present + n);
    cpu = c.stop();
  } finally {
    await close();
  }
  const writes = await meter.stop(n);
  const check = await withPg(ctx.url, async (c) => {
    const { rows } = await c.query(
      `SELECT count(*)::int AS rows, count(DISTINCT (payload->>'seq')::int)::int AS distinct_seq FROM sqlstreams.message_log_${streamId}
        WHERE (payload->>'seq')::int >= $1`,
      [present],
    );
    const r = rows[0];
    return { expected: n, handled: r.rows, present, missing: n - r.distinct_seq, duplicates: r.rows - r.distinct_seq, ok: r.rows === n && r.distinct_seq === n };
  });
  return {
    metrics: { produce: rate(n, cpu.wallMs) },
    check,
    where: { ...cpu, roundTrips: stats.count, roundTripsPerMsg: +(stats.count / n).toFixed(4), stmtMs: Math.round(stats.ms), present, ...writes, statements: stats.top(10) },
    settings: { connections: PRODUCE_CONNECTIONS, batch: PRODUCE_BATCH, present },
  };
}

// ---------------------------------------------------------------------------------------------
// idle: 200 caught-up groups on 100 streams; each tick polls every group once

const IDLE = { streams: 100, groupsPerStream: 2, ticks: 20, poolMax: 4 };

/**
 * Rows written to the library's tables of the arm's database (pg_stat_user_tables). Not
 * pg_stat_database: its counters include catalog rows, and an autovacuum ANALYZE of the setup's
 * tables writes pg_statistic rows whenever it happens to run.
 */
function libraryWrites(url) {
  return settledStats(url, async (c) => {
    const { rows } = await c.query(
      "SELECT COALESCE(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::float8 AS n FROM pg_stat_user_tables WHERE schemaname = 'sqlstreams'",
    );
    return rows[0].n;
  }, (n, last) => n === last);
}

export async function idle(ctx) {
  const streams = ctx.quick ? 10 : IDLE.streams;
  const ticks = ctx.quick ? 3 : IDLE.ticks;
  const names = Array.from({ length: streams }, (_, i) => `idle.s${i}`);
  const groups = [];
  {
    const { client, close } = await openClient(ctx.url, PRODUCE_CONNECTIONS, null, ctx.errors);
    try {
      await client.migrate();
      for (const s of names) {
        const st = client.stream(s);
        await st.register({});
        for (let g = 0; g < IDLE.groupsPerStream; g++) {
          await st.consumer(`g${g}`).register({ start: "beginning" });
          groups.push([s, `g${g}`]);
        }
        await st.produce({ seq: 0 });
      }
      // Catch every group up: the measured ticks find nothing to do.
      await parallel(groups.length, PRODUCE_CONNECTIONS, async (i) => {
        await client.stream(groups[i][0]).consumer(groups[i][1]).drain(() => {});
      });
    } finally {
      await close();
    }
  }
  await beforeTimed(ctx.url);
  const stats = new QueryStats();
  const { client, pool, close } = await openClient(ctx.url, IDLE.poolMax, stats, ctx.errors);
  const consumers = groups.map(([s, g]) => client.stream(s).consumer(g));
  let polls = 0;
  let busy = 0;
  let cpu;
  let meter;
  let written0;
  const tick = () => parallel(consumers.length, IDLE.poolMax, async (i) => {
    const r = await consumers[i].poll(() => {
      busy++;
    });
    polls++;
    if (!r.idle || r.started > 0) busy++;
  });
  try {
    await Promise.all(Array.from({ length: IDLE.poolMax }, () => pool.query("SELECT 1")));
    await tick(); // warm: the client's stream lookups are cached from here on
    polls = 0;
    busy = 0;
    meter = await new WriteMeter(ctx).start();
    written0 = await libraryWrites(ctx.url);
    stats.reset();
    const c = new CpuMeter().start();
    for (let t = 0; t < ticks; t++) await tick();
    cpu = c.stop();
  } finally {
    await close();
  }
  const writes = await meter.stop(polls);
  const stmtsPerPoll = stats.count / Math.max(1, polls);
  const rowsWritten = (await libraryWrites(ctx.url)) - written0;
  const check = {
    expected: groups.length * ticks, handled: polls, polls, busy, stmtsPerPoll, rowsWritten, missing: groups.length * ticks - polls, duplicates: 0,
    // One read-only statement per idle poll: exactly one statement, nothing written, nothing run.
    ok: polls === groups.length * ticks && busy === 0 && stmtsPerPoll === 1 && rowsWritten === 0,
  };
  return {
    metrics: {
      stmtPerPoll: stmtsPerPoll,
      pgCpuMsPerTick: cpu.pgCpuMs === null ? null : cpu.pgCpuMs / ticks,
      nodeCpuMsPerTick: cpu.nodeCpuMs / ticks,
      msPerTick: cpu.wallMs / ticks,
    },
    check,
    // Commits are left out: pg_stat_database counts the warm-up tick's read-only statements late.
    where: { ...cpu, roundTrips: stats.count, roundTripsPerMsg: +stmtsPerPoll.toFixed(4), stmtMs: Math.round(stats.ms), groups: groups.length, streams, ticks, ...writes, commitsPerMsg: undefined, statements: stats.top(5) },
    settings: { streams, groups: groups.length, ticks, poolMax: IDLE.poolMax },
  };
}
