// The deployment's streams with their payload types, declared once (docs/guide/producing.md#typed-streams):
// producers write `client.stream(ordersPlaced).produce(order)` and the handlers bind to the same
// definitions, so `msg.payload` is typed in both places without a cast.
import { defineStream } from "@sqlstreams/core";
import type { OrderPlaced } from "./handlers/fraud-scoring.js";
import type { BalanceAdjustment } from "./handlers/apply-balance.js";

export const ordersPlaced = defineStream<OrderPlaced>("orders.placed");
export const ledgerAdjustments = defineStream<BalanceAdjustment>("ledger.adjustments");
