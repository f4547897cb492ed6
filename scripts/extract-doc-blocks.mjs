// Extracts every TypeScript block (```ts) of README.md and docs/**/*.md into one .ts file per
// block, plus a prelude and a tsconfig.json, so that `npx tsc -p <outDir>` type-checks them
// against the @sqlstreams/* packages that <outDir> resolves (the workspaces inside this
// repository, the packed tarballs in an app). The block kinds and their markers are described in
// docs/README.md#code-blocks-are-checked:
//   (no marker)        a complete module, checked as written;
//   // fragment …      imports hoisted, the rest wrapped in an async function, prelude names in scope;
//   // sst-config …    the run() body of an sst.config.ts (or a whole one): written to <outDir>/sst/
//                      and checked by <outDir>/tsconfig.sst.json against SST's generated platform
//                      types, which exist only in an app after `sst install` (--sst-platform PATH
//                      to its .sst/platform/config.d.ts; without it those blocks are listed, not checked).
//
//   node scripts/extract-doc-blocks.mjs <outDir> [--sst-platform PATH]
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
const outDir = args[0] && !args[0].startsWith("--") ? resolve(args[0]) : null;
if (!outDir) {
  console.error("usage: node scripts/extract-doc-blocks.mjs <outDir> [--sst-platform PATH]");
  process.exit(2);
}
const platformAt = args.indexOf("--sst-platform");
const sstPlatform = platformAt >= 0 ? resolve(args[platformAt + 1] ?? "") : null;

const walk = (dir) =>
  readdirSync(dir)
    .sort()
    .flatMap((f) => {
      const p = join(dir, f);
      return statSync(p).isDirectory() ? walk(p) : p.endsWith(".md") ? [p] : [];
    });
const pages = [join(root, "README.md"), ...walk(join(root, "docs"))];

/** Every ```ts / ```typescript block of a page: its first line number and its text, de-indented. */
function blocksOf(page) {
  const lines = readFileSync(page, "utf8").split("\n");
  const blocks = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)(`{3,}|~{3,})\s*([\w-]*)/.exec(lines[i]);
    if (!open) continue;
    const [, indent, fence, lang] = open;
    const body = [];
    let j = i + 1;
    for (; j < lines.length; j++) {
      if (lines[j].trimStart().startsWith(fence) && lines[j].trim() === lines[j].trim().replace(/[^`~]/g, "")) break;
      body.push(lines[j].startsWith(indent) ? lines[j].slice(indent.length) : lines[j].trimStart());
    }
    if (lang === "ts" || lang === "typescript") blocks.push({ line: i + 1, text: body.join("\n") });
    i = j;
  }
  return blocks;
}

/** Splits a block into its import statements (possibly multi-line) and the rest. */
function splitImports(text) {
  const imports = [];
  const rest = [];
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    if (/^import\s/.test(lines[i])) {
      const stmt = [lines[i]];
      while (!/from\s+["'][^"']+["'];?\s*(\/\/.*)?$|^import\s+["'][^"']+["'];?\s*$/.test(stmt.at(-1)) && i + 1 < lines.length) stmt.push(lines[++i]);
      imports.push(stmt.join("\n"));
    } else rest.push(lines[i]);
  }
  return { imports, rest: rest.join("\n") };
}

/** Names bound by import statements (default, namespace, named, `type` named). */
function importedNames(imports) {
  const names = new Set();
  for (const stmt of imports) {
    const clause = /^import\s+(?:type\s+)?([\s\S]*?)\s+from\s/.exec(stmt)?.[1] ?? "";
    const named = /\{([\s\S]*)\}/.exec(clause)?.[1] ?? "";
    for (const part of named.split(",")) {
      const n = part.trim().replace(/^type\s+/, "").split(/\s+as\s+/).at(-1)?.trim();
      if (n) names.add(n);
    }
    const outside = clause.replace(/\{[\s\S]*\}/, "").replace(/\*\s+as\s+(\w+)/, (_, n) => (names.add(n), "")).split(",");
    for (const n of outside.map((s) => s.trim()).filter(Boolean)) names.add(n);
  }
  return names;
}

const preludeSource = readFileSync(join(root, "scripts/doc-blocks-prelude.ts"), "utf8");
const preludeNames = [...preludeSource.matchAll(/^export\s+(?:declare\s+)?(?:const|let|function|class|interface|type|async function)\s+(\w+)/gm)].map((m) => m[1]);

/** The body of a fragment: `export` dropped (checked as a plain declaration), indented. */
const wrapBody = (rest) =>
  rest
    .split("\n")
    .map((l) => (l ? "  " + l.replace(/^export\s+(?=(const|let|async|function|interface|type|class)\b)/, "") : l))
    .join("\n");

function fragmentFile(text, preludePath) {
  const { imports, rest } = splitImports(text);
  // A relative import names a file of the imagined app: the prelude stands in for it.
  const kept = imports.filter((s) => !/from\s+["']\.{1,2}\//.test(s));
  const taken = importedNames(kept);
  const fromPrelude = preludeNames.filter((n) => !taken.has(n));
  return [
    ...kept,
    `import { ${fromPrelude.join(", ")} } from "${preludePath}";`,
    "",
    "export async function block(): Promise<void> {",
    wrapBody(rest),
    "}",
    "",
  ].join("\n");
}

function sstFile(text) {
  const body = text.replace(/^\/\/\/\s*<reference path=.*\n/m, "");
  if (/\$config\s*\(/.test(body)) return body + "\n";
  const { imports, rest } = splitImports(body);
  return [
    ...imports.filter((s) => !/from\s+["']\.{1,2}\//.test(s)),
    "",
    "export default $config({",
    '  app: () => ({ name: "doc-block", home: "aws" }),',
    "  async run() {",
    wrapBody(rest).replace(/^/gm, "  "),
    "  },",
    "});",
    "",
  ].join("\n");
}

rmSync(outDir, { recursive: true, force: true });
mkdirSync(join(outDir, "sst"), { recursive: true });
writeFileSync(join(outDir, "prelude.ts"), preludeSource);
// The app file the sst-config blocks import their groups from (`await import("./src/streams/groups.js")`).
mkdirSync(join(outDir, "sst/src/streams"), { recursive: true });
writeFileSync(
  join(outDir, "sst/src/streams/groups.ts"),
  'import type { GroupDeclaration } from "@sqlstreams/aws";\n\nexport declare const groups: GroupDeclaration[];\n',
);
writeFileSync(join(outDir, "package.json"), JSON.stringify({ private: true, type: "module" }, null, 2) + "\n");

// Peers whose own declarations fail skipLibCheck: false (drizzle-orm 0.45: errors in its gel,
// mysql, singlestore and sqlite modules). Blocks importing one are checked by tsconfig.peers.json,
// the same options with skipLibCheck: true; every other block, and so every declaration file of
// @sqlstreams/*, under skipLibCheck: false.
const LIB_CHECK_EXEMPT = ["drizzle-orm"];
const exempt = [];

const counts = { module: 0, fragment: 0, "sst-config": 0 };
for (const page of pages) {
  const rel = relative(root, page);
  for (const block of blocksOf(page)) {
    const first = block.text.split("\n", 1)[0].trim();
    const kind = /^\/\/\s*fragment\b/.test(first) ? "fragment" : /^\/\/\s*sst-config\b/.test(first) ? "sst-config" : "module";
    const name = `${rel.replace(/[/\\]/g, "_")}_L${block.line}.ts`;
    const header = `// ${rel}:${block.line} (${kind})\n`;
    if (kind === "module") writeFileSync(join(outDir, name), header + block.text + "\nexport {};\n");
    else if (kind === "fragment") writeFileSync(join(outDir, name), header + fragmentFile(block.text, "./prelude.js"));
    else writeFileSync(join(outDir, "sst", name), header + sstFile(block.text));
    if (kind !== "sst-config" && LIB_CHECK_EXEMPT.some((p) => new RegExp(`from\\s+["']${p}(/[^"']*)?["']`).test(block.text))) exempt.push(name);
    counts[kind]++;
  }
}

const compilerOptions = {
  target: "ES2022",
  module: "NodeNext",
  moduleResolution: "NodeNext",
  strict: true,
  noEmit: true,
  skipLibCheck: false,
  types: ["node"],
};
writeFileSync(join(outDir, "tsconfig.json"), JSON.stringify({ compilerOptions, include: ["*.ts"], exclude: exempt }, null, 2) + "\n");
writeFileSync(
  join(outDir, "tsconfig.peers.json"),
  JSON.stringify({ compilerOptions: { ...compilerOptions, skipLibCheck: true }, files: ["prelude.ts", ...exempt] }, null, 2) + "\n",
);
if (sstPlatform) {
  if (!existsSync(sstPlatform)) {
    console.error(`--sst-platform ${sstPlatform}: no such file (run \`sst install\` in the app first)`);
    process.exit(1);
  }
  // SST bundles the config itself; its own types are checked as SST's templates are (Bundler, skipLibCheck).
  const sstOptions = { ...compilerOptions, module: "ESNext", moduleResolution: "Bundler", skipLibCheck: true };
  writeFileSync(join(outDir, "tsconfig.sst.json"), JSON.stringify({ compilerOptions: sstOptions, files: [sstPlatform], include: ["sst/**/*.ts"] }, null, 2) + "\n");
}
const out = relative(process.cwd(), outDir) || ".";
console.log(
  `${counts.module} module and ${counts.fragment} fragment block(s) in ${out}: npx tsc -p ${out} && npx tsc -p ${join(out, "tsconfig.peers.json")}` +
    (counts["sst-config"] === 0 ? "" : sstPlatform ? `; ${counts["sst-config"]} sst-config block(s): npx tsc -p ${relative(process.cwd(), join(outDir, "tsconfig.sst.json"))}` : `; ${counts["sst-config"]} sst-config block(s) in sst/ not checked without --sst-platform`),
);
