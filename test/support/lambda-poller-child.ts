// A poll Lambda's container as a real process: the real handler (createPollHandler) invoked in a
// loop the way the Lambda runtime would on a schedule, one DatabaseProvider (and so one pool)
// kept across invocations. Bundled and spawned by spawnLambdaPoller() (./lambda-poller.ts); reads
// its LambdaPollerConfig from CHILD_CFG, the database from DATABASE_URL and the provider's
// settings (SQLSTREAMS_DB_IDLE_TIMEOUT_MS, AWS_LAMBDA_FUNCTION_NAME) from the environment.
// Writes JSON lines to stdout:
//   { event: "ready" }
//   { event: "handled", id }                                  every handler run
//   { event: "invocation", n, at, doneAt, ok, started?, code?, cause? }   after each invocation
//   { event: "done", invocations }                            after a "stop" line on stdin
import { setTimeout as sleep } from "node:timers/promises";
import { createInterface } from "node:readline";
import { DatabaseProvider, createPollHandler, localContext } from "@sqlstreams/aws";
import type { LambdaPollerConfig } from "./lambda-poller.js";

const cfg = JSON.parse(process.env.CHILD_CFG ?? "{}") as LambdaPollerConfig;
const out = (o: Record<string, unknown>) => process.stdout.write(JSON.stringify(o) + "\n");

let stopped = false;
createInterface({ input: process.stdin }).on("line", (l) => {
  if (l.trim() === "stop") stopped = true;
});

const database = new DatabaseProvider({ waker: false, logger: () => {} });
const handler = createPollHandler({
  stream: cfg.stream,
  group: cfg.group,
  database,
  log: () => {},
  metrics: false,
  handle: async (m) => {
    out({ event: "handled", id: m.id });
    if (cfg.handlerMs) await sleep(cfg.handlerMs);
  },
});

out({ event: "ready" });
let n = 0;
while (!stopped) {
  n++;
  const at = Date.now();
  try {
    const r = await handler({ stream: cfg.stream, group: cfg.group }, localContext(cfg.budgetMs ?? 60_000));
    out({ event: "invocation", n, at, doneAt: Date.now(), ok: true, started: r.started });
  } catch (e) {
    const err = e as { code?: string; cause?: { code?: string } };
    out({ event: "invocation", n, at, doneAt: Date.now(), ok: false, code: err.code, cause: err.cause?.code });
  }
  // The schedule's next tick, spread a little as independent containers' ticks are.
  await sleep(cfg.pauseMs + Math.floor(Math.random() * (cfg.jitterMs ?? 0)));
}
out({ event: "done", invocations: n });
await database.close();
process.exit(0);
