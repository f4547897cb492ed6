// Latency, produce → handler start, in one run and at one pace (500 msg/s, single sends, a
// producer thread): ours woken on produce (the notify waker, a group run as `sqlstreams dev`
// runs it), ours in continuous mode (drain, then an idle wait, as the poll handler's
// `mode: "continuous"` does), and graphile-worker 0.18's LISTEN/NOTIFY worker. The producer stamps
// its send time into each payload; the handler subtracts it from its own start time.
import { CpuMeter, Tally, beforeTimed, percentile, rate, sleep } from "../lib/common.mjs";
import { CONSUME, loadCore, openClient, runWorker, verifyGroups } from "./ours.mjs";

const PER_SECOND = 500;
// The continuous mode's idle wait: the bench's tuned 20 ms (the poll handler's default idleWait is 1 s,
// which bounds the latency at about that much instead).
const IDLE_WAIT_MS = 20;
// The woken group's safety-net schedule (a deployment's is a minute; a lost wake shows as a p99 near this).
const SCHEDULE_MS = 1_000;
// graphile-worker: jobs arrive by LISTEN/NOTIFY; the poll interval is only its fallback.
const GRAPHILE = { concurrency: 8, pollInterval: 2_000 };

const summary = (lat) => ({ p50: percentile(lat, 50), p90: percentile(lat, 90), p99: percentile(lat, 99), max: lat.length ? lat[lat.length - 1] : null });

async function oursMode(ctx, mode, n, seconds) {
  const stream = `lat.${mode}`;
  {
    const { client, close } = await openClient(ctx.url, 1, null, ctx.errors);
    try {
      await client.migrate();
      await client.stream(stream).register({});
      await client.stream(stream).consumer("g1").register({ start: "beginning" });
    } finally {
      await close();
    }
  }
  await beforeTimed(ctx.url);
  const shared = new SharedArrayBuffer(16);
  const consumerRole = mode === "wake"
    ? runWorker("wake", { url: ctx.url, stream, group: "g1", n, shared, parties: 2, poolMax: CONSUME.poolMax, batchLimit: CONSUME.batchLimit, concurrency: CONSUME.concurrency, timeoutMs: ctx.timeoutMs, scheduleMs: SCHEDULE_MS })
    : runWorker("drain", { url: ctx.url, stream, group: "g1", n, ...CONSUME, shared, parties: 2, timeoutMs: ctx.timeoutMs, idleSleepMs: IDLE_WAIT_MS, latency: true });
  const [p, c] = await Promise.all([
    runWorker("paced", { url: ctx.url, stream, n, shared, parties: 2, perSecond: PER_SECOND, timeoutMs: ctx.timeoutMs, ...(mode === "wake" ? { waker: "notify" } : {}) }),
    consumerRole,
  ]);
  if (c.error || p.error) throw new Error(`${mode}: ${c.error ?? p.error}`);
  const db = await verifyGroups(ctx.url, ["g1"], { stream });
  return {
    lat: summary(c.latencies),
    achieved: rate(n, p.cpu.wallMs),
    check: { ...c.check, db, ok: c.check.ok && p.ok && db.ok },
    where: { consumerRoundTrips: c.roundTrips, roundTripsPerMsg: +(c.roundTrips / n).toFixed(4), totals: c.totals, producerLate: p.late, producer: p.cpu, consumer: c.cpu, seconds },
    errors: [...(p.errors ?? []), ...(c.errors ?? [])],
  };
}

async function graphileMode(ctx, n) {
  const { graphileWorker: load } = await import("../peers/load.mjs");
  const gw = await load();
  const logger = new gw.Logger(() => () => {});
  const utils = await gw.makeWorkerUtils({ connectionString: ctx.url, logger });
  await utils.migrate();
  await utils.release();
  await beforeTimed(ctx.url);
  const tally = new Tally(n);
  const latencies = [];
  const shared = new SharedArrayBuffer(16);
  const sh = new Int32Array(shared);
  const runner = await gw.run({
    connectionString: ctx.url, concurrency: GRAPHILE.concurrency, pollInterval: GRAPHILE.pollInterval, noHandleSignals: true, logger,
    taskList: {
      bench: async (payload) => {
        if (tally.see(payload.seq) === 1) latencies.push(performance.timeOrigin + performance.now() - payload.t);
      },
    },
  });
  try {
    const producer = runWorker("paced", { url: ctx.url, n, shared, parties: 2, perSecond: PER_SECOND, timeoutMs: ctx.timeoutMs, sql: "SELECT graphile_worker.add_job('bench', $1::json)" });
    Atomics.add(sh, 2, 1); // the start line: the worker is listening
    const cpu = new CpuMeter().start({ profile: false });
    const end = Date.now() + ctx.timeoutMs;
    while (tally.distinct < n) {
      if (Date.now() > end) throw new Error(`graphile: timed out, ${tally.distinct}/${n} handled`);
      await sleep(5);
    }
    const p = await producer;
    const consumed = cpu.stop();
    latencies.sort((a, b) => a - b);
    return { lat: summary(latencies), achieved: rate(n, p.cpu.wallMs), check: { ...tally.result(), ok: tally.result().ok && p.ok }, where: { consumer: consumed, producerLate: p.late, settings: GRAPHILE }, errors: p.errors ?? [] };
  } finally {
    await runner.stop().catch(() => {});
  }
}

export async function latencyArm(ctx) {
  await loadCore();
  const seconds = ctx.seconds ?? (ctx.quick ? 1 : 10);
  const n = PER_SECOND * seconds;
  const modes = {};
  modes.wake = await oursMode(ctx, "wake", n, seconds);
  modes.continuous = await oursMode(ctx, "continuous", n, seconds);
  modes.graphile = await graphileMode(ctx, n);
  const metrics = {};
  for (const [k, m] of Object.entries(modes)) {
    for (const [q, v] of Object.entries(m.lat)) metrics[`${k}_${q}`] = v;
    metrics[`${k}_achievedRate`] = m.achieved;
  }
  const check = { ok: Object.values(modes).every((m) => m.check.ok), expected: n, missing: Object.values(modes).reduce((a, m) => a + m.check.missing, 0), duplicates: Object.values(modes).reduce((a, m) => a + m.check.duplicates, 0), modes: Object.fromEntries(Object.entries(modes).map(([k, m]) => [k, m.check])) };
  return {
    metrics,
    check,
    where: Object.fromEntries(Object.entries(modes).map(([k, m]) => [k, m.where])),
    errors: Object.values(modes).flatMap((m) => m.errors),
    settings: { perSecond: PER_SECOND, seconds, idleWaitMs: IDLE_WAIT_MS, scheduleMs: SCHEDULE_MS, graphile: GRAPHILE, ...CONSUME },
  };
}
