// Consumer group `fraud-scoring` of stream `orders.placed`: scores each placed order and sends
// orders that need a human to the review service (FRAUD_REVIEW_URL), or logs the decision.
import { Permanent, type Message } from "@sqlstreams/core";
import { createPollHandler } from "@sqlstreams/aws";
import { groups } from "../groups.js";
import { ordersPlaced } from "../streams.js";

export interface OrderPlaced {
  orderId: string;
  customerId: string;
  amountCents: number;
  currency: string;
  billingCountry: string;
  shippingCountry: string;
  items: number;
  /** Orders this customer placed before this one. */
  previousOrders?: number;
}

export interface FraudScore {
  orderId: string;
  score: number;
  decision: "approve" | "review" | "reject";
  reasons: string[];
}

function isOrder(p: unknown): p is OrderPlaced {
  const o = p as Partial<OrderPlaced> | null;
  return (
    typeof o === "object" && o !== null &&
    typeof o.orderId === "string" && o.orderId.length > 0 &&
    typeof o.customerId === "string" &&
    Number.isSafeInteger(o.amountCents) && (o.amountCents as number) >= 0 &&
    typeof o.currency === "string" && /^[A-Z]{3}$/.test(o.currency) &&
    typeof o.billingCountry === "string" && typeof o.shippingCountry === "string" &&
    Number.isSafeInteger(o.items) && (o.items as number) > 0
  );
}

/** A small rule-based score: 0 (fine) … 100 (certainly fraud). Pure. */
export function scoreOrder(o: OrderPlaced): FraudScore {
  const reasons: string[] = [];
  let score = 0;
  if (o.amountCents >= 500_000) {
    score += 40;
    reasons.push("amount at or above 5,000");
  } else if (o.amountCents >= 100_000) {
    score += 15;
    reasons.push("amount at or above 1,000");
  }
  if (o.billingCountry !== o.shippingCountry) {
    score += 25;
    reasons.push("billing and shipping countries differ");
  }
  if ((o.previousOrders ?? 0) === 0) {
    score += 15;
    reasons.push("first order of the customer");
  }
  if (o.items >= 20) {
    score += 20;
    reasons.push("unusually many items");
  }
  score = Math.min(score, 100);
  const decision = score >= 80 ? "reject" : score >= 40 ? "review" : "approve";
  return { orderId: o.orderId, score, decision, reasons };
}

/** The message handler: invalid payloads are dead at once; review-service failures retry. */
export async function handle(msg: Message<OrderPlaced>): Promise<void> {
  if (!isOrder(msg.payload)) throw Permanent(new Error(`message ${msg.id} is not an OrderPlaced payload`));
  const result = scoreOrder(msg.payload);
  const reviewUrl = process.env.FRAUD_REVIEW_URL;
  if (result.decision !== "approve" && reviewUrl) {
    const res = await fetch(reviewUrl, {
      method: "POST",
      headers: { "content-type": "application/json", "idempotency-key": `fraud-scoring:${msg.id}` },
      body: JSON.stringify(result),
      signal: msg.signal,
    });
    if (res.status >= 400 && res.status < 500 && res.status !== 429) {
      throw Permanent(new Error(`review service refused order ${result.orderId}: HTTP ${res.status}`));
    }
    if (!res.ok) throw new Error(`review service unavailable: HTTP ${res.status}`);
  }
  console.log(JSON.stringify({ level: result.decision === "approve" ? "info" : "warn", event: "fraud.scored", messageId: msg.id, attempt: msg.attempt, ...result }));
}

export const handler = createPollHandler({ stream: ordersPlaced, group: "fraud-scoring", handle, groups });
