// The caller's transaction, as produceInTx and produceBatchInTx see it: anything that runs one
// parameterised statement ($1, $2, ... placeholders) on the connection of an open transaction
// (docs/guide/producing.md#producing-inside-your-transaction). A node-postgres client is one as it is;
// a postgres.js transaction (`sql.begin`) and a Prisma interactive transaction (`$transaction`)
// are recognised by shape; Drizzle and Kysely transactions go through the adapters of
// `@sqlstreams/core/drizzle` and `@sqlstreams/core/kysely`, which import those libraries, so the
// main entry point imports no ORM at all.
import { SqlStreamsError } from "./errors.js";

export type Row = Record<string, unknown>;

/** Runs one statement inside the caller's open transaction and returns its rows. */
export interface TxExecutor {
  query(text: string, params?: unknown[]): Promise<{ rows: Row[] }>;
}

/** A postgres.js transaction (the `tx` of `sql.begin(async (tx) => ...)`), by shape. */
export interface PostgresJsTx {
  unsafe(text: string, params?: never[]): PromiseLike<readonly unknown[]>;
  typed?: (value: never, oid: number) => unknown;
}

const TEXT_OID = 25;

/** A Prisma interactive transaction (the `tx` of `prisma.$transaction(async (tx) => ...)`), by shape. */
export interface PrismaTx {
  $queryRawUnsafe(text: string, ...params: unknown[]): PromiseLike<unknown>;
}

/** What produceInTx accepts as its transaction. */
export type Transactional = TxExecutor | PostgresJsTx | PrismaTx;

/** A postgres.js transaction as an executor (produceInTx also accepts it directly). */
export function fromPostgresJs(tx: PostgresJsTx): TxExecutor {
  return {
    async query(text, params = []) {
      // postgres.js would JSON-encode a string bound to a jsonb parameter a second time: every
      // string goes as text, and the statement's casts ($3::jsonb, $5::uuid) convert it.
      const typed = tx.typed;
      const bound = typed ? params.map((v) => (typeof v === "string" ? typed(v as never, TEXT_OID) : v)) : params;
      const rows = await tx.unsafe(text, bound as never[]);
      return { rows: [...rows] as Row[] };
    },
  };
}

/** A Prisma interactive transaction as an executor (produceInTx also accepts it directly). */
export function fromPrisma(tx: PrismaTx): TxExecutor {
  return {
    async query(text, params = []) {
      const rows = await tx.$queryRawUnsafe(text, ...params);
      return { rows: Array.isArray(rows) ? (rows as Row[]) : [] };
    },
  };
}

function isFn(o: unknown, name: string): boolean {
  return (typeof o === "object" || typeof o === "function") && o !== null && typeof (o as Record<string, unknown>)[name] === "function";
}

/** The executor for whatever transaction object the caller passed (SQL0015 when none fits). */
export function toExecutor(tx: unknown, where: string): TxExecutor {
  if (isFn(tx, "query")) return tx as TxExecutor;
  if (isFn(tx, "unsafe")) return fromPostgresJs(tx as PostgresJsTx);
  if (isFn(tx, "$queryRawUnsafe")) return fromPrisma(tx as PrismaTx);
  throw new SqlStreamsError(
    "SQL0015",
    `${where} needs the caller's open transaction: a pg client after BEGIN, a postgres.js sql.begin transaction, ` +
      "a Prisma $transaction client, or an executor from @sqlstreams/core/drizzle or /kysely",
  );
}

/**
 * The SQLSTATE of a database error, wherever the driver or ORM put it: on the error itself
 * (node-postgres, postgres.js), on its cause (Drizzle wraps errors), or in Prisma's
 * meta.driverAdapterError.cause.
 */
export function sqlState(e: unknown): string | undefined {
  const todo: unknown[] = [e];
  for (let i = 0; i < todo.length && i < 8; i++) {
    const o = todo[i] as { code?: unknown; cause?: unknown; meta?: { driverAdapterError?: unknown }; clientVersion?: unknown } | null;
    if (!o || typeof o !== "object") continue;
    // A Prisma error's own code (P2010) is Prisma's, not a SQLSTATE.
    const prisma = o.clientVersion !== undefined;
    if (!prisma && typeof o.code === "string" && /^[0-9A-Z]{5}$/.test(o.code)) return o.code;
    todo.push(o.cause, o.meta?.driverAdapterError);
  }
  return undefined;
}
