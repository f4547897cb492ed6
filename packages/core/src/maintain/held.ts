// The floor step of maintain() (docs/protocol/retention.md#maintain): the report names the group that holds
// expired messages back, and for how long.
import { expiredAboveFloor, retentionStatus } from "./floor.js";
import { LOCK_FAILURES, type MaintainRun } from "./run.js";

/**
 * Whether the lowest message above the floor is already expired. The read can be chosen as the
 * victim of a deadlock with another maintain()'s partition drop; it is only a report, so it is
 * then left to the next run instead of failing the step.
 */
async function expiredAboveTheFloor(run: MaintainRun, floor: bigint): Promise<boolean> {
  try {
    return await expiredAboveFloor(run.db, run.s.id, floor, run.activeLow, run.s.retentionMs);
  } catch (e) {
    if (LOCK_FAILURES.has((e as { code?: string }).code ?? "")) return false;
    throw e;
  }
}

/**
 * Retention held back by a group: the lowest message above the floor is already expired.
 * (Maintenance never moves a cursor, so the floor read in step 2 still holds.)
 */
export async function noteHeldRetention(run: MaintainRun): Promise<void> {
  const f = run.floor;
  const held = f?.heldBy;
  if (!f || !held) return;
  if (await expiredAboveTheFloor(run, f.floor)) {
    run.report.retentionHeldBy = {
      group: held.group,
      committed: String(held.committed),
      unresolvedFrom: held.unresolvedFrom === null ? null : String(held.unresolvedFrom),
      paused: held.paused,
    };
    run.report.retentionHeldMs = (await retentionStatus(run.db, run.s.id)).heldForMs;
  }
}
