// Sending produce statements (docs/guide/producing.md#failures): on a pooled connection with transient
// retries, or behind a savepoint in the caller's transaction; either way a missing partition is
// created and the insert tried again (docs/guide/producing.md#partitions).
import type pg from "pg";
import type { StreamInfo } from "../runtime.js";
import { type Db, RETRY_PAUSES, connect, isPoolerAuthMessage, isPoolerNotSent, isTransient, query } from "../db.js";
import { SqlStreamsError, isSqlStreamsError } from "../errors.js";
import { type Row, type TxExecutor, sqlState } from "../executor.js";
import { tables } from "../sql/names.js";
import * as ProduceSql from "../sql/produce.js";
import { produceMixedBatch } from "../sql/scheduled.js";
import { setTimeout as sleep } from "node:timers/promises";
import type { PartitionUpkeep } from "./partitions.js";
import type { Prepared } from "./prepare.js";

/** SQLSTATE of an insert that found no partition for its id. */
const NO_PARTITION = "23514";
/** How long produceInTx waits for a missing partition, created on another pooled connection. */
const IN_TX_PARTITION_MS = 2_000;

/**
 * The produce statement may have committed: the connection failed after it was sent (a network
 * error, a pooler's 08P01 for a crashed server connection) or no answer came within its bound.
 */
function connectionLost(e: unknown): boolean {
  if (isSqlStreamsError(e, "SQL0050")) return e.details.sent === true;
  const code = (e as { code?: string })?.code;
  if (code === "08P01") return !isPoolerNotSent(e) && !isPoolerAuthMessage(String((e as Error).message));
  if (code === "08006" || code === "08003") return true;
  return !code || !/^[0-9A-Z]{5}$/.test(code) ? isTransient(e) : false;
}

function unknownOutcome(e: unknown): SqlStreamsError {
  return new SqlStreamsError(
    "SQL0024",
    isSqlStreamsError(e, "SQL0050")
      ? `the database did not answer the produce within ${String(e.details.timeoutMs)} ms: the message may or may not exist; an idempotencyKey makes a retry safe`
      : "the connection was lost while the produce was committing: the message may or may not exist; an idempotencyKey makes a retry safe",
    {},
    e,
  );
}

/**
 * A batch's items as the statements that reduce it in SQL read them: a JSON array of {k, r, o}
 * (key, compaction rank, options) and, with `schedule`, s (the due time), beside the payloads.
 */
function itemsArray(prepared: Prepared[], schedule: boolean): string {
  const items = prepared.map((p) => {
    const s = schedule ? `,"s":${p.schedule ? JSON.stringify(p.schedule) : "null"}` : "";
    return `{"k":${p.key === null ? "null" : JSON.stringify(p.key)},"r":${p.rank ?? "null"},"o":${p.options ?? "null"}${s}}`;
  });
  return `[${items.join(",")}]`;
}

/** The one statement of a batch: an insert from JSON arrays, reduced in SQL to each key's winner with compaction. */
export function batchStatement(q: string, streamId: string, prepared: Prepared[]): { text: string; values: unknown[] } {
  const t = tables(q, streamId);
  const payloads = ProduceSql.jsonArray(prepared.map((p) => p.payload));
  if (prepared.some((p) => p.schedule !== null)) {
    // Some wait for their due time (docs/guide/producing.md#scheduled-delivery): both kinds in one statement.
    return { text: produceMixedBatch.sql(t), values: produceMixedBatch.values({ payloads, items: itemsArray(prepared, true) }) };
  }
  if (prepared.some((p) => p.rank !== null)) {
    // Compaction needs the batch's winners per key: reduced in SQL.
    return { text: ProduceSql.produceBatch.sql(t), values: ProduceSql.produceBatch.values({ payloads, items: itemsArray(prepared, false) }) };
  }
  if (!prepared.some((p) => p.key !== null || p.options !== null)) {
    const { payloadsOnly } = ProduceSql.produceBatchArrays;
    return { text: payloadsOnly.sql(t), values: payloadsOnly.values({ payloads }) };
  }
  const { withMeta } = ProduceSql.produceBatchArrays;
  const keys = ProduceSql.jsonArray(prepared.map((p) => (p.key === null ? null : JSON.stringify(p.key))));
  return { text: withMeta.sql(t), values: withMeta.values({ payloads, keys, options: ProduceSql.jsonArray(prepared.map((p) => p.options)) }) };
}

/**
 * Sends a produce statement of n messages in its own transaction, with transient retries and
 * missing-partition recovery; SQL0024 when the connection was lost after it was sent.
 */
export async function sendProduce<R extends pg.QueryResultRow>(
  db: Db, partitions: PartitionUpkeep, info: StreamInfo, text: string, values: unknown[], n: number,
): Promise<R[]> {
  let recoveries = 0;
  let transient = 0;
  for (;;) {
    let c: pg.PoolClient;
    try {
      c = await connect(db);
    } catch (e) {
      if (transient < RETRY_PAUSES.length && isTransient(e)) {
        await sleep(RETRY_PAUSES[transient++]);
        continue;
      }
      throw e;
    }
    try {
      const r = await query<R>(db, c, text, values);
      c.release();
      return r.rows;
    } catch (e) {
      // A same-key race is an ordinary statement failure: the connection stays usable.
      c.release(ProduceSql.isIdempotencyRace(e) ? undefined : true);
      if ((e as { code?: string })?.code === NO_PARTITION) {
        if (recoveries >= 3) throw new SqlStreamsError("SQL0023", "partition creation cannot keep up with the id sequence after 3 retries", {}, e);
        recoveries++;
        await partitions.recover(info, n);
        continue;
      }
      if (connectionLost(e)) throw unknownOutcome(e);
      if (transient < RETRY_PAUSES.length && isTransient(e)) {
        await sleep(RETRY_PAUSES[transient++]);
        continue;
      }
      throw e;
    }
  }
}

/** Sends one statement on the caller's executor, through the client's query hook and statement bound. */
export async function sendOn<R extends Row>(db: Db, ex: TxExecutor, text: string, values?: unknown[]): Promise<R[]> {
  const r = await query(db, ex as unknown as pg.PoolClient, text, values);
  return r.rows as R[];
}

/**
 * Runs a produce statement behind a savepoint in the caller's transaction: a failed insert rolls
 * back to it only, and a missing partition is created (on another pooled connection, at most
 * 2 s) and the insert tried again.
 */
export async function sendInTx<R extends Row>(
  db: Db, partitions: PartitionUpkeep, ex: TxExecutor, info: StreamInfo, text: string, values: unknown[], n: number, where: string,
): Promise<R[]> {
  try {
    await sendOn(db, ex, "SAVEPOINT sqlstreams_produce");
  } catch (e) {
    if (sqlState(e) === "25P01") {
      throw new SqlStreamsError("SQL0015", `${where} needs a connection inside an open transaction: call BEGIN first`, {}, e);
    }
    throw e;
  }
  for (let attempt = 0; ; attempt++) {
    try {
      const rows = await sendOn<R>(db, ex, text, values);
      await sendOn(db, ex, "RELEASE SAVEPOINT sqlstreams_produce");
      return rows;
    } catch (e) {
      await sendOn(db, ex, "ROLLBACK TO SAVEPOINT sqlstreams_produce");
      const noPartition = sqlState(e) === NO_PARTITION;
      if (!noPartition || attempt >= 3) {
        if (noPartition) throw new SqlStreamsError("SQL0023", "partition creation cannot keep up with the id sequence", {}, e);
        throw e;
      }
      try {
        await partitions.recover(info, n, IN_TX_PARTITION_MS);
      } catch (err) {
        throw new SqlStreamsError("SQL0022", `the partition for the next id of ${info.name} is missing and could not be created now`, {}, err);
      }
    }
  }
}
