// No import cycle in the packages' sources, type-only imports included. eslint's import-x/no-cycle
// guards value imports but skips `import type` (it has no option to include them); this check walks
// every import and re-export of packages/*/src (relative ones, and @sqlstreams/* across packages)
// and fails on any cycle. Run by `npm run check`.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import ts from "typescript";

const root = resolve(import.meta.dirname, "..");
const packages = readdirSync(join(root, "packages")).filter((p) => existsSync(join(root, "packages", p, "src")));
const entry = new Map(packages.map((p) => {
  const pkg = JSON.parse(readFileSync(join(root, "packages", p, "package.json"), "utf8"));
  return [pkg.name, join(root, "packages", p, "src", "index.ts")];
}));

function sources(dir) {
  return readdirSync(dir).flatMap((f) => {
    const path = join(dir, f);
    if (statSync(path).isDirectory()) return sources(path);
    return /\.ts$/.test(f) && !/\.d\.ts$/.test(f) ? [path] : [];
  });
}

/** The file an import names, or null for a module outside the packages. */
function target(from, spec) {
  if (spec.startsWith(".")) {
    const base = resolve(dirname(from), spec).replace(/\.js$/, "");
    return [`${base}.ts`, join(base, "index.ts")].find(existsSync) ?? null;
  }
  return entry.get(spec) ?? null;
}

const files = packages.flatMap((p) => sources(join(root, "packages", p, "src")));
const edges = new Map(files.map((f) => {
  // preProcessFile lists every import, `import type` and `export … from` included.
  const { importedFiles } = ts.preProcessFile(readFileSync(f, "utf8"), true, true);
  return [f, [...new Set(importedFiles.map((i) => target(f, i.fileName)).filter((t) => t !== null))]];
}));

// Tarjan's strongly connected components: a component of more than one file (or a file that
// imports itself) is a cycle.
let index = 0;
const idx = new Map();
const low = new Map();
const stack = [];
const on = new Set();
const cycles = [];
function visit(v) {
  idx.set(v, index);
  low.set(v, index++);
  stack.push(v);
  on.add(v);
  for (const w of edges.get(v) ?? []) {
    if (!idx.has(w)) {
      visit(w);
      low.set(v, Math.min(low.get(v), low.get(w)));
    } else if (on.has(w)) low.set(v, Math.min(low.get(v), idx.get(w)));
  }
  if (low.get(v) !== idx.get(v)) return;
  const scc = [];
  let w;
  do {
    w = stack.pop();
    on.delete(w);
    scc.push(w);
  } while (w !== v);
  if (scc.length > 1 || (edges.get(v) ?? []).includes(v)) cycles.push(scc);
}
for (const f of files) if (!idx.has(f)) visit(f);

if (cycles.length > 0) {
  for (const c of cycles) console.error(`import cycle (type imports included): ${c.map((f) => relative(root, f)).sort().join(" <-> ")}`);
  console.error("break it: move the shared type to a module both import, or pass it down");
  process.exit(1);
}
console.log(`import cycles: none in ${files.length} files (type imports included)`);
