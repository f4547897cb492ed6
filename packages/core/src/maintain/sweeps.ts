// Steps 4–6 of maintain() (docs/protocol/retention.md#maintain): idempotency keys past their TTL, expired
// key leases and long-empty compaction heads, each deleted a batch at a time.
import type { Db } from "../db.js";
import * as MaintainSql from "../sql/maintain.js";
import { tables } from "../sql/names.js";

/**
 * Deletes one batch of idempotency keys older than the stream's TTL (docs/protocol/retention.md#maintain step 4).
 * A key of a message still scheduled (message_id -scheduled id) stays until the message is moved,
 * which restarts its TTL (docs/guide/producing.md#scheduled-delivery).
 */
export async function deleteIdempotencyKeys(db: Db, streamId: string, ttlMs: bigint): Promise<number> {
  const r = await MaintainSql.deleteIdempotencyKeys.query(db, db.pool, tables(db.q, streamId), { ttlMs: String(ttlMs) });
  return r.rowCount ?? 0;
}

/** Deletes one batch of expired message key leases (docs/protocol/retention.md#maintain step 5). */
export async function deleteExpiredKeyLeases(db: Db, streamId: string): Promise<number> {
  const r = await MaintainSql.deleteExpiredKeyLeases.query(db, db.pool, tables(db.q, streamId), {});
  return r.rowCount ?? 0;
}

/** Deletes one batch of compaction heads left empty for over an hour (docs/protocol/retention.md#maintain step 6). */
export async function deleteEmptyHeads(db: Db, streamId: string): Promise<number> {
  const r = await MaintainSql.deleteEmptyHeads.query(db, db.pool, tables(db.q, streamId), {});
  return r.rowCount ?? 0;
}
