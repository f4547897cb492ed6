// The README's quick start as an app runs it: connect, migrate, register a stream and a consumer
// group, produce, drain the group once with a handler, read its progress and dead letters, close
// the client, exit. `DATABASE_URL=postgres://… npm run build && npm run quickstart`.
import { SqlStreams, Permanent } from "@sqlstreams/core";

const client = new SqlStreams({ connectionString: process.env.DATABASE_URL });
try {
  await client.migrate(); // idempotent; safe to race

  const orders = client.stream<{ orderId: string; total: number }>("orders.placed");
  await orders.register({ retention: 7 * 24 * 3600_000 }); // creates the stream's tables once

  await orders.produce({ orderId: "o-1", total: 42 }, { key: "customer-7", idempotencyKey: "o-1" });
  await orders.produceBatch([{ payload: { orderId: "o-2", total: 5 } }, { payload: { orderId: "o-3", total: -9 } }]);

  const scoring = orders.consumer("fraud-scoring");
  await scoring.register({ message: { timeout: 30_000, retry: { maxRetries: 5, baseDelay: 2_000 } } });

  const report = await scoring.drain(async (msg) => {
    if (msg.payload.total < 0) return Permanent(new Error("negative total")); // dead at once, no retries
    console.log(`scored ${msg.payload.orderId}`); // a throw here would be a retryable failure
  }, { deadline: Date.now() + 50_000 });

  console.log(report);
  console.log(await scoring.progress()); // head, committed, lag, exception counts, oldest unresolved age
  console.log(await scoring.failures()); // dead letters with payload, attempts, last error
} finally {
  await client.close(); // ends the pool, so the process exits
}
