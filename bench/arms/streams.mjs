// Scale in streams and groups: 10, 100 and 1,000 registered streams with 2 groups each (a quick
// run: 2 and 6), each size in a database of its own. Per size: registration time per stream,
// the relations the streams add to the catalog, maintain() per run and per stream, the idle poll
// (statements per caught-up poll, rows written), and produce/consume rates on one busy stream
// among them. The per-stream costs should stay flat as the count grows: slowest ÷ fastest.
import pg from "pg";
import { CpuMeter, QueryStats, Tally, beforeTimed, median, parallel, rate, setBenchDatabase, settledStats } from "../lib/common.mjs";
import { CONSUME, PRODUCE_CONNECTIONS, drainAll, openClient, produceRange, verifyGroups } from "./ours.mjs";

const GROUPS_PER_STREAM = 2;
// Idle polls: every group of the first (up to) 100 streams, once to warm the client's lookups, then once measured.
const IDLE_STREAMS = 100;
const MAINTAIN_RUNS = 3;

const streamName = (i) => `scale.s${i}`;

async function connect(url) {
  const c = new pg.Client({ connectionString: url });
  c.on("error", () => {});
  await c.connect();
  return c;
}

async function withAdmin(url, fn) {
  const c = await connect(url);
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

function libraryWrites(url) {
  return settledStats(url, async (c) => {
    const { rows } = await c.query("SELECT COALESCE(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::float8 AS n FROM pg_stat_user_tables WHERE schemaname = 'sqlstreams'");
    return rows[0].n;
  }, (n, last) => n === last);
}

async function oneSize(ctx, url, size, n) {
  const out = { streams: size, groups: size * GROUPS_PER_STREAM };
  const errors = ctx.errors;
  const relationsBefore = await withAdmin(url, async (c) => {
    const { client, close } = await openClient(url, PRODUCE_CONNECTIONS, null, errors);
    try {
      await client.migrate();
    } finally {
      await close();
    }
    return (await c.query("SELECT count(*)::int AS n FROM pg_class k JOIN pg_namespace s ON s.oid = k.relnamespace WHERE s.nspname = 'sqlstreams'")).rows[0].n;
  });

  // Registration, one stream (and its groups) after another, as a migrate function would.
  {
    const { client, close } = await openClient(url, 1, null, errors);
    try {
      const t0 = performance.now();
      for (let i = 0; i < size; i++) {
        const st = client.stream(streamName(i));
        await st.register({});
        for (let g = 0; g < GROUPS_PER_STREAM; g++) await st.consumer(`g${g}`).register({ start: "beginning" });
      }
      out.registerMs = performance.now() - t0;
    } finally {
      await close();
    }
  }
  out.registerMsPerStream = out.registerMs / size;
  const relations = await withAdmin(url, async (c) => (await c.query("SELECT count(*)::int AS n FROM pg_class k JOIN pg_namespace s ON s.oid = k.relnamespace WHERE s.nspname = 'sqlstreams'")).rows[0].n);
  out.relations = relations;
  out.relationsPerStream = (relations - relationsBefore) / size;
  await beforeTimed(url);

  // maintain(): one warm-up run (its first partitions, statistics), then MAINTAIN_RUNS timed.
  {
    const { client, close } = await openClient(url, 2, null, errors);
    try {
      await client.maintain();
      const runs = [];
      for (let r = 0; r < (ctx.quick ? 1 : MAINTAIN_RUNS); r++) {
        const t0 = performance.now();
        await client.maintain();
        runs.push(performance.now() - t0);
      }
      out.maintainMsPerRun = median(runs);
      out.maintainMsPerStream = out.maintainMsPerRun / size;
    } finally {
      await close();
    }
  }

  // The idle poll: every group of the first streams is caught up (nothing produced yet).
  {
    const stats = new QueryStats();
    const { client, close } = await openClient(url, 4, stats, errors);
    try {
      const consumers = [];
      for (let i = 0; i < Math.min(size, IDLE_STREAMS); i++) for (let g = 0; g < GROUPS_PER_STREAM; g++) consumers.push(client.stream(streamName(i)).consumer(`g${g}`));
      let busy = 0;
      const tick = () => parallel(consumers.length, 4, async (i) => {
        const r = await consumers[i].poll(() => {
          busy++;
        });
        if (!r.idle || r.started > 0) busy++;
      });
      await tick();
      busy = 0;
      const w0 = await libraryWrites(url);
      stats.reset();
      const t0 = performance.now();
      await tick();
      out.idlePollMs = (performance.now() - t0) / consumers.length;
      out.stmtPerPoll = stats.count / consumers.length;
      out.idleRowsWritten = (await libraryWrites(url)) - w0;
      out.idleBusy = busy;
      out.idlePolls = consumers.length;
    } finally {
      await close();
    }
  }

  // One busy stream among them: produce n (produceBatch 500 × 4), then one group drains them.
  const busyStream = streamName(Math.floor(size / 2));
  {
    const { client, pool, close } = await openClient(url, PRODUCE_CONNECTIONS, null, errors);
    try {
      await Promise.all(Array.from({ length: PRODUCE_CONNECTIONS }, () => pool.query("SELECT 1")));
      const c = new CpuMeter().start({ profile: false });
      await produceRange(client.stream(busyStream), 0, n);
      out.produce = rate(n, c.stop().wallMs);
    } finally {
      await close();
    }
  }
  await beforeTimed(url);
  const tally = new Tally(n);
  const { cpu } = await drainAll({
    url, stream: busyStream, group: "g0", n, ...CONSUME, errors, timeoutMs: ctx.timeoutMs, tally,
    handler: (msg) => {
      tally.see(msg.payload.seq);
    },
  });
  out.consume = rate(n, cpu.wallMs);
  out.consumeCpu = cpu;
  const db = await verifyGroups(url, ["g0"], { stream: busyStream });
  out.check = { ...tally.result(), db, idleOk: out.stmtPerPoll === 1 && out.idleRowsWritten === 0 && out.idleBusy === 0 };
  out.check.ok = out.check.ok && db.ok && out.check.idleOk;
  return out;
}

export async function streamsArm(ctx) {
  const sizes = ctx.quick ? [2, 6] : [10, 100, 1000];
  const n = ctx.n;
  const bySize = [];
  for (const size of sizes) {
    const name = `${ctx.dbName}_s${size}`;
    await withAdmin(ctx.adminUrl, (c) => c.query(`CREATE DATABASE ${name}`));
    setBenchDatabase(name, ctx.nice ?? null);
    const u = new URL(ctx.url);
    u.pathname = "/" + name;
    try {
      bySize.push(await oneSize(ctx, u.toString(), size, n));
    } finally {
      await withAdmin(ctx.adminUrl, (c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).catch(() => {});
    }
  }
  // Slowest ÷ fastest of each per-stream cost across the sizes (1 = flat), and of the busy stream's rates.
  const spread = (xs) => {
    const v = xs.filter((x) => typeof x === "number" && x > 0);
    return v.length < 2 ? null : Math.min(...v) / Math.max(...v);
  };
  const registerSpread = spread(bySize.map((s) => s.registerMsPerStream));
  const maintainSpread = spread(bySize.map((s) => s.maintainMsPerStream));
  const consumeSpread = spread(bySize.map((s) => s.consume));
  const produceSpread = spread(bySize.map((s) => s.produce));
  const metrics = {
    consume: bySize.at(-1).consume,
    produce: bySize.at(-1).produce,
    stmtPerPoll: Math.max(...bySize.map((s) => s.stmtPerPoll)),
    perStreamSpread: Math.min(...[registerSpread, maintainSpread].filter((x) => x != null)),
    registerSpread,
    maintainSpread,
    consumeSpread,
    produceSpread,
  };
  for (const s of bySize) {
    const k = `s${s.streams}_`;
    metrics[`${k}registerMsPerStream`] = s.registerMsPerStream;
    metrics[`${k}maintainMsPerRun`] = s.maintainMsPerRun;
    metrics[`${k}maintainMsPerStream`] = s.maintainMsPerStream;
    metrics[`${k}relations`] = s.relations;
    metrics[`${k}consume`] = s.consume;
    metrics[`${k}produce`] = s.produce;
  }
  const ok = bySize.every((s) => s.check.ok);
  return {
    metrics,
    // expected: the busy stream's messages at each size (CPU per 100k is of the largest size's drain).
    check: { ok, expected: n, missing: bySize.reduce((a, s) => a + s.check.missing, 0), duplicates: bySize.reduce((a, s) => a + s.check.duplicates, 0), sizes: bySize.map((s) => ({ streams: s.streams, ...s.check })) },
    where: { ...bySize.at(-1).consumeCpu, sizes: bySize.map(({ check: _check, consumeCpu: _cpu, ...rest }) => rest) },
    settings: { sizes, groupsPerStream: GROUPS_PER_STREAM, busyMessages: n, idleStreams: IDLE_STREAMS, maintainRuns: ctx.quick ? 1 : MAINTAIN_RUNS, ...CONSUME },
  };
}
