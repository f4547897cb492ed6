// Partitions from the producer's side (docs/guide/producing.md#partitions): the next one created ahead
// once a produce lands in the last tenth of one, and a missing one created when an insert found
// none (SQL0041).
import type { Db } from "../db.js";
import type { StreamInfo } from "../runtime.js";
import { ensurePartition, nextSequenceValue } from "../sql/partitions.js";

/** The partitions one stream handle has seen or created (create-ahead is skipped for them). */
export class PartitionUpkeep {
  private readonly seen = new Set<bigint>();

  constructor(private readonly db: Db) {}

  /**
   * Creates every partition covering the next n ids after an insert found none (SQL0041). With
   * `timeoutMs` (produceInTx: the caller's connection is busy in its transaction, so the work
   * needs another pooled one) it gives up after that long; creating a partition is idempotent,
   * so work still under way when it gives up does no harm.
   */
  async recover(info: StreamInfo, n: number, timeoutMs?: number): Promise<void> {
    if (timeoutMs === undefined) return this.createCovering(info, n);
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no partition could be created within ${timeoutMs} ms`)), timeoutMs);
    });
    const work = this.createCovering(info, n);
    work.catch(() => {});
    try {
      await Promise.race([work, expired]);
    } finally {
      clearTimeout(timer);
    }
  }

  private async createCovering(info: StreamInfo, n: number): Promise<void> {
    const next = await nextSequenceValue(this.db, info.id);
    const first = next / info.partitionSize;
    const last = (next + BigInt(n)) / info.partitionSize;
    for (let k = first; k <= last; k++) {
      await ensurePartition(this.db, info.id, info.partitionSize, k);
      this.seen.add(k);
    }
    this.db.events.emit({ level: "warn", code: "SQL0041", message: `missing partition of ${info.name} recovered`, stream: info.name, from: String(first), to: String(last) });
  }

  /** Ensures the next partition exists once a produce of `ids` lands in the last tenth of one; a failure is logged (SQL0041). */
  async createAhead(info: StreamInfo, ids: string[]): Promise<void> {
    const size = info.partitionSize;
    const x = BigInt(ids[ids.length - 1]);
    const k = x / size;
    // The next partition once this one is 90 % used, and every partition the next call of the
    // same size would reach, so a batch as large as a partition does not fail and burn its ids.
    let last = (x + BigInt(ids.length)) / size;
    if ((x - k * size) * 10n >= 9n * size && last < k + 1n) last = k + 1n;
    try {
      for (let j = k + 1n; j <= last; j++) {
        if (this.seen.has(j)) continue;
        await ensurePartition(this.db, info.id, size, j);
        this.seen.add(j);
      }
    } catch (e) {
      this.db.events.emit({
        level: "warn",
        code: "SQL0041",
        message: `create-ahead of partitions after ${k} of ${info.name} failed: ${(e as Error).message}`,
        stream: info.name,
      });
    }
  }
}
