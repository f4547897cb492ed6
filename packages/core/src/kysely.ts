// @sqlstreams/core/kysely: a Kysely transaction as the executor produceInTx runs on
// (docs/guide/producing.md#producing-inside-your-transaction). This entry point imports kysely, an
// optional peer: the main entry point never loads it.
import { CompiledQuery } from "kysely";
import type { Row, TxExecutor } from "./executor.js";

/** What the adapter needs of a Kysely instance or transaction: `executeQuery(compiled)`. */
export interface KyselyTx {
  executeQuery<R>(query: CompiledQuery<R>): Promise<{ rows: R[] }>;
}

/** Wraps the `trx` of `db.transaction().execute(async (trx) => ...)` for produceInTx / produceBatchInTx. */
export function kyselyExecutor(tx: KyselyTx): TxExecutor {
  return {
    async query(text, params = []) {
      const r = await tx.executeQuery<Row>(CompiledQuery.raw(text, params));
      return { rows: r.rows };
    },
  };
}
