// Every comment that cites the protocol cites a section that exists in this repository:
// `docs/<part>/<page>.md#<anchor>` (or `README.md#<anchor>`) must name a real page and heading, and no
// comment may cite section numbers of a document that is not here. Run by `npm run check`.
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";

const files = execFileSync("git", ["ls-files", "--cached", "--others", "--exclude-standard"], { encoding: "utf8" })
  .split("\n")
  .filter((f) => /\.(ts|mts|mjs|js|sql)$/.test(f) && !f.startsWith("packages/core/src/generated/") && existsSync(f));

// GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens.
const slug = (heading) => heading.trim().toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, "").replace(/\s/g, "-");
const anchors = new Map();
function anchorsOf(page) {
  if (!anchors.has(page)) {
    const text = existsSync(page) ? readFileSync(page, "utf8").replace(/```[\s\S]*?```/g, "") : null;
    anchors.set(page, text === null ? null : new Set([...text.matchAll(/^#{1,6}\s+(.+)$/gm)].map((m) => slug(m[1]))));
  }
  return anchors.get(page);
}

const problems = [];
for (const file of files) {
  const lines = readFileSync(file, "utf8").split("\n");
  lines.forEach((line, i) => {
    const where = `${file}:${i + 1}`;
    if (/§\s?\d/.test(line) || /\bSPEC\b/.test(line)) problems.push(`${where}: cites a section of a document outside the repository (use docs/<part>/<page>.md#<section>)`);
    for (const m of line.matchAll(/\b((?:docs\/(?:[a-z0-9-]+\/)*(?:[a-z0-9-]+|README)|README)\.md)(?:#([a-z0-9_-]+))?/g)) {
      const set = anchorsOf(m[1]);
      if (set === null) problems.push(`${where}: ${m[1]} does not exist`);
      else if (m[2] && !set.has(m[2])) problems.push(`${where}: ${m[1]} has no section #${m[2]}`);
    }
  });
}
if (problems.length > 0) {
  console.error(problems.join("\n"));
  process.exit(1);
}
