// Real child Node processes for crash tests: spawn an ESM script, read its stdout as JSON lines,
// wait for a line that matches, and SIGKILL it.
//
//   import { spawnNode } from "./support/processes.js";
//   const child = spawnNode({ source: `...`, env: { DATABASE_URL: dbUrl() } });
//   await child.waitFor({ event: "handler-started", id: 3 });
//   const exit = await child.kill();          // SIGKILL, resolves once the process is gone
//   expect(exit.signal).toBe("SIGKILL");
//
// Every child still alive when the test file finishes is SIGKILLed by an afterAll hook
// (registered when this module is imported by a test file) and, as a last resort, when the
// worker process exits.
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { buildSync } from "esbuild";
import { afterAll } from "vitest";

/** Repository root (this file is test/support/processes.ts). */
export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

/**
 * Inline scripts are written here, inside the repository, so that bare imports such as
 * `import pg from "pg"` or `import { createClient } from "@sqlstreams/core"` resolve through the
 * repository's node_modules exactly as they would for a real user.
 */
const scratchDir = join(repoRoot, "node_modules", ".cache", "sqlstreams-test");

/** A JSON object printed by the child on one line of stdout. */
export type ChildMessage = Record<string, unknown>;

export type LineMatcher = ChildMessage | ((message: ChildMessage) => boolean);

export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface SpawnOptions {
  /** Path of an ESM script to run (absolute, or relative to the repository root). */
  script?: string;
  /** Source of an ESM module; written to a temporary .mjs file inside the repository. */
  source?: string;
  /** Arguments after the script path. */
  args?: string[];
  /**
   * Variables added to the inherited environment; `undefined` removes an inherited variable
   * (e.g. `{ DATABASE_URL: undefined }`).
   */
  env?: Record<string, string | undefined>;
  /** Working directory; defaults to the repository root. */
  cwd?: string;
  /** Extra flags for node itself, e.g. ["--enable-source-maps"]. */
  nodeArgs?: string[];
  /** Label used in error messages; defaults to the script name. */
  name?: string;
}

export interface WaitOptions {
  /** Give up after this long (default 30 s). */
  timeoutMs?: number;
  /** Only consider messages with index >= from (default 0: messages already received count). */
  from?: number;
}

export interface NodeChild {
  readonly name: string;
  readonly pid: number;
  readonly process: ChildProcess;
  /** Every stdout line so far, raw. */
  readonly lines: string[];
  /** Every stdout line so far that parsed as a JSON object, in order. */
  readonly messages: ChildMessage[];
  /** Everything written to stderr so far. */
  readonly stderr: () => string;
  /** Resolves once the process has exited and its stdout has been fully read. Never rejects. */
  readonly exited: Promise<ExitInfo>;
  /** The exit information, or undefined while it is running. */
  readonly exitInfo: () => ExitInfo | undefined;
  /**
   * Resolve with the first JSON message (from `from`, default 0) that matches: a function
   * predicate, or an object whose every key equals (===, or JSON-equal for objects) the
   * message's. Rejects if the child exits first or on timeout, with its stderr in the error.
   */
  waitFor(match: LineMatcher, options?: WaitOptions): Promise<ChildMessage>;
  /** As waitFor, on raw stdout lines. */
  waitForLine(match: string | RegExp | ((line: string) => boolean), options?: WaitOptions): Promise<string>;
  /** Write one JSON line (or a raw string line) to the child's stdin. */
  send(message: unknown): void;
  /** Send a signal (default SIGKILL) and resolve once the process has gone. */
  kill(signal?: NodeJS.Signals): Promise<ExitInfo>;
  /** Wait for the process to exit on its own; rejects on timeout (default 30 s). */
  waitForExit(timeoutMs?: number): Promise<ExitInfo>;
}

// One registry per worker process (module instances are re-evaluated per test file, the
// process-exit hook must be installed once and see every child).
const registryKey = Symbol.for("sqlstreams.test.children");
const globalRegistry = globalThis as unknown as Record<symbol, Set<NodeChild> | undefined>;
const installExitHook = globalRegistry[registryKey] === undefined;
const allChildren = (globalRegistry[registryKey] ??= new Set<NodeChild>());
/** Children spawned through this module instance (i.e. by the current test file). */
const live = new Set<NodeChild>();

/** Spawn `node <script>` (ESM) with piped stdio. */
export function spawnNode(options: SpawnOptions): NodeChild {
  if ((options.script === undefined) === (options.source === undefined)) {
    throw new Error("spawnNode: pass exactly one of `script` or `source`");
  }
  let scriptPath: string;
  let tempFile: string | undefined;
  if (options.source !== undefined) {
    mkdirSync(scratchDir, { recursive: true });
    tempFile = join(scratchDir, `child-${process.pid}-${randomBytes(6).toString("hex")}.mjs`);
    writeFileSync(tempFile, options.source);
    scriptPath = tempFile;
  } else {
    scriptPath = resolve(repoRoot, options.script!);
  }
  const name = options.name ?? (options.script ?? "inline script");

  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const [k, v] of Object.entries(options.env ?? {})) {
    if (v === undefined) delete env[k];
    else env[k] = v;
  }

  const proc = spawn(process.execPath, [...(options.nodeArgs ?? []), scriptPath, ...(options.args ?? [])], {
    cwd: options.cwd ?? repoRoot,
    env,
    stdio: ["pipe", "pipe", "pipe"],
  });
  const lines: string[] = [];
  const messages: ChildMessage[] = [];
  let stderr = "";
  let exit: ExitInfo | undefined;
  const listeners = new Set<() => void>();
  const notify = () => {
    for (const l of [...listeners]) l();
  };

  proc.stderr!.setEncoding("utf8");
  proc.stderr!.on("data", (chunk: string) => {
    stderr += chunk;
    if (stderr.length > 256_000) stderr = stderr.slice(-128_000);
  });
  proc.stdin!.on("error", () => {}); // EPIPE after the child died

  const rl = createInterface({ input: proc.stdout!, crlfDelay: Infinity });
  rl.on("line", (line) => {
    lines.push(line);
    const parsed = parseObject(line);
    if (parsed) messages.push(parsed);
    notify();
  });

  let spawnError: Error | undefined;
  proc.on("error", (err) => {
    spawnError = err;
  });

  const exited = new Promise<ExitInfo>((resolveExit) => {
    proc.on("close", (code, signal) => {
      exit = { code, signal };
      live.delete(child);
      allChildren.delete(child);
      if (tempFile) rmSync(tempFile, { force: true });
      notify();
      resolveExit(exit);
    });
  });

  const describeExit = () =>
    `${name} (pid ${proc.pid}) exited with ${exit?.signal ?? `code ${exit?.code}`}` +
    (spawnError ? ` [${spawnError.message}]` : "") +
    `\n--- stderr ---\n${stderr.slice(-8_000)}`;

  function waitGeneric<T, I>(
    source: I[],
    test: (item: I) => boolean,
    map: (item: I) => T,
    what: string,
    opts: WaitOptions = {},
  ): Promise<T> {
    const timeoutMs = opts.timeoutMs ?? 30_000;
    let next = opts.from ?? 0;
    return new Promise<T>((resolveWait, rejectWait) => {
      const done = () => {
        listeners.delete(check);
        clearTimeout(timer);
      };
      function check() {
        while (next < source.length) {
          const item = source[next++];
          let ok: boolean;
          try {
            ok = test(item);
          } catch (err) {
            done();
            rejectWait(err);
            return;
          }
          if (ok) {
            done();
            resolveWait(map(item));
            return;
          }
        }
        if (exit) {
          done();
          rejectWait(new Error(`waiting for ${what}, but ${describeExit()}`));
        }
      }
      const timer = setTimeout(() => {
        done();
        rejectWait(
          new Error(
            `timed out after ${timeoutMs} ms waiting for ${what} from ${name} (pid ${proc.pid}); ` +
              `last stdout lines:\n${lines.slice(-10).join("\n")}\n--- stderr ---\n${stderr.slice(-4_000)}`,
          ),
        );
      }, timeoutMs);
      listeners.add(check);
      check();
    });
  }

  const child: NodeChild = {
    name,
    pid: proc.pid ?? -1,
    process: proc,
    lines,
    messages,
    stderr: () => stderr,
    exited,
    exitInfo: () => exit,
    waitFor(match, opts) {
      const test = typeof match === "function" ? match : (m: ChildMessage) => matchesPartial(m, match);
      const what = typeof match === "function" ? "a matching message" : JSON.stringify(match);
      return waitGeneric(messages, test, (m) => m, what, opts);
    },
    waitForLine(match, opts) {
      const test =
        typeof match === "string"
          ? (l: string) => l.includes(match)
          : match instanceof RegExp
            ? (l: string) => match.test(l)
            : match;
      return waitGeneric(lines, test, (l) => l, `a stdout line matching ${String(match)}`, opts);
    },
    send(message) {
      const line = typeof message === "string" ? message : JSON.stringify(message);
      proc.stdin!.write(line + "\n");
    },
    async kill(signal = "SIGKILL") {
      if (!exit) {
        try {
          proc.kill(signal);
        } catch {
          // already gone
        }
      }
      return exited;
    },
    async waitForExit(timeoutMs = 30_000) {
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, rejectTimeout) => {
        timer = setTimeout(
          () => rejectTimeout(new Error(`${name} (pid ${proc.pid}) still running after ${timeoutMs} ms`)),
          timeoutMs,
        );
      });
      try {
        return await Promise.race([exited, timeout]);
      } finally {
        clearTimeout(timer);
      }
    },
  };
  live.add(child);
  allChildren.add(child);
  return child;
}

/** SIGKILL every child spawned by this file that is still running, and wait for them to go. */
export async function killAllChildren(): Promise<void> {
  await Promise.all([...live].map((c) => c.kill("SIGKILL")));
}

function parseObject(line: string): ChildMessage | undefined {
  const t = line.trim();
  if (!t.startsWith("{")) return undefined;
  try {
    const v: unknown = JSON.parse(t);
    return v !== null && typeof v === "object" && !Array.isArray(v) ? (v as ChildMessage) : undefined;
  } catch {
    return undefined;
  }
}

function matchesPartial(message: ChildMessage, expected: ChildMessage): boolean {
  for (const [k, v] of Object.entries(expected)) {
    const actual = message[k];
    if (actual === v) continue;
    if (v !== null && typeof v === "object" && JSON.stringify(actual) === JSON.stringify(v)) continue;
    return false;
  }
  return true;
}

// Cleanup. afterAll only works while a test file is being collected; outside vitest (or if
// imported from a non-test context) the exit hook still guarantees no orphaned pollers.
try {
  afterAll(killAllChildren);
} catch {
  // not collecting a test file
}
if (installExitHook) {
  process.on("exit", () => {
    for (const c of allChildren) {
      try {
        c.process.kill("SIGKILL");
      } catch {
        // ignore
      }
    }
  });
}

/** What test/support/poller-child.ts does: one poll or drain, or polls on command from stdin. */
export interface PollerConfig {
  stream: string;
  /** Default "g". */
  group?: string;
  /**
   * Default "poll"; "commands" runs poll/drain for each such line on stdin until "exit"; "loop"
   * drains repeatedly (see waitForGo, stopAfter, maxDrains, pauseMs) until a "stop" line.
   */
  method?: "poll" | "drain" | "commands" | "loop";
  opts?: Record<string, unknown>;
  /** What the handler does for a message id (default `defaultAction`, else ok). */
  actions?: Record<string, PollerAction>;
  defaultAction?: PollerAction;
  /** The file a "spin" handler waits for. */
  file?: string;
  /** How long a "sleep" handler sleeps (default 20 ms). */
  sleepMs?: number;
  /** Payload paths ("i", "s.length", "s.0") echoed in every start event, to check what arrived. */
  echo?: string[];
  /** Loop mode: wait for a "go" line before the first drain. */
  waitForGo?: boolean;
  /** Loop mode: stop once this many handler runs started. */
  stopAfter?: number;
  /** Loop mode: at most this many drains. */
  maxDrains?: number;
  /** Loop mode: the pause between drains (default 20 ms). */
  pauseMs?: number;
  maxConnections?: number;
}

export type PollerAction = "ok" | "crash" | "hang" | "spin" | "sleep" | "wait" | "waitfail" | "fail";

let pollerBundle: string | undefined;

/** Spawns the typed poller child (bundled once per test worker) against the database at `url`. */
export function spawnPoller(url: string, cfg: PollerConfig, name = `poller ${cfg.stream}`, nodeArgs: string[] = []): NodeChild {
  if (pollerBundle === undefined) {
    mkdirSync(scratchDir, { recursive: true });
    const outfile = join(scratchDir, `poller-${process.pid}.mjs`);
    buildSync({
      entryPoints: [join(repoRoot, "test/support/poller-child.ts")],
      bundle: true, platform: "node", format: "esm", target: "node20", packages: "external", outfile, logLevel: "error",
    });
    pollerBundle = outfile;
  }
  return spawnNode({ name, script: pollerBundle, nodeArgs, env: { DATABASE_URL: url, CHILD_CFG: JSON.stringify(cfg) } });
}
