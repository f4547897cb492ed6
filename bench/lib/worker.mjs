// One role of a multi-party arm, in its own thread: "drain" (a consumer group), "produce"
// (produceBatch as fast as the backlog bound allows) or "paced" (single produce() calls at a
// fixed rate). Shared counters (Int32Array over a SharedArrayBuffer):
//   [0] messages produced   [1] messages handled (first time)   [2] parties at the start line
// Also "prefill", the untimed setup of the cost-curve arms (no shared counters).
import { parentPort, workerData } from "node:worker_threads";
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
      if (latencies) latencies.push(Date.now() - msg.createdAt.getTime());
    }
  };
  const isDone = () => {
    const backlog = Atomics.load(sh, 0) - Atomics.load(sh, 1);
    if (backlog > maxBacklog) maxBacklog = backlog;
    return tally.distinct >= n;
  };
  const { cpu, totals } = await drainAll({
    url: d.url, group: d.group, n, batchLimit: d.batchLimit, concurrency: d.concurrency, poolMax: d.poolMax,
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
  const { client, pool, close } = await openClient(d.url, 4, stats, errors);
  try {
    const stream = client.stream(STREAM);
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

function pacedRole() {
  return producerRole(async (stream) => {
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
      const p = stream.produce(makePayload(i)).then(() => {
        Atomics.add(sh, 0, 1);
        inflight.delete(p);
      });
      inflight.add(p);
    }
    await Promise.all(inflight);
    return { late };
  });
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

const roles = { drain: drainRole, produce: produceRole, paced: pacedRole, "floor-read": floorReadRole, prefill: prefillRole };
try {
  const result = await roles[d.role]();
  parentPort.postMessage({ type: "result", result });
} catch (e) {
  parentPort.postMessage({ type: "result", result: { error: String(e?.stack ?? e), check: { ok: false, error: String(e?.message ?? e) }, errors, cpu: { wallMs: NaN }, roundTrips: 0, ok: false, totals: {}, latencies: [] } });
}
