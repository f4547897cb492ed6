// message_log_N partitions (docs/guide/producing.md#partitions): created by producers ahead of need and by maintain().
import { setTimeout as sleep } from "node:timers/promises";
import { type Db, RETRY_PAUSES, connect, query } from "../db.js";
import { advisoryXactLock, localLockTimeout, relationExists } from "./catalog.js";
import { partitionName, schemaNames, tables } from "./names.js";
import { defineStatement } from "./statement.js";

const ALREADY_EXISTS = new Set(["42P07", "42710", "23505"]);

/** The stream's id sequence: the next id is last_value (+1 once called). */
const idSequence = defineStatement<Record<string, never>, { last_value: string; is_called: boolean }>([], (t) =>
  `SELECT last_value::text, is_called FROM ${t.messageLog}_id_seq`);

/**
 * Ensures partition k of a stream exists: a short transaction of its own with a 2 s lock
 * timeout and an advisory lock keyed on (schema, stream, k). "Already exists" counts as success.
 * Returns true when this call created it. The creation locks the log and its indexes while
 * another maintain() may be dropping a partition of the same log: when Postgres picks this
 * transaction as a deadlock's victim it is simply tried again (it is idempotent).
 */
export async function ensurePartition(db: Db, streamId: string, partitionSize: bigint, k: bigint): Promise<boolean> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await createPartition(db, streamId, partitionSize, k);
    } catch (e) {
      if ((e as { code?: string }).code !== "40P01" || attempt >= RETRY_PAUSES.length) throw e;
      await sleep(RETRY_PAUSES[attempt]);
    }
  }
}

async function createPartition(db: Db, streamId: string, partitionSize: bigint, k: bigint): Promise<boolean> {
  const c = await connect(db);
  let broken = false;
  try {
    await query(db, c, "BEGIN");
    await query(db, c, localLockTimeout("2000ms"));
    // Serializes the creation of one partition across sessions.
    await advisoryXactLock.query(db, c, schemaNames(db.q), { lockKey: `sqlstreams.partition:${db.schema}:${streamId}:${k}` });
    const exists = await relationExists.query(db, c, schemaNames(db.q), { name: partitionName(db.q, streamId, k) });
    let created = false;
    if (!exists.rows[0].ok) {
      const from = k * partitionSize;
      const to = (k + 1n) * partitionSize;
      await query(
        db,
        c,
        `CREATE TABLE IF NOT EXISTS ${partitionName(db.q, streamId, k)} PARTITION OF ${tables(db.q, streamId).messageLog} FOR VALUES FROM (${from}) TO (${to})`,
      );
      created = true;
    }
    await query(db, c, "COMMIT");
    return created;
  } catch (e) {
    try {
      await c.query("ROLLBACK");
    } catch {
      broken = true;
    }
    if (ALREADY_EXISTS.has((e as { code?: string }).code ?? "")) return false;
    throw e;
  } finally {
    c.release(broken ? true : undefined);
  }
}

/** The id the stream's sequence hands out next. */
export async function nextSequenceValue(db: Db, streamId: string): Promise<bigint> {
  const r = await idSequence.query(db, db.pool, tables(db.q, streamId), {});
  const row = r.rows[0];
  return row.is_called ? BigInt(row.last_value) + 1n : BigInt(row.last_value);
}
