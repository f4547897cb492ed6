// Several pollers on one keyed group: real poller processes drain one ordered (or exclusive)
// group while a producer appends keyed messages at a steady rate; optionally one poller is
// SIGKILLed mid-run. Reports deferrals per message (delivery_log rows 'deferred'), messages that
// got an exception row, lag over time, throughput, and the time to catch up once the producer
// stops. A measurement, not a test: it asserts nothing. Run `node bench/arms/pollers.mjs --help`.
//
// Needs a built @sqlstreams/core (npm run build) and a PostgreSQL server (DATABASE_URL, default
// postgres://postgres@127.0.0.1:5432/postgres); every run makes its own database and drops it.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";

const HELP = `node bench/arms/pollers.mjs [options]

  --pollers N        poller processes on the group (default 3); a comma list runs each in turn
  --keys N           distinct keys, message i has key k(i mod N) (default 50); comma list allowed
  --policy P         ordered | exclusive (default ordered); comma list allowed
  --rate N           messages per second produced (default 330)
  --seconds N        how long the producer runs (default 20)
  --kill-at S        after S seconds a poller SIGKILLs itself at its next handler start (mid-range)
  --timeout MS       the group's message timeout, which sets the range and key lease length (default 1000)
  --concurrency N    handlers per poller (default 10)
  --batch N          batchLimit: the drain's range ceiling (default 100)
  --work MS          each handler sleeps this long (default 2)
  --burst-ms MS      the producer sends what the rate owes every MS (default 50)
  --catchup-max S    give up waiting for the group to catch up after the producer stops (default 60)
  --url URL          server (default $DATABASE_URL or postgres://postgres@127.0.0.1:5432/postgres)
  --json             one JSON line per run instead of the table

Each combination of --pollers x --keys x --policy is one run on a fresh database.`;

const STREAM = "bench.pollers";
const GROUP = "g";

// ---------------------------------------------------------------------------------------------
// The child: one poller process, draining in a loop like a scheduled function would, until
// "stop" on stdin. Prints {event:"tick", handled, deferred, drains} every 500 ms and at the end.
if (process.argv[2] === "--child") {
  const cfg = JSON.parse(process.env.POLLER_CFG);
  const { SqlStreams } = await import("@sqlstreams/core");
  const client = new SqlStreams({ connectionString: cfg.url, logger: () => {} });
  const g = client.stream(STREAM).consumer(GROUP);
  let stop = false;
  // "die": SIGKILL this process at its next handler start, so mid-range, holding its range lease.
  let die = false;
  createInterface({ input: process.stdin }).on("line", (l) => {
    if (l.trim() === "stop") stop = true;
    if (l.trim() === "die") die = true;
    if (l.trim() === "live") die = false;
  });
  let handled = 0;
  let deferred = 0;
  let drains = 0;
  const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");
  const tick = () => out({ event: "tick", handled, deferred, drains });
  const timer = setInterval(tick, 500);
  const handler = async () => {
    if (die) process.kill(process.pid, "SIGKILL");
    if (cfg.work > 0) await sleep(cfg.work);
    handled++;
  };
  out({ event: "ready" });
  while (!stop) {
    const r = await g.drain(handler, { concurrency: cfg.concurrency, batchLimit: cfg.batch });
    drains++;
    deferred += r.deferred ?? 0;
    if (r.started === 0) await sleep(20);
  }
  clearInterval(timer);
  tick();
  await client.close();
  process.exit(0);
}

// ---------------------------------------------------------------------------------------------
// The parent.
const { values: a } = parseArgs({
  options: {
    pollers: { type: "string", default: "3" },
    keys: { type: "string", default: "50" },
    policy: { type: "string", default: "ordered" },
    rate: { type: "string", default: "330" },
    seconds: { type: "string", default: "20" },
    "kill-at": { type: "string" },
    timeout: { type: "string", default: "1000" },
    concurrency: { type: "string", default: "10" },
    batch: { type: "string", default: "100" },
    work: { type: "string", default: "2" },
    "burst-ms": { type: "string", default: "50" },
    "catchup-max": { type: "string", default: "60" },
    url: { type: "string", default: process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres" },
    json: { type: "boolean", default: false },
    help: { type: "boolean", default: false },
  },
});
if (a.help) {
  console.log(HELP);
  process.exit(0);
}
const list = (s) => s.split(",").map((x) => x.trim()).filter(Boolean);
const num = (s) => Number(s);

function dbUrl(base, name) {
  const u = new URL(base);
  u.pathname = `/${name}`;
  return u.toString();
}

async function withPg(url, fn) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

function spawnPoller(cfg) {
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url), "--child"], {
    env: { ...process.env, POLLER_CFG: JSON.stringify(cfg) },
    stdio: ["pipe", "pipe", "inherit"],
  });
  const p = { child, last: { handled: 0, deferred: 0, drains: 0 }, exited: null, ready: null };
  p.exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
  p.ready = new Promise((resolve) => {
    createInterface({ input: child.stdout }).on("line", (l) => {
      let m;
      try {
        m = JSON.parse(l);
      } catch {
        return;
      }
      if (m.event === "ready") resolve();
      if (m.event === "tick") p.last = m;
    });
    p.exited.then(resolve);
  });
  return p;
}

async function run({ pollers, keys, policy }) {
  const name = `bench_pollers_${randomBytes(4).toString("hex")}`;
  await withPg(a.url, (c) => c.query(`CREATE DATABASE ${name}`));
  const url = dbUrl(a.url, name);
  const procs = [];
  try {
    const { SqlStreams } = await import("@sqlstreams/core");
    const client = new SqlStreams({ connectionString: url, logger: () => {} });
    await client.migrate();
    const stream = client.stream(STREAM);
    await stream.register({});
    await stream.consumer(GROUP).register({
      concurrencyOverride: policy,
      message: { timeout: num(a.timeout) },
    });
    const db = new pg.Client({ connectionString: url });
    await db.connect();
    const { rows: [s] } = await db.query("SELECT id FROM sqlstreams.stream_config WHERE name = $1", [STREAM]);
    const n = s.id;

    const cfg = { url, concurrency: num(a.concurrency), batch: num(a.batch), work: num(a.work) };
    for (let i = 0; i < pollers; i++) procs.push(spawnPoller(cfg));
    await Promise.all(procs.map((p) => p.ready));

    const rate = num(a.rate);
    const seconds = num(a.seconds);
    const t0 = performance.now();
    const at = () => (performance.now() - t0) / 1000;
    let produced = 0;
    let producing = true;
    const producer = (async () => {
      // Every --burst-ms, what the rate owes so far.
      while (at() < seconds) {
        const owed = Math.floor(at() * rate) - produced;
        if (owed > 0) {
          const items = Array.from({ length: owed }, (_, j) => {
            const i = produced + j;
            return { payload: { i }, key: `k${i % keys}` };
          });
          await stream.produceBatch(items);
          produced += owed;
        }
        await sleep(num(a["burst-ms"]));
      }
      producing = false;
    })();

    let killed = null;
    // The longest range lease left when the kill was seen (the dead range's, on the database clock).
    let leaseLeftAtKill = null;
    let keyLeaseLeftAtKill = null;
    const killAt = a["kill-at"] === undefined ? null : num(a["kill-at"]);
    const samples = [];
    const sample = async () => {
      const { rows: [r] } = await db.query(
        `SELECT (SELECT COALESCE(max(id), 0) FROM sqlstreams.message_log_${n})::bigint AS head,
                (SELECT committed FROM sqlstreams.consumer_group_cursor_${n})::bigint AS committed,
                (SELECT count(*) FROM sqlstreams.exception_queue_${n})::bigint AS rows,
                (SELECT count(*) FROM sqlstreams.delivery_log_${n} WHERE status = 'deferred')::bigint AS deferred`);
      const handled = procs.reduce((x, p) => x + p.last.handled, 0);
      samples.push({ t: at(), head: Number(r.head), lag: Number(r.head) - Number(r.committed), rows: Number(r.rows), deferred: Number(r.deferred), handled });
    };
    // The kill: poller 0 is told to SIGKILL itself at its next handler start; if it gets no
    // work within a second (another poller holds the keys), it is told to live after all and the
    // next one is told, and so on.
    const kill = async () => {
      for (const p of procs) {
        p.child.stdin.write("die\n");
        const died = await Promise.race([p.exited.then(() => true), sleep(1000).then(() => false)]);
        if (died) return at();
        p.child.stdin.write("live\n");
      }
      return null;
    };
    let killing = null;
    while (producing) {
      // Not a divisor of the producer's bursts, so the samples do not all fall at one phase of them.
      await sleep(700);
      if (killAt !== null && killing === null && at() >= killAt) killing = kill().then(async (t) => {
          killed = t;
          if (t === null) return;
          const { rows: [l] } = await db.query(
            `SELECT (EXTRACT(EPOCH FROM (SELECT max(expires_at) FROM sqlstreams.claim_lease_${n}) - now()))::float8 AS s,
                    (EXTRACT(EPOCH FROM (SELECT max(expires_at) FROM sqlstreams.message_key_lease_${n}) - now()))::float8 AS k`);
          leaseLeftAtKill = l.s;
          keyLeaseLeftAtKill = l.k;
        });
      await sample();
    }
    if (killing !== null) await killing;
    await producer;
    const stopAt = at();
    let caughtUp = null;
    while (at() < stopAt + num(a["catchup-max"])) {
      await sleep(250);
      await sample();
      const last = samples[samples.length - 1];
      if (last.head === produced && last.lag === 0 && last.rows === 0) {
        caughtUp = at() - stopAt;
        break;
      }
    }
    for (const p of procs) if (p.child.exitCode === null && p.child.signalCode === null) p.child.stdin.write("stop\n");
    await Promise.all(procs.map((p) => p.exited));
    const { rows: [f] } = await db.query(
      `SELECT count(*) FILTER (WHERE status = 'deferred')::bigint AS deferred,
              count(DISTINCT message_id) FILTER (WHERE status IN ('deferred', 'failure', 'delayed'))::bigint AS excepted,
              count(DISTINCT message_id) FILTER (WHERE status = 'deferred')::bigint AS deferred_msgs
         FROM sqlstreams.delivery_log_${n}`);
    await db.end();
    await client.close();

    const during = samples.filter((x) => x.t <= stopAt);
    const lags = during.map((x) => x.lag).sort((x, y) => x - y);
    const afterKill = killed === null ? null : during.filter((x) => x.t >= killed);
    // Two readings of "back after the kill". keepingPace: the first sample after the kill from
    // which the lag never grows again while the producer runs (beyond one producer burst of
    // noise): from there the group handles at least what arrives. caughtUp: the first sample
    // from which the lag stays below two ranges until the producer stops.
    let paceAgain = null;
    let caughtUpAfterKill = null;
    if (afterKill !== null) {
      const slack = Math.ceil((rate * num(a["burst-ms"])) / 1000);
      for (let i = 0; i < afterKill.length && paceAgain === null; i++) {
        const from = afterKill[i].lag;
        if (afterKill.slice(i + 1).every((x) => x.lag <= from + slack)) paceAgain = afterKill[i].t - killed;
      }
      for (let i = 0; i < afterKill.length; i++) {
        if (afterKill.slice(i).every((x) => x.lag <= 2 * cfg.batch)) {
          caughtUpAfterKill = afterKill[i].t - killed;
          break;
        }
      }
    }
    const handledDuring = during.length > 0 ? during[during.length - 1].handled : 0;
    return {
      pollers, keys, policy, kill: killed === null ? null : Number(killed.toFixed(1)),
      produced, seconds, rate,
      deferredRows: Number(f.deferred),
      deferredPerMessage: Number((Number(f.deferred) / Math.max(1, produced)).toFixed(3)),
      deferredMessages: Number(f.deferred_msgs),
      exceptionMessages: Number(f.excepted),
      lagMedian: lags.length ? lags[Math.floor(lags.length / 2)] : null,
      lagMax: lags.length ? lags[lags.length - 1] : null,
      throughputDuring: Number((handledDuring / stopAt).toFixed(1)),
      catchUpS: caughtUp === null ? null : Number(caughtUp.toFixed(1)),
      paceAgainAfterKillS: paceAgain === null ? null : Number(paceAgain.toFixed(1)),
      leaseLeftAtKillS: leaseLeftAtKill === null ? null : Number(leaseLeftAtKill.toFixed(1)),
      keyLeaseLeftAtKillS: keyLeaseLeftAtKill === null ? null : Number(keyLeaseLeftAtKill.toFixed(1)),
      caughtUpAfterKillS: caughtUpAfterKill === null ? null : Number(caughtUpAfterKill.toFixed(1)),
      lagSeries: samples.map((x) => [Number(x.t.toFixed(1)), x.lag, x.rows]),
    };
  } finally {
    for (const p of procs) if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill("SIGKILL");
    await Promise.all(procs.map((p) => p.exited));
    await withPg(a.url, (c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).catch(() => {});
  }
}

for (const policy of list(a.policy)) {
  if (policy !== "ordered" && policy !== "exclusive") throw new Error(`--policy: ordered or exclusive, not ${policy}`);
  for (const keys of list(a.keys).map(num)) {
    for (const pollers of list(a.pollers).map(num)) {
      const r = await run({ pollers, keys, policy });
      if (a.json) {
        console.log(JSON.stringify(r));
        continue;
      }
      const { lagSeries, ...rest } = r;
      console.log(Object.entries(rest).map(([k, v]) => `${k}=${v}`).join(" "));
      console.log(`  lag over time [s, lag, exception rows]: ${lagSeries.filter((_, i) => i % 2 === 0).map((x) => x.join("/")).join(" ")}`);
    }
  }
}
