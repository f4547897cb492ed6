// Peers: pg-boss 10 and graphile-worker 0.17 (root devDependencies, the history rows), and the
// newest, pg-boss 12 and graphile-worker 0.18 (bench/peers/, run under Node 22), with the same
// payloads, the same Postgres and their fastest settings found on this machine. Each is verified
// by counting handled messages.
import pg from "pg";
import { CpuMeter, Tally, beforeTimed, makePayload, parallel, rate, sleep } from "../lib/common.mjs";

const PRODUCE_CONNECTIONS = 4;
const PRODUCE_BATCH = 500;

/** Waits until `done()` holds, polling every `everyMs`; throws after `timeoutMs`. */
async function until(done, timeoutMs, everyMs = 20, what = "condition") {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if (await done()) return;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(everyMs);
  }
}

// ---------------------------------------------------------------------------------------------
// pg-boss 10.4.2: `insert` (one statement per array of jobs), then `work` with a large
// batchSize, the minimum polling interval (0.5 s) and several workers (pg-boss 10 has no
// teamSize: each `work` call is one fetch loop). Completion is batched per fetched array.
// A worker loop takes at least the polling interval (it sleeps the rest of it after each batch),
// so throughput is about workers × batchSize / 0.5 s until Postgres saturates: on 2 cores,
// 4 × 5000 measured ~20k/s against ~2k/s for 1 × 1000 and ~4k/s for 8 × 250 (see README).

export const PGBOSS_SETTINGS = { workers: 4, batchSize: 5000, pollingIntervalSeconds: 0.5 };

// pg-boss 12.38.0: a named export, insert(queue, jobs), `burstWhenBatchFull` (fetch again at once
// while a fetch came back full, instead of sleeping the polling interval) and `localConcurrency`
// (parallel fetch loops of one work() call). --sweep-peers on 2 cores (3 December 2026, loaded,
// 20k jobs, consume msg/s): 1 × 1000 burst 3.1k; localConcurrency 4 × 1000/2000/5000 burst
// 7.5k/7.9k/6.4k; 8 × 2000 burst 6.6k; 4 workers × 5000 without burst 10.0k (again: 6.6k), with
// burst 9.1k. Four work() loops of 5000 with burst is the pick (noisy; within noise of no burst).
export const PGBOSS12_SETTINGS = { workers: 4, localConcurrency: 1, batchSize: 5000, pollingIntervalSeconds: 0.5, burstWhenBatchFull: true };

export async function pgBoss12(ctx) {
  const { pgBoss: load } = await import("../peers/load.mjs");
  const { PgBoss } = await load();
  return pgBossArm(ctx, PgBoss, { ...PGBOSS12_SETTINGS, ...(ctx.peerSettings ?? {}) }, true);
}

export async function pgBoss(ctx) {
  const { default: PgBoss } = await import("pg-boss");
  return pgBossArm(ctx, PgBoss, { ...PGBOSS_SETTINGS, ...(ctx.peerSettings ?? {}) }, false);
}

async function pgBossArm(ctx, PgBoss, settings, v12) {
  const n = ctx.n;
  const boss = new PgBoss({
    connectionString: ctx.url,
    max: PRODUCE_CONNECTIONS + settings.workers * (settings.localConcurrency ?? 1) + 2,
    supervise: false, // no maintenance loop competing with the measured work
    schedule: false,
    migrate: true,
  });
  boss.on("error", (e) => {
    ctx.errors.push(String(e?.message ?? e));
  });
  await boss.start();
  const queue = "bench";
  await boss.createQueue(queue);
  try {
    // Produce: bulk insert, 500 per call, 4 calls at once.
    await beforeTimed(ctx.url);
    const cpuP = new CpuMeter().start();
    await parallel(Math.ceil(n / PRODUCE_BATCH), PRODUCE_CONNECTIONS, async (b) => {
      const jobs = [];
      for (let s = b * PRODUCE_BATCH; s < Math.min(n, (b + 1) * PRODUCE_BATCH); s++) jobs.push(v12 ? { data: makePayload(s) } : { name: queue, data: makePayload(s) });
      await (v12 ? boss.insert(queue, jobs) : boss.insert(jobs));
    });
    const produced = cpuP.stop();

    // Consume: handled when the handler saw every message and the database holds no unfinished job.
    const tally = new Tally(n);
    const pool = new pg.Pool({ connectionString: ctx.url, max: 1 });
    await beforeTimed(ctx.url);
    const cpuC = new CpuMeter().start();
    for (let w = 0; w < settings.workers; w++) {
      const opts = { batchSize: settings.batchSize, pollingIntervalSeconds: settings.pollingIntervalSeconds };
      if (v12) Object.assign(opts, { localConcurrency: settings.localConcurrency, burstWhenBatchFull: settings.burstWhenBatchFull });
      await boss.work(queue, opts, async (jobs) => {
        for (const job of jobs) tally.see(job.data.seq);
      });
    }
    await until(() => tally.distinct === n, ctx.timeoutMs, 20, "pg-boss handlers");
    await until(
      async () => (await pool.query("SELECT count(*)::int AS c FROM pgboss.job WHERE name = $1 AND state < 'completed'", [queue])).rows[0].c === 0,
      ctx.timeoutMs,
      20,
      "pg-boss completions",
    );
    const consumed = cpuC.stop();
    await boss.offWork(queue);
    const { rows } = await pool.query("SELECT count(*)::int AS c FROM pgboss.job WHERE name = $1 AND state = 'completed'", [queue]);
    await pool.end();
    const check = tally.result();
    check.completedInDb = rows[0].c;
    if (rows[0].c !== n) check.ok = false;
    return {
      metrics: { produce: rate(n, produced.wallMs), consume: rate(n, consumed.wallMs) },
      check,
      where: { ...consumed, produce: produced, note: "consume phase; produce phase under produce" },
      settings,
    };
  } finally {
    await boss.stop({ graceful: false, wait: true, timeout: 2000 }).catch(() => {});
  }
}

// ---------------------------------------------------------------------------------------------
// graphile-worker 0.17.3: `addJobs` (500 per call, 4 at once), then `run` with a local queue
// (jobs fetched and locked in batches) and batched completion. Tried on 2 cores, 50k jobs:
// concurrency 8–64, localQueue 200–5000, completeJobBatchDelay 0–20; 32 / 2000 / 10 was the
// most consistent (~18k/s); the others were equal or slower and noisier.

export const GRAPHILE_SETTINGS = { concurrency: 32, localQueueSize: 2000, completeJobBatchDelay: 10, pollInterval: 100 };

// graphile-worker 0.18.0: the same API. --sweep-peers on 2 cores (3 December 2026, loaded, 20k
// jobs, consume msg/s): concurrency/localQueue 16/1000 8.6k, 32/500 8.6k, 32/2000 8.8k, 32/5000
// 12.7k, 64/2000 15.4k (again: 9.1k), 64/5000 11.5k, 32/2000 with completeJobBatchDelay 0 9.0k.
// 64 handlers beat 32; 5000 vs 2000 is within noise: 64/5000 is the pick.
export const GRAPHILE18_SETTINGS = { concurrency: 64, localQueueSize: 5000, completeJobBatchDelay: 10, pollInterval: 100 };

export async function graphileWorker18(ctx) {
  const { graphileWorker: load } = await import("../peers/load.mjs");
  return graphileArm(ctx, await load(), { ...GRAPHILE18_SETTINGS, ...(ctx.peerSettings ?? {}) });
}

export async function graphileWorker(ctx) {
  return graphileArm(ctx, await import("graphile-worker"), { ...GRAPHILE_SETTINGS, ...(ctx.peerSettings ?? {}) });
}

async function graphileArm(ctx, gw, settings) {
  const n = ctx.n;
  const logger = new gw.Logger(() => () => {});
  const utils = await gw.makeWorkerUtils({ connectionString: ctx.url, logger, maxPoolSize: PRODUCE_CONNECTIONS + 1 });
  let runner = null;
  try {
    await utils.migrate();
    await beforeTimed(ctx.url);
    const cpuP = new CpuMeter().start();
    await parallel(Math.ceil(n / PRODUCE_BATCH), PRODUCE_CONNECTIONS, async (b) => {
      const specs = [];
      for (let s = b * PRODUCE_BATCH; s < Math.min(n, (b + 1) * PRODUCE_BATCH); s++) specs.push({ identifier: "bench", payload: makePayload(s) });
      await utils.addJobs(specs);
    });
    const produced = cpuP.stop();

    const tally = new Tally(n);
    const pool = new pg.Pool({ connectionString: ctx.url, max: 1 });
    await beforeTimed(ctx.url);
    const cpuC = new CpuMeter().start();
    runner = await gw.run({
      connectionString: ctx.url,
      concurrency: settings.concurrency,
      maxPoolSize: settings.concurrency + 4,
      noHandleSignals: true,
      pollInterval: settings.pollInterval,
      logger,
      taskList: {
        bench: async (payload) => {
          tally.see(payload.seq);
        },
      },
      preset: {
        worker: {
          localQueue: { size: settings.localQueueSize },
          completeJobBatchDelay: settings.completeJobBatchDelay,
          failJobBatchDelay: settings.completeJobBatchDelay,
        },
      },
    });
    await until(() => tally.distinct === n, ctx.timeoutMs, 20, "graphile-worker handlers");
    // Completing a job deletes it: done when no job is left.
    await until(
      async () => (await pool.query("SELECT count(*)::int AS c FROM graphile_worker._private_jobs")).rows[0].c === 0,
      ctx.timeoutMs,
      20,
      "graphile-worker completions",
    );
    const consumed = cpuC.stop();
    await pool.end();
    return {
      metrics: { produce: rate(n, produced.wallMs), consume: rate(n, consumed.wallMs) },
      check: tally.result(),
      where: { ...consumed, produce: produced, note: "consume phase; produce phase under produce" },
      settings,
    };
  } finally {
    if (runner) await runner.stop().catch(() => {});
    await utils.release().catch(() => {});
  }
}
