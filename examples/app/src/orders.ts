// Placing an order: the order row and its `shop.orders` message commit together or not at all,
// once from a Drizzle transaction and once from plain SQL (`sqlstreams.produce`).
import type { ProduceResult, SqlStreams } from "@sqlstreams/core";
import { drizzleExecutor } from "@sqlstreams/core/drizzle";
import type { NodePgDatabase } from "drizzle-orm/node-postgres";
import type pg from "pg";
import { orders } from "./db.js";
import { ordersPlaced, type OrderPlaced } from "./streams/definitions.js";

export interface NewOrder {
  id: string;
  customerId: string;
  email: string;
  totalCents: number;
  sendConfirmationAfter?: number;
}

function payloadOf(order: NewOrder): OrderPlaced {
  const payload: OrderPlaced = { orderId: order.id, customerId: order.customerId, email: order.email, totalCents: order.totalCents };
  if (order.sendConfirmationAfter !== undefined) payload.sendAfter = order.sendConfirmationAfter;
  return payload;
}

/** Inserts the order and produces its message in one Drizzle transaction. */
export async function placeOrder(db: NodePgDatabase, streams: SqlStreams, order: NewOrder): Promise<ProduceResult> {
  return db.transaction(async (tx) => {
    await tx.insert(orders).values({ id: order.id, customerId: order.customerId, email: order.email, totalCents: order.totalCents });
    return streams.stream(ordersPlaced).produceInTx(drizzleExecutor(tx), payloadOf(order), {
      key: order.customerId,
      idempotencyKey: `order:${order.id}`,
    });
  });
}

/**
 * The same in SQL, as a trigger or a psql session would: one statement inserts the order and
 * produces its message with `sqlstreams.produce(stream, payload, key, idempotency_key)`.
 * Returns the message id.
 */
export async function placeOrderFromSql(pool: pg.Pool, order: NewOrder): Promise<string> {
  const { rows } = await pool.query<{ id: string }>(
    `WITH o AS (
       INSERT INTO orders (id, customer_id, email, total_cents) VALUES ($1, $2, $3, $4)
       RETURNING id, customer_id
     )
     SELECT sqlstreams.produce('shop.orders', $5::jsonb, key => o.customer_id, idempotency_key => 'order:' || o.id) AS id
       FROM o`,
    [order.id, order.customerId, order.email, order.totalCents, JSON.stringify(payloadOf(order))],
  );
  const row = rows[0];
  if (!row) throw new Error(`order ${order.id} was not inserted`);
  return row.id;
}
