// The names a `// fragment` code block of the README and docs/ may use without declaring them
// (docs/README.md#code-blocks-are-checked). scripts/extract-doc-blocks.mjs copies this file next
// to the extracted blocks as prelude.ts; nothing here runs, it is only type-checked.
import type pg from "pg";
import type { Consumer, PrismaTx, SqlStreams, Stream } from "@sqlstreams/core";
import type { GroupDeclaration, StreamDeclarations } from "@sqlstreams/aws";

/** The payload of the examples' `orders.placed` stream. */
export interface OrderPlaced {
  orderId: string;
  total: number;
}

/** A client, a stream and one of its consumer groups, as the quick start makes them. */
export declare const client: SqlStreams;
export declare const orders: Stream<OrderPlaced>;
export declare const group: Consumer<OrderPlaced>;
export declare const scoring: Consumer<OrderPlaced>;

/** Your node-postgres pool. */
export declare const pool: pg.Pool;

/** The app's group declaration (src/streams/groups.ts). */
export declare const groups: GroupDeclaration[];
/** The app's stream options, registered on deploy with the groups. */
export declare const streams: StreamDeclarations;

/** An order row of the app, as the ORM examples insert it. */
export declare const order: { id: string; total: number; customerId: string };

/** A Prisma client with an `order` model (your generated client has its own type). */
export declare const prisma: {
  $transaction<T>(fn: (tx: PrismaTx & { order: { create(args: { data: unknown }): Promise<unknown> } }) => Promise<T>): Promise<T>;
};

/** Stand-ins for the app's own code that handlers call. */
export declare function score(payload: unknown, opts?: { signal?: AbortSignal }): Promise<void>;
export declare function rateLimited(): Promise<boolean>;
export declare function sendReceipt(payload: unknown, opts: { signal: AbortSignal; idempotencyKey: string }): Promise<void>;
export declare const warehouse: {
  insert(rows: unknown[], opts: { signal: AbortSignal }): Promise<Array<{ ok: boolean; invalid?: boolean; throttled?: boolean; reason?: string }>>;
};
