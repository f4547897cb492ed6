// `sqlstreams dev` (what `npm start` runs): the deployment of functions/groups.ts, locally.
//
//   1. load the bundles of `npm run build` (.build/functions: groups, handlers, maintain, migrate)
//   2. DATABASE_URL, or an embedded Postgres kept in .sqlstreams/dev-pg
//   3. migrate and register every stream and group (the migrate function, as on deploy)
//   4. produce a demo workload (and start the stub services the example handlers call)
//   5. the local stand-in for EventBridge: invoke each group's handler with { stream, group } and
//      a fake Lambda context on its schedule (compressed: --tick / --speed), and the maintain
//      function on its own; a live progress view
//      and, on a wake (a producer with waker "notify" / SQLSTREAMS_WAKE=notify: NOTIFY
//      sqlstreams_wake), the group's handler at once (docs/producing.md#wake-on-produce)
//   6. Ctrl-C (or --once converging): stop scheduling, let running invocations finish, stop the
//      embedded Postgres, exit 0
import { resolve } from "node:path";
import pg from "pg";
import { type CycleReport, type Progress, WAKE_CHANNEL, mergeReports } from "@sqlstreams/core";
import { type LocalContext, GROUP_DEFAULTS, resolvedDeclaration } from "@sqlstreams/aws";
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
  dashboard: boolean;
  dashboardPort: number | undefined;
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
    dashboard: v["no-dashboard"] !== true,
    dashboardPort: num(v, "dashboard-port", 0, 65_535),
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
  /** Wakes received (NOTIFY) and whether one came while every invocation slot was busy. */
  wakes: number;
  wakePending: boolean;
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
  wakes: number;
  parallelism: number;
  errors: number;
  lastError?: string;
  nextInMs: number | null;
}


export async function dev(ctx: Ctx, v: Values): Promise<number> {
  const run = new DevRun(ctx, options(v));
  // The deployment, before anything starts: a missing build or a bad declaration fails fast.
  await run.load();
  run.install();
  try {
    return await run.run();
  } finally {
    await run.cleanup();
  }
}

/**
 * One `sqlstreams dev` session: the steps of the header comment as methods over one shared state
 * (the output, the database, the demo producer, the scheduler of jobs, the view, the stop).
 */
class DevRun {
  private readonly io: Ctx["io"];
  private readonly json: boolean;
  private readonly live: boolean;
  private readonly started = Date.now();
  private readonly secrets: (string | undefined)[] = [];
  /** The last lines for a person while the live view owns the screen. */
  private readonly events: string[] = [];
  private viewStarted = false;
  private dep!: Deployment;
  private jobs: Job[] = [];
  private localContext!: (typeof import("@sqlstreams/aws"))["localContext"];
  private logs: LogCapture | undefined;
  private server: EmbeddedServer | undefined;
  private services: DemoServices | undefined;
  private dashboard: import("node:http").Server | undefined;
  private where = "";
  // Stopping: the first signal asks, the second abandons running invocations, the third exits.
  private stopRequested: ((why: string) => void) | undefined;
  private stopReason: string | undefined;
  private forced = false;
  private lastSignalAt = 0;
  private signals = 0;
  private stopping = false;
  // The demo producer.
  private streamNames: string[] = [];
  private readonly produced = new Map<string, number>();
  private producing = false;
  private producedAt = Date.now();
  private produceError: string | undefined;
  private producer: Promise<void> = Promise.resolve();
  // The scheduler and the view.
  private readonly inflight = new Set<Promise<void>>();
  private timer: NodeJS.Timeout | undefined;
  private listener: pg.Client | undefined;
  private lastPlain = 0;
  private lastPlainText = "";
  private drawnLines = 0;
  private refreshing = false;

  constructor(
    private readonly ctx: Ctx,
    private readonly o: DevOptions,
  ) {
    this.io = ctx.io;
    this.json = ctx.json;
    this.live = this.io.isTTY && !this.json && !this.io.env.CI;
  }

  private emit(event: string, data: Record<string, unknown> = {}): void {
    if (this.json) this.io.out(JSON.stringify({ event, elapsedMs: Date.now() - this.started, ...data }) + "\n");
  }

  /** A line for a person: printed at once before/without the live view, kept for the view otherwise. */
  private readonly say = (line: string): void => {
    if (this.json) return;
    if (this.live && this.viewStarted) {
      this.events.push(line);
      if (this.events.length > 4) this.events.shift();
    } else {
      this.io.out(line + "\n");
    }
  };

  async load(): Promise<void> {
    this.dep = await loadDeployment(this.o.build, this.io.cwd);
    this.jobs = makeJobs(this.dep, this.o, this.started);
    this.localContext = (await import("@sqlstreams/aws")).localContext;
  }

  install(): void {
    const { ctx, io, o } = this;
    const echo = ctx.common.verbose && !this.live && !this.json ? (l: string) => io.err(l.endsWith("\n") ? l : l + "\n") : undefined;
    this.logs = new LogCapture(resolve(io.cwd, o.logFile), () => this.secrets, echo);
    this.logs.install();
    process.on("exit", this.onExit);
    process.on("unhandledRejection", this.onRejection);
    for (const s of SIGNALS) process.on(s, this.onSignal);
  }

  private readonly onExit = () => this.server?.signal();
  private readonly onRejection = (e: unknown) => this.logs?.write(`unhandled rejection: ${describeError(e, this.secrets).message}`, "error");
  private readonly onSignal = (sig: NodeJS.Signals) => {
    const now = Date.now();
    // npm forwards the terminal's SIGINT, so one Ctrl-C can arrive twice: count it once.
    if (now - this.lastSignalAt < 1_000) return;
    this.lastSignalAt = now;
    this.signals++;
    if (this.signals === 1) {
      this.stopRequested?.(sig === "SIGINT" ? "Ctrl-C" : sig);
      if (!this.stopRequested) this.stopReason = sig;
    } else if (this.signals === 2) {
      this.forced = true;
      this.say("stopping now: running invocations are abandoned (their leases expire; nothing is lost)");
    } else {
      this.server?.signal();
      process.exit(130);
    }
  };

  async run(): Promise<number> {
    await this.openDatabase();
    // Listening before "migrated" is announced: a producer that starts then is never missed.
    await this.startWakeListener();
    await this.migrate();
    await this.startDashboard();
    await this.startDemo();
    describeSchedule(this.jobs, this.o, this.say);
    this.startProducer();
    this.startScheduler();
    this.viewStarted = true;
    const outcome = await this.untilStop();
    this.stopReason = outcome.why;
    await this.shutdown();
    return this.finish(outcome.code);
  }

  /** 2. DATABASE_URL, or the embedded Postgres. */
  private async openDatabase(): Promise<void> {
    const { ctx, o, io } = this;
    let url = ctx.common.databaseUrl;
    if (!url) {
      this.say(`starting the embedded Postgres in ${o.dataDir} …`);
      this.server = await startEmbedded({ dataDir: resolve(io.cwd, o.dataDir), port: o.port, log: (l) => this.logs?.write(`[postgres] ${l}`) });
      url = this.server.url;
      ctx.common.databaseUrl = url;
    }
    this.secrets.push(passwordOf(url));
    // The bundled functions read their credentials like on Lambda: DATABASE_URL (and SQLSTREAMS_SCHEMA).
    process.env.DATABASE_URL = url;
    process.env.SQLSTREAMS_SCHEMA = ctx.common.schema;
    const s = this.server;
    this.where = s ? `embedded Postgres ${maskUrl(url)} (${s.reused ? "reusing" : "initialised"} ${o.dataDir}; Postgres log ${rel(io.cwd, s.logFile)})` : maskUrl(url);
    this.say(`database: ${this.where}, schema ${ctx.common.schema}`);
    this.emit("dev.database", { url: maskUrl(url), embedded: s !== undefined, reused: s?.reused ?? false, schema: ctx.common.schema });
  }

  /** 3. Migrate and register, as the deploy does. */
  private async migrate(): Promise<void> {
    const { dep } = this;
    const client = this.ctx.client();
    if (dep.migrate) {
      await dep.migrate({ source: "sqlstreams-dev" }, this.localContext(300_000, { functionName: "sqlstreams-dev-migrate" }));
    } else {
      await client.migrate();
      const names = [...new Set([...dep.groups.map((g) => g.declaration.stream), ...Object.keys(dep.streams)])];
      for (const n of names) await client.stream(n).register(dep.streams[n] ?? {});
      for (const g of dep.groups) await client.stream(g.declaration.stream).consumer(g.declaration.group).register(g.declaration.config ?? {});
    }
    this.streamNames = [...new Set(dep.groups.map((g) => g.declaration.stream))];
    const via = dep.migrate ? " (through the migrate function)" : "";
    this.say(`migrated; registered ${this.streamNames.length} stream(s) and ${dep.groups.length} group(s) of ${rel(this.io.cwd, dep.buildDir)}/functions/groups.mjs${via}`);
    this.emit("dev.migrated", { streams: this.streamNames, groups: dep.groups.map((g) => `${g.declaration.stream}/${g.declaration.group}`) });
    for (const j of this.jobs) {
      if (!j.group) continue;
      j.progress = await client.stream(j.group.declaration.stream).consumer(j.group.declaration.group).progress();
      j.startCommitted = BigInt(j.progress.committed);
    }
  }

  /** 4. The stub services the example handlers call (functions/handlers/*), and what the demo will produce. */
  private async startDemo(): Promise<void> {
    const { o, streamNames } = this;
    for (const s of streamNames) this.produced.set(s, 0);
    this.producedAt = Date.now();
    if (o.demo && streamNames.some((n) => n === "orders.placed" || n === "ledger.adjustments")) {
      this.services = await startDemoServices(process.env);
      if (this.services.env.length > 0) this.say(`demo services (fail once per "fail-once" message) at ${this.services.url}: ${this.services.env.join(", ")}`);
    }
    if (!o.demo) return;
    for (const st of streamNames) {
      const x = demoExpectations(st, o.messages);
      this.say(`demo: ${o.messages} messages to ${st}: ${x.failOnce} fail once and are retried, ${x.permanent} are invalid and end dead (Permanent)`);
    }
  }

  private startProducer(): void {
    const { o } = this;
    if (!o.demo || o.messages === 0) return;
    const client = this.ctx.client();
    this.producing = true;
    this.producer = (async () => {
      try {
        for (let from = 1; from <= o.messages && !this.stopping; from += BATCH) {
          const n = Math.min(BATCH, o.messages - from + 1);
          for (const s of this.streamNames) {
            await client.stream(s).produceBatch(demoBatch(s, from, n, o.messages));
            this.produced.set(s, (this.produced.get(s) ?? 0) + n);
          }
          await sleep(BATCH_PAUSE_MS);
        }
      } catch (e) {
        this.produceError = describeError(e, this.secrets).message;
        this.say(`demo producer failed: ${this.produceError}`);
      } finally {
        this.producing = false;
        this.producedAt = Date.now();
      }
    })();
  }

  /** 5b. Wake on produce, locally: a NOTIFY from a producer's claimed wake runs the group at once. */
  private async startWakeListener(): Promise<void> {
    const url = this.ctx.common.databaseUrl;
    if (!url) return;
    const listener = new pg.Client({ connectionString: url, application_name: "sqlstreams-dev-wake" });
    listener.on("error", (e) => this.logs?.write(`wake listener failed: ${describeError(e, this.secrets).message}`, "error"));
    listener.on("notification", (n) => {
      let t: { schema?: string; stream?: string; group?: string };
      try {
        t = JSON.parse(n.payload ?? "") as typeof t;
      } catch {
        return;
      }
      if (t.schema !== this.ctx.common.schema || this.stopping) return;
      const job = this.jobs.find((j) => j.group?.declaration.stream === t.stream && j.group?.declaration.group === t.group);
      if (!job) return;
      job.wakes++;
      this.emit("dev.wake", { stream: t.stream, group: t.group });
      if (job.running >= job.parallelism) job.wakePending = true;
      else this.invoke(job);
    });
    await listener.connect();
    await listener.query(`LISTEN ${WAKE_CHANNEL}`);
    this.listener = listener;
  }

  /** 5. The local stand-in for EventBridge. */
  private startScheduler(): void {
    this.timer = setInterval(() => this.tick(), 50);
    this.tick();
  }

  private tick(): void {
    if (this.stopping) return;
    const now = Date.now();
    for (const j of this.jobs) {
      if (j.nextAt !== null && now >= j.nextAt) {
        this.fire(j);
        this.reschedule(j, now);
      }
    }
  }

  private fire(job: Job): void {
    if (job.running >= job.parallelism) {
      job.skipped++;
      return;
    }
    for (let i = job.running; i < job.parallelism; i++) this.invoke(job);
  }

  private reschedule(job: Job, now: number): void {
    if (job.tickMs !== undefined) {
      job.nextAt = Math.max((job.nextAt ?? now) + job.tickMs, now + 1);
      return;
    }
    const speed = this.o.speed ?? 1;
    const virtualNow = this.started + (now - this.started) * speed;
    const next = nextFire(job.schedule, virtualNow, this.started);
    job.nextAt = next === null ? null : this.started + (next - this.started) / speed;
  }

  private invoke(job: Job): void {
    job.running++;
    job.invocations++;
    const context: LocalContext = this.localContext(job.budgetMs, {
      functionName: `sqlstreams-dev-${job.name.replace(/[^A-Za-z0-9-]+/g, "-")}`,
      memoryMB: job.group ? resolvedDeclaration(job.group.declaration).memory : GROUP_DEFAULTS.memory,
    });
    const p = this.runJob(job, context);
    this.inflight.add(p);
    void p.finally(() => this.inflight.delete(p));
  }

  private async runJob(job: Job, context: LocalContext): Promise<void> {
    try {
      if (job.kind === "group") {
        const d = job.group!.declaration;
        const r = await job.group!.handler({ stream: d.stream, group: d.group }, context);
        job.report = job.report ? mergeReports(job.report, r) : r;
      } else if (this.dep.maintain) {
        await this.dep.maintain({ source: "sqlstreams-dev" }, context);
      } else {
        await this.ctx.client().maintain({ deadline: Date.now() + job.budgetMs - 3_000 });
      }
    } catch (e) {
      job.errors++;
      job.lastError = describeError(e, this.secrets).message;
      this.logs?.write(JSON.stringify({ level: "error", event: "sqlstreams.dev.invocation", function: job.name, error: job.lastError }), "error");
    } finally {
      job.running--;
      job.finished++;
      // A wake that found every slot busy: run once more (the run may have released before it came).
      if (job.wakePending && !this.stopping) {
        job.wakePending = false;
        this.invoke(job);
      }
    }
  }

  private snapshot(): Snapshot {
    const now = Date.now();
    const maintain = this.jobs.find((j) => j.kind === "maintain")!;
    return {
      elapsedMs: now - this.started,
      groups: this.jobs.filter((j) => j.kind === "group").map((j) => row(j, this.produced, now)),
      maintain: {
        runs: maintain.finished, running: maintain.running, errors: maintain.errors, lastError: maintain.lastError,
        nextInMs: maintain.nextAt === null ? null : Math.max(0, maintain.nextAt - now),
      },
    };
  }

  private draw(final = false): void {
    const snap = this.snapshot();
    if (this.json) this.drawJson(snap, final);
    else if (this.live) this.drawLive(snap, final);
    else this.drawPlain(snap, final);
  }

  private drawJson(snap: Snapshot, final: boolean): void {
    const text = JSON.stringify(snap.groups.map((g) => [g.head, g.committed, g.ready, g.deferred, g.inflight, g.dead, g.invocations]));
    if (final || (Date.now() - this.lastPlain >= PLAIN_EVERY_MS && text !== this.lastPlainText)) {
      this.lastPlain = Date.now();
      this.lastPlainText = text;
      if (!final) this.emit("dev.progress", { groups: snap.groups, maintain: snap.maintain });
    }
  }

  private drawLive(snap: Snapshot, final: boolean): void {
    const width = Math.max(40, (process.stdout.columns ?? this.io.columns ?? 120) - 1);
    const lines = render(snap, this.o, this.logs!, this.events, this.stopReason, width);
    let out = this.drawnLines > 0 ? `\x1b[${this.drawnLines}F\x1b[0J` : "\x1b[?25l";
    out += lines.join("\n") + "\n";
    if (final) out += "\x1b[?25h";
    this.io.out(out);
    this.drawnLines = lines.length;
  }

  private drawPlain(snap: Snapshot, final: boolean): void {
    const text = snap.groups.map((g) => plainLine(g)).join("\n");
    if (text === this.lastPlainText || (!final && Date.now() - this.lastPlain < PLAIN_EVERY_MS)) return;
    this.lastPlain = Date.now();
    this.lastPlainText = text;
    const t = `[${(snap.elapsedMs / 1_000).toFixed(1).padStart(6)}s]`;
    this.io.out(snap.groups.map((g) => `${t} ${plainLine(g)}`).join("\n") + "\n");
  }

  private async refresh(): Promise<void> {
    if (this.refreshing) return;
    this.refreshing = true;
    try {
      for (const j of this.jobs) {
        if (!j.group) continue;
        const at = Date.now();
        try {
          j.progress = await this.ctx.client().stream(j.group.declaration.stream).consumer(j.group.declaration.group).progress();
          j.progressAt = at;
        } catch (e) {
          j.progressAt = undefined;
          j.lastError = describeError(e, this.secrets).message;
        }
      }
    } finally {
      this.refreshing = false;
    }
  }

  /** --once: every group has run, caught up with everything produced, and holds no open exception. */
  private converged(): boolean {
    if (this.producing || this.produceError !== undefined) return false;
    return this.jobs.every((j) => {
      if (j.kind !== "group") return true;
      const p = j.progress;
      const fresh = j.invocations > 0 && p !== undefined && j.progressAt !== undefined && j.progressAt > this.producedAt;
      return fresh && p.lag === "0" && p.exceptions.ready + p.exceptions.deferred + p.exceptions.inflight === 0;
    });
  }

  /** The view, refreshed until a signal, the embedded server's exit, or (--once) convergence or timeout. */
  private untilStop(): Promise<{ code: number; why: string }> {
    const { o } = this;
    return new Promise((resolveStop) => {
      let done = false;
      const finish = (code: number, why: string) => {
        if (done) return;
        done = true;
        clearInterval(view);
        resolveStop({ code, why });
      };
      this.stopRequested = (why) => finish(0, `stopped (${why})`);
      if (this.stopReason) finish(0, `stopped (${this.stopReason})`);
      void this.server?.exited.then(() => finish(1, "the embedded Postgres exited unexpectedly"));
      const step = async () => {
        await this.refresh();
        if (done) return;
        this.draw();
        if (o.once && this.produceError !== undefined) finish(1, `the demo producer failed: ${this.produceError}`);
        else if (o.once && this.converged()) finish(0, "converged");
        else if (o.once && Date.now() - this.started > o.timeoutMs) finish(1, `did not converge within ${o.timeoutMs / 1_000} s`);
      };
      const view = setInterval(() => void step(), REFRESH_MS);
    });
  }

  /**
   * 6. Stop scheduling and producing, let running invocations finish. An invocation whose group
   * holds nothing (no open range lease, no inflight row: a continuous-mode poller idling until its
   * budget ends) is not waited for.
   */
  private async shutdown(): Promise<void> {
    this.stopping = true;
    clearInterval(this.timer);
    await this.listener?.end().catch(() => {});
    this.listener = undefined;
    await this.producer;
    let lastWaitNote = Date.now();
    for (;;) {
      const busy = this.jobs.filter((j) => j.running > 0);
      if (busy.length === 0 || this.forced) break;
      await this.refresh();
      const holding = busy.filter((j) => j.kind === "maintain" || !j.progress || j.progress.openLeases > 0 || j.progress.exceptions.inflight > 0);
      if (holding.length === 0) break;
      if (Date.now() - lastWaitNote >= 3_000) {
        lastWaitNote = Date.now();
        this.say(`waiting for ${holding.map((j) => j.name).join(", ")} to finish (Ctrl-C again to stop now)`);
      }
      this.draw();
      await Promise.race([Promise.race([...this.inflight]), sleep(REFRESH_MS)]);
    }
  }

  /** The final view and summary, after the services, the client and the embedded server stopped. */
  private async finish(exitCode: number): Promise<number> {
    const { ctx, io, o } = this;
    await this.refresh();
    this.draw(true);
    const snap = this.snapshot();
    const abandoned = this.jobs.reduce((n, j) => n + j.running, 0);
    await this.services?.close().catch(() => {});
    this.services = undefined;
    await ctx.close();
    if (this.server) {
      await this.server.stop();
      this.server = undefined;
    }
    await this.logs?.close();
    const url = ctx.common.databaseUrl && !secretsEmbedded(this.where) ? maskUrl(ctx.common.databaseUrl) : undefined;
    summary(io, this.json, snap, exitCode, this.stopReason, o, rel(io.cwd, resolve(io.cwd, o.logFile)), abandoned, url);
    return exitCode;
  }

  /** The operator dashboard on 127.0.0.1 (its fixed port, or a free one when that is taken). */
  private async startDashboard(): Promise<void> {
    if (this.o.dashboard === false) return;
    const { DASHBOARD_PORT, startDashboard } = await import("../dashboard.js");
    const client = this.ctx.client();
    let started: { server: import("node:http").Server; url: string };
    try {
      started = await startDashboard(client, { host: "127.0.0.1", port: this.o.dashboardPort ?? DASHBOARD_PORT, readOnly: false });
    } catch (e) {
      if ((e as { code?: string }).code !== "EADDRINUSE" || this.o.dashboardPort !== undefined) throw e;
      started = await startDashboard(client, { host: "127.0.0.1", port: 0, readOnly: false });
    }
    this.dashboard = started.server;
    this.say(`dashboard: ${started.url}`);
    this.emit("dev.dashboard", { url: started.url });
  }

  async cleanup(): Promise<void> {
    if (this.dashboard) {
      const d = this.dashboard;
      await new Promise<void>((res) => d.close(() => res()));
      d.closeAllConnections();
    }
    for (const s of SIGNALS) process.removeListener(s, this.onSignal);
    process.removeListener("unhandledRejection", this.onRejection);
    await this.services?.close().catch(() => {});
    await this.ctx.close();
    if (this.server) await this.server.stop().catch(() => {});
    process.removeListener("exit", this.onExit);
    await this.logs?.close();
    if (this.live) this.io.out("\x1b[?25h");
  }
}

const SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;

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
    const r = resolvedDeclaration(d);
    jobs.push(job(`${d.stream}/${d.group}`, "group", schedule, o, now, r.parallelism, o.budgetMs ?? r.timeout, g));
  }
  const ms = parseSchedule(dep.maintainSchedule);
  jobs.push(job("maintain", "maintain", ms, o, now, 1, o.budgetMs ?? 120_000));
  if (o.tickMs !== undefined) jobs[jobs.length - 1].tickMs = o.tickMs * MAINTAIN_TICKS;
  return jobs;
}

function job(name: string, kind: Job["kind"], schedule: Schedule, o: DevOptions, now: number, parallelism: number, budgetMs: number, group?: LoadedGroup): Job {
  const j: Job = {
    name, kind, group, schedule, tickMs: o.tickMs, parallelism, budgetMs, nextAt: now,
    running: 0, invocations: 0, finished: 0, skipped: 0, errors: 0, wakes: 0, wakePending: false,
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
    mode: resolvedDeclaration(d).mode,
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
    wakes: j.wakes,
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
