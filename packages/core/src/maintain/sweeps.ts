// Steps 4–6 of maintain() (docs/protocol/retention.md#maintain): idempotency keys past their TTL, expired
// key leases and long-empty compaction heads, each deleted a batch at a time.
import { type Db, query } from "../db.js";
import { table } from "../sql/names.js";
import { BATCH } from "./run.js";

/** Empty compaction heads idle for this long are deleted (docs/protocol/ordering.md#compaction). */
const EMPTY_HEAD_IDLE = "1 hour";

/**
 * Deletes one batch of idempotency keys older than the stream's TTL (docs/protocol/retention.md#maintain step 4).
 * A key of a message still scheduled (message_id -scheduled id) stays until the message is moved,
 * which restarts its TTL (docs/guide/producing.md#scheduled-delivery).
 */
export async function deleteIdempotencyKeys(db: Db, streamId: string, ttlMs: bigint): Promise<number> {
  const ik = table(db.q, streamId, "idempotency_key");
  const r = await query(
    db,
    db.pool,
    `DELETE FROM ${ik} WHERE idempotency_key IN (
       SELECT k.idempotency_key FROM ${ik} k WHERE k.created_at < now() - $1::bigint * interval '1 millisecond' AND k.message_id > 0
        ORDER BY k.created_at LIMIT ${BATCH} FOR UPDATE SKIP LOCKED)`,
    [String(ttlMs)],
  );
  return r.rowCount ?? 0;
}

/** Deletes one batch of expired message key leases (docs/protocol/retention.md#maintain step 5). */
export async function deleteExpiredKeyLeases(db: Db, streamId: string): Promise<number> {
  const keyLease = table(db.q, streamId, "message_key_lease");
  const r = await query(
    db,
    db.pool,
    `DELETE FROM ${keyLease} WHERE (consumer_group_id, message_key) IN (
       SELECT k.consumer_group_id, k.message_key FROM ${keyLease} k WHERE k.expires_at < now()
        LIMIT ${BATCH} FOR UPDATE SKIP LOCKED)`,
  );
  return r.rowCount ?? 0;
}

/** Deletes one batch of compaction heads left empty for over an hour (docs/protocol/retention.md#maintain step 6). */
export async function deleteEmptyHeads(db: Db, streamId: string): Promise<number> {
  const compactionHead = table(db.q, streamId, "compaction_head");
  const r = await query(
    db,
    db.pool,
    `DELETE FROM ${compactionHead} WHERE compaction_key IN (
       SELECT h.compaction_key FROM ${compactionHead} h
        WHERE h.message_id IS NULL AND h.updated_at < now() - interval '${EMPTY_HEAD_IDLE}'
        ORDER BY h.updated_at LIMIT ${BATCH} FOR UPDATE SKIP LOCKED)`,
  );
  return r.rowCount ?? 0;
}
