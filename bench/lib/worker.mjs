// One role of a multi-party arm, in its own thread: "drain" (a consumer group), "produce"
// (produceBatch as fast as the backlog bound allows) or "paced" (single produce() calls at a
// fixed rate). Shared counters (Int32Array over a SharedArrayBuffer):
//   [0] messages produced   [1] messages handled (first time)   [2] parties at the start line
// Also "prefill", the untimed setup of the cost-curve arms (no shared counters).
import { parentPort, workerData } from "node:worker_threads";
import pg from "pg";
import { CpuMeter, QueryStats, Tally, enableProfiling, makePayload, setBenchDatabase, setPayloadShape, sleep } from "./common.mjs";
import { STREAM, drainAll, openClient, produceRange } from "../arms/ours.mjs";
import { floorRead } from "../arms/floors.mjs";

const d = workerData;
const sh = new Int32Array(d.shared ?? new SharedArrayBuffer(16));
const errors = [];
setBenchDatabase(d.dbName, d.nice ?? null);
setPayloadShape(d.shape);
enableProfiling(d.profileLabel ? `${d.profileLabel}-${d.role}${d.group ? "-" + d.group : ""}` : null);

async function startLine() {
  Atomics.add(sh, 2, 1);
  while (Atomics.load(sh, 2) < d.parties) await sleep(1);
}

async function drainRole() {
  const n = d.n;
  const tally = new Tally(n);
  const stats = new QueryStats();
  const latencies = d.latency ? [] : null;
  let maxBacklog = 0;
  const handler = (msg) => {
    const seq = msg.payload.seq;
    if (tally.see(seq) === 1) {
      Atomics.add(sh, 1, 1);
      // produce → handler start: the producer stamps its send time into the payload (`t`).
      if (latencies) latencies.push(epochMs() - msg.payload.t);
    }
  };
  const isDone = () => {
    const backlog = Atomics.load(sh, 0) - Atomics.load(sh, 1);
    if (backlog > maxBacklog) maxBacklog = backlog;
    return tally.distinct >= n;
  };
  const { cpu, totals } = await drainAll({
    url: d.url, stream: d.stream ?? STREAM, group: d.group, n, batchLimit: d.batchLimit, concurrency: d.concurrency, poolMax: d.poolMax,
    errors, timeoutMs: d.timeoutMs, handler, tally, idleSleepMs: d.idleSleepMs ?? 5, stats, isDone, startSignal: startLine,
  });
  if (latencies) latencies.sort((a, b) => a - b);
  return { cpu, totals, check: tally.result(), roundTrips: stats.count, statements: stats.top(10), errors, maxBacklog, latencies };
}

/**
 * A producing role: a client with 4 warm connections, started on the shared start line, with
 * round trips counted and CPU measured from there; `body(stream)` returns the role's extra fields.
 */
async function producerRole(body) {
  const stats = new QueryStats();
  const { client, pool, close } = await openClient(d.url, 4, stats, errors, d.waker ? { waker: d.waker } : {});
  try {
    const stream = client.stream(d.stream ?? STREAM);
    await Promise.all(Array.from({ length: 4 }, () => pool.query("SELECT 1")));
    await startLine();
    stats.reset();
    const cpu = new CpuMeter().start();
    const extra = await body(stream);
    return { cpu: cpu.stop(), ok: true, roundTrips: stats.count, ...extra, errors };
  } finally {
    await close();
  }
}

function produceRole() {
  return producerRole(async (stream) => {
    const end = Date.now() + d.timeoutMs;
    await produceRange(stream, 0, d.n, {
      gate: async () => {
        while (Atomics.load(sh, 0) - Atomics.load(sh, 1) > d.backlog) {
          if (Date.now() > end) throw new Error("producer timed out waiting for the backlog to drain");
          await sleep(1);
        }
      },
      onProduced: (k) => Atomics.add(sh, 0, k),
    });
    return {};
  });
}

/** Absolute time in ms with sub-ms precision, comparable across threads. */
function epochMs() {
  return performance.timeOrigin + performance.now();
}

function pacedRole() {
  return producerRole(async (stream) => {
    // d.sql: a peer's own enqueue statement ($1 = the payload as JSON text) instead of produce().
    const sqlPool = d.sql ? new pg.Pool({ connectionString: d.url, max: 4 }) : null;
    const send = d.sql ? (payload) => sqlPool.query(d.sql, [JSON.stringify(payload)]) : (payload) => stream.produce(payload);
    if (sqlPool) await Promise.all(Array.from({ length: 4 }, () => sqlPool.query("SELECT 1")));
    try {
      return await pace(send);
    } finally {
      await sqlPool?.end();
    }
  });
}

async function pace(send) {
  const t0 = performance.now();
  const gap = 1000 / d.perSecond;
  const inflight = new Set();
  let late = 0;
  for (let i = 0; i < d.n; i++) {
    const due = t0 + i * gap;
    const wait = due - performance.now();
    if (wait > 1) await sleep(wait);
    else if (wait < -50) late++;
    while (inflight.size >= 8) await Promise.race(inflight);
    const p = send({ ...makePayload(i), t: epochMs() }).then(() => {
      Atomics.add(sh, 0, 1);
      inflight.delete(p);
    });
    inflight.add(p);
  }
  await Promise.all(inflight);
  return { late };
}

async function floorReadRole() {
  return floorRead({ url: d.url, n: d.n, cursorId: d.cursorId, batchLimit: d.batchLimit, adminUrl: null, dbName: d.dbName, startSignal: startLine });
}

/** Untimed setup of the cost-curve arms: messages [from, to) in batches of `batch`, as fast as it goes. */
async function prefillRole() {
  const { client, close } = await openClient(d.url, 4, null, errors);
  try {
    await produceRange(client.stream(STREAM), d.from, d.to, { batch: d.batch });
  } finally {
    await close();
  }
  return { ok: errors.length === 0, errors };
}

/**
 * A group woken on produce, as `sqlstreams dev` runs it: LISTEN on the notify waker's channel; a
 * wake for this stream and group starts a drain (or marks one pending while a drain runs); an idle
 * drain releases the group's wake and drains again when a produce asked for it meanwhile (as the
 * poll handler does). A schedule every `scheduleMs` is the safety net, as the group's schedule is.
 */
async function wakeRole() {
  const { WAKE_CHANNEL } = await import("@sqlstreams/core");
  const n = d.n;
  const tally = new Tally(n);
  const stats = new QueryStats();
  const latencies = [];
  const { client, pool, close } = await openClient(d.url, d.poolMax, stats, errors);
  const consumer = client.stream(d.stream).consumer(d.group);
  const handler = (msg) => {
    if (tally.see(msg.payload.seq) === 1) {
      Atomics.add(sh, 1, 1);
      latencies.push(epochMs() - msg.payload.t);
    }
  };
  const opts = { batchLimit: d.batchLimit, concurrency: d.concurrency };
  const totals = { wakes: 0, drains: 0, scheduled: 0, released: 0 };
  let running = null;
  let pending = false;
  const run = () => {
    if (running) {
      pending = true;
      return running;
    }
    running = (async () => {
      try {
        do {
          pending = false;
          totals.drains++;
          await consumer.drain(handler, opts);
          totals.released++;
        } while (pending || (await consumer.releaseWake()));
      } catch (e) {
        errors.push(String(e?.message ?? e));
      } finally {
        running = null;
      }
    })();
    return running;
  };
  const listener = new pg.Client({ connectionString: d.url });
  listener.on("error", (e) => errors.push(String(e?.message ?? e)));
  listener.on("notification", (m) => {
    let t;
    try {
      t = JSON.parse(m.payload ?? "");
    } catch {
      return;
    }
    if (t.stream !== d.stream || t.group !== d.group) return;
    totals.wakes++;
    void run();
  });
  try {
    await listener.connect();
    await listener.query(`LISTEN ${WAKE_CHANNEL}`);
    await Promise.all(Array.from({ length: d.poolMax }, () => pool.query("SELECT 1")));
    await run(); // warm: the group's first drain, and its wake released
    await startLine();
    stats.reset();
    const cpu = new CpuMeter().start({ profile: false });
    const end = Date.now() + d.timeoutMs;
    let nextSchedule = Date.now() + d.scheduleMs;
    while (tally.distinct < n) {
      if (Date.now() > end) throw new Error(`timed out: ${tally.distinct}/${n} handled`);
      if (Date.now() >= nextSchedule) {
        totals.scheduled++;
        nextSchedule = Date.now() + d.scheduleMs;
        void run();
      }
      await sleep(5);
    }
    await running;
    latencies.sort((a, b) => a - b);
    return { cpu: cpu.stop(), totals, check: tally.result(), roundTrips: stats.count, statements: stats.top(10), errors, latencies };
  } finally {
    await listener.end().catch(() => {});
    await close();
  }
}

const roles = { wake: wakeRole, drain: drainRole, produce: produceRole, paced: pacedRole, "floor-read": floorReadRole, prefill: prefillRole };
try {
  const result = await roles[d.role]();
  parentPort.postMessage({ type: "result", result });
} catch (e) {
  parentPort.postMessage({ type: "result", result: { error: String(e?.stack ?? e), check: { ok: false, error: String(e?.message ?? e) }, errors, cpu: { wallMs: NaN }, roundTrips: 0, ok: false, totals: {}, latencies: [] } });
}
