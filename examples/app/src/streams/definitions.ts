// The app's streams with their payload types, declared once: producers write
// `client.stream(ordersPlaced).produce(order)` and the handlers bind to the same definition, so
// `msg.payload` is typed on both sides without a cast.
import { defineStream } from "@sqlstreams/core";

export interface OrderPlaced {
  orderId: string;
  customerId: string;
  email: string;
  totalCents: number;
  /** The customer asked for the confirmation no earlier than this (epoch ms). */
  sendAfter?: number;
}

export const ordersPlaced = defineStream<OrderPlaced>("shop.orders");
