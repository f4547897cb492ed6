import { defineConfig } from "vitest/config";

// Tests run against a real Postgres: DATABASE_URL if set, else an embedded one started by the
// global setup. Each test file creates its own database (test/support/db.ts), so files can run
// in parallel; the machines have 2 cores, hence 2 workers.
//
// test/isolated/ holds tests that must not share the server with other work: the snapshot
// fence tests deliberately hold transactions open and check the cluster's xmin, the round-trip budget counts statements exactly, and
// the deadline and range-crash scenarios assert wall-clock behaviour (C25, C26) that a
// saturated 2-core machine would blur. They run after everything else, one file at a time.
const shared = {
  exclude: ["**/node_modules/**", "**/dist/**", "**/.sst/**", "**/.build/**"],
  globalSetup: ["test/support/global-setup.ts"],
  pool: "forks" as const,
  testTimeout: 60_000,
  hookTimeout: 60_000,
  teardownTimeout: 30_000,
  printConsoleTrace: false,
};

export default defineConfig({
  test: {
    ...shared,
    maxWorkers: 2,
    projects: [
      {
        extends: true,
        test: { name: "main", include: ["test/**/*.test.ts"], exclude: [...shared.exclude, "test/isolated/**"], sequence: { groupOrder: 0 } },
      },
      {
        extends: true,
        test: { name: "isolated", include: ["test/isolated/**/*.test.ts"], fileParallelism: false, sequence: { groupOrder: 1 } },
      },
    ],
  },
});
