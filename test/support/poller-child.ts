// The one poller child of the crash and fault tests, a real process as each Lambda invocation
// would be. Bundled by spawnPoller() (./processes.ts) and run with node; it reads its
// PollerConfig from CHILD_CFG and writes JSON lines to stdout:
//   { event: "start" | "end", id, key, attempt, pid, at, t, ok?, payload? }   around every handler run
//                                                        (at: wall clock ms; t: the same in fractional ms
//                                                        from performance.now(), to order events of
//                                                        several children; payload: the cfg.echo paths)
//   { event: "drain", at, doneAt, started, deferred } / { event: "done", handled }   (loop mode)
//   { event: "log", code, level, message }              every library log event
//   { event: "report", report, seen }                    after each poll or drain
//   { event: "ready" } / { event: "failed", code, message } / { event: "uncaught", message }  (commands mode)
// A "die" line in loop mode SIGKILLs the process at its next handler start (mid-range), unless a
// "live" line came after it.
// Handler actions per message id: crash (SIGKILL itself), hang (block the event loop), spin
// (block until `file` exists), sleep (await sleepMs), wait (until "go" on stdin), waitfail (wait,
// then throw), fail (throw).
import { existsSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { createInterface } from "node:readline";
import { SqlStreams, type Message, type PollOptions } from "@sqlstreams/core";
import type { PollerConfig } from "./processes.js";

const cfg = JSON.parse(process.env.CHILD_CFG ?? "{}") as PollerConfig;
const out = (o: Record<string, unknown>) => process.stdout.write(JSON.stringify(o) + "\n");
const nap = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

// Lines from the test on stdin: "go" releases waiting handlers; in commands mode, poll/drain/exit.
let go = false;
const commands: string[] = [];
let wake = () => {};
createInterface({ input: process.stdin }).on("line", (l) => {
  if (l.trim() === "go") go = true;
  else commands.push(l.trim());
  wake();
});
const until = (take: () => string | undefined) =>
  new Promise<string>((resolve) => {
    const check = () => {
      const v = take();
      if (v === undefined) wake = check;
      else resolve(v);
    };
    check();
  });
const waitGo = () => until(() => (go ? "go" : undefined));

const client = new SqlStreams({
  connectionString: process.env.DATABASE_URL,
  ...(cfg.maxConnections !== undefined ? { maxConnections: cfg.maxConnections } : {}),
  logger: (e) => out({ event: "log", code: e.code, level: e.level, message: e.message }),
});
const g = client.stream(cfg.stream).consumer(cfg.group ?? "g");
const seen: string[] = [];

/** The payload values cfg.echo names ("a.b.0", "s.length"), for the test to check what arrived. */
function echoed(payload: unknown): Record<string, unknown> | undefined {
  if (!cfg.echo) return undefined;
  const pick = (path: string) =>
    path.split(".").reduce<unknown>((v, k) => (v === null || v === undefined ? undefined : (v as Record<string, unknown>)[k]), payload);
  return Object.fromEntries(cfg.echo.map((path) => [path, pick(path)]));
}

const hires = () => performance.timeOrigin + performance.now();

async function handler(m: Message): Promise<void> {
  seen.push(m.id);
  const start = { event: "start", id: m.id, key: m.key, attempt: m.attempt, pid: process.pid, at: Date.now(), t: hires() };
  out(cfg.echo ? { ...start, payload: echoed(m.payload) } : start);
  if (commands.lastIndexOf("die") > commands.lastIndexOf("live")) process.kill(process.pid, "SIGKILL");
  const a = cfg.actions?.[m.id] ?? cfg.defaultAction ?? "ok";
  if (a === "crash") process.kill(process.pid, "SIGKILL");
  if (a === "hang") for (;;) nap(50);
  if (a === "spin") while (!existsSync(cfg.file ?? "")) nap(10);
  if (a === "sleep") await sleep(cfg.sleepMs ?? 20);
  if (a === "wait" || a === "waitfail") await waitGo();
  if (a === "waitfail") throw new Error(`late failure ${m.id}`);
  if (a === "fail") {
    out({ event: "end", id: m.id, key: m.key, attempt: m.attempt, ok: false, at: Date.now(), t: hires() });
    throw new Error(`boom ${m.id}`);
  }
  out({ event: "end", id: m.id, key: m.key, attempt: m.attempt, ok: true, at: Date.now(), t: hires() });
}

/**
 * "loop": drains until a "stop" line (after a "go" line when cfg.waitForGo), or until cfg.stopAfter
 * handler runs or cfg.maxDrains drains; pauses cfg.pauseMs (default 20) between drains.
 */
async function loop(): Promise<void> {
  const stopped = () => commands.includes("stop");
  out({ event: "ready" });
  if (cfg.waitForGo) await waitGo();
  for (let i = 0; !stopped() && i < (cfg.maxDrains ?? Infinity) && seen.length < (cfg.stopAfter ?? Infinity); i++) {
    const at = Date.now();
    const r = await g.drain(handler, opts);
    out({ event: "drain", at, doneAt: Date.now(), started: r.started, deferred: r.deferred });
    await sleep(cfg.pauseMs ?? 20);
  }
  out({ event: "done", handled: seen.length });
}

const opts = (cfg.opts ?? {}) as PollOptions;
if (cfg.method === "commands") {
  process.on("uncaughtException", (e) => {
    out({ event: "uncaught", message: String(e?.message) });
    process.exit(70);
  });
  out({ event: "ready" });
  for (;;) {
    const cmd = await until(() => commands.shift());
    if (cmd === "exit") break;
    try {
      const report = await g[cmd === "drain" ? "drain" : "poll"](handler, opts);
      out({ event: "report", report, seen });
    } catch (e) {
      const err = e as { code?: string; message?: string };
      out({ event: "failed", code: err.code, message: err.message });
    }
  }
} else if (cfg.method === "loop") {
  await loop();
} else {
  const report = await g[cfg.method ?? "poll"](handler, opts);
  out({ event: "report", report, seen });
}
await client.close();
process.exit(0);
