// One bounded claim cycle (docs/protocol/poll-cycle.md): load → range phase → exception phase → cursor advance.
import type { Runtime, StreamInfo } from "../runtime.js";
import { PartitionUpkeep } from "../produce/partitions.js";
import { groupResolution, rateLimitOf } from "../config.js";
import { withBudget } from "../db.js";
import { SqlStreamsError, groupNotRegistered, isSqlStreamsError } from "../errors.js";
import * as statements from "../sql/cycle.js";
import { MOVE_LIMIT, moveScheduled } from "../sql/scheduled.js";
import { type PollContext, type PollOptions, aborted, big } from "./context.js";
import { type ExceptionFacts, expirePhase, exceptionPhase, flushCarry } from "./exceptions.js";
import { Chain, type RangeFacts, STEADY_CHAIN_MS, claimPhase } from "./range/chain.js";
import { reclaimPhase } from "./range/reclaim.js";
import type { DrainSizing } from "./sizer.js";
import { type CycleReport, type Handler, emptyCycleReport } from "./types.js";
import { type MonotonicMs, after, now } from "../clock.js";
import { GroupSlot, maxConcurrencyOf } from "./slot.js";

/** Poll facts a drain needs beyond the report, and its range sizing (docs/protocol/poll-cycle.md#range-size-in-a-drain). */
export interface PollState extends DrainSizing {
  fenceBlocked: boolean;
  /** The drain's concurrency slot, once its first poll took one (groups with maxConcurrency). */
  slot?: GroupSlot;
  /** After a rate-limited poll: ms until the group's next token (docs/protocol/poll-cycle.md#rate-limit). */
  rateWaitMs?: number | null;
  /** The group's default message timeout: a drain waits for tokens only when such a run still fits after the wait. */
  rateRunMs?: number;
}

/**
 * One poll. Every statement it sends (and those of handlers it awaits) ends by the deadline plus
 * recordMargin, when the leases it takes end too; one still unanswered then fails the poll with
 * SQL0050 and its leases expire as designed (docs/guide/operations.md#timeouts).
 */
export function pollOnce<T>(
  client: Runtime, stream: string, group: string, handler: Handler<T>, options: PollOptions, state?: PollState,
): Promise<CycleReport> {
  return withBudget(options.deadline, options.recordMargin, `poll of ${stream}/${group}`, () => cycle(client, stream, group, handler, options, state));
}

async function cycle<T>(
  client: Runtime, stream: string, group: string, handler: Handler<T>, options: PollOptions, state?: PollState,
): Promise<CycleReport> {
  const started = now();
  const report = emptyCycleReport(stream, group);
  report.polls = 1;
  const db = client.db;
  let own: GroupSlot | undefined; // a slot this poll alone holds (poll() outside a drain)
  try {
    const info = await client.streamInfo(stream);
    const t = statements.tables(db.q, info.id);
    let load = await loadGroup(client, t, info.id, stream, group);
    // Scheduled messages are due (docs/protocol/poll-cycle.md#scheduled-messages): move them to the
    // log, then load again so that this poll claims them.
    if (load.scheduled_due && (await moveDue(client, t, info)) > 0) load = await loadGroup(client, t, info.id, stream, group);
    if (!load.has_cursor) throw new SqlStreamsError("SQL0010", `consumer group ${group} has no cursor on stream ${stream}`, { stream, group });
    report.committedBefore = report.committedAfter = load.committed;
    if (load.paused) {
      report.paused = true;
      return finish(report, started);
    }
    if (options.deadline !== undefined && options.deadline - now() < options.recordMargin) {
      report.idle = true;
      return finish(report, started);
    }
    const max = maxConcurrencyOf(load.config);
    if (max !== undefined && state?.slot === undefined) {
      // docs/guide/configuration.md#maxconcurrency: at the cap, return at once without claiming.
      const cap = () => (options.deadline === undefined ? null : Math.max(1, Math.floor(options.deadline - now()) + options.recordMargin));
      const slot = await GroupSlot.take(db, t, load.group_id, max, cap, () => {
        db.events.emit({ level: "warn", code: "SQL0034", message: "concurrency slot lost: its lease expired while the drain ran; the drain stops after this poll", stream, group });
      });
      if (slot === null) {
        report.capped = 1;
        return finish(report, started);
      }
      if (state) state.slot = slot;
      else own = slot;
    }
    const ctx: PollContext<T> = {
      client, db, tables: t, stream, group, groupId: load.group_id, resolution: groupResolution(load.config ?? {}), mode: load.mode,
      handler, options, report, stop: false, plain: new Map(), rate: rateJson(load.config), rateWaitMs: null,
    };
    const chain = new Chain(ctx, state, after(started, STEADY_CHAIN_MS));
    let range: RangeFacts = { took: false, fenceBlocked: false, advance: false, expirable: false, reservable: false };

    // Range phase (docs/protocol/poll-cycle.md#the-range-lease): an expired range first, else a fresh one
    // (in a drain, while they come back full, the ones after it: docs/protocol/poll-cycle.md#the-steady-state).
    if (load.reclaimable) range = await reclaimPhase(ctx, chain);
    if (!range.took && load.obs !== "0") range = await claimPhase(ctx, chain, load);

    // Exception phase (docs/protocol/poll-cycle.md#the-exception-phase), for what the load or a record saw.
    const expired = load.expirable || range.expirable ? await expirePhase(ctx) : { took: false, advance: false };
    // In a drain, a batch that filled up and ran whole is followed by the next reservation in the
    // same poll, without a load and an advance between them, for at most STEADY_CHAIN_MS of the
    // poll; the batch's last outcomes travel with it (docs/protocol/poll-cycle.md#batches-in-a-row).
    const mayCarry = () => state !== undefined && ctx.rate === null && mayReserveAgain(ctx, started);
    const reserved: ExceptionFacts = (load.reservable || range.reservable) && !ctx.stop && !aborted(ctx)
      ? await exceptionPhase(ctx, null, mayCarry) : { took: false, advance: false };
    let carry = reserved.carry ?? null;
    while (reserved.full === true && state !== undefined && mayReserveAgain(ctx, started)) {
      const next = await exceptionPhase(ctx, carry, mayCarry);
      carry = next.carry ?? null;
      reserved.advance ||= next.advance;
      reserved.full = next.full;
    }
    if (carry !== null) await flushCarry(ctx, carry);

    // Cursor advance (docs/protocol/poll-cycle.md#cursor-advance) when anything this poll did, or saw, can move it.
    if (big(load.target) > big(load.committed) || range.advance || expired.advance || reserved.advance) {
      const r = await statements.advance.retry(db, t, { groupId: ctx.groupId });
      report.committedAfter = r.rows[0].committed;
    }
    // Held back by the rate limit is not idle: the work is there, waiting for tokens.
    report.idle = !range.took && !expired.took && !reserved.took && report.rateLimited === 0;
    if (state) {
      state.fenceBlocked = range.fenceBlocked;
      state.rateWaitMs = ctx.rateWaitMs;
      state.rateRunMs = ctx.resolution.defaults.timeout;
    }
    return finish(report, started);
  } catch (e) {
    if (isSqlStreamsError(e)) throw e;
    throw new SqlStreamsError("SQL0033", `poll of ${stream}/${group} failed: ${(e as Error).message}`, { stream, group }, e);
  } finally {
    if (own) await own.release();
  }
}

async function loadGroup(client: Runtime, t: statements.Tables, streamId: string, stream: string, group: string): Promise<statements.LoadRow> {
  const loaded = await statements.load.retry(client.db, t, { streamId, group });
  if (loaded.rowCount === 0) {
    await client.streamInfo(stream, true); // throws SQL0009 when the stream is gone
    throw groupNotRegistered(stream, group);
  }
  return loaded.rows[0];
}

/**
 * Runs the scheduled-message mover; when the log's next partition is missing it is created (as a
 * producer would) and the mover runs once more. The stream's groups are woken when it moved any.
 */
async function moveDue(client: Runtime, t: statements.Tables, info: StreamInfo): Promise<number> {
  let moved = (await moveScheduled.retry(client.db, t, { limit: MOVE_LIMIT })).rows[0].moved;
  if (moved < 0) {
    await new PartitionUpkeep(client.db).recover(info, MOVE_LIMIT);
    moved = (await moveScheduled.retry(client.db, t, { limit: MOVE_LIMIT })).rows[0].moved;
  }
  if (moved > 0) await client.afterProduce(info.name);
  return moved;
}

/**
 * Whether a drain's poll may reserve another batch after a full one: no stop, abort, rate limit or
 * near deadline, and within STEADY_CHAIN_MS of the poll's start.
 */
function mayReserveAgain<T>(ctx: PollContext<T>, started: MonotonicMs): boolean {
  if (ctx.stop || aborted(ctx) || ctx.report.rateLimited > 0 || ctx.report.notStarted > 0) return false;
  if (now() >= after(started, STEADY_CHAIN_MS)) return false;
  return ctx.options.deadline === undefined || ctx.options.deadline - now() >= 2 * ctx.options.recordMargin;
}

/** The group's rateLimit as the claim and the reservation take it, or null: no token is taken. */
function rateJson(config: unknown): string | null {
  const r = rateLimitOf(config);
  return r === undefined ? null : JSON.stringify(r);
}

function finish(r: CycleReport, started: number): CycleReport {
  r.durationMs = Math.round(now() - started);
  return r;
}
