// `sqlstreams dev` (what `npm start` runs): the deployment of functions/groups.ts, locally.
//
//   1. load the bundles of `npm run build` (.build/functions: groups, handlers, maintain, migrate)
//   2. DATABASE_URL, or an embedded Postgres kept in .sqlstreams/dev-pg
//   3. migrate and register every stream and group (the migrate function, as on deploy)
//   4. produce a demo workload (and start the stub services the example handlers call)
//   5. the local stand-in for EventBridge: invoke each group's handler with { stream, group } and
//      a fake Lambda context on its schedule (compressed: --tick / --speed), and the maintain
//      function on its own; a live progress view
//   6. Ctrl-C (or --once converging): stop scheduling, let running invocations finish, stop the
//      embedded Postgres, exit 0
import { resolve } from "node:path";
import { type CycleReport, type Progress, mergeReports } from "@sqlstreams/core";
import type { LocalContext } from "@sqlstreams/aws";
import type { Values } from "../commands.js";
import type { Ctx } from "../context.js";
import { describeError, usageError } from "../errors.js";
import { age, bar, clip, maskUrl, table } from "../format.js";
import { type Schedule, nextFire, parseSchedule } from "../schedule.js";
import { type DemoServices, demoBatch, demoExpectations, startDemoServices } from "./demo.js";
import { type EmbeddedServer, startEmbedded } from "./embedded.js";
import { type Deployment, type LoadedGroup, loadDeployment } from "./functions.js";
import { LogCapture } from "./logs.js";
import { setTimeout as sleep } from "node:timers/promises";

interface DevOptions {
  once: boolean;
  timeoutMs: number;
  tickMs: number | undefined;
  speed: number | undefined;
  budgetMs: number | undefined;
  messages: number;
  demo: boolean;
  build: string;
  dataDir: string;
  port: number | undefined;
  logFile: string;
}

const REFRESH_MS = 500;
const PLAIN_EVERY_MS = 2_000;
const BATCH = 20;
const BATCH_PAUSE_MS = 100;
/** With --tick, maintain runs every this many ticks (rate(5 minutes) against rate(1 minute)). */
const MAINTAIN_TICKS = 5;

function num(v: Values, name: string, min: number, max: number, integer = true): number | undefined {
  const x = v[name];
  if (typeof x !== "string") return undefined;
  const n = Number(x);
  if (x.trim() === "" || !Number.isFinite(n) || (integer && !Number.isInteger(n)) || n < min || n > max) {
    throw usageError(`--${name} must be ${integer ? "an integer" : "a number"} between ${min} and ${max}, got ${JSON.stringify(x)}`, "dev");
  }
  return n;
}

function options(v: Values): DevOptions {
  const tickMs = num(v, "tick", 100, 3_600_000);
  const speed = num(v, "speed", 0.001, 1_000_000, false);
  if (tickMs !== undefined && speed !== undefined) throw usageError("pass --tick or --speed, not both", "dev");
  return {
    once: v.once === true,
    timeoutMs: (num(v, "timeout", 1, 86_400) ?? 120) * 1_000,
    tickMs: speed === undefined ? (tickMs ?? 2_000) : undefined,
    speed,
    budgetMs: num(v, "budget", 1_000, 900_000),
    messages: num(v, "messages", 0, 100_000) ?? 300,
    demo: v["no-demo"] !== true,
    build: typeof v.build === "string" ? v.build : ".build",
    dataDir: typeof v["data-dir"] === "string" ? v["data-dir"] : ".sqlstreams/dev-pg",
    port: num(v, "port", 1, 65_535),
    logFile: typeof v["log-file"] === "string" ? v["log-file"] : ".sqlstreams/dev.log",
  };
}

/** One scheduled function: a group's poll handler, or maintenance. */
interface Job {
  name: string;
  kind: "group" | "maintain";
  group?: LoadedGroup;
  schedule: Schedule;
  /** Real ms between fires in --tick mode. */
  tickMs?: number;
  parallelism: number;
  budgetMs: number;
  nextAt: number | null;
  running: number;
  invocations: number;
  finished: number;
  skipped: number;
  errors: number;
  lastError?: string;
  report?: CycleReport;
  progress?: Progress;
  /** When the read behind `progress` started (a read that began before the last produce proves nothing). */
  progressAt?: number;
  startCommitted?: bigint;
}

interface Snapshot {
  elapsedMs: number;
  groups: GroupRow[];
  maintain: { runs: number; running: number; errors: number; lastError?: string; nextInMs: number | null };
}

interface GroupRow {
  stream: string;
  group: string;
  mode: string;
  schedule: string;
  produced: number;
  head: string;
  committed: string;
  lag: string;
  handled: string;
  succeeded: number;
  failed: number;
  ready: number;
  deferred: number;
  inflight: number;
  dead: number;
  paused: boolean;
  invocations: number;
  running: number;
  skipped: number;
  parallelism: number;
  errors: number;
  lastError?: string;
  nextInMs: number | null;
}


export async function dev(ctx: Ctx, v: Values): Promise<number> {
  const o = options(v);
  const io = ctx.io;
  const json = ctx.json;
  const live = io.isTTY && !json && !io.env.CI;
  const started = Date.now();
  const secrets: (string | undefined)[] = [];
  const emit = (event: string, data: Record<string, unknown> = {}) => {
    if (json) io.out(JSON.stringify({ event, elapsedMs: Date.now() - started, ...data }) + "\n");
  };
  const events: string[] = [];
  /** A line for a person: printed at once before/without the live view, kept for the view otherwise. */
  const say = (line: string) => {
    if (json) return;
    if (live && viewStarted) {
      events.push(line);
      if (events.length > 4) events.shift();
    } else {
      io.out(line + "\n");
    }
  };
  let viewStarted = false;

  // 1. The deployment, before anything starts: a missing build or a bad declaration fails fast.
  const dep: Deployment = await loadDeployment(o.build, io.cwd);
  const jobs = makeJobs(dep, o, started);
  const { localContext } = await import("@sqlstreams/aws");

  const logs = new LogCapture(resolve(io.cwd, o.logFile), () => secrets, ctx.common.verbose && !live && !json ? (l) => io.err(l.endsWith("\n") ? l : l + "\n") : undefined);
  logs.install();
  let server: EmbeddedServer | undefined;
  let services: DemoServices | undefined;
  const onExit = () => server?.signal();
  process.on("exit", onExit);
  const onRejection = (e: unknown) => logs.write(`unhandled rejection: ${describeError(e, secrets).message}`, "error");
  process.on("unhandledRejection", onRejection);

  let stopRequested: ((why: string) => void) | undefined;
  let stopReason: string | undefined;
  let forced = false;
  let lastSignalAt = 0;
  let signals = 0;
  const onSignal = (sig: NodeJS.Signals) => {
    const now = Date.now();
    // npm forwards the terminal's SIGINT, so one Ctrl-C can arrive twice: count it once.
    if (now - lastSignalAt < 1_000) return;
    lastSignalAt = now;
    signals++;
    if (signals === 1) {
      stopRequested?.(sig === "SIGINT" ? "Ctrl-C" : sig);
      if (!stopRequested) stopReason = sig;
    } else if (signals === 2) {
      forced = true;
      say("stopping now: running invocations are abandoned (their leases expire; nothing is lost)");
    } else {
      server?.signal();
      process.exit(130);
    }
  };
  for (const s of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.on(s, onSignal);

  try {
    // 2. The database.
    let url = ctx.common.databaseUrl;
    if (!url) {
      say(`starting the embedded Postgres in ${o.dataDir} …`);
      server = await startEmbedded({ dataDir: resolve(io.cwd, o.dataDir), port: o.port, log: (l) => logs.write(`[postgres] ${l}`) });
      url = server.url;
      ctx.common.databaseUrl = url;
    }
    secrets.push(passwordOf(url));
    // The bundled functions read their credentials like on Lambda: DATABASE_URL (and SQLSTREAMS_SCHEMA).
    process.env.DATABASE_URL = url;
    process.env.SQLSTREAMS_SCHEMA = ctx.common.schema;
    const where = server
      ? `embedded Postgres ${maskUrl(url)} (${server.reused ? "reusing" : "initialised"} ${o.dataDir}; Postgres log ${rel(io.cwd, server.logFile)})`
      : maskUrl(url);
    say(`database: ${where}, schema ${ctx.common.schema}`);
    emit("dev.database", { url: maskUrl(url), embedded: server !== undefined, reused: server?.reused ?? false, schema: ctx.common.schema });

    // 3. Migrate and register, as the deploy does.
    const client = ctx.client();
    if (dep.migrate) {
      await dep.migrate({ source: "sqlstreams-dev" }, localContext(300_000, { functionName: "sqlstreams-dev-migrate" }));
    } else {
      await client.migrate();
      const names = [...new Set([...dep.groups.map((g) => g.declaration.stream), ...Object.keys(dep.streams)])];
      for (const n of names) await client.stream(n).register(dep.streams[n] ?? {});
      for (const g of dep.groups) await client.stream(g.declaration.stream).consumer(g.declaration.group).register(g.declaration.config ?? {});
    }
    const streamNames = [...new Set(dep.groups.map((g) => g.declaration.stream))];
    say(`migrated; registered ${streamNames.length} stream(s) and ${dep.groups.length} group(s) of ${rel(io.cwd, dep.buildDir)}/functions/groups.mjs${dep.migrate ? " (through the migrate function)" : ""}`);
    emit("dev.migrated", { streams: streamNames, groups: dep.groups.map((g) => `${g.declaration.stream}/${g.declaration.group}`) });
    for (const j of jobs) {
      if (!j.group) continue;
      j.progress = await client.stream(j.group.declaration.stream).consumer(j.group.declaration.group).progress();
      j.startCommitted = BigInt(j.progress.committed);
    }

    // 4. Demo services and workload.
    const produced = new Map<string, number>(streamNames.map((s) => [s, 0]));
    let producing = false;
    let producedAt = Date.now();
    let produceError: string | undefined;
    // The stub services stand in for what the example handlers call (functions/handlers/*).
    if (o.demo && streamNames.some((n) => n === "orders.placed" || n === "ledger.adjustments")) {
      services = await startDemoServices(process.env);
      if (services.env.length > 0) say(`demo services (fail once per "fail-once" message) at ${services.url}: ${services.env.join(", ")}`);
    }
    if (o.demo) {
      for (const st of streamNames) {
        const x = demoExpectations(st, o.messages);
        say(`demo: ${o.messages} messages to ${st}: ${x.failOnce} fail once and are retried, ${x.permanent} are invalid and end dead (Permanent)`);
      }
    }
    describeSchedule(jobs, o, say);

    let stopping = false;
    const producer = (async () => {
      if (!o.demo || o.messages === 0) return;
      producing = true;
      try {
        for (let from = 1; from <= o.messages && !stopping; from += BATCH) {
          const n = Math.min(BATCH, o.messages - from + 1);
          for (const s of streamNames) {
            await client.stream(s).produceBatch(demoBatch(s, from, n, o.messages));
            produced.set(s, (produced.get(s) ?? 0) + n);
          }
          await sleep(BATCH_PAUSE_MS);
        }
      } catch (e) {
        produceError = describeError(e, secrets).message;
        say(`demo producer failed: ${produceError}`);
      } finally {
        producing = false;
        producedAt = Date.now();
      }
    })();

    // 5. The scheduler.
    const inflight = new Set<Promise<void>>();
    const invoke = (job: Job) => {
      job.running++;
      job.invocations++;
      const context: LocalContext = localContext(job.budgetMs, {
        functionName: `sqlstreams-dev-${job.name.replace(/[^A-Za-z0-9-]+/g, "-")}`,
        memoryMB: job.group?.declaration.memory ?? 256,
      });
      const p = (async () => {
        try {
          if (job.kind === "group") {
            const d = job.group!.declaration;
            const r = await job.group!.handler({ stream: d.stream, group: d.group }, context);
            job.report = job.report ? mergeReports(job.report, r) : r;
          } else if (dep.maintain) {
            await dep.maintain({ source: "sqlstreams-dev" }, context);
          } else {
            await client.maintain({ deadline: Date.now() + job.budgetMs - 3_000 });
          }
        } catch (e) {
          job.errors++;
          job.lastError = describeError(e, secrets).message;
          logs.write(JSON.stringify({ level: "error", event: "sqlstreams.dev.invocation", function: job.name, error: job.lastError }), "error");
        } finally {
          job.running--;
          job.finished++;
        }
      })();
      inflight.add(p);
      void p.finally(() => inflight.delete(p));
    };
    const fire = (job: Job) => {
      if (job.running >= job.parallelism) {
        job.skipped++;
        return;
      }
      for (let i = job.running; i < job.parallelism; i++) invoke(job);
    };
    const schedule = (job: Job, now: number) => {
      if (job.tickMs !== undefined) {
        job.nextAt = Math.max((job.nextAt ?? now) + job.tickMs, now + 1);
      } else {
        const speed = o.speed ?? 1;
        const virtualNow = started + (now - started) * speed;
        const next = nextFire(job.schedule, virtualNow, started);
        job.nextAt = next === null ? null : started + (next - started) / speed;
      }
    };
    const tick = () => {
      if (stopping) return;
      const now = Date.now();
      for (const j of jobs) {
        if (j.nextAt !== null && now >= j.nextAt) {
          fire(j);
          schedule(j, now);
        }
      }
    };
    const timer = setInterval(tick, 50);
    tick();

    // The view, and the stop conditions.
    let lastPlain = 0;
    let lastPlainText = "";
    let drawnLines = 0;
    const snapshot = (): Snapshot => {
      const now = Date.now();
      const maintain = jobs.find((j) => j.kind === "maintain")!;
      return {
        elapsedMs: now - started,
        groups: jobs.filter((j) => j.kind === "group").map((j) => row(j, produced, now)),
        maintain: { runs: maintain.finished, running: maintain.running, errors: maintain.errors, lastError: maintain.lastError, nextInMs: maintain.nextAt === null ? null : Math.max(0, maintain.nextAt - now) },
      };
    };
    const draw = (final = false) => {
      const snap = snapshot();
      if (json) {
        const text = JSON.stringify(snap.groups.map((g) => [g.head, g.committed, g.ready, g.deferred, g.inflight, g.dead, g.invocations]));
        if (final || (Date.now() - lastPlain >= PLAIN_EVERY_MS && text !== lastPlainText)) {
          lastPlain = Date.now();
          lastPlainText = text;
          if (!final) emit("dev.progress", { groups: snap.groups, maintain: snap.maintain });
        }
        return;
      }
      if (live) {
        const width = Math.max(40, (process.stdout.columns ?? io.columns ?? 120) - 1);
        const lines = render(snap, o, logs, events, stopReason, width);
        let out = drawnLines > 0 ? `\x1b[${drawnLines}F\x1b[0J` : "\x1b[?25l";
        out += lines.join("\n") + "\n";
        if (final) out += "\x1b[?25h";
        io.out(out);
        drawnLines = lines.length;
        return;
      }
      const text = snap.groups.map((g) => plainLine(g)).join("\n");
      if (text !== lastPlainText && (final || Date.now() - lastPlain >= PLAIN_EVERY_MS)) {
        lastPlain = Date.now();
        lastPlainText = text;
        const t = `[${(snap.elapsedMs / 1_000).toFixed(1).padStart(6)}s]`;
        io.out(snap.groups.map((g) => `${t} ${plainLine(g)}`).join("\n") + "\n");
      }
    };
    viewStarted = true;

    let refreshing = false;
    const refresh = async () => {
      if (refreshing) return;
      refreshing = true;
      try {
        for (const j of jobs) {
          if (!j.group) continue;
          const at = Date.now();
          try {
            j.progress = await client.stream(j.group.declaration.stream).consumer(j.group.declaration.group).progress();
            j.progressAt = at;
          } catch (e) {
            j.progressAt = undefined;
            j.lastError = describeError(e, secrets).message;
          }
        }
      } finally {
        refreshing = false;
      }
    };
    const converged = () =>
      !producing &&
      produceError === undefined &&
      jobs.every((j) => j.kind !== "group" || (j.invocations > 0 && j.progress !== undefined && j.progressAt !== undefined && j.progressAt > producedAt && j.progress.lag === "0" &&
        j.progress.exceptions.ready + j.progress.exceptions.deferred + j.progress.exceptions.inflight === 0));

    const outcome = await new Promise<{ code: number; why: string }>((resolveStop) => {
      let done = false;
      const finish = (code: number, why: string) => {
        if (done) return;
        done = true;
        clearInterval(view);
        resolveStop({ code, why });
      };
      stopRequested = (why) => finish(0, `stopped (${why})`);
      if (stopReason) finish(0, `stopped (${stopReason})`);
      void server?.exited.then(() => finish(1, "the embedded Postgres exited unexpectedly"));
      const view = setInterval(() => {
        void (async () => {
          await refresh();
          if (done) return;
          draw();
          if (o.once && produceError !== undefined) finish(1, `the demo producer failed: ${produceError}`);
          else if (o.once && converged()) finish(0, "converged");
          else if (o.once && Date.now() - started > o.timeoutMs) finish(1, `did not converge within ${o.timeoutMs / 1_000} s`);
        })();
      }, REFRESH_MS);
    });
    const exitCode = outcome.code;
    stopReason = outcome.why;

    // 6. Shutdown: stop scheduling and producing, let running invocations finish. An invocation
    // whose group holds nothing (no open range lease, no inflight row: a continuous-mode poller
    // idling until its budget ends) is not waited for.
    stopping = true;
    clearInterval(timer);
    await producer;
    let lastWaitNote = Date.now();
    for (;;) {
      const busy = jobs.filter((j) => j.running > 0);
      if (busy.length === 0 || forced) break;
      await refresh();
      const holding = busy.filter((j) => j.kind === "maintain" || !j.progress || j.progress.openLeases > 0 || j.progress.exceptions.inflight > 0);
      if (holding.length === 0) break;
      if (Date.now() - lastWaitNote >= 3_000) {
        lastWaitNote = Date.now();
        say(`waiting for ${holding.map((j) => j.name).join(", ")} to finish (Ctrl-C again to stop now)`);
      }
      draw();
      await Promise.race([Promise.race([...inflight]), sleep(REFRESH_MS)]);
    }
    await refresh();
    draw(true);
    const snap = snapshot();
    const abandoned = jobs.reduce((n, j) => n + j.running, 0);
    await services?.close().catch(() => {});
    services = undefined;
    await ctx.close();
    if (server) {
      await server.stop();
      server = undefined;
    }
    await logs.close();
    summary(io, json, snap, exitCode, stopReason, o, rel(io.cwd, resolve(io.cwd, o.logFile)), abandoned, ctx.common.databaseUrl && !secretsEmbedded(where) ? maskUrl(ctx.common.databaseUrl) : undefined);
    return exitCode;
  } finally {
    for (const s of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.removeListener(s, onSignal);
    process.removeListener("unhandledRejection", onRejection);
    await services?.close().catch(() => {});
    await ctx.close();
    if (server) await server.stop().catch(() => {});
    process.removeListener("exit", onExit);
    await logs.close();
    if (live) io.out("\x1b[?25h");
  }
}

function secretsEmbedded(where: string): boolean {
  return where.startsWith("embedded");
}

function rel(cwd: string, p: string): string {
  return p.startsWith(cwd + "/") ? p.slice(cwd.length + 1) : p;
}

function passwordOf(url: string): string | undefined {
  try {
    const p = new URL(url).password;
    return p ? decodeURIComponent(p) : undefined;
  } catch {
    return undefined;
  }
}

function makeJobs(dep: Deployment, o: DevOptions, now: number): Job[] {
  const jobs: Job[] = [];
  for (const g of dep.groups) {
    const d = g.declaration;
    let schedule: Schedule;
    try {
      schedule = parseSchedule(d.schedule);
    } catch (e) {
      throw Object.assign(e as Error, { message: `${d.stream}/${d.group}: ${(e as Error).message}` });
    }
    jobs.push(job(`${d.stream}/${d.group}`, "group", schedule, o, now, d.parallelism ?? 1, o.budgetMs ?? d.timeout ?? 60_000, g));
  }
  const ms = parseSchedule(dep.maintainSchedule);
  jobs.push(job("maintain", "maintain", ms, o, now, 1, o.budgetMs ?? 120_000));
  if (o.tickMs !== undefined) jobs[jobs.length - 1].tickMs = o.tickMs * MAINTAIN_TICKS;
  return jobs;
}

function job(name: string, kind: Job["kind"], schedule: Schedule, o: DevOptions, now: number, parallelism: number, budgetMs: number, group?: LoadedGroup): Job {
  const j: Job = {
    name, kind, group, schedule, tickMs: o.tickMs, parallelism, budgetMs, nextAt: now,
    running: 0, invocations: 0, finished: 0, skipped: 0, errors: 0,
  };
  // A cron schedule on the (sped-up) clock fires at its next time; rates and ticks fire at once.
  if (o.tickMs === undefined && schedule.kind === "cron") {
    const next = nextFire(schedule, now, now);
    j.nextAt = next === null ? null : now + (next - now) / (o.speed ?? 1);
  }
  return j;
}

function describeSchedule(jobs: Job[], o: DevOptions, say: (l: string) => void): void {
  if (o.tickMs !== undefined) {
    say(`schedules compressed: every group is invoked every ${o.tickMs} ms, maintain every ${o.tickMs * MAINTAIN_TICKS} ms (--speed N follows the declared schedules N× faster)`);
  } else {
    say(`schedules: as declared, on a clock ${o.speed}× faster: ${jobs.map((j) => `${j.name} ${j.schedule.expression}`).join(", ")}`);
  }
  say(`invocation budget: ${o.budgetMs !== undefined ? `${o.budgetMs} ms (--budget)` : "each group's declared timeout"}; at most \`parallelism\` invocations of a group at once`);
}


function row(j: Job, produced: Map<string, number>, now: number): GroupRow {
  const d = j.group!.declaration;
  const p = j.progress;
  const handled = p && j.startCommitted !== undefined ? BigInt(p.committed) - j.startCommitted : 0n;
  return {
    stream: d.stream,
    group: d.group,
    mode: d.mode ?? "drain",
    schedule: d.schedule,
    produced: produced.get(d.stream) ?? 0,
    head: p?.head ?? "-",
    committed: p?.committed ?? "-",
    lag: p?.lag ?? "-",
    handled: (handled < 0n ? 0n : handled).toString(),
    succeeded: j.report?.succeeded ?? 0,
    failed: j.report?.failed ?? 0,
    ready: p?.exceptions.ready ?? 0,
    deferred: p?.exceptions.deferred ?? 0,
    inflight: p?.exceptions.inflight ?? 0,
    dead: p?.exceptions.dead ?? 0,
    paused: p?.paused ?? false,
    invocations: j.finished,
    running: j.running,
    skipped: j.skipped,
    parallelism: j.parallelism,
    errors: j.errors,
    lastError: j.lastError,
    nextInMs: j.nextAt === null ? null : Math.max(0, j.nextAt - now),
  };
}

function fraction(g: GroupRow): number {
  const head = Number(g.head);
  const committed = Number(g.committed);
  if (!Number.isFinite(head) || head === 0) return 1;
  return committed / head;
}

function render(s: Snapshot, o: DevOptions, logs: LogCapture, events: string[], stopReason: string | undefined, width: number): string[] {
  const lines: string[] = [];
  const t = (s.elapsedMs / 1_000).toFixed(1);
  lines.push(`sqlstreams dev — ${t}s${o.once ? ` (--once, timeout ${o.timeoutMs / 1_000}s)` : ""}${stopReason ? ` — stopping: ${stopReason}` : ""}`);
  lines.push("");
  const tbl = table(
    ["GROUP", "MODE", "PRODUCED", "HEAD", "LAG", "PROGRESS", "HANDLED", "READY", "DEFERRED", "INFLIGHT", "DEAD", "RUNS", "NEXT"],
    s.groups.map((g) => [
      `${g.stream}/${g.group}${g.paused ? " (paused)" : ""}`, g.mode, String(g.produced), g.head, g.lag, bar(fraction(g)), g.handled,
      String(g.ready), String(g.deferred), String(g.inflight), String(g.dead),
      `${g.invocations}${g.running ? `+${g.running}` : ""}${g.errors ? ` (${g.errors} err)` : ""}`,
      stopReason || g.nextInMs === null ? "-" : g.running >= g.parallelism ? "running" : `in ${age(g.nextInMs)}`,
    ]),
  );
  lines.push(...tbl.split("\n"));
  lines.push("");
  lines.push(`maintain: ${s.maintain.runs} run(s)${s.maintain.running ? ", running" : ""}${s.maintain.errors ? `, ${s.maintain.errors} error(s): ${s.maintain.lastError}` : ""}${s.maintain.nextInMs !== null ? `, next in ${age(s.maintain.nextInMs)}` : ""}`);
  for (const g of s.groups) if (g.lastError) lines.push(`last error ${g.stream}/${g.group}: ${g.lastError}`);
  const deadWithLag0 = s.groups.filter((g) => g.lag === "0" && g.dead > 0);
  if (deadWithLag0.length > 0) lines.push("note: lag 0 with dead rows is not success — the dead messages need a fix and `sqlstreams redrive`");
  for (const e of events) lines.push(e);
  lines.push("");
  lines.push(`log (${logs.lines} lines, ${rel(process.cwd(), logs.file)}):`);
  for (const l of logs.recent.slice(-3)) lines.push(`  ${l}`);
  lines.push(stopReason ? "" : "Ctrl-C to stop");
  return lines.map((l) => clip(l, width));
}

function plainLine(g: GroupRow): string {
  return (
    `${g.stream}/${g.group} produced=${g.produced} head=${g.head} committed=${g.committed} lag=${g.lag} handled=${g.handled} ` +
    `ready=${g.ready} deferred=${g.deferred} inflight=${g.inflight} dead=${g.dead} runs=${g.invocations}${g.running ? `+${g.running}` : ""}` +
    (g.errors ? ` errors=${g.errors}` : "") + (g.paused ? " paused" : "")
  );
}

function summary(
  io: Ctx["io"],
  json: boolean,
  s: Snapshot,
  code: number,
  why: string | undefined,
  o: DevOptions,
  logFile: string,
  abandoned: number,
  url: string | undefined,
): void {
  const converged = why === "converged";
  if (json) {
    io.out(JSON.stringify({ event: "dev.summary", exitCode: code, converged, reason: why, elapsedMs: s.elapsedMs, groups: s.groups, maintain: s.maintain, abandonedInvocations: abandoned, logFile }) + "\n");
    return;
  }
  const lines: string[] = [];
  lines.push("");
  lines.push(`sqlstreams dev: ${why ?? "stopped"} after ${(s.elapsedMs / 1_000).toFixed(1)} s`);
  lines.push(
    table(
      ["GROUP", "PRODUCED", "HANDLED", "SUCCEEDED", "RETRIED", "LAG", "READY", "DEFERRED", "INFLIGHT", "DEAD", "RUNS", "ERRORS"],
      s.groups.map((g) => [
        `${g.stream}/${g.group}`, String(g.produced), g.handled,
        g.invocations === 0 ? "-" : String(g.succeeded), g.invocations === 0 ? "-" : String(g.failed), g.lag,
        String(g.ready), String(g.deferred), String(g.inflight), String(g.dead), String(g.invocations), String(g.errors),
      ]),
    ),
  );
  lines.push("HANDLED = ids the group's cursor passed during this run; SUCCEEDED/RETRIED = from the reports of finished invocations (- : none finished yet, e.g. continuous mode)");
  if (o.demo && s.groups.some((g) => g.dead > 0)) {
    lines.push("dead rows are expected: the demo sends invalid payloads ({ demo: { permanent: true } }) that the handlers reject with Permanent().");
    if (url) lines.push(`inspect them: sqlstreams failures --stream ${s.groups[0].stream} --group ${s.groups[0].group}   (DATABASE_URL=${url})`);
  }
  if (abandoned > 0) lines.push(`${abandoned} idle invocation(s) (continuous mode) were not waited for: they held no leases`);
  lines.push(`handler logs: ${logFile}`);
  io.out(lines.join("\n") + "\n");
}
