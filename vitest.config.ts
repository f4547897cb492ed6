import { defineConfig } from "vitest/config";

// Tests run against a real Postgres: DATABASE_URL if set, else an embedded one started by the
// global setup. Each test file creates its own database (test/support/db.ts), so files can run
// in parallel; the machines have 2 cores, hence 2 workers.
export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    exclude: ["**/node_modules/**", "**/dist/**", "**/.sst/**", "**/.build/**"],
    globalSetup: ["test/support/global-setup.ts"],
    pool: "forks",
    maxWorkers: 2,
    fileParallelism: true,
    testTimeout: 60_000,
    hookTimeout: 60_000,
    teardownTimeout: 30_000,
    // Scenario tests print structured logs; keep failures readable.
    printConsoleTrace: false,
  },
});
