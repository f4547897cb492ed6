// The whole path of the app against a real Postgres (DATABASE_URL, a database of its own): the
// migrate function registers groups.ts, orders are placed from a Drizzle transaction and from SQL,
// the two groups' Lambda poll handlers run locally, and the end states are read back with
// progress() and failures(). Exits non-zero on the first state that is not as expected.
import { closeDefaultDatabase, localContext } from "@sqlstreams/aws";
import { SqlStreams, type Consumer, type Progress } from "@sqlstreams/core";
import { drizzleExecutor } from "@sqlstreams/core/drizzle";
import { TransactionRollbackError } from "drizzle-orm";
import { drizzle } from "drizzle-orm/node-postgres";
import pg from "pg";
import { CREATE_ORDERS, orders } from "./db.js";
import * as confirmationEmails from "./handlers/confirmation-emails.js";
import * as loyaltyPoints from "./handlers/loyalty-points.js";
import { placeOrder, placeOrderFromSql } from "./orders.js";
import { ordersPlaced, type OrderPlaced } from "./streams/definitions.js";
import { handler as migrate } from "./streams/migrate.js";

function expect(ok: boolean, what: string, actual: unknown): asserts ok {
  if (!ok) throw new Error(`e2e: expected ${what}, got ${JSON.stringify(actual)}`);
  console.log(`ok: ${what}`);
}

const exceptions = (p: Progress) => Object.fromEntries(Object.entries(p.exceptions).filter(([, n]) => n > 0));

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 4 });
const client = new SqlStreams({ pool });
try {
  // What the component's migrate function does on every deploy, run here with DATABASE_URL.
  const migrated = await migrate({}, localContext(30_000));
  expect(migrated.groups.join(",") === "shop.orders/confirmation-emails,shop.orders/loyalty-points", "the migrate handler to register both groups", migrated.groups);
  await pool.query(CREATE_ORDERS);

  const db = drizzle({ client: pool });
  const sendAfter = Date.now() + 1_500;
  const a = await placeOrder(db, client, { id: "A-1", customerId: "c-1", email: "ada@example.com", totalCents: 12_50 });
  const b = await placeOrderFromSql(pool, { id: "B-2", customerId: "c-2", email: "not an address", totalCents: 3_00 });
  const c = await placeOrder(db, client, { id: "C-3", customerId: "c-1", email: "ada@example.com", totalCents: 99_00, sendConfirmationAfter: sendAfter });
  expect(!a.duplicate && !c.duplicate && BigInt(a.id) < BigInt(b) && BigInt(b) < BigInt(c.id), "three new messages in order (Drizzle, SQL, Drizzle)", { a, b, c });
  const again = await client.stream(ordersPlaced).produce({ orderId: "A-1", customerId: "c-1", email: "ada@example.com", totalCents: 12_50 }, { idempotencyKey: "order:A-1" });
  expect(again.duplicate && again.id === a.id, "the idempotency key of the Drizzle produce to return the first id", again);
  // A transaction that rolls back after producing leaves neither the order nor its message
  // (loyalty-points below sees exactly three orders).
  const rolledBack = await db
    .transaction(async (tx) => {
      await tx.insert(orders).values({ id: "D-4", customerId: "c-3", email: "grace@example.com", totalCents: 1_00 });
      await client.stream(ordersPlaced).produceInTx(drizzleExecutor(tx), { orderId: "D-4", customerId: "c-3", email: "grace@example.com", totalCents: 1_00 });
      tx.rollback();
    })
    .then(() => false, (e: unknown) => e instanceof TransactionRollbackError);
  const stored = await db.select({ id: orders.id }).from(orders).orderBy(orders.id);
  expect(rolledBack && stored.map((o) => o.id).join(",") === "A-1,B-2,C-3", "the rolled-back order D-4 not stored", stored);

  const emails: Consumer<OrderPlaced> = client.stream(ordersPlaced).consumer("confirmation-emails");
  const loyalty: Consumer<OrderPlaced> = client.stream(ordersPlaced).consumer("loyalty-points");
  const event = { stream: "shop.orders", group: "confirmation-emails" };

  // First poll: A is sent, B is dead at once (Permanent), C waits for its time (Delay).
  const first = await confirmationEmails.handler(event, localContext(30_000));
  expect(first.succeeded === 1 && first.dead === 1 && first.delayed === 1, "first poll: 1 sent, 1 dead, 1 delayed", first);
  const p1 = await emails.progress();
  expect(p1.exceptions.dead === 1 && p1.exceptions.ready === 1, "progress after the first poll: 1 dead, 1 waiting", exceptions(p1));
  const [waiting] = await emails.failures({ status: "ready" });
  expect(waiting?.messageId === c.id && waiting.delays === 1 && waiting.attempts === 1 && waiting.canRunAfter.getTime() >= sendAfter - 1_000,
    "C waiting for its time after one run that returned Delay", waiting);

  // After C's time, the next poll sends it.
  await new Promise((r) => setTimeout(r, Math.max(0, waiting.canRunAfter.getTime() - Date.now()) + 300));
  const second = await confirmationEmails.handler(event, localContext(30_000));
  expect(second.succeeded === 1 && second.dead === 0 && second.delayed === 0, "second poll: C sent", second);
  const p2 = await emails.progress();
  expect(p2.lag === "0" && p2.exceptions.dead === 1 && p2.exceptions.ready === 0 && p2.oldestUnresolvedAgeMs === null,
    "progress after the second poll: only the dead letter is left", { lag: p2.lag, ...exceptions(p2), oldest: p2.oldestUnresolvedAgeMs });
  const dead = await emails.failures({ status: "dead" });
  expect(dead.length === 1 && dead[0]?.messageId === b && dead[0].payload.orderId === "B-2" && (dead[0].lastError ?? "").includes("is not an email address"),
    "failures(): B dead with the handler's reason", dead);

  // The other group reads the same stream independently: every order credits points.
  const points = await loyaltyPoints.handler({ stream: "shop.orders", group: "loyalty-points" }, localContext(30_000));
  const p3 = await loyalty.progress();
  expect(points.succeeded === 3 && p3.lag === "0" && Object.keys(exceptions(p3)).length === 0, "loyalty-points: 3 credited, nothing left", { points, lag: p3.lag, ...exceptions(p3) });
} finally {
  await client.close();
  await pool.end();
  await closeDefaultDatabase();
}
