#!/usr/bin/env node
// Generates the Prisma client of the adapter test (test/prisma/schema.prisma → test/prisma/generated,
// not committed), so `npm run check` can type-check and the tests can import it. Skipped when the
// output is already there for this schema and this Prisma version (a stamp file records both).
// Prisma's CLI wants a schema-engine binary at start-up, which it would download; `generate` never
// runs it, so the CLI is pointed at /bin/true instead and nothing is fetched. No telemetry.
import { createHash } from "node:crypto";
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const schema = join(root, "test", "prisma", "schema.prisma");
const out = join(root, "test", "prisma", "generated");
const stampFile = join(out, ".stamp");
const version = JSON.parse(readFileSync(join(root, "node_modules", "prisma", "package.json"), "utf8")).version;
const stamp = createHash("sha256").update(version).update(readFileSync(schema)).digest("hex");

if (existsSync(join(out, "client.ts")) && existsSync(stampFile) && readFileSync(stampFile, "utf8") === stamp) process.exit(0);

execFileSync(process.execPath, [join(root, "node_modules", "prisma", "build", "index.js"), "generate", "--schema", schema], {
  cwd: root,
  stdio: process.argv.includes("--quiet") ? "ignore" : "inherit",
  env: {
    ...process.env,
    PRISMA_SCHEMA_ENGINE_BINARY: "/bin/true",
    CHECKPOINT_DISABLE: "1",
    PRISMA_HIDE_UPDATE_MESSAGE: "1",
  },
});
writeFileSync(stampFile, stamp);
