// Embeds migrations/ into packages/core/src/generated/migrations.ts so that the library (and every
// Lambda bundle built from it) carries its schema without reading files at run time.
//
// Per scope (system: the control plane; stream: one stream's table family):
//   NNNN_*.sql      numbered, forward-only table/index migrations, applied once each in order
//                   (0001_baseline.sql creates everything a fresh schema or family needs);
//   functions/X.sql the current definition of function X (X_N for a stream family), re-created
//                   whenever the SHA-256 of the file changes (docs/protocol/data-model.md#upgrades).
// The functions are emitted in an order where each comes after the library functions it calls,
// because a LANGUAGE sql body is checked against the catalog when it is created.
//
// Checked here, so a mistake fails `npm run check` rather than a migration:
//   - a function file creates functions of its own name only, and drops nothing (the migration
//     drops every overload of the name before re-creating it);
//   - every function sets `search_path = pg_catalog, pg_temp`, unless the file says why not on a
//     line starting `-- search_path:` (a small LANGUAGE sql function the planner must inline);
//   - no numbered migration creates a function.
// `--check` fails when the generated file is out of date instead of writing it.
import { createHash } from "node:crypto";
import { readFileSync, readdirSync, writeFileSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const out = join(root, "packages/core/src/generated/migrations.ts");
const problems = [];

function numbered(scope) {
  const dir = join(root, "migrations", scope);
  return readdirSync(dir)
    .filter((f) => /^\d{4}_.*\.sql$/.test(f))
    .sort()
    .map((f, i) => {
      const sql = readFileSync(join(dir, f), "utf8");
      if (Number(f.slice(0, 4)) !== i + 1) problems.push(`migrations/${scope}/${f}: numbered files must run 0001, 0002, … without gaps`);
      if (/\bCREATE\s+(OR\s+REPLACE\s+)?(FUNCTION|PROCEDURE)\b/i.test(sql.replace(/--.*$/gm, ""))) {
        problems.push(`migrations/${scope}/${f}: functions belong in migrations/${scope}/functions/, one file each`);
      }
      return { version: i + 1, name: f, sql };
    });
}

function functions(scope) {
  const dir = join(root, "migrations", scope, "functions");
  const prefix = scope === "stream" ? "\\{\\{schema\\}\\}\\." : "__SCHEMA__\\.";
  const suffix = scope === "stream" ? "_\\{\\{N\\}\\}" : "";
  const files = readdirSync(dir)
    .filter((f) => f.endsWith(".sql"))
    .sort()
    .map((f) => {
      const name = f.slice(0, -4);
      const sql = readFileSync(join(dir, f), "utf8");
      const where = `migrations/${scope}/functions/${f}`;
      if (!/^[a-z][a-z0-9_]*$/.test(name)) problems.push(`${where}: name the file after its function (lower case)`);
      const code = sql.replace(/--.*$/gm, "");
      if (/\bDROP\s+(FUNCTION|PROCEDURE|TABLE|INDEX|TYPE|SEQUENCE)\b/i.test(code)) problems.push(`${where}: must not DROP (the migration drops the function's old overloads)`);
      const creates = [...code.matchAll(/CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+(\S+?)\s*\(/gi)].map((m) => m[1]);
      if (creates.length === 0) problems.push(`${where}: creates no function`);
      const own = new RegExp(`^${prefix}${name}${suffix}$`);
      for (const c of creates) if (!own.test(c)) problems.push(`${where}: creates ${c}; a file creates its own function only`);
      const statements = code.split(/CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION/i).slice(1);
      const hardened = statements.every((s) => /\bSET\s+search_path\s*=\s*pg_catalog\s*,\s*pg_temp\b/i.test(s.split("$fn$")[0]));
      if (!hardened && !/^-- search_path:/m.test(sql)) {
        problems.push(`${where}: add SET search_path = pg_catalog, pg_temp (or a "-- search_path:" line saying why not)`);
      }
      const hash = createHash("sha256").update(sql).digest("hex");
      return { name, hash, sql, calls: [] };
    });
  const names = new Set(files.map((f) => f.name));
  for (const f of files) {
    const code = f.sql.replace(/--.*$/gm, "");
    const re = new RegExp(`${prefix}([a-z0-9_]+?)${suffix}\\s*\\(`, "g");
    f.calls = [...new Set([...code.matchAll(re)].map((m) => m[1]))].filter((n) => n !== f.name && names.has(n));
  }
  // Callees first; ties by name, so the order (and the generated file) is stable.
  const ordered = [];
  const state = new Map();
  const visit = (f, path) => {
    if (state.get(f.name) === "done") return;
    if (state.get(f.name) === "visiting") {
      problems.push(`migrations/${scope}/functions: call cycle ${[...path, f.name].join(" -> ")}`);
      return;
    }
    state.set(f.name, "visiting");
    for (const c of f.calls.sort()) visit(files.find((x) => x.name === c), [...path, f.name]);
    state.set(f.name, "done");
    ordered.push({ name: f.name, hash: f.hash, sql: f.sql });
  };
  for (const f of files) visit(f, []);
  return ordered;
}

/** The migrations and function files of both scopes, in the order they are applied; exits on a problem. */
export function collect() {
  const parts = {
    systemMigrations: numbered("system"),
    streamMigrations: numbered("stream"),
    systemFunctions: functions("system"),
    streamFunctions: functions("stream"),
  };
  if (problems.length) {
    for (const p of problems) console.error(p);
    process.exit(1);
  }
  return parts;
}

function main() {
  const parts = collect();
  const body =
    "// Generated by scripts/gen-migrations.mjs from migrations/. Do not edit by hand.\n" +
    "export interface Migration { version: number; name: string; sql: string }\n" +
    "export interface FunctionFile { name: string; hash: string; sql: string }\n" +
    `export const systemMigrations: Migration[] = ${JSON.stringify(parts.systemMigrations, null, 2)};\n` +
    `export const streamMigrations: Migration[] = ${JSON.stringify(parts.streamMigrations, null, 2)};\n` +
    "/** The control plane's functions, each after the functions it calls. */\n" +
    `export const systemFunctions: FunctionFile[] = ${JSON.stringify(parts.systemFunctions, null, 2)};\n` +
    "/** A stream family's functions (name without the _N suffix), each after the functions it calls. */\n" +
    `export const streamFunctions: FunctionFile[] = ${JSON.stringify(parts.streamFunctions, null, 2)};\n`;

  if (process.argv.includes("--check")) {
    let current = "";
    try { current = readFileSync(out, "utf8"); } catch { /* missing */ }
    if (current !== body) {
      console.error("packages/core/src/generated/migrations.ts is out of date: run `node scripts/gen-migrations.mjs`");
      process.exit(1);
    }
  } else {
    mkdirSync(dirname(out), { recursive: true });
    writeFileSync(out, body);
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) main();
