// How fast a deferred backlog of an ordered group drains, against the range path: one group
// drains N keyed messages on the range path (the range rate); another group's handler fails the
// first message of each key once, with a long backoff, so every later message of the key is
// written deferred behind it; then every row is made due and the time to drain the backlog is
// taken (the backlog rate). A measurement, not a test: `node bench/arms/backlog.mjs --help`.
// Needs a built @sqlstreams/core and a PostgreSQL server; makes its own database and drops it.
import { parseArgs } from "node:util";
import { randomBytes } from "node:crypto";
import pg from "pg";

const HELP = `node bench/arms/backlog.mjs [--messages 3000] [--keys 5,50] [--concurrency 10] [--batch 100] [--profile] [--url URL]

Prints one JSON line per key count: rangeRate and backlogRate (messages per second), their ratio,
the backlog's exception rows, and the Postgres CPU (ms, the backends serving the arm's database)
of each phase with its ratio per message (pgCpuRatio: range CPU over backlog CPU, steadier than
the rates on a shared machine). --profile adds, for the backlog's drain, the statements sent
(round trips) and the costliest statement shapes with their count and time from send to reply.`;

const { values: a } = parseArgs({
  options: {
    messages: { type: "string", default: "3000" },
    keys: { type: "string", default: "5,50" },
    concurrency: { type: "string", default: "10" },
    batch: { type: "string", default: "100" },
    url: { type: "string", default: process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres" },
    profile: { type: "boolean", default: false },
    help: { type: "boolean", default: false },
  },
});
if (a.help) {
  console.log(HELP);
  process.exit(0);
}
const { SqlStreams } = await import("@sqlstreams/core");
const { CpuMeter, QueryStats, instrumentedPool, setBenchDatabase } = await import("../lib/common.mjs");

async function run(n, keys) {
  const name = `bench_backlog_${randomBytes(4).toString("hex")}`;
  const admin = new pg.Client({ connectionString: a.url });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  setBenchDatabase(name);
  const u = new URL(a.url);
  u.pathname = `/${name}`;
  const url = u.toString();
  const stats = new QueryStats();
  const pool = a.profile ? instrumentedPool(url, 10, stats) : null;
  const client = new SqlStreams(pool ? { pool, logger: () => {} } : { connectionString: url, logger: () => {} });
  const db = new pg.Client({ connectionString: url });
  try {
    await client.migrate();
    const s = client.stream("backlog");
    await s.register({});
    await s.consumer("ok").register({ concurrencyOverride: "ordered", message: { timeout: 1000 } });
    await s.consumer("fail").register({ concurrencyOverride: "ordered", exceptionInitialBackoff: 60_000, message: { timeout: 1000 } });
    for (let i = 0; i < n; i += 500) {
      await s.produceBatch(Array.from({ length: Math.min(500, n - i) }, (_, j) => ({ payload: { i: i + j }, key: `k${(i + j) % keys}` })));
    }
    const opts = { concurrency: Number(a.concurrency), batchLimit: Number(a.batch) };
    let handled = 0;
    stats.reset();
    let cpu = new CpuMeter().start({ profile: false });
    let t = performance.now();
    while (handled < n) {
      const r = await s.consumer("ok").drain(() => void handled++, opts);
      if (r.idle) await new Promise((res) => setTimeout(res, 10));
    }
    const rangeMs = performance.now() - t;
    const rangeCpu = cpu.stop();
    const range = { statements: stats.count, statementMs: Math.round(stats.ms), top: stats.top(4) };

    await db.connect();
    const { rows: [st] } = await db.query("SELECT id FROM sqlstreams.stream_config WHERE name = 'backlog'");
    const failed = new Set();
    stats.reset();
    let done = 0;
    const handler = (m) => {
      if (m.attempt === 0 && m.payload.i < keys && !failed.has(m.id)) {
        failed.add(m.id);
        throw new Error("first of its key fails once");
      }
      done++;
    };
    const g = s.consumer("fail");
    for (let i = 0; i < 50; i++) if ((await g.drain(handler, opts)).idle) break;
    const { rows: [b] } = await db.query(`SELECT count(*)::int AS n FROM sqlstreams.exception_queue_${st.id}`);
    await db.query(`UPDATE sqlstreams.exception_queue_${st.id} SET can_run_after = now()`);
    const before = done;
    stats.reset();
    cpu = new CpuMeter().start({ profile: false });
    t = performance.now();
    while (done < n) await g.drain(handler, opts);
    const backlogMs = performance.now() - t;
    const backlogCpu = cpu.stop();
    const rangeRate = n / (rangeMs / 1000);
    const backlogRate = (n - before) / (backlogMs / 1000);
    const out = { messages: n, keys, backlogRows: b.n, rangeRate: Math.round(rangeRate), backlogRate: Math.round(backlogRate), ratio: Number((backlogRate / rangeRate).toFixed(3)),
      pgCpuRangeMs: rangeCpu.pgCpuMs, pgCpuBacklogMs: backlogCpu.pgCpuMs,
      pgCpuRatio: rangeCpu.pgCpuMs && backlogCpu.pgCpuMs ? Number(((rangeCpu.pgCpuMs / n) / (backlogCpu.pgCpuMs / (n - before))).toFixed(3)) : null };
    if (a.profile) Object.assign(out, { rangeMs: Math.round(rangeMs), backlogMs: Math.round(backlogMs), statements: stats.count, statementMs: Math.round(stats.ms), top: stats.top(10), range });
    return out;
  } finally {
    await db.end().catch(() => {});
    await client.close();
    await pool?.end();
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => {});
    await admin.end();
  }
}

for (const k of a.keys.split(",").map(Number)) console.log(JSON.stringify(await run(Number(a.messages), k)));
