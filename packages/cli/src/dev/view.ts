// What `sqlstreams dev` shows: one line per event for a person (or a JSON line with --json), a
// live table of every group on a terminal (plain lines otherwise), and the final summary.
import { resolvedDeclaration } from "@sqlstreams/aws";
import type { CommandContext } from "../context.js";
import { age, bar, clip, table } from "../format.js";
import type { LogCapture } from "./logs.js";
import type { DevOptions } from "./options.js";
import type { Job } from "./scheduler.js";

const PLAIN_EVERY_MS = 2_000;

export interface Snapshot {
  elapsedMs: number;
  groups: GroupRow[];
  maintain: { runs: number; running: number; errors: number; lastError?: string; nextInMs: number | null };
}

export interface GroupRow {
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

export function snapshot(jobs: Job[], produced: Map<string, number>, started: number): Snapshot {
  const now = Date.now();
  const maintain = jobs.find((j) => j.kind === "maintain")!;
  return {
    elapsedMs: now - started,
    groups: jobs.filter((j) => j.kind === "group").map((j) => row(j, produced, now)),
    maintain: {
      runs: maintain.finished, running: maintain.running, errors: maintain.errors, lastError: maintain.lastError,
      nextInMs: maintain.nextAt === null ? null : Math.max(0, maintain.nextAt - now),
    },
  };
}

/** The output of one session: events, the progress view, the summary. */
export class View {
  /** The last lines for a person while the live view owns the screen. */
  private readonly events: string[] = [];
  private started = false;
  private lastPlain = 0;
  private lastPlainText = "";
  private drawnLines = 0;

  constructor(
    private readonly io: CommandContext["io"],
    readonly json: boolean,
    readonly live: boolean,
    private readonly o: DevOptions,
    private readonly since: number,
  ) {}

  emit(event: string, data: Record<string, unknown> = {}): void {
    if (this.json) this.io.out(JSON.stringify({ event, elapsedMs: Date.now() - this.since, ...data }) + "\n");
  }

  /** A line for a person: printed at once before/without the live view, kept for the view otherwise. */
  readonly say = (line: string): void => {
    if (this.json) return;
    if (this.live && this.started) {
      this.events.push(line);
      if (this.events.length > 4) this.events.shift();
    } else {
      this.io.out(line + "\n");
    }
  };

  /** From now on the live view owns the screen. */
  start(): void {
    this.started = true;
  }

  draw(snap: Snapshot, logs: LogCapture, stopReason: string | undefined, final = false): void {
    if (this.json) this.drawJson(snap, final);
    else if (this.live) this.drawLive(snap, logs, stopReason, final);
    else this.drawPlain(snap, final);
  }

  /** Puts the cursor back if the live view hid it. */
  restoreCursor(): void {
    if (this.live) this.io.out("\x1b[?25h");
  }

  private drawJson(snap: Snapshot, final: boolean): void {
    const text = JSON.stringify(snap.groups.map((g) => [g.head, g.committed, g.ready, g.deferred, g.inflight, g.dead, g.invocations]));
    if (final || (Date.now() - this.lastPlain >= PLAIN_EVERY_MS && text !== this.lastPlainText)) {
      this.lastPlain = Date.now();
      this.lastPlainText = text;
      if (!final) this.emit("dev.progress", { groups: snap.groups, maintain: snap.maintain });
    }
  }

  private drawLive(snap: Snapshot, logs: LogCapture, stopReason: string | undefined, final: boolean): void {
    const width = Math.max(40, (process.stdout.columns ?? this.io.columns ?? 120) - 1);
    const lines = render(snap, this.o, logs, this.events, stopReason, width);
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
}

export function rel(cwd: string, p: string): string {
  return p.startsWith(cwd + "/") ? p.slice(cwd.length + 1) : p;
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

export function summary(
  io: CommandContext["io"],
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
  const dead = s.groups.find((g) => g.dead > 0);
  if (dead) {
    if (o.demo) lines.push("dead rows are expected: the demo sends invalid payloads ({ demo: { permanent: true } }) that the handlers reject with Permanent().");
    if (url) lines.push(`inspect them: sqlstreams failures --stream ${dead.stream} --group ${dead.group}   (DATABASE_URL=${url})`);
  }
  if (abandoned > 0) lines.push(`${abandoned} idle invocation(s) (continuous mode) were not waited for: they held no leases`);
  lines.push(`handler logs: ${logFile}`);
  io.out(lines.join("\n") + "\n");
}
