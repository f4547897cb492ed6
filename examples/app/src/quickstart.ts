// The README's quick start, verbatim: connect, migrate, register a stream and a consumer group,
// produce, drain the group with a handler, read its progress, close the client so the process
// exits. `DATABASE_URL=postgres://… npm run build && npm run quickstart`.
import { SqlStreams, Permanent } from "@sqlstreams/core";

type OrderPlaced = { orderId: string; total: number };

const client = new SqlStreams({ connectionString: process.env.DATABASE_URL });
await client.migrate();                                   // creates the control plane; idempotent

const orders = client.stream<OrderPlaced>("orders.placed");
await orders.register({ retention: 7 * 24 * 3600_000 });  // creates the stream's tables once
const scoring = orders.consumer("fraud-scoring");
await scoring.register({ message: { timeout: 5_000, retry: { maxRetries: 5 } } });

await orders.produce({ orderId: "o-1", total: 42 }, { key: "customer-7", idempotencyKey: "o-1" });
await orders.produceBatch([{ payload: { orderId: "o-2", total: 5 } }, { payload: { orderId: "o-3", total: -1 } }]);

const report = await scoring.drain(async (msg) => {
  if (msg.payload.total < 0) return Permanent(new Error("negative total"));  // dead at once, no retries
  console.log(`scoring ${msg.payload.orderId} (message ${msg.id})`);          // a throw would be retried
}, { deadline: Date.now() + 30_000 });        // no handler starts that could not finish by then

console.log(`${report.succeeded} succeeded, ${report.dead} dead`);
console.log(await scoring.progress());   // head, committed, lag, leases, exception counts
await client.close();                    // ends the pool, so the script exits
