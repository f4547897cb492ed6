#!/usr/bin/env node
// The `sqlstreams` bin. Kept in git (dist/ is built), so that `npm ci` can link it before
// `npm run build` has run: npm skips a bin whose file does not exist at install time.
try {
  await import("../dist/bin.js");
} catch (e) {
  if (e?.code === "ERR_MODULE_NOT_FOUND" && String(e.message).includes("dist/bin.js")) {
    console.error("sqlstreams: the CLI is not built yet; run `npm run build` at the repository root");
    process.exit(1);
  }
  throw e;
}
