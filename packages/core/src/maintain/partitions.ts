// Step 1 of maintain() (docs/protocol/retention.md#maintain): partitions K and K+1 of the id the sequence
// hands out next, created ahead of the producers.
import type { Db } from "../db.js";
import * as MaintainSql from "../sql/maintain.js";
import { tables } from "../sql/names.js";
import { ensurePartition } from "../sql/partitions.js";
import type { MaintainRun } from "./run.js";

interface PartitionState {
  /** The id the sequence hands out next. */
  next: bigint;
  /** Indexes of the existing message_log_N partitions, ascending. */
  partitions: bigint[];
}

/** Sequence position and existing partitions, in one statement. */
async function partitionState(db: Db, streamId: string): Promise<PartitionState> {
  const t = tables(db.q, streamId);
  const r = await MaintainSql.partitionState.query(db, db.pool, t, { log: t.messageLog });
  const prefix = `message_log_${streamId}_`;
  const partitions = (r.rows[0].parts ?? [])
    .filter((n) => n.startsWith(prefix) && /^[0-9]+$/.test(n.slice(prefix.length)))
    .map((n) => BigInt(n.slice(prefix.length)))
    .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  return { next: BigInt(r.rows[0].next), partitions };
}

/** 1. Partition create-ahead: K and K+1 of the id the sequence hands out next. */
export async function createAhead(run: MaintainRun): Promise<void> {
  const { db, s } = run;
  const st = await partitionState(db, s.id);
  run.next = st.next;
  run.partitions = st.partitions;
  run.stateKnown = true;
  const k = run.next / s.partitionSize;
  for (const want of [k, k + 1n]) {
    if (run.partitions.includes(want)) continue;
    if (await ensurePartition(db, s.id, s.partitionSize, want)) run.report.partitionsCreated++;
    run.partitions.push(want);
  }
}
