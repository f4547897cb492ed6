// Type-level fixture for typed streams (docs/guide/producing.md#typed-streams), checked by
// `tsc -p tsconfig.check.json` in `npm run check` and never run. Each `@ts-expect-error` marks a
// deliberate type error: if the types stopped catching it, tsc would fail on the unused directive.
import { z } from "zod";
import * as v from "valibot";
import { defineStream, type PayloadOf, type SqlStreams } from "@sqlstreams/core";
import { createPollHandler } from "@sqlstreams/aws";

interface OrderPlaced {
  orderId: string;
  total: number;
}

const placed = defineStream<OrderPlaced>("orders.placed");
const zodOrders = defineStream("orders.zod", { schema: z.object({ orderId: z.string(), total: z.number() }) });
const valibotOrders = defineStream("orders.valibot", { schema: v.object({ sku: v.string(), qty: v.number() }) });

export async function producers(client: SqlStreams): Promise<void> {
  await client.stream(placed).produce({ orderId: "o-1", total: 1 });
  // @ts-expect-error total must be a number
  await client.stream(placed).produce({ orderId: "o-1", total: "1" });
  await client.stream(zodOrders).produceBatch([{ payload: { orderId: "o-2", total: 2 } }]);
  // @ts-expect-error the zod schema's type has no field `nope`
  await client.stream(zodOrders).produce({ orderId: "o-3", total: 3, nope: true });
  await client.stream(valibotOrders).produceInTx(await client.db.pool.connect(), { sku: "a", qty: 1 });
  // @ts-expect-error qty is required by the valibot schema
  await client.stream(valibotOrders).produce({ sku: "a" });
}

export async function consumers(client: SqlStreams): Promise<void> {
  await client.stream(zodOrders).consumer("g").drain((msg) => {
    const total: number = msg.payload.total;
    // @ts-expect-error orderId is a string, not a number
    const wrong: number = msg.payload.orderId;
    return void [total, wrong];
  });
}

const zodPayload: PayloadOf<typeof zodOrders> = { orderId: "o", total: 1 };

/** A handler bound to a typed stream: msg.payload is OrderPlaced without a cast. */
export const handler = createPollHandler({
  stream: placed,
  group: "fraud-scoring",
  handle: (msg) => {
    const id: string = msg.payload.orderId;
    // @ts-expect-error OrderPlaced has no field `customer`
    return void [id, msg.payload.customer, zodPayload];
  },
});

/** Batch handlers: msgs[i].payload is typed; entries are undefined, an Outcome or an Error. */
export async function batchConsumers(client: SqlStreams): Promise<void> {
  await client.stream(zodOrders).consumer("g").drainBatch((msgs) => msgs.map((m) => (m.payload.total < 0 ? new Error("negative") : undefined)));
  await client.stream(placed).consumer("g").pollBatch(async (msgs) => {
    const ids: string[] = msgs.map((m) => m.payload.orderId);
    return void ids;
  }, { maxBatch: 50 });
  // @ts-expect-error an entry is undefined, an Outcome or an Error, not a string
  await client.stream(placed).consumer("g").drainBatch((msgs) => msgs.map(() => "ok"));
}

export const batchHandler = createPollHandler({
  stream: placed,
  group: "fraud-scoring",
  maxBatch: 25,
  handleBatch: (msgs) => {
    // @ts-expect-error OrderPlaced has no field `customer`
    return void msgs.map((m) => m.payload.customer);
  },
});
