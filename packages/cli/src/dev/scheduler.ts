// The local stand-in for EventBridge: one job per group (its poll handler) and one for
// maintenance, fired on their schedules (compressed with --tick, or sped up with --speed), at
// most `parallelism` invocations of a job at once, each with a fake Lambda context.
import { type CycleReport, type Progress, mergeReports } from "@sqlstreams/core";
import { type LocalContext, GROUP_DEFAULTS, resolvedDeclaration } from "@sqlstreams/aws";
import { type Schedule, nextFire, parseSchedule } from "../schedule.js";
import type { Deployment, LoadedGroup } from "./app.js";
import { type DevOptions, MAINTAIN_TICKS } from "./options.js";

/** One scheduled function: a group's poll handler, or maintenance. */
export interface Job {
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

export interface SchedulerDeps {
  o: DevOptions;
  started: number;
  localContext: (budgetMs: number, o: { functionName: string; memoryMB: number; onContinue?: (n: number) => void }) => LocalContext;
  /** One maintenance run within the context's budget. */
  maintain: (context: LocalContext) => Promise<void>;
  /** A failed invocation's message, scrubbed, for the log and the view. */
  failed: (job: Job, e: unknown) => void;
}

export function makeJobs(dep: Deployment, o: DevOptions, now: number): Job[] {
  const jobs: Job[] = [];
  for (const g of dep.loaded) {
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

export function describeSchedule(jobs: Job[], o: DevOptions, say: (l: string) => void): void {
  if (o.tickMs !== undefined) {
    say(`schedules compressed: every group is invoked every ${o.tickMs} ms, maintain every ${o.tickMs * MAINTAIN_TICKS} ms (--speed N follows the declared schedules N× faster)`);
  } else {
    say(`schedules: as declared, on a clock ${o.speed}× faster: ${jobs.map((j) => `${j.name} ${j.schedule.expression}`).join(", ")}`);
  }
  say(`invocation budget: ${o.budgetMs !== undefined ? `${o.budgetMs} ms (--budget)` : "each group's declared timeout"}; at most \`parallelism\` invocations of a group at once`);
}

export class Scheduler {
  private readonly inflight = new Set<Promise<void>>();
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(
    readonly jobs: Job[],
    private readonly deps: SchedulerDeps,
  ) {}

  start(): void {
    this.timer = setInterval(() => this.tick(), 50);
    this.tick();
  }

  /** No new invocations (running ones go on). */
  stop(): void {
    this.stopped = true;
    clearInterval(this.timer);
  }

  /** Resolves when any running invocation ends (at once when none runs). */
  async anyEnded(): Promise<void> {
    if (this.inflight.size > 0) await Promise.race([...this.inflight]);
  }

  /** A wake for the group: run it now, or once more when a slot frees. */
  wake(stream: string, group: string): Job | undefined {
    if (this.stopped) return undefined;
    const j = this.jobs.find((x) => x.group?.declaration.stream === stream && x.group?.declaration.group === group);
    if (!j) return undefined;
    j.wakes++;
    if (j.running >= j.parallelism) j.wakePending = true;
    else this.invoke(j);
    return j;
  }

  private tick(): void {
    if (this.stopped) return;
    const now = Date.now();
    for (const j of this.jobs) {
      if (j.nextAt !== null && now >= j.nextAt) {
        this.fire(j);
        this.reschedule(j, now);
      }
    }
  }

  private fire(j: Job): void {
    if (j.running >= j.parallelism) {
      j.skipped++;
      return;
    }
    for (let i = j.running; i < j.parallelism; i++) this.invoke(j);
  }

  private reschedule(j: Job, now: number): void {
    if (j.tickMs !== undefined) {
      j.nextAt = Math.max((j.nextAt ?? now) + j.tickMs, now + 1);
      return;
    }
    const { started, o } = this.deps;
    const speed = o.speed ?? 1;
    const virtualNow = started + (now - started) * speed;
    const next = nextFire(j.schedule, virtualNow, started);
    j.nextAt = next === null ? null : started + (next - started) / speed;
  }

  private invoke(j: Job): void {
    j.running++;
    j.invocations++;
    const context = this.deps.localContext(j.budgetMs, {
      functionName: `sqlstreams-dev-${j.name.replace(/[^A-Za-z0-9-]+/g, "-")}`,
      memoryMB: j.group ? resolvedDeclaration(j.group.declaration).memory : GROUP_DEFAULTS.memory,
      // A group with `scale` continues itself at its budget while a backlog lasts: run more invocations.
      onContinue: (n) => {
        for (let i = 0; i < n && !this.stopped; i++) this.invoke(j);
      },
    });
    const p = this.run(j, context);
    this.inflight.add(p);
    void p.finally(() => this.inflight.delete(p));
  }

  private async run(j: Job, context: LocalContext): Promise<void> {
    try {
      if (j.group) {
        const d = j.group.declaration;
        const r = await j.group.handler({ stream: d.stream, group: d.group }, context);
        j.report = j.report ? mergeReports(j.report, r) : r;
      } else {
        await this.deps.maintain(context);
      }
    } catch (e) {
      j.errors++;
      this.deps.failed(j, e);
    } finally {
      j.running--;
      j.finished++;
      // A wake that found every slot busy: run once more (the run may have released before it came).
      if (j.wakePending && !this.stopped) {
        j.wakePending = false;
        this.invoke(j);
      }
    }
  }
}
