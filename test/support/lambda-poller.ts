// Spawns ./lambda-poller-child.ts (bundled once per test worker): a poll Lambda's container as a
// real process, invoking the real handler in a loop.
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { buildSync } from "esbuild";
import { type NodeChild, repoRoot, spawnNode } from "./processes.js";

export interface LambdaPollerConfig {
  stream: string;
  group: string;
  /** The pause between the end of an invocation and the next one (the schedule). */
  pauseMs: number;
  /** Up to this much is added to each pause at random. Default 0. */
  jitterMs?: number;
  /** Each invocation's budget (localContext). Default 60 000 (a message needs its timeout to fit). */
  budgetMs?: number;
  /** How long the handler takes per message. Default 0. */
  handlerMs?: number;
}

let bundle: string | undefined;

/** Starts one container; `env` adds the provider's settings (SQLSTREAMS_DB_IDLE_TIMEOUT_MS, …). */
export function spawnLambdaPoller(url: string, cfg: LambdaPollerConfig, name: string, env: Record<string, string> = {}): NodeChild {
  if (bundle === undefined) {
    const dir = join(repoRoot, "node_modules", ".cache", "sqlstreams-test");
    mkdirSync(dir, { recursive: true });
    const outfile = join(dir, `lambda-poller-${process.pid}.mjs`);
    buildSync({
      entryPoints: [join(repoRoot, "test/support/lambda-poller-child.ts")],
      bundle: true, platform: "node", format: "esm", target: "node20", packages: "external", outfile, logLevel: "error",
    });
    bundle = outfile;
  }
  return spawnNode({
    name,
    script: bundle,
    env: { DATABASE_URL: url, CHILD_CFG: JSON.stringify(cfg), AWS_LAMBDA_FUNCTION_NAME: name, SQLSTREAMS_DB_SECRET_ARN: undefined, ...env },
  });
}
