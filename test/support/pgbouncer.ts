// A real PgBouncer (Debian's package) started by a test, in front of the test's Postgres: its
// own config in a temp folder, a free port, SCRAM authentication checked by PgBouncer itself
// (auth_query against pg_shadow, so ALTER ROLE … PASSWORD takes effect at once) and transaction
// pooling. Tests that need it skip with a message where the binary is not installed.
import { setTimeout as sleep } from "node:timers/promises";
import { spawn, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { chmod, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const PGBOUNCER_BIN = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"].find((p) => existsSync(p));

export interface PgBouncer {
  /** host:port of the pooler, for building URLs. */
  host: string;
  port: number;
  /** `url` with host and port replaced by the pooler's. */
  urlFor(url: string): string;
  log(): Promise<string>;
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** Starts PgBouncer in front of the server of `serverUrl` (or of a host:port given explicitly). */
export async function startPgBouncer(serverUrl: string, opts: { serverHost?: string; serverPort?: number; poolSize?: number } = {}): Promise<PgBouncer> {
  if (!PGBOUNCER_BIN) throw new Error("pgbouncer is not installed");
  const server = new URL(serverUrl);
  const adminPassword = decodeURIComponent(server.password);
  const dir = await mkdtemp(join(tmpdir(), "sqlstreams-pgbouncer-"));
  await chmod(dir, 0o777);
  const port = await freePort();
  const ini = [
    "[databases]",
    `* = host=${opts.serverHost ?? server.hostname} port=${opts.serverPort ?? Number(server.port || 5432)}`,
    "[pgbouncer]",
    "listen_addr = 127.0.0.1",
    `listen_port = ${port}`,
    "unix_socket_dir =",
    "auth_type = scram-sha-256",
    `auth_file = ${join(dir, "userlist.txt")}`,
    `auth_user = ${decodeURIComponent(server.username) || "postgres"}`,
    "auth_query = SELECT usename, passwd FROM pg_shadow WHERE usename = $1",
    "pool_mode = transaction",
    `default_pool_size = ${opts.poolSize ?? 5}`,
    "max_client_conn = 200",
    `logfile = ${join(dir, "pgbouncer.log")}`,
    `pidfile = ${join(dir, "pgbouncer.pid")}`,
    "ignore_startup_parameters = extra_float_digits",
    "",
  ].join("\n");
  await writeFile(join(dir, "pgbouncer.ini"), ini);
  await writeFile(join(dir, "userlist.txt"), `"${decodeURIComponent(server.username) || "postgres"}" "${adminPassword}"\n`);
  // PgBouncer refuses to run as root: it drops to the postgres user, which must read the folder.
  const asRoot = process.getuid?.() === 0;
  if (asRoot) spawnSync("chown", ["-R", "postgres", dir]);
  const child = spawn(PGBOUNCER_BIN, [...(asRoot ? ["-u", "postgres"] : []), join(dir, "pgbouncer.ini")], { stdio: "ignore" });
  child.on("error", () => {});
  const log = () => readFile(join(dir, "pgbouncer.log"), "utf8").catch(() => "");
  const urlFor = (u: string) => {
    const x = new URL(u);
    x.hostname = "127.0.0.1";
    x.port = String(port);
    return x.toString();
  };
  // Ready when it listens (a login would need a password the trust-auth server may not have).
  const until = Date.now() + 20_000;
  while (!(await log()).includes("process up")) {
    if (Date.now() > until || child.exitCode !== null) throw new Error(`pgbouncer did not start:\n${await log()}`);
    await sleep(100);
  }
  return {
    host: "127.0.0.1",
    port,
    urlFor,
    log,
    async stop() {
      if (child.exitCode === null) {
        const exited = new Promise((r) => child.once("exit", r));
        child.kill("SIGTERM");
        await Promise.race([exited, new Promise((r) => setTimeout(r, 5_000))]);
        if (child.exitCode === null) child.kill("SIGKILL");
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}
