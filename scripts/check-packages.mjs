#!/usr/bin/env node
// Checks what the workspaces would publish, from the tarballs `npm pack` makes of the built
// packages (run after `npm run build` or `npm run check`, which emit dist/):
//  - the tarball ships what runs and nothing else: LICENSE, NOTICE, README.md, package.json,
//    dist/ (and bin/ for the CLI); no .tsbuildinfo, no TypeScript source, no declaration maps,
//    and every source map carries its sources (sourcesContent), since src/ is not shipped;
//  - the metadata is complete (license, repository with its directory, homepage, bugs, keywords,
//    description, engines equal to the root's);
//  - @arethetypeswrong/cli with --profile esm-only: the packages are ESM only (`"type": "module"`,
//    exports without a `require` condition), so the node10 and node16-from-CommonJS resolutions
//    are reported but not failed; ESM under node16/nodenext and bundler resolution must be clean;
//  - publint --strict on the tarball, with no message of any level;
//  - `npm publish --dry-run` per workspace with no warning (except that the dry run is not
//    logged in to the registry, which says nothing about the package).
// Exits 1 on any problem. Usage: node scripts/check-packages.mjs [--keep DIR]
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const root = join(import.meta.dirname, "..");
const rootPkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
const keepAt = process.argv.indexOf("--keep");
const dest = keepAt > 0 ? process.argv[keepAt + 1] : mkdtempSync(join(tmpdir(), "sqlstreams-packs-"));
mkdirSync(dest, { recursive: true });
const problems = [];
const fail = (ws, message) => problems.push(`${ws}: ${message}`);

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { cwd: root, encoding: "utf8", env: { ...process.env, FORCE_COLOR: "0", NO_COLOR: "1" }, ...opts });
  return { code: r.status ?? 1, out: `${r.stdout ?? ""}${r.stderr ?? ""}`, stdout: r.stdout ?? "", stderr: r.stderr ?? "" };
}

const ALLOWED = [/^(LICENSE|NOTICE|README\.md|package\.json)$/, /^dist\/.+\.(js|d\.ts|js\.map)$/, /^bin\/[^/]+\.js$/];

function checkMetadata(ws, pkg) {
  for (const field of ["description", "license", "homepage", "keywords"]) if (!pkg[field] || pkg[field].length === 0) fail(ws, `package.json has no "${field}"`);
  if (pkg.license !== rootPkg.license) fail(ws, `license ${pkg.license} differs from the root's ${rootPkg.license}`);
  if (pkg.repository?.type !== "git" || !pkg.repository?.url || pkg.repository?.directory !== ws) fail(ws, `repository must be { type: "git", url, directory: "${ws}" }`);
  if (!pkg.bugs?.url) fail(ws, `package.json has no "bugs.url"`);
  if (pkg.engines?.node !== rootPkg.engines.node) fail(ws, `engines.node ${pkg.engines?.node} differs from the root's ${rootPkg.engines.node}`);
  for (const [name, range] of Object.entries(pkg.dependencies ?? {})) {
    if (!/^\d+\.\d+\.\d+(-[\w.]+)?$/.test(range)) fail(ws, `dependency ${name}@${range} is not pinned exactly`);
  }
}

function checkFiles(ws, tgz, files) {
  for (const f of files) {
    if (!ALLOWED.some((re) => re.test(f.path))) fail(ws, `ships ${f.path} (only LICENSE, NOTICE, README.md, package.json, dist/ and bin/ belong in the tarball)`);
  }
  for (const required of ["LICENSE", "NOTICE", "README.md"]) if (!files.some((f) => f.path === required)) fail(ws, `does not ship ${required}`);
  const maps = files.filter((f) => f.path.endsWith(".map")).map((f) => `package/${f.path}`);
  if (maps.length === 0) return;
  // Every map must embed its sources: they point at src/, which is not shipped.
  const listing = execFileSync("tar", ["-xzOf", tgz, ...maps], { encoding: "utf8", maxBuffer: 256 * 1024 * 1024 });
  const count = (listing.match(/"sourcesContent":\[/g) ?? []).length;
  if (count !== maps.length) fail(ws, `${maps.length - count} of ${maps.length} source maps lack sourcesContent`);
}

for (const ws of rootPkg.workspaces) {
  const pkg = JSON.parse(readFileSync(join(root, ws, "package.json"), "utf8"));
  console.log(`\n=== ${pkg.name} (${ws})`);
  checkMetadata(ws, pkg);

  const packed = run("npm", ["pack", "--json", "--pack-destination", dest, "-w", ws]);
  if (packed.code !== 0) {
    fail(ws, `npm pack failed:\n${packed.out}`);
    continue;
  }
  const [info] = JSON.parse(packed.stdout);
  const tgz = join(dest, info.filename);
  checkFiles(ws, tgz, info.files);
  console.log(`packed ${info.filename}: ${info.entryCount} files, ${info.size} bytes`);

  const attw = run("npx", ["--no-install", "attw", tgz, "--profile", "esm-only", "--format", "ascii", "--no-color", "--no-emoji"]);
  if (attw.code !== 0) fail(ws, `attw --profile esm-only:\n${attw.out}`);
  else console.log("attw --profile esm-only: no problem");

  const publint = run("npx", ["--no-install", "publint", "run", tgz, "--strict", "--level", "suggestion"]);
  if (publint.code !== 0 || !publint.out.includes("All good!")) fail(ws, `publint --strict:\n${publint.out}`);
  else console.log("publint --strict: all good");

  const publish = run("npm", ["publish", "--dry-run", "-w", ws]);
  const warnings = publish.stderr
    .split("\n")
    .filter((l) => /^npm (warn|WARN|error|ERR)/.test(l))
    .filter((l) => !/requires you to be logged in/.test(l));
  if (publish.code !== 0 || warnings.length > 0) fail(ws, `npm publish --dry-run:\n${warnings.join("\n") || publish.out}`);
  else console.log("npm publish --dry-run: no warning");
}

if (keepAt < 0) rmSync(dest, { recursive: true, force: true });
else console.log(`\ntarballs kept in ${dest}`);
if (problems.length > 0) {
  console.error(`\n${problems.length} problem(s):\n${problems.map((p) => `- ${p}`).join("\n")}`);
  process.exit(1);
}
console.log("\nevery package is clean");
