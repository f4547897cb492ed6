// A drain's concurrency slot (docs/guide/configuration.md#maxconcurrency): taken by the first poll of a
// group with maxConcurrency, renewed by a timer while the drain runs, released at its end. Groups
// without maxConcurrency never reach this file: their polls send no statement for it.
import { randomUUID } from "node:crypto";
import type { Db } from "../db.js";
import type { Tables } from "../sql/names.js";
import * as statements from "../sql/slots.js";

/**
 * A slot's lease. A crashed drain's slot frees itself within this; it is shorter than a drain's
 * range lease bound (DRAIN_LEASE_BOUND_MS, 60 s), so after a crash the slot is free again before
 * the crashed range comes back, and the next drain is there to reclaim it.
 */
export const SLOT_LEASE_MS = 15_000;
/** How often a held slot is renewed: three renewals fit in one lease. */
export const SLOT_RENEW_MS = 5_000;

/** A group's maxConcurrency from its stored configuration (undefined: unlimited). */
export function maxConcurrencyOf(config: unknown): number | undefined {
  const v = (config as { maxConcurrency?: unknown } | null)?.maxConcurrency;
  return typeof v === "number" && Number.isInteger(v) && v >= 1 ? v : undefined;
}

export class GroupSlot {
  /** Set when a renewal found the slot taken by another drain (its lease had expired). */
  lost = false;
  private timer: NodeJS.Timeout | undefined;
  private released = false;

  private constructor(
    private readonly db: Db,
    private readonly t: Tables,
    private readonly groupId: string,
    readonly slot: number,
    private readonly token: string,
    /** The most a lease may run to from now, ms (deadline + recordMargin), or null for none. */
    private readonly cap: () => number | null,
    private readonly onLost: () => void,
  ) {}

  /** Takes a free slot of 1..max, or null when the group is at its cap. */
  static async take(
    db: Db, t: Tables, groupId: string, max: number, cap: () => number | null, onLost: () => void,
  ): Promise<GroupSlot | null> {
    const token = randomUUID();
    const r = await statements.takeSlot.retry(db, t, { groupId, max, token, leaseMs: leaseMs(cap()) });
    const slot = r.rows[0]?.slot ?? null;
    if (slot === null) return null;
    const s = new GroupSlot(db, t, groupId, slot, token, cap, onLost);
    s.timer = setInterval(() => void s.renew(), SLOT_RENEW_MS);
    s.timer.unref();
    return s;
  }

  private async renew(): Promise<void> {
    if (this.released || this.lost) return;
    try {
      const r = await statements.renewSlot.query(this.db, this.db.pool, this.t, {
        groupId: this.groupId, slot: this.slot, token: this.token, leaseMs: leaseMs(this.cap()),
      });
      if (r.rowCount === 0 && !this.released) {
        this.lost = true;
        clearInterval(this.timer);
        this.onLost();
      }
    } catch {
      // A failed renewal is tried again at the next tick; the lease outlives two of them.
    }
  }

  /** Frees the slot for the next drain; a failure leaves it to expire with its lease. */
  async release(): Promise<void> {
    if (this.released) return;
    this.released = true;
    clearInterval(this.timer);
    if (this.lost) return;
    try {
      await statements.releaseSlot.query(this.db, this.db.pool, this.t, { groupId: this.groupId, slot: this.slot, token: this.token });
    } catch {
      // The slot frees itself at its lease's end.
    }
  }
}

function leaseMs(cap: number | null): number {
  return cap === null ? SLOT_LEASE_MS : Math.max(1, Math.min(SLOT_LEASE_MS, cap));
}
