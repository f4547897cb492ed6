// Consumer group `loyalty-points` of `shop.orders` (ordered per customer): one point per whole
// currency unit spent, credited in order of the customer's orders.
import { Permanent, type Message } from "@sqlstreams/core";
import { createPollHandler } from "@sqlstreams/aws";
import { ordersPlaced, type OrderPlaced } from "../streams/definitions.js";
import { groups } from "../streams/groups.js";

export function pointsFor(order: OrderPlaced): number {
  return Math.floor(order.totalCents / 100);
}

export function handle(msg: Message<OrderPlaced>): void {
  const order = msg.payload;
  if (!Number.isSafeInteger(order.totalCents) || order.totalCents < 0) {
    throw Permanent(new Error(`order ${order.orderId}: totalCents ${order.totalCents} is not a non-negative integer`));
  }
  console.log(JSON.stringify({ level: "info", event: "loyalty.credited", messageId: msg.id, customerId: order.customerId, points: pointsFor(order) }));
}

export const handler = createPollHandler({ stream: ordersPlaced, group: "loyalty-points", handle, groups });
