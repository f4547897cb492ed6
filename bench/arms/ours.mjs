// Our arms, against the public API of @sqlstreams/core. Each takes a fresh database (ctx.url),
// sets up untimed, then measures one thing and checks that every message was handled.
import pg from "pg";
import { Worker } from "node:worker_threads";
import { CpuMeter, QueryStats, Tally, WriteMeter, beforeTimed, getPayloadShape, instrumentedPool, makePayload, parallel, rate, sleep } from "../lib/common.mjs";

export const STREAM = "bench.orders";
export const PRODUCE_CONNECTIONS = 4;
export const PRODUCE_BATCH = 500;
// Tuned for a no-op handler on 2 cores (see bench/README.md): the range size of a short measured
// sweep of batchLimit (1,000 / 2,000 / 5,000 / 10,000, both payloads, both servers; History,
// 5 December 2026), and enough handlers in flight that dispatch never waits on one message. The
// read floor reads ranges of the same size (floors.mjs).
export const CONSUME = { batchLimit: 5000, concurrency: 32, poolMax: 2 };
/** CONSUME with the run's `--batch-limit` and `--concurrency`, for the arms compared with `consume`. */
const consumeSettings = (ctx) => ({ ...CONSUME, ...(ctx.batchLimit ? { batchLimit: ctx.batchLimit } : {}), ...(ctx.concurrency ? { concurrency: ctx.concurrency } : {}) });

let core;
export async function loadCore() {
  core ??= await import("@sqlstreams/core");
  return core;
}

export function quietLogger(errors) {
  return (event) => {
    if (event.level === "error" || (event.level === "warn" && errors.length < 50)) errors.push(`${event.code}: ${event.message}`);
  };
}

/** A client over an instrumented pool: every statement counted and timed. */
export async function openClient(url, max, stats, errors, options = {}) {
  const { SqlStreams } = await loadCore();
  const pool = instrumentedPool(url, max, stats ?? new QueryStats());
  const client = new SqlStreams({ pool, logger: quietLogger(errors ?? []), ...options });
  return { client, pool, async close() { await client.close().catch(() => {}); await pool.end().catch(() => {}); } };
}

function itemsFor(from, to, keyed) {
  const items = new Array(to - from);
  for (let s = from; s < to; s++) items[s - from] = keyed ? { payload: makePayload(s), key: `k${s % keyed}` } : { payload: makePayload(s) };
  return items;
}

/** Produces seq from..to-1 with produceBatch(500) × 4 at once. */
export async function produceRange(stream, from, to, opts = {}) {
  const per = opts.batch ?? PRODUCE_BATCH;
  const batches = Math.ceil((to - from) / per);
  await parallel(batches, opts.connections ?? PRODUCE_CONNECTIONS, async (b) => {
    const lo = from + b * per;
    const hi = Math.min(to, lo + per);
    if (opts.gate) await opts.gate(lo);
    await stream.produceBatch(itemsFor(lo, hi, opts.keyed));
    if (opts.onProduced) opts.onProduced(hi - lo);
  });
}

/** Setup, untimed: schema, stream, groups, and optionally the first n messages. */
async function setup(ctx, { groups = [], produce = 0, keyed = 0 } = {}) {
  currentDb = ctx.dbName;
  currentNice = ctx.nice ?? null;
  profileLabel = ctx.profile ? ctx.arm : null;
  const { client, close } = await openClient(ctx.url, PRODUCE_CONNECTIONS, null, ctx.errors);
  try {
    await client.migrate();
    const stream = client.stream(STREAM);
    await stream.register({});
    for (const g of groups) await stream.consumer(g.name).register({ start: "beginning", ...(g.config ?? {}) });
    if (produce > 0) await produceRange(stream, 0, produce, { keyed });
  } finally {
    await close();
  }
  const c = new pg.Client({ connectionString: ctx.url });
  await c.connect();
  try {
    const { rows } = await c.query("SELECT id::text AS id FROM sqlstreams.stream_config WHERE name = $1", [STREAM]);
    if (produce > 0) await c.query(`VACUUM ANALYZE sqlstreams.message_log_${rows[0].id}`);
    return rows[0].id;
  } finally {
    await c.end();
    await beforeTimed(ctx.url);
  }
}

/**
 * The database side of a consume arm, after it: per group, the committed cursor at the head, no
 * claim lease left (open or expired, from progress() and from the lease table itself), no
 * exception row in flight, and exception counts as the arm expects (`unresolved`: ready + deferred
 * + dead; none in any arm without faults, and none left once the failing arm's retries succeeded).
 */
export async function verifyGroups(url, groups, { unresolved = 0, stream = STREAM } = {}) {
  const { client, close } = await openClient(url, 1, null, []);
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const out = { ok: true };
    const streamId = (await c.query("SELECT id::text AS id FROM sqlstreams.stream_config WHERE name = $1", [stream])).rows[0].id;
    for (const g of groups) {
      const p = await client.stream(stream).consumer(g).progress();
      const leases = (await c.query(
        `SELECT count(*)::int AS n FROM sqlstreams.claim_lease_${streamId} l JOIN sqlstreams.consumer_group_config g ON g.id = l.consumer_group_id WHERE g.name = $1`,
        [g],
      )).rows[0].n;
      const e = p.exceptions;
      const left = e.ready + e.deferred + e.dead;
      const ok = p.lag === "0" && p.committed === p.head && p.openLeases === 0 && p.expiredLeases === 0 && leases === 0 && e.inflight === 0 && left === unresolved;
      out[g] = { head: p.head, committed: p.committed, lag: p.lag, openLeases: p.openLeases, expiredLeases: p.expiredLeases, leaseRows: leases, exceptions: e, ok };
      out.ok &&= ok;
    }
    return out;
  } finally {
    await c.end();
    await close();
  }
}

/** Folds the database-side check into an arm's tally check. */
function withDb(check, db) {
  return { ...check, db, ok: check.ok && db.ok };
}

async function verifyLog(ctx, streamId, n) {
  const c = new pg.Client({ connectionString: ctx.url });
  await c.connect();
  try {
    const { rows } = await c.query(
      `SELECT count(*)::int AS rows, count(DISTINCT (payload->>'seq')::int)::int AS distinct_seq FROM sqlstreams.message_log_${streamId}`,
    );
    const r = rows[0];
    return { expected: n, handled: r.rows, missing: n - r.distinct_seq, duplicates: r.rows - r.distinct_seq, ok: r.rows === n && r.distinct_seq === n };
  } finally {
    await c.end();
  }
}

function whereFrom(cpu, stats, n, extra = {}) {
  return {
    ...cpu,
    roundTrips: stats.count,
    roundTripsPerMsg: +(stats.count / n).toFixed(4),
    stmtMs: Math.round(stats.ms),
    ...extra,
    statements: stats.top(10),
  };
}

// ---------------------------------------------------------------------------------------------
// produce: produceBatch(500) × 4 concurrent

export async function produce(ctx) {
  const n = ctx.n;
  const streamId = await setup(ctx);
  const meter = await new WriteMeter(ctx).start();
  const stats = new QueryStats();
  const { client, pool, close } = await openClient(ctx.url, PRODUCE_CONNECTIONS, stats, ctx.errors);
  let cpu;
  try {
    const stream = client.stream(STREAM);
    // Open the connections before the clock starts, as a long-lived producer would have them.
    await Promise.all(Array.from({ length: PRODUCE_CONNECTIONS }, () => pool.query("SELECT 1")));
    stats.reset();
    const c = new CpuMeter().start();
    await produceRange(stream, 0, n);
    cpu = c.stop();
  } finally {
    await close();
  }
  const writes = await meter.stop(n);
  const check = await verifyLog(ctx, streamId, n);
  return {
    metrics: { produce: rate(n, cpu.wallMs) },
    check,
    where: whereFrom(cpu, stats, n, writes),
    settings: { connections: PRODUCE_CONNECTIONS, batch: PRODUCE_BATCH },
  };
}

// ---------------------------------------------------------------------------------------------
// consume: drain one group over a prefilled stream

/** Drains `group` until every seq in 0..n-1 was handled; returns timings and the summed report. */
export async function drainAll({ url, stream = STREAM, group, n, batchLimit, concurrency, poolMax, defaults = false, maxBatch, errors, timeoutMs, handler, tally, idleSleepMs = 5, stats, isDone, startSignal }) {
  const { client, pool, close } = await openClient(url, poolMax, stats, errors);
  const consumer = client.stream(stream).consumer(group);
  const totals = { polls: 0, rangesClaimed: 0, started: 0, succeeded: 0, failed: 0, deferred: 0, dead: 0, leaseLost: 0, idlePolls: 0 };
  try {
    await Promise.all(Array.from({ length: poolMax }, () => pool.query("SELECT 1")));
    if (startSignal) await startSignal();
    stats?.reset();
    const cpu = new CpuMeter().start();
    const end = Date.now() + timeoutMs;
    const done = isDone ?? (() => tally.distinct >= n);
    while (!done()) {
      if (Date.now() > end) throw new Error(`timed out: ${tally.distinct}/${n} handled`);
      // defaults: drain(handler) and nothing else, as a new user writes it.
      // maxBatch: drainBatch(handler of an array) with that maxBatch and its default concurrency.
      const r = defaults
        ? await consumer.drain(handler)
        : maxBatch
          ? await consumer.drainBatch(handler, { batchLimit, maxBatch, deadline: Date.now() + 15 * 60_000 })
          : await consumer.drain(handler, { batchLimit, concurrency, deadline: Date.now() + 15 * 60_000 });
      for (const k of Object.keys(totals)) if (typeof r[k] === "number") totals[k] += r[k];
      if (r.started === 0 && r.rangesClaimed === 0) {
        totals.idlePolls++;
        if (!done()) await sleep(idleSleepMs);
      }
    }
    return { cpu: cpu.stop(), totals };
  } finally {
    await close();
  }
}

export async function consume(ctx) {
  const n = ctx.n;
  const settings = ctx.defaults
    ? { defaults: true, poolMax: CONSUME.poolMax }
    : ctx.batch
      ? { batchLimit: CONSUME.batchLimit, maxBatch: 100, poolMax: CONSUME.poolMax }
      : consumeSettings(ctx);
  await setup(ctx, { groups: [{ name: "g1" }], produce: n });
  const meter = await new WriteMeter(ctx).start();
  const stats = new QueryStats();
  const tally = new Tally(n);
  const { cpu, totals } = await drainAll({
    url: ctx.url, group: "g1", n, ...settings, errors: ctx.errors, timeoutMs: ctx.timeoutMs, stats, tally,
    handler: ctx.batch
      ? (msgs) => {
          for (const msg of msgs) tally.see(msg.payload.seq);
        }
      : (msg) => {
          tally.see(msg.payload.seq);
        },
  });
  const writes = await meter.stop(n);
  const ranges = totals.rangesClaimed;
  return {
    metrics: { consume: rate(n, cpu.wallMs) },
    check: withDb(tally.result(), await verifyGroups(ctx.url, ["g1"])),
    where: whereFrom(cpu, stats, n, { ranges, polls: totals.polls, statementsPerRange: +(stats.count / Math.max(1, ranges)).toFixed(2), ...writes }),
    report: totals,
    settings,
  };
}

// ---------------------------------------------------------------------------------------------
// Worker threads: a second group, a concurrent producer, a paced producer. Each role runs in its
// own thread (its own event loop), as it would in its own Lambda.

let currentDb = null;
let currentNice = null;
let profileLabel = null;
export function runWorker(role, data) {
  return new Promise((resolve, reject) => {
    const w = new Worker(new URL("../lib/worker.mjs", import.meta.url), { workerData: { role, dbName: currentDb, nice: currentNice, profileLabel, shape: getPayloadShape(), ...data } });
    let result;
    w.on("message", (m) => {
      if (m?.type === "result") result = m.result;
    });
    w.on("error", reject);
    w.on("exit", (code) => (result ? resolve(result) : reject(new Error(`worker ${role} exited ${code} without a result`))));
  });
}

function summarizeRoles(results, n) {
  const roundTrips = results.reduce((a, r) => a + (r.roundTrips ?? 0), 0);
  return { roundTrips, roundTripsPerMsg: +(roundTrips / n).toFixed(4) };
}

export async function consumeTwoGroups(ctx) {
  const n = ctx.n;
  await setup(ctx, { groups: [{ name: "g1" }, { name: "g2" }], produce: n });
  const meter = await new WriteMeter(ctx).start();
  const shared = new SharedArrayBuffer(16);
  const cpu = new CpuMeter().start({ profile: false });
  const base = { url: ctx.url, n, ...CONSUME, timeoutMs: ctx.timeoutMs, shared };
  const [a, b] = await Promise.all([runWorker("drain", { ...base, group: "g1", parties: 2 }), runWorker("drain", { ...base, group: "g2", parties: 2 })]);
  const all = cpu.stop();
  const writes = await meter.stop(n * 2);
  const db = await verifyGroups(ctx.url, ["g1", "g2"]);
  const ok = a.check.ok && b.check.ok && db.ok;
  return {
    metrics: { group1: rate(n, a.cpu.wallMs), group2: rate(n, b.cpu.wallMs), slowerGroup: Math.min(rate(n, a.cpu.wallMs), rate(n, b.cpu.wallMs)), total: rate(2 * n, all.wallMs) },
    check: { ok, group1: a.check, group2: b.check, db, expected: 2 * n, missing: a.check.missing + b.check.missing, duplicates: a.check.duplicates + b.check.duplicates },
    where: { ...all, ...summarizeRoles([a, b], 2 * n), ...writes, note: "per message of either group", group1: a.cpu, group2: b.cpu, statements: a.statements },
    errors: [...a.errors, ...b.errors],
    settings: CONSUME,
  };
}

export async function produceConsume(ctx) {
  const n = ctx.n;
  await setup(ctx, { groups: [{ name: "g1" }] });
  const meter = await new WriteMeter(ctx).start();
  // [0] produced, [1] handled (distinct), [2] start flag
  const shared = new SharedArrayBuffer(16);
  const backlog = ctx.backlog ?? Math.max(5_000, Math.min(50_000, Math.floor(n / 4)));
  const cpu = new CpuMeter().start({ profile: false });
  const [p, c] = await Promise.all([
    runWorker("produce", { url: ctx.url, n, shared, parties: 2, backlog, timeoutMs: ctx.timeoutMs }),
    runWorker("drain", { url: ctx.url, n, group: "g1", ...CONSUME, shared, parties: 2, timeoutMs: ctx.timeoutMs, idleSleepMs: 2 }),
  ]);
  const all = cpu.stop();
  const writes = await meter.stop(n);
  return {
    metrics: { produce: rate(n, p.cpu.wallMs), consume: rate(n, c.cpu.wallMs) },
    check: withDb({ ...c.check, ok: c.check.ok && p.ok }, await verifyGroups(ctx.url, ["g1"])),
    where: { ...all, ...summarizeRoles([p, c], n), consumerRoundTrips: c.roundTrips, producerRoundTrips: p.roundTrips, ...writes, maxBacklog: c.maxBacklog, statements: c.statements, producer: p.cpu, consumer: c.cpu },
    errors: [...p.errors, ...c.errors],
    settings: { ...CONSUME, backlog, produceConnections: PRODUCE_CONNECTIONS, produceBatch: PRODUCE_BATCH },
  };
}

// ---------------------------------------------------------------------------------------------
// ordered: 1,000 keys, the group overrides every message to `ordered`

export async function ordered(ctx) {
  const n = ctx.n;
  const keys = 1000;
  await setup(ctx, { groups: [{ name: "g1", config: { concurrencyOverride: "ordered" } }], produce: n, keyed: keys });
  const meter = await new WriteMeter(ctx).start();
  const stats = new QueryStats();
  const tally = new Tally(n);
  // Order is by message id (4 producers ran at once, so seq order is not id order).
  const lastId = new Float64Array(keys).fill(-1);
  let orderViolations = 0;
  let keyMismatch = 0;
  const { cpu, totals } = await drainAll({
    url: ctx.url, group: "g1", n, ...consumeSettings(ctx), errors: ctx.errors, timeoutMs: ctx.timeoutMs, stats, tally,
    handler: (msg) => {
      const seq = msg.payload.seq;
      const k = seq % keys;
      if (msg.key !== `k${k}`) keyMismatch++;
      const id = Number(msg.id);
      if (tally.see(seq) === 1) {
        if (id < lastId[k]) orderViolations++;
        lastId[k] = id;
      }
    },
  });
  const writes = await meter.stop(n);
  const check = tally.result();
  check.orderViolations = orderViolations;
  check.keyMismatch = keyMismatch;
  check.ok = check.ok && orderViolations === 0 && keyMismatch === 0;
  return {
    metrics: { consume: rate(n, cpu.wallMs) },
    check: withDb(check, await verifyGroups(ctx.url, ["g1"])),
    where: whereFrom(cpu, stats, n, { ranges: totals.rangesClaimed, deferred: totals.deferred, ...writes }),
    report: totals,
    settings: { ...consumeSettings(ctx), keys },
  };
}

// ---------------------------------------------------------------------------------------------
// failing: 2% of handlers throw on their first attempt; retried through the exception queue

export async function failing(ctx) {
  const n = ctx.n;
  const everyNth = 50;
  const group = { name: "g1", config: { exceptionInitialBackoff: 0, message: { retry: { maxRetries: 3, baseDelay: 1, maxDelay: 10 } } } };
  await setup(ctx, { groups: [group], produce: n });
  const meter = await new WriteMeter(ctx).start();
  const stats = new QueryStats();
  const tally = new Tally(n);
  let thrown = 0;
  const { cpu, totals } = await drainAll({
    url: ctx.url, group: "g1", n, ...consumeSettings(ctx), errors: ctx.errors, timeoutMs: ctx.timeoutMs, stats, tally, idleSleepMs: 2,
    handler: (msg) => {
      const seq = msg.payload.seq;
      if (seq % everyNth === 0 && msg.attempt === 0) {
        thrown++;
        throw new Error(`bench: first attempt of ${seq} fails`);
      }
      tally.see(seq);
    },
  });
  const writes = await meter.stop(n);
  const check = tally.result();
  const expectedFailures = Math.ceil(n / everyNth);
  check.thrown = thrown;
  check.expectedFailures = expectedFailures;
  check.ok = check.ok && thrown >= expectedFailures;
  return {
    metrics: { consume: rate(n, cpu.wallMs) },
    check: withDb(check, await verifyGroups(ctx.url, ["g1"])),
    where: whereFrom(cpu, stats, n, { ranges: totals.rangesClaimed, failed: totals.failed, ...writes }),
    report: totals,
    settings: { ...consumeSettings(ctx), failingShare: 1 / everyNth },
  };
}
