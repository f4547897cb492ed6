import { defineConfig } from "vitest/config";

// Three projects, run in this order (test/README.md has the folder convention):
//
// unit      test/unit/**: pure modules, no database and no global setup. Runs first and fast:
//           `npx vitest run --project unit`.
// main      every other *.test.ts except the isolated ones. Tests run against a real Postgres:
//           DATABASE_URL if set, else an embedded one started by the global setup. Each test file
//           creates its own database (test/support/db.ts), so files run in parallel; the machines
//           have 2 cores, hence 2 workers.
// isolated  *.isolated.test.ts, wherever they live: tests that must not share the server with
//           other work. The snapshot fence tests deliberately hold transactions open and check the
//           cluster's xmin, the round-trip budget counts statements exactly, and the deadline,
//           range-crash and frozen-backend scenarios assert wall-clock behaviour (C25, C26) that a
//           saturated 2-core machine would blur. They run after everything else, one file at a time.
const exclude = ["**/node_modules/**", "**/dist/**", "**/.sst/**", "**/.build/**"];
const ISOLATED = "test/**/*.isolated.test.ts";
const UNIT = "test/unit/**";

const shared = {
  exclude,
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
        test: { name: "unit", include: [`${UNIT}/*.test.ts`], testTimeout: 10_000, sequence: { groupOrder: 0 } },
      },
      {
        extends: true,
        test: {
          name: "main",
          include: ["test/**/*.test.ts"],
          exclude: [...exclude, UNIT, ISOLATED],
          globalSetup: ["test/support/global-setup.ts"],
          sequence: { groupOrder: 1 },
        },
      },
      {
        extends: true,
        test: {
          name: "isolated",
          include: [ISOLATED],
          globalSetup: ["test/support/global-setup.ts"],
          fileParallelism: false,
          sequence: { groupOrder: 2 },
        },
      },
    ],
  },
});
