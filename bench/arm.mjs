// Runs ONE arm in a fresh process (spawned by bench/run.mjs) against the database it was given,
// and prints its result as one line `BENCH_RESULT {...}` on stdout. A fresh process per arm keeps
// one arm's timers, pools, JIT state and garbage out of the next arm's figures.
import { floorCopy, floorInsert, floorRead, floorReadSetup, floorReadTwo } from "./arms/floors.mjs";
import { graphileWorker, graphileWorker18, pgBoss, pgBoss12 } from "./arms/peers.mjs";
import { enableProfiling, setBenchDatabase, setPayloadShape } from "./lib/common.mjs";

const ours = () => import("./arms/ours.mjs");
const curve = () => import("./arms/curve.mjs");
const intx = () => import("./arms/intx.mjs");
const pgq = () => import("./arms/pgq.mjs");
const streams = () => import("./arms/streams.mjs");
const latencyArms = () => import("./arms/latency.mjs");

export const ARMS = {
  "floor-insert": { run: floorInsert },
  "floor-read": { setup: floorReadSetup, run: floorRead },
  "floor-read-2x": { setup: floorReadSetup, run: floorReadTwo },
  "floor-copy": { setup: floorReadSetup, run: floorCopy },
  pgq: { run: async (ctx) => (await pgq()).pgqArm(ctx) },
  streams: { run: async (ctx) => (await streams()).streamsArm(ctx) },
  produce: { run: async (ctx) => (await ours()).produce(ctx) },
  consume: { run: async (ctx) => (await ours()).consume(ctx) },
  "consume-defaults": { run: async (ctx) => (await ours()).consume({ ...ctx, defaults: true }) },
  "consume-batch": { run: async (ctx) => (await ours()).consume({ ...ctx, batch: true }) },
  "consume-2groups": { run: async (ctx) => (await ours()).consumeTwoGroups(ctx) },
  "produce-consume": { run: async (ctx) => (await ours()).produceConsume(ctx) },
  ordered: { run: async (ctx) => (await ours()).ordered(ctx) },
  failing: { run: async (ctx) => (await ours()).failing(ctx) },
  latency: { run: async (ctx) => (await latencyArms()).latencyArm(ctx) },
  "consume-10k": { run: async (ctx) => (await curve()).consumeCurve(ctx) },
  "consume-100k": { run: async (ctx) => (await curve()).consumeCurve(ctx) },
  "consume-1m": { run: async (ctx) => (await curve()).consumeCurve(ctx) },
  "produce-1m": { run: async (ctx) => (await curve()).produceCurve(ctx) },
  idle: { run: async (ctx) => (await curve()).idle(ctx) },
  "produce-tx": { run: async (ctx) => (await intx()).produceTx(ctx) },
  pgboss: { run: pgBoss },
  graphile: { run: graphileWorker },
  pgboss12: { run: pgBoss12 },
  graphile18: { run: graphileWorker18 },
};

async function main() {
  const ctx = JSON.parse(process.env.BENCH_ARM_CTX ?? "{}");
  ctx.errors = [];
  if (ctx.profile) enableProfiling(ctx.arm);
  setBenchDatabase(ctx.dbName, ctx.nice ?? null);
  setPayloadShape(ctx.shape);
  const arm = ARMS[ctx.arm];
  if (!arm) throw new Error(`unknown arm ${ctx.arm}`);
  if (arm.setup) await arm.setup(ctx);
  const result = await arm.run(ctx);
  result.errors = [...(result.errors ?? []), ...ctx.errors].slice(0, 20);
  process.stdout.write(`BENCH_RESULT ${JSON.stringify(result)}\n`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().then(
    () => process.exit(0),
    (e) => {
      process.stdout.write(`BENCH_RESULT ${JSON.stringify({ failed: String(e?.stack ?? e), check: { ok: false }, metrics: {} })}\n`);
      process.exit(1);
    },
  );
}
