// One bounded claim cycle (docs/poll-cycle.md): load → range phase → exception phase → cursor advance.
import type { Runtime } from "../runtime.js";
import { type ResolvedPollOptions, groupResolution } from "../config.js";
import { queryRetry, withBudget } from "../db.js";
import { SqlStreamsError, groupNotRegistered, isSqlStreamsError } from "../errors.js";
import * as S from "../sql/cycle.js";
import { type Ctx, type LoadRow, aborted, big } from "./context.js";
import { expirePhase, exceptionPhase } from "./exceptions.js";
import { STEADY_CHAIN_MS, claimPhase, reclaimPhase } from "./range.js";
import type { LastRun, RangeSample, RangeSizer } from "./sizer.js";
import { type CycleReport, type Handler, emptyReport } from "./types.js";
import { now } from "../clock.js";

/** Poll facts a drain needs beyond the report. */
export interface PollState {
  fenceBlocked: boolean;
  /** When set, the range phase fills it for the drain's RangeSizer (left untouched without a range). */
  sample?: RangeSample;
  /**
   * A drain's sizer: with it, a range run whole that came back full is recorded in the statement
   * that claims the next one, and the sizer sees each range before the next is claimed
   * (docs/poll-cycle.md#the-steady-state). `sample` is then the last range's.
   */
  sizer?: RangeSizer;
  /** The drain's last range: how long it ran (monotonic ms) and its slowest handler's share of its timeout (docs/poll-cycle.md#claiming-ahead). */
  lastRun?: LastRun;
}

/**
 * One poll. Every statement it sends (and those of handlers it awaits) ends by the deadline plus
 * recordMargin, when the leases it takes end too; one still unanswered then fails the poll with
 * SQL0050 and its leases expire as designed (docs/operations.md#timeouts).
 */
export function pollOnce<T>(
  client: Runtime, stream: string, group: string, handler: Handler<T>, o: ResolvedPollOptions, state?: PollState,
): Promise<CycleReport> {
  return withBudget(o.deadline, o.recordMargin, `poll of ${stream}/${group}`, () => cycle(client, stream, group, handler, o, state));
}

async function cycle<T>(
  client: Runtime, stream: string, group: string, handler: Handler<T>, o: ResolvedPollOptions, state?: PollState,
): Promise<CycleReport> {
  const started = now();
  const report = emptyReport(stream, group);
  report.polls = 1;
  const db = client.db;
  try {
    const info = await client.streamInfo(stream);
    const t = S.tables(db.q, info.id);
    const loaded = await queryRetry<LoadRow>(db, S.load(db.q, t), [info.id, group]);
    if (loaded.rowCount === 0) {
      await client.streamInfo(stream, true); // throws SQL0009 when the stream is gone
      throw groupNotRegistered(stream, group);
    }
    const L = loaded.rows[0];
    if (!L.has_cursor) throw new SqlStreamsError("SQL0010", `consumer group ${group} has no cursor on stream ${stream}`, { stream, group });
    report.committedBefore = report.committedAfter = L.committed;
    if (L.paused) {
      report.paused = true;
      return finish(report, started);
    }
    if (o.deadline !== undefined && o.deadline - now() < o.recordMargin) {
      report.idle = true;
      return finish(report, started);
    }
    const ctx: Ctx<T> = {
      client, db, t, stream, group, groupId: L.group_id, g: groupResolution(L.config ?? {}), mode: L.mode,
      handler, o, report, stop: false, advance: big(L.target) > big(L.committed), fenceBlocked: false, plain: new Map(),
      sample: state?.sample, state, chainUntil: started + STEADY_CHAIN_MS, expirable: L.expirable, reservable: L.reservable,
    };
    let tookRange = false;
    let tookRows = false;

    // Range phase (docs/poll-cycle.md#the-range-lease): an expired range first, else a fresh one
    // (in a drain, while they come back full, the ones after it: docs/poll-cycle.md#the-steady-state).
    if (L.reclaimable) tookRange = await reclaimPhase(ctx);
    if (!tookRange && L.obs !== "0") tookRange = await claimPhase(ctx, L);

    // Exception phase (docs/poll-cycle.md#the-exception-phase).
    if (ctx.expirable) tookRows = (await expirePhase(ctx)) || tookRows;
    if (ctx.reservable && !ctx.stop && !aborted(ctx)) tookRows = (await exceptionPhase(ctx)) || tookRows;

    // Cursor advance (docs/poll-cycle.md#cursor-advance) when anything this poll did, or saw, can move it.
    if (ctx.advance) {
      const r = await queryRetry<{ committed: string }>(db, S.advance(t), [ctx.groupId]);
      report.committedAfter = r.rows[0].committed;
    }
    report.idle = !tookRange && !tookRows;
    if (state) state.fenceBlocked = ctx.fenceBlocked;
    return finish(report, started);
  } catch (e) {
    if (isSqlStreamsError(e)) throw e;
    throw new SqlStreamsError("SQL0033", `poll of ${stream}/${group} failed: ${(e as Error).message}`, { stream, group }, e);
  }
}

function finish(r: CycleReport, started: number): CycleReport {
  r.durationMs = Math.round(now() - started);
  return r;
}

