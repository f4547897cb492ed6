// `sqlstreams dev`: the app's deployment, locally.
//
//   1. load the app's declaration (--groups, .ts or .js) and the handlers it names (app.ts)
//   2. DATABASE_URL, or an embedded Postgres kept in .sqlstreams/dev-pg
//   3. migrate and register every declared stream and group, as the deployed migrate function does
//   4. with --demo only: produce a demo workload (producer.ts); otherwise nothing is produced
//   5. the local stand-in for EventBridge (scheduler.ts): invoke each group's handler with
//      { stream, group } and a fake Lambda context on its schedule, maintenance on its own, and a
//      group at once on a wake (wake.ts); a live progress view (view.ts)
//   6. Ctrl-C (or --once converging): stop scheduling, let running invocations finish, stop the
//      embedded Postgres, exit 0
import { resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import type pg from "pg";
import type { LocalContext } from "@sqlstreams/aws";
import type { CommandContext, Values } from "../context.js";
import { describeError } from "../errors.js";
import { maskUrl } from "../format.js";
import { type Deployment, loadDeployment } from "./app.js";
import { type EmbeddedServer, startEmbedded } from "./embedded.js";
import { LogCapture } from "./logs.js";
import { type DevOptions, REFRESH_MS, devOptions } from "./options.js";
import { DemoProducer } from "./producer.js";
import { type Job, Scheduler, describeSchedule, makeJobs } from "./scheduler.js";
import { View, rel, snapshot, summary } from "./view.js";
import { listenForWakes } from "./wake.js";
import { DueWakes } from "./due.js";

export async function dev(ctx: CommandContext, v: Values): Promise<number> {
  const run = new DevRun(ctx, devOptions(v));
  // The deployment, before anything starts: a missing or bad declaration or handler fails fast.
  await run.load();
  run.install();
  try {
    return await run.run();
  } finally {
    await run.cleanup();
  }
}

const SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;

/** One `sqlstreams dev` session: the steps of the header comment over one shared state. */
class DevRun {
  private readonly io: CommandContext["io"];
  private readonly started = Date.now();
  private readonly secrets: (string | undefined)[] = [];
  private readonly view: View;
  private dep!: Deployment;
  private scheduler!: Scheduler;
  private producer!: DemoProducer;
  private localContext!: (typeof import("@sqlstreams/aws"))["localContext"];
  private logs: LogCapture | undefined;
  private server: EmbeddedServer | undefined;
  private dashboard: import("node:http").Server | undefined;
  private listener: pg.Client | undefined;
  /** Wakes a stream's groups when its earliest scheduled message comes due. */
  private readonly due = new DueWakes((stream) => {
    if (this.stopping) return;
    for (const j of this.jobs) if (j.group?.declaration.stream === stream && this.scheduler.wake(stream, j.group.declaration.group)) this.view.emit("dev.wake", { stream, group: j.group.declaration.group });
  });
  private where = "";
  // Stopping: the first signal asks, the second abandons running invocations, the third exits.
  private stopRequested: ((why: string) => void) | undefined;
  private stopReason: string | undefined;
  private forced = false;
  private lastSignalAt = 0;
  private signals = 0;
  private stopping = false;
  private refreshing = false;

  constructor(
    private readonly ctx: CommandContext,
    private readonly o: DevOptions,
  ) {
    this.io = ctx.io;
    this.view = new View(ctx.io, ctx.json, ctx.io.isTTY && !ctx.json && !ctx.io.env.CI, o, this.started);
  }

  private get jobs(): Job[] {
    return this.scheduler.jobs;
  }

  private readonly say = (line: string) => this.view.say(line);
  private readonly describe = (e: unknown) => describeError(e, this.secrets).message;

  /** 1. The declaration and the handlers, imported before anything starts. */
  async load(): Promise<void> {
    this.dep = await loadDeployment(this.o.groups, this.io.cwd, "dev");
    const aws = await import("@sqlstreams/aws");
    this.localContext = aws.localContext;
    this.scheduler = new Scheduler(makeJobs(this.dep, this.o, this.started), {
      o: this.o,
      started: this.started,
      localContext: (budgetMs, c) => this.localContext(budgetMs, c),
      maintain: (context) => this.maintainOnce(context),
      failed: (j, e) => {
        j.lastError = this.describe(e);
        this.logs?.write(JSON.stringify({ level: "error", event: "sqlstreams.dev.invocation", function: j.name, error: j.lastError }), "error");
      },
    });
    const streams = [...new Set(this.dep.groups.map((g) => g.stream))];
    this.producer = new DemoProducer(this.o, streams, this.say, this.describe);
  }

  install(): void {
    const { ctx, io, o } = this;
    const echo = ctx.common.verbose && !this.view.live && !ctx.json ? (l: string) => io.err(l.endsWith("\n") ? l : l + "\n") : undefined;
    this.logs = new LogCapture(resolve(io.cwd, o.logFile), () => this.secrets, echo);
    this.logs.install();
    process.on("exit", this.onExit);
    process.on("unhandledRejection", this.onRejection);
    for (const s of SIGNALS) process.on(s, this.onSignal);
  }

  private readonly onExit = () => this.server?.signal();
  private readonly onRejection = (e: unknown) => this.logs?.write(`unhandled rejection: ${this.describe(e)}`, "error");
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
    await this.producer.prepare();
    describeSchedule(this.jobs, this.o, this.say);
    this.producer.start(this.ctx.client(), () => this.stopping);
    this.scheduler.start();
    this.view.start();
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
    // The handlers read their credentials like on Lambda: DATABASE_URL (and SQLSTREAMS_SCHEMA).
    process.env.DATABASE_URL = url;
    process.env.SQLSTREAMS_SCHEMA = ctx.common.schema;
    const s = this.server;
    this.where = s ? `embedded Postgres ${maskUrl(url)} (${s.reused ? "reusing" : "initialised"} ${o.dataDir}; Postgres log ${rel(io.cwd, s.logFile)})` : maskUrl(url);
    this.say(`database: ${this.where}, schema ${ctx.common.schema}`);
    this.view.emit("dev.database", { url: maskUrl(url), embedded: s !== undefined, reused: s?.reused ?? false, schema: ctx.common.schema });
  }

  /** 3. Migrate and register, as the deployed migrate function does (createMigrateHandler). */
  private async migrate(): Promise<void> {
    const { dep } = this;
    const client = this.ctx.client();
    await client.migrate();
    const names = [...new Set([...dep.groups.map((g) => g.stream), ...Object.keys(dep.streams)])];
    for (const n of names) await client.stream(n).register(dep.streams[n] ?? {});
    for (const g of dep.groups) await client.stream(g.stream).consumer(g.group).register(g.config ?? {});
    const streams = [...new Set(dep.groups.map((g) => g.stream))];
    this.say(`migrated; registered ${streams.length} stream(s) and ${dep.groups.length} group(s) of ${dep.shown}`);
    this.view.emit("dev.migrated", { declaration: dep.shown, streams, groups: dep.groups.map((g) => `${g.stream}/${g.group}`) });
    for (const j of this.jobs) {
      if (!j.group) continue;
      j.progress = await client.stream(j.group.declaration.stream).consumer(j.group.declaration.group).progress();
      j.startCommitted = BigInt(j.progress.committed);
    }
  }

  /** Maintenance for every stream, within the invocation's budget (as the maintain function). */
  private async maintainOnce(context: LocalContext): Promise<void> {
    await this.ctx.client().maintain({ deadline: Date.now() + context.getRemainingTimeInMillis() - 3_000 });
  }

  /** 5b. Wake on produce, locally: a NOTIFY from a producer's claimed wake runs the group at once. */
  private async startWakeListener(): Promise<void> {
    const url = this.ctx.common.databaseUrl;
    if (!url) return;
    this.listener = await listenForWakes(
      url,
      this.ctx.common.schema,
      (t) => {
        if (this.stopping) return;
        if (this.scheduler.wake(t.stream, t.group)) this.view.emit("dev.wake", { stream: t.stream, group: t.group });
      },
      (e) => this.logs?.write(`wake listener failed: ${this.describe(e)}`, "error"),
    );
  }

  private draw(final = false): void {
    this.view.draw(snapshot(this.jobs, this.producer.produced, this.started), this.logs!, this.stopReason, final);
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
          this.due.arm(j.group.declaration.stream, j.progress.scheduled.nextDueAt);
        } catch (e) {
          j.progressAt = undefined;
          j.lastError = this.describe(e);
        }
      }
    } finally {
      this.refreshing = false;
    }
  }

  /** --once: every group has run, caught up with everything produced, and holds no open exception. */
  private converged(): boolean {
    const p = this.producer;
    if (p.producing || p.error !== undefined) return false;
    return this.jobs.every((j) => {
      if (j.kind !== "group") return true;
      const pr = j.progress;
      const fresh = j.invocations > 0 && pr !== undefined && j.progressAt !== undefined && j.progressAt > p.producedAt;
      return fresh && pr.lag === "0" && pr.exceptions.ready + pr.exceptions.deferred + pr.exceptions.inflight === 0;
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
        if (o.once && this.producer.error !== undefined) finish(1, `the demo producer failed: ${this.producer.error}`);
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
    this.scheduler.stop();
    this.due.stop();
    await this.listener?.end().catch(() => {});
    this.listener = undefined;
    await this.producer.finished();
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
      await Promise.race([this.scheduler.anyEnded(), sleep(REFRESH_MS)]);
    }
  }

  /** The final view and summary, after the services, the client and the embedded server stopped. */
  private async finish(exitCode: number): Promise<number> {
    const { ctx, io, o } = this;
    await this.refresh();
    this.draw(true);
    const snap = snapshot(this.jobs, this.producer.produced, this.started);
    const abandoned = this.jobs.reduce((n, j) => n + j.running, 0);
    await this.producer.close();
    await ctx.close();
    if (this.server) {
      await this.server.stop();
      this.server = undefined;
    }
    await this.logs?.close();
    const url = ctx.common.databaseUrl && !this.where.startsWith("embedded") ? maskUrl(ctx.common.databaseUrl) : undefined;
    summary(io, ctx.json, snap, exitCode, this.stopReason, o, rel(io.cwd, resolve(io.cwd, o.logFile)), abandoned, url);
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
    this.view.emit("dev.dashboard", { url: started.url });
  }

  async cleanup(): Promise<void> {
    if (this.dashboard) {
      const d = this.dashboard;
      await new Promise<void>((res) => d.close(() => res()));
      d.closeAllConnections();
    }
    for (const s of SIGNALS) process.removeListener(s, this.onSignal);
    process.removeListener("unhandledRejection", this.onRejection);
    await this.producer.close();
    await this.ctx.close();
    if (this.server) await this.server.stop().catch(() => {});
    process.removeListener("exit", this.onExit);
    await this.logs?.close();
    this.view.restoreCursor();
  }
}

function passwordOf(url: string): string | undefined {
  try {
    const p = new URL(url).password;
    return p ? decodeURIComponent(p) : undefined;
  } catch {
    return undefined;
  }
}
