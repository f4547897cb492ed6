// Shared pieces of the bench: payloads, an instrumented pg pool, CPU and row counters,
// correctness tallies and small statistics. Plain ESM, no build step.
import fs from "node:fs";
import inspector from "node:inspector";
import os from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import pg from "pg";

export { sleep };
export const nowMs = () => performance.now();

// ---------------------------------------------------------------------------------------------
// Payloads: 1 KB JSON objects that carry their sequence number, so every arm can check that each
// message was handled at least once and count duplicates.

const FILLER_WORDS = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor".split(" ");
function filler(len, salt) {
  let s = "";
  let i = salt;
  while (s.length < len) s += FILLER_WORDS[i++ % FILLER_WORDS.length] + " ";
  return s.slice(0, len);
}

// Two payload shapes (`--payloads lean,order`): "order", an order document of nested objects
// (its JSON.parse costs ~2 µs per message on either side of a ratio, which hides per-message
// overhead of the code around it), and "lean", `{ seq, producer, pad: "x" × 964 }`: the same
// ~1 KB of JSON text, one string to decode. An arm process or worker thread sets its shape once.
let payloadShape = "order";
export const PAYLOAD_SHAPES = ["lean", "order"];
export function setPayloadShape(shape) {
  if (shape && !PAYLOAD_SHAPES.includes(shape)) throw new Error(`unknown payload shape ${shape}`);
  payloadShape = shape ?? "order";
}
export const getPayloadShape = () => payloadShape;
const LEAN_PAD = "x".repeat(964);

// Building a fresh 1 KB object per message costs about as much Node CPU as a produce call's own
// work, so the timed loops take a shallow copy of one of 1,000 prebuilt templates instead (what a
// producer that already holds its objects would do). The copy is a new object each time.
const TEMPLATES = [];
/** A ~1 KB JSON object of the arm's shape tagged with `seq`. */
export function makePayload(seq) {
  if (payloadShape === "lean") return { seq, producer: "bench", pad: LEAN_PAD };
  const i = seq % 1000;
  const t = (TEMPLATES[i] ??= buildPayload(i));
  return { ...t, seq };
}

function buildPayload(seq) {
  const obj = {
    seq,
    type: "order.placed",
    orderId: `ord-${seq.toString(36).padStart(8, "0")}`,
    customer: { id: `cus-${(seq * 7919) % 100000}`, tier: seq % 3 === 0 ? "gold" : "standard", country: "NZ" },
    items: [
      { sku: `sku-${seq % 997}`, qty: 1 + (seq % 4), price: 1999 },
      { sku: `sku-${(seq + 13) % 997}`, qty: 2, price: 450 },
      { sku: `sku-${(seq + 29) % 997}`, qty: 1, price: 12500 },
    ],
    total: 16949 + (seq % 100),
    placedAt: "2025-01-01T00:00:00.000Z",
    note: "",
  };
  const base = JSON.stringify(obj).length;
  obj.note = filler(Math.max(0, 1024 - base), seq);
  return obj;
}

// ---------------------------------------------------------------------------------------------
// Correctness: a count per sequence number. Every arm runs one of these.

export class Tally {
  /** `allowedDuplicates`: how many duplicate deliveries the arm may see (none without faults). */
  constructor(n, allowedDuplicates = 0) {
    this.n = n;
    this.allowedDuplicates = allowedDuplicates;
    this.counts = new Uint16Array(n);
    this.handled = 0; // handler invocations that succeeded (duplicates included)
    this.unknown = 0; // seq outside 0..n-1
    this.distinct = 0; // sequence numbers seen at least once
  }
  see(seq) {
    if (!Number.isInteger(seq) || seq < 0 || seq >= this.n) {
      this.unknown++;
      return 0;
    }
    this.handled++;
    const c = this.counts[seq];
    if (c === 0) this.distinct++;
    if (c < 65535) this.counts[seq] = c + 1;
    return c + 1;
  }
  result() {
    let missing = 0;
    let duplicates = 0;
    let firstMissing = null;
    for (let i = 0; i < this.n; i++) {
      const c = this.counts[i];
      if (c === 0) {
        missing++;
        if (firstMissing === null) firstMissing = i;
      } else duplicates += c - 1;
    }
    const ok = missing === 0 && this.unknown === 0 && duplicates <= this.allowedDuplicates;
    return { expected: this.n, handled: this.handled, missing, duplicates, duplicatesAllowed: this.allowedDuplicates, unknown: this.unknown, firstMissing, ok };
  }
}

// ---------------------------------------------------------------------------------------------
// An instrumented pool: counts every statement sent on any of its connections (round trips,
// BEGIN/COMMIT included) and, per statement shape, the time from send to reply.

function shapeOf(text) {
  const t = String(text).replace(/\s+/g, " ").trim();
  return t.length > 110 ? t.slice(0, 110) + "…" : t;
}

export class QueryStats {
  constructor() {
    this.reset();
  }
  reset() {
    this.count = 0;
    this.ms = 0;
    this.byShape = new Map();
  }
  record(text, ms, rows) {
    this.count++;
    this.ms += ms;
    const k = shapeOf(text);
    let e = this.byShape.get(k);
    if (!e) this.byShape.set(k, (e = { count: 0, ms: 0, rows: 0, empty: 0 }));
    e.count++;
    e.ms += ms;
    if (typeof rows === "number") {
      e.rows += rows;
      if (rows === 0) e.empty++;
    }
  }
  top(limit = 12) {
    return [...this.byShape.entries()]
      .map(([shape, e]) => ({ shape, count: e.count, ms: Math.round(e.ms), meanMs: +(e.ms / e.count).toFixed(3), rows: e.rows, empty: e.empty }))
      .sort((a, b) => b.ms - a.ms)
      .slice(0, limit);
  }
}

export function instrumentedPool(connectionString, max, stats) {
  const pool = new pg.Pool({ connectionString, max });
  pool.on("error", () => {});
  pool.on("connect", (client) => {
    const orig = client.query.bind(client);
    client.query = function (...args) {
      const first = args[0];
      const t0 = performance.now();
      // A submittable with a callback: the library's claim, which carries the read of its range in
      // the same round trip (docs/protocol/poll-cycle.md#the-claims-answer). Counted as one round trip, under
      // the claim's text, with the rows of both statements.
      if (first && typeof first === "object" && typeof first.submit === "function") {
        const done = first.callback;
        if (typeof done === "function") {
          first.callback = (err, res) => {
            const rows = Array.isArray(res) ? res.reduce((n, r) => n + (r?.rows?.length ?? 0), 0) : res?.rows?.length;
            stats.record(first.text, performance.now() - t0, rows);
            done(err, res);
          };
        }
        return orig(...args);
      }
      const text = typeof first === "string" ? first : first?.text;
      const last = args[args.length - 1];
      if (typeof last === "function") {
        args[args.length - 1] = (err, res) => {
          stats.record(text, performance.now() - t0, res?.rows?.length);
          last(err, res);
        };
        return orig(...args);
      }
      const p = orig(...args);
      if (p && typeof p.then === "function") {
        p.then(
          (res) => stats.record(text, performance.now() - t0, res?.rows?.length),
          () => stats.record(text, performance.now() - t0),
        );
      }
      return p;
    };
  });
  return pool;
}

// ---------------------------------------------------------------------------------------------
// Where the time goes: CPU of this Node process and of every local postgres process.

// On a shared machine the CPU of every postgres process would include other people's work, so
// only the backends serving this arm's database are counted: their command line names it
// ("postgres: user bench_consume_1a2b… 127.0.0.1(port) idle"). The pools are opened before the
// clock starts and stay open, so their backends live through the whole measured window.
const CLK_TCK = 100;
let benchDb = null;
// --nice: the bench's processes and the backends serving its database get this priority, so that
// other work on a shared machine disturbs the figures less.
let benchNice = null;
export function setBenchDatabase(name, nice = null) {
  benchDb = name;
  benchNice = nice;
}

/** CPU ticks (user + system) of each live postgres backend serving this arm's database. */
const classified = new Map(); // pid -> true (ours) | false
function ourBackends() {
  const out = new Map();
  if (!benchDb) return out;
  let entries;
  try {
    entries = fs.readdirSync("/proc");
  } catch {
    return out;
  }
  const needle = ` ${benchDb} `;
  for (const e of entries) {
    const c0 = e.charCodeAt(0);
    if (c0 < 48 || c0 > 57) continue;
    const known = classified.get(e);
    if (known === false) continue;
    try {
      const s = fs.readFileSync(`/proc/${e}/stat`, "latin1");
      const close = s.lastIndexOf(")");
      if (known === undefined) {
        const ours = s.slice(s.indexOf("(") + 1, close) === "postgres" && fs.readFileSync(`/proc/${e}/cmdline`, "latin1").includes(needle);
        classified.set(e, ours);
        if (!ours) continue;
        if (benchNice !== null) {
          try {
            os.setPriority(Number(e), benchNice);
          } catch {}
        }
      }
      const f = s.slice(close + 2).split(" ");
      // fields after ")": state(0) ppid(1) … utime(11) stime(12)
      out.set(e, +f[11] + +f[12]);
    } catch {
      classified.delete(e);
    }
  }
  return out;
}

/**
 * Samples the backends every 200 ms so that connections opened and closed inside the window (by
 * worker threads) are counted too: a backend first seen mid-window counts from zero.
 */
class PgCpuSampler {
  start() {
    this.base = ourBackends();
    this.last = new Map(this.base);
    this.timer = setInterval(() => this.sample(), 200);
    this.timer.unref?.();
  }
  sample() {
    for (const [pid, t] of ourBackends()) {
      if (!this.base.has(pid)) this.base.set(pid, 0);
      this.last.set(pid, t);
    }
  }
  stop() {
    clearInterval(this.timer);
    this.sample();
    if (!benchDb) return null;
    let ticks = 0;
    for (const [pid, t] of this.last) ticks += t - (this.base.get(pid) ?? 0);
    return (ticks * 1000) / CLK_TCK;
  }
}

export function nodeCpuMs() {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}

// --profile: the V8 CPU profile of this thread over the measured window only. Sessions on the
// same thread dispatch synchronously, so start/stop need no await.
let profiling = null;
export function enableProfiling(label) {
  profiling = label ? { label } : null;
}

function profilerStart() {
  if (!profiling || profiling.session) return false;
  const session = new inspector.Session();
  session.connect();
  session.post("Profiler.enable");
  session.post("Profiler.setSamplingInterval", { interval: 200 });
  session.post("Profiler.start");
  profiling.session = session;
  return true;
}

function profilerStop() {
  const session = profiling?.session;
  if (!session) return undefined;
  let profile;
  session.post("Profiler.stop", (err, res) => {
    if (!err) profile = res.profile;
  });
  session.disconnect();
  profiling.session = null;
  if (!profile) return undefined;
  const dir = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "results");
  let file;
  try {
    fs.mkdirSync(dir, { recursive: true });
    file = path.join(dir, `${profiling.label}.cpuprofile`);
    fs.writeFileSync(file, JSON.stringify(profile));
  } catch {
    file = undefined;
  }
  return { file, ...summarizeProfile(profile) };
}

/** Self time per function (and for idle and GC), largest first. */
export function summarizeProfile(profile, limit = 15) {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const selfUs = new Map();
  for (let i = 0; i < profile.samples.length; i++) {
    const id = profile.samples[i];
    selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
  }
  const byFn = new Map();
  let total = 0;
  for (const [id, us] of selfUs) {
    const cf = byId.get(id).callFrame;
    const file = cf.url ? cf.url.split("/").slice(-2).join("/") : "";
    const k = `${cf.functionName || "(anonymous)"}${file ? ` ${file}:${cf.lineNumber + 1}` : ""}`;
    byFn.set(k, (byFn.get(k) ?? 0) + us);
    total += us;
  }
  const idle = byFn.get("(idle)") ?? 0;
  const top = [...byFn.entries()]
    .filter(([k]) => k !== "(idle)")
    .sort((a, b) => b[1] - a[1])
    .slice(0, limit)
    .map(([fn, us]) => ({ fn, ms: Math.round(us / 1000), pctOfBusy: +((100 * us) / Math.max(1, total - idle)).toFixed(1) }));
  return { sampledMs: Math.round(total / 1000), idleMs: Math.round(idle / 1000), busyMs: Math.round((total - idle) / 1000), top };
}

export class CpuMeter {
  start({ profile = true } = {}) {
    this.profiled = profile && profilerStart();
    this.t0 = nowMs();
    this.node0 = nodeCpuMs();
    this.pg = new PgCpuSampler();
    this.pg.start();
    return this;
  }
  stop() {
    const wall = nowMs() - this.t0;
    const node = nodeCpuMs() - this.node0;
    const pgMs = this.pg.stop();
    const out = { wallMs: Math.round(wall), nodeCpuMs: Math.round(node), pgCpuMs: pgMs === null ? null : Math.round(pgMs) };
    if (this.profiled) out.nodeProfile = profilerStop();
    return out;
  }
}

// ---------------------------------------------------------------------------------------------
// Rows written and transactions, from pg_stat_database of the arm's own (fresh) database. The
// statistics are flushed when backends exit, so read them after the measured pool was ended.

/**
 * Reads statistics through a fresh connection until `settled` says a reading may be used (given
 * the one before it), at most 2 s: exiting backends flush their pending counters a moment late.
 */
export async function settledStats(url, read, settled) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    let last = null;
    for (let i = 0; i < 20; i++) {
      await c.query("SELECT pg_stat_clear_snapshot()");
      const r = await read(c);
      if (r !== null && last !== null && settled(r, last)) return r;
      last = r;
      await sleep(100);
    }
    return last;
  } finally {
    await c.end();
  }
}

export function dbWriteStats(adminUrl, dbName) {
  return settledStats(adminUrl, async (c) => {
    const { rows } = await c.query(
      `SELECT tup_inserted::float8 AS ins, tup_updated::float8 AS upd, tup_deleted::float8 AS del,
              xact_commit::float8 AS commits, xact_rollback::float8 AS rollbacks,
              (SELECT count(*)::int FROM pg_stat_activity WHERE datname = $1) AS backends
       FROM pg_stat_database WHERE datname = $1`,
      [dbName],
    );
    return rows[0] ?? null;
  }, (r, last) => r.backends === 0 && last.ins === r.ins && last.upd === r.upd && last.del === r.del && last.commits === r.commits);
}

/** Rows written, transactions and WAL for the measured window of this arm's database. */
export class WriteMeter {
  constructor(ctx) {
    this.ctx = ctx;
  }
  async start() {
    if (!this.ctx.adminUrl) return this; // inside a worker thread: the arm measures writes as a whole
    this.s0 = await dbWriteStats(this.ctx.adminUrl, this.ctx.dbName);
    this.w0 = await walBytes(this.ctx.adminUrl);
    return this;
  }
  async stop(n) {
    if (!this.ctx.adminUrl) return {};
    const s1 = await dbWriteStats(this.ctx.adminUrl, this.ctx.dbName);
    const w1 = await walBytes(this.ctx.adminUrl);
    if (!this.s0 || !s1) return {};
    const rows = s1.ins - this.s0.ins + (s1.upd - this.s0.upd) + (s1.del - this.s0.del);
    return {
      rowsWrittenPerMsg: +(rows / n).toFixed(4),
      rowsInserted: s1.ins - this.s0.ins,
      rowsUpdated: s1.upd - this.s0.upd,
      rowsDeleted: s1.del - this.s0.del,
      commitsPerMsg: +((s1.commits - this.s0.commits) / n).toFixed(4),
      walBytesPerMsg: Math.round((w1 - this.w0) / n),
    };
  }
}

export async function walBytes(adminUrl) {
  const c = new pg.Client({ connectionString: adminUrl });
  await c.connect();
  try {
    const { rows } = await c.query("SELECT pg_current_wal_lsn() AS lsn");
    return lsnToNumber(rows[0].lsn);
  } finally {
    await c.end();
  }
}
function lsnToNumber(lsn) {
  const [hi, lo] = lsn.split("/");
  return parseInt(hi, 16) * 2 ** 32 + parseInt(lo, 16);
}

// ---------------------------------------------------------------------------------------------
// Statistics

export function median(xs) {
  const s = xs.filter((x) => typeof x === "number" && Number.isFinite(x)).sort((a, b) => a - b);
  if (s.length === 0) return null;
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

export function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

/** Runs `fn(i)` for i in 0..count-1 with at most `width` running at once. */
export async function parallel(count, width, fn) {
  let next = 0;
  const lanes = [];
  for (let w = 0; w < Math.min(width, count); w++) {
    lanes.push(
      (async () => {
        for (;;) {
          const i = next++;
          if (i >= count) return;
          await fn(i);
        }
      })(),
    );
  }
  await Promise.all(lanes);
}

/**
 * The same preparation before every arm's timed phase: fresh planner statistics for every table of
 * the arm's database (ANALYZE) and no checkpoint debt (CHECKPOINT), so that no arm times an
 * autovacuum-less table with default estimates or the writing-out of its own setup.
 */
export async function beforeTimed(url) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query("ANALYZE");
    await c.query("CHECKPOINT");
  } finally {
    await c.end();
  }
}

export function rate(n, ms) {
  return ms > 0 ? (n * 1000) / ms : null;
}
