// Consumer group `confirmation-emails` of `shop.orders`: sends the order confirmation. An address
// that cannot receive mail is dead at once (Permanent); a confirmation the customer asked to get
// later waits (Delay) without spending a retry; a mail service outage is a retryable failure.
import { Delay, Permanent, type Message, type Outcome } from "@sqlstreams/core";
import { createPollHandler } from "@sqlstreams/aws";
import { ordersPlaced, type OrderPlaced } from "../streams/definitions.js";
import { groups } from "../streams/groups.js";

const EMAIL = /^[^@\s]+@[^@\s]+\.[^@\s]+$/;

export async function handle(msg: Message<OrderPlaced>): Promise<void | Outcome> {
  const order = msg.payload;
  if (!EMAIL.test(order.email)) return Permanent(new Error(`order ${order.orderId}: ${JSON.stringify(order.email)} is not an email address`));
  if (order.sendAfter !== undefined && order.sendAfter > Date.now()) return Delay(order.sendAfter - Date.now());
  const mailUrl = process.env.MAIL_URL;
  if (mailUrl) {
    const res = await fetch(mailUrl, {
      method: "POST",
      headers: { "content-type": "application/json", "idempotency-key": `confirmation:${order.orderId}` },
      body: JSON.stringify({ to: order.email, template: "order-confirmation", orderId: order.orderId }),
      signal: msg.signal,
    });
    if (!res.ok) throw new Error(`mail service: HTTP ${res.status}`);
  }
  console.log(JSON.stringify({ level: "info", event: "confirmation.sent", messageId: msg.id, orderId: order.orderId, delays: msg.delays }));
}

export const handler = createPollHandler({ stream: ordersPlaced, group: "confirmation-emails", handle, groups });
