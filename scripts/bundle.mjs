#!/usr/bin/env node
// Bundles every Lambda entry point of functions/ into one self-contained ESM file each:
//   .build/functions/handlers/<group>.mjs   one per file in functions/handlers/
//   .build/functions/maintain.mjs, migrate.mjs, dashboard.mjs
//   .build/functions/groups.mjs             the declaration, for `sqlstreams dev`
// Run by `npm run build` after tsc (the functions import the built workspace packages).
// Usage: node scripts/bundle.mjs [--quiet] [--outdir <dir>]
import { existsSync, readdirSync, rmSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const functionsDir = join(root, "functions");
const outIndex = process.argv.indexOf("--outdir");
const outdir = outIndex > 0 && process.argv[outIndex + 1] ? resolve(process.argv[outIndex + 1]) : join(root, ".build", "functions");
const quiet = process.argv.includes("--quiet");

/** Every entry point, as a path relative to functions/ without extension. */
function entryPoints() {
  const out = [];
  for (const name of ["groups", "maintain", "migrate", "dashboard"]) {
    if (existsSync(join(functionsDir, `${name}.ts`))) out.push(name);
  }
  const handlers = join(functionsDir, "handlers");
  if (existsSync(handlers)) {
    for (const f of readdirSync(handlers).sort()) {
      if (f.endsWith(".ts") && !f.endsWith(".d.ts") && !f.endsWith(".test.ts")) out.push(`handlers/${f.slice(0, -3)}`);
    }
  }
  return out;
}

const entries = entryPoints();
rmSync(outdir, { recursive: true, force: true });

const result = await build({
  absWorkingDir: root,
  entryPoints: Object.fromEntries(entries.map((e) => [e, join(functionsDir, `${e}.ts`)])),
  outdir,
  outExtension: { ".js": ".mjs" },
  bundle: true,
  format: "esm",
  platform: "node",
  target: "node20",
  minify: true,
  sourcemap: false,
  splitting: false,
  legalComments: "none",
  // pg requires pg-native only when asked for native bindings; never bundled.
  external: ["pg-native"],
  // CommonJS dependencies (pg, the AWS SDK) call require() for Node built-ins.
  banner: { js: 'import{createRequire as __sqlsCreateRequire}from"node:module";const require=__sqlsCreateRequire(import.meta.url);' },
  metafile: true,
  logLevel: "warning",
});

if (!quiet) {
  const rows = Object.entries(result.metafile.outputs)
    .map(([file, o]) => [relative(root, join(root, file)), o.bytes])
    .sort((a, b) => a[0].localeCompare(b[0]));
  for (const [file, bytes] of rows) console.log(`${file.padEnd(48)} ${(bytes / 1024).toFixed(1).padStart(8)} KiB`);
}
