// @sqlstreams/core/drizzle: a Drizzle transaction (node-postgres or postgres.js driver) as the
// executor produceInTx runs on (docs/guide/producing.md#producing-inside-your-transaction). This entry
// point imports drizzle-orm, an optional peer: the main entry point never loads it.
import { sql, type SQL, type SQLChunk } from "drizzle-orm";
import type { Row, TxExecutor } from "./executor.js";

/** What the adapter needs of a Drizzle database or transaction: `execute(sql)`. */
export interface DrizzleTx {
  execute(query: SQL): PromiseLike<unknown>;
}

/** A statement with $n placeholders as a Drizzle SQL object, each placeholder a bound parameter. */
function toDrizzle(text: string, params: unknown[]): SQL {
  const chunks: SQLChunk[] = [];
  let last = 0;
  for (const m of text.matchAll(/\$(\d+)/g)) {
    chunks.push(sql.raw(text.slice(last, m.index)), sql.param(params[Number(m[1]) - 1]));
    last = m.index + m[0].length;
  }
  chunks.push(sql.raw(text.slice(last)));
  return sql.join(chunks);
}

/** The rows of a Drizzle execute() result: node-postgres gives { rows }, postgres.js an array. */
function rowsOf(r: unknown): Row[] {
  if (Array.isArray(r)) return r as Row[];
  const rows = (r as { rows?: unknown } | null)?.rows;
  return Array.isArray(rows) ? (rows as Row[]) : [];
}

/** Wraps the `tx` of `db.transaction(async (tx) => ...)` for produceInTx / produceBatchInTx. */
export function drizzleExecutor(tx: DrizzleTx): TxExecutor {
  return {
    async query(text, params = []) {
      return { rows: rowsOf(await tx.execute(toDrizzle(text, params))) };
    },
  };
}
