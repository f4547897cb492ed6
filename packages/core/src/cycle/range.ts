// The range phase of a poll (docs/poll-cycle.md#the-range-lease): reclaim an expired range (or quarantine it), else claim a
// fresh one behind the snapshot fence; dispatch its messages in chains; record the outcomes.
import { randomUUID } from "node:crypto";
import type pg from "pg";
import { timeoutBounds } from "../config.js";
import { type RetryState, query, queryRetry, transactionRetry } from "../db.js";
import * as S from "../sql/cycle.js";
import { type KeyTake, type KeyRefusal, decodeKeyTake, decodeKeyTakes, deferredReason } from "../sql/results.js";
import {
  type Ctx, type LoadRow, type RangeMessage, type RawMessage, aborted, big, byId, leaseCap, logDead, logNotStarted,
  lostLease, mayStart, message, resolve,
} from "./context.js";
import { type Plan, type RunOutcome, plan } from "./plan.js";
import { runHandler } from "./run.js";
import { keyAbandoned, watchRun } from "./abandoned.js";
import { setTimeout as sleep } from "node:timers/promises";
import { now } from "../clock.js";
import { GROW_TIMEOUT_SHARE, emptySample } from "./sizer.js";

// ---------------------------------------------------------------------------------------------
// Range phase
// ---------------------------------------------------------------------------------------------

interface TakenRange {
  token: string;
  low: string;
  high: string;
  /** The lease's length as the database computed it (lease_ms_N), from when its claim was sent. */
  leaseMs: number;
  msgs: RawMessage[];
}

/** A row of claim_N's answer (docs/poll-cycle.md#the-steady-state): a record row, a message, the header or a fence holder. */
type ClaimRow = RawMessage & {
  low: string | null;
  high: string | null;
  lease_ms: number | null;
  recorded?: boolean | null;
  committed?: string | null;
  paused?: boolean | null;
  reclaimable?: boolean | null;
  expirable?: boolean | null;
  reservable?: boolean | null;
};

/** A claim's answer (messages, then the header; or fence holders), its token and when it was sent. */
interface Claim {
  token: string;
  sentAt: number;
  rows: ClaimRow[];
}

/** The first row of record_take_keys_N (the record's), then the keys it did not take. */
type RecordTakeRow = {
  recorded: boolean | null;
  paused: boolean | null;
  reclaimable: boolean | null;
  expirable: boolean | null;
  reservable: boolean | null;
} & KeyRefusal;

/** The previous range's record, sent with the next claim (JSON arrays as record_range_N takes them). */
interface RecordArgs {
  token: string;
  eq: string | null;
  dl: string | null;
  /** The key leases to release: the range's key token and the keys it holds under it. */
  keyToken: string | null;
  keys: string[];
  /**
   * No abandoned run holds a lease under the key token: every lease under it goes, named by the
   * token alone (record_take_keys_N's "all", stream migration 0018).
   */
  allKeys: boolean;
  /**
   * Claim the next range even if due exception rows wait (docs/poll-cycle.md#due-rows-and-the-chain):
   * only after a range without keyed messages.
   */
  pastDue: boolean;
}

/**
 * A drain's chain of keyed ranges passes its key leases on from range to range instead of
 * releasing and taking them again; a lease taken there lasts this much beyond its run, so ranges a
 * little later in the chain still find it long enough (docs/ordering.md#key-leases).
 */
export const CHAIN_KEY_HEADROOM_MS = 2_000;

/** A held key counts as long enough for a range when it would still cover a run started this much later. */
const HELD_ALLOWANCE_MS = 500;

/** Pauses before asking the fence again while older write transactions are still open. */
const FENCE_WAITS_MS = [5, 10, 20, 40, 80, 160, 320, 400];

/**
 * A fresh range, and in a drain the ranges after it: a range that came back full and was run
 * whole is recorded in the same statement that claims the next (docs/poll-cycle.md#the-steady-state).
 * While ranges of unkeyed messages keep coming back full and quick, the next range is claimed
 * while this one runs (docs/poll-cycle.md#claiming-ahead); `pend` is then a range run whole
 * whose record travels with the next claim.
 */
export async function claimPhase<T>(ctx: Ctx<T>, L: LoadRow): Promise<boolean> {
  let claim: Claim | null = await freshClaim(ctx, L);
  if (claim === null) return false;
  let pend: Pending<T> | null = null;
  while (claim !== null) ({ next: claim, pend } = await runClaimed(ctx, claim, pend));
  return true;
}

/** A range run whole whose record is sent with the next claim. */
interface Pending<T> {
  run: RangeRun<T>;
  rows: RangeRows;
  rec: RecordArgs;
}

/** What a range's run leaves for the next: the next claimed range, and the record still to send. */
interface Step<T> {
  next: Claim | null;
  /** Only with `next`: its record is sent by the claim that runs ahead of `next`, or alone before it. */
  pend: Pending<T> | null;
}

/**
 * claim_N's parameters. `own`: the range leases this poll still holds while it claims (a claim
 * ahead), which the claim does not count as another poll's range holding keys
 * (docs/ordering.md#ranges-of-several-pollers).
 */
function claimParams<T>(ctx: Ctx<T>, token: string, head: string | null, obs: string | null, rec: RecordArgs | null, own: string[] = []): unknown[] {
  const tb = timeoutBounds(ctx.g);
  return [
    ctx.groupId, ctx.o.batchLimit, head, obs, token, tb.def, tb.min, tb.max, ctx.o.concurrency, ctx.o.recordMargin, rangeLeaseCap(ctx),
    ctx.o.batchBytes, rec?.token ?? null, rec?.eq ?? null, rec?.dl ?? null, rec ? keyLeaseJson(rec) : null, rec?.pastDue ?? false, own,
  ];
}

/**
 * claim_N and the read of the range it leased, in one round trip and one transaction
 * (docs/poll-cycle.md#the-claims-answer); answered as one list in claim_N's order: the record row
 * when the claim recorded a range, the messages, then the header (or the fence holders).
 */
function sendClaim<T>(ctx: Ctx<T>, token: string, params: unknown[], retry: RetryState): Promise<pg.QueryResult<ClaimRow>> {
  return queryRetry<ClaimRow>(ctx.db, S.claim(ctx.t), params, retry, {
    text: S.claimRead(ctx.t),
    values: [ctx.groupId, token, params[1]],
    join: (claim, read) => {
      const rows = claim.rows as ClaimRow[];
      const msgs = read.rows as ClaimRow[];
      if (msgs.length === 0) return claim;
      const rec = rows.length > 0 && typeof rows[0].recorded === "boolean" ? 1 : 0;
      return { ...claim, rows: [...rows.slice(0, rec), ...msgs, ...rows.slice(rec)], rowCount: rows.length + msgs.length };
    },
  });
}

/** The claim after a load, asked again a few times while the fence holds it. Null: nothing claimed. */
async function freshClaim<T>(ctx: Ctx<T>, L: LoadRow): Promise<Claim | null> {
  const token = randomUUID();
  let sentAt: number;
  let r: pg.QueryResult<ClaimRow>;
  for (let wait = 0; ; wait++) {
    sentAt = now();
    r = await sendClaim(ctx, token, claimParams(ctx, token, L.head, L.obs, null), { retried: false, recover: () => ownClaim(ctx, token) });
    // No range with a non-idle observation means the fence could not prove the head yet: a
    // transaction of this stream's producers is still open (docs/poll-cycle.md#the-fence). They
    // are usually milliseconds from committing, so ask again a few times before giving up.
    if (claimed(r.rows) || wait >= FENCE_WAITS_MS.length || ctx.stop || aborted(ctx)) break;
    if (ctx.o.deadline !== undefined && ctx.o.deadline - now() < ctx.o.recordMargin + FENCE_WAITS_MS[wait]) break;
    await sleep(FENCE_WAITS_MS[wait]);
  }
  if (!claimed(r.rows)) {
    ctx.fenceBlocked = true;
    warnFenceHolders(ctx, r.rows);
    return null;
  }
  return { token, sentAt, rows: r.rows };
}

/**
 * Runs one claimed range and records it; answers the next range when the record claimed one, or
 * when it was claimed ahead while this one ran (with this range's record still to send).
 */
async function runClaimed<T>(ctx: Ctx<T>, claim: Claim, pend: Pending<T> | null): Promise<Step<T>> {
  ctx.report.rangesClaimed++;
  const head = claim.rows[claim.rows.length - 1];
  if (ctx.sample) ctx.sample.full = big(head.high as string) - big(head.low as string) >= BigInt(ctx.o.batchLimit);
  const run = rangeOf(ctx, claim);
  if (run === null) {
    if (pend !== null) await pend.run.record(false);
    ctx.advance = true; // an empty range: no lease, the advance passes its ids
    return { next: null, pend: null };
  }
  const t0 = now();
  let ahead: Promise<Settled<Claim | null>> | null = null;
  let taking: Promise<Settled<void>> | null = null;
  if (run.keyed) {
    // A keyed range takes its first keys with the pending record (docs/poll-cycle.md#keyed-ranges-claimed-ahead);
    // the claim ahead carries no record, and goes out at the same time (after the take, so on a
    // single connection it runs while the handlers do, not before them).
    const own = pend === null ? [run.rangeToken] : [run.rangeToken, pend.rec.token];
    taking = settled(run.takeFirstKeys(pend));
    if (mayClaimAhead(ctx, run)) ahead = settled(claimAhead(ctx, own));
  } else {
    // The claim ahead carries the pending record; without it, the pending range records first.
    if (mayClaimAhead(ctx, run)) ahead = settled(pend ? pend.run.recordAndClaim(pend.rows, pend.rec, false) : claimAhead(ctx, [run.rangeToken]));
    else if (pend !== null) await pend.run.record(false);
  }
  // One turn of the event loop puts the statements on the wire before handlers that return
  // synchronously hold the thread for the whole range.
  if (ahead !== null || taking !== null) await new Promise(setImmediate);
  const took = taking === null ? null : await taking;
  if (took !== null && !took.ok) {
    // Nothing of this range ran: a range claimed ahead behind it is released unstarted too.
    const next = ahead === null ? null : await ahead;
    if (next?.ok && next.value !== null) await releaseUnstarted(ctx, next.value);
    throw took.error;
  }
  const failure = await run.dispatch();
  if (ctx.sample) {
    ctx.sample.ms = now() - t0;
    if (ctx.state) ctx.state.lastRun = { ms: ctx.sample.ms, slowest: ctx.sample.slowest };
  }
  if (ahead === null) {
    const next = await run.record(failure !== null, true);
    if (failure) throw failure.e;
    return { next, pend: null };
  }
  return afterAhead(ctx, run, failure, await ahead);
}

/** The range a claim answered (its rows, then the header), or null for an empty one. */
function rangeOf<T>(ctx: Ctx<T>, claim: Claim): RangeRun<T> | null {
  // The header row (low and high of the range, the lease's length) follows the messages; payloads
  // come as JSON text, counted against batchBytes by the claim (docs/poll-cycle.md#the-byte-bound).
  const rows = claim.rows;
  const head = rows[rows.length - 1];
  const low = head.low as string;
  const high = head.high as string;
  if (rows.length === 1) return null;
  const msgs = byId(rows.slice(0, -1));
  return new RangeRun(ctx, { token: claim.token, low, high, leaseMs: head.lease_ms as number, msgs }, claim.sentAt, true);
}

type Settled<V> = { ok: true; value: V } | { ok: false; error: unknown };

/** A promise that never rejects, so one left pending while handlers run is never an unhandled rejection. */
function settled<V>(p: Promise<V>): Promise<Settled<V>> {
  return p.then((value) => ({ ok: true as const, value }), (error: unknown) => ({ ok: false as const, error }));
}

/**
 * Whether the next range may be claimed while this one runs (docs/poll-cycle.md#claiming-ahead):
 * when the range could be recorded with the next claim (mayChain) and the drain's last range was
 * quick (a keyed range claimed ahead takes its keys only with this range's record:
 * docs/poll-cycle.md#keyed-ranges-claimed-ahead): its slowest handler used at most a quarter of its timeout (as
 * for growing the range) and it ran within a quarter of this range's lease, so the range claimed
 * ahead, sized before this one ran, does not wait long for its turn. A range that does wait longer
 * extends its lease before a start that would not fit, as any range does.
 */
function mayClaimAhead<T>(ctx: Ctx<T>, run: RangeRun<T>): boolean {
  if (!mayChain(ctx)) return false;
  const last = ctx.state?.lastRun;
  return last !== undefined && last.slowest <= GROW_TIMEOUT_SHARE && 4 * last.ms <= run.leaseMs;
}

/** The claim sent ahead without a record: it claims up to the stream's last proven head. */
async function claimAhead<T>(ctx: Ctx<T>, own: string[]): Promise<Claim | null> {
  const token = randomUUID();
  const sentAt = now();
  const r = await sendClaim(ctx, token, claimParams(ctx, token, null, null, null, own), { retried: false, recover: () => ownClaim(ctx, token) });
  return claimed(r.rows) ? { token, sentAt, rows: r.rows } : null;
}

/**
 * After a range whose successor was claimed ahead: the range's record goes with the claim after
 * that when the chain goes on, else it is sent alone now. A range claimed ahead behind a failed
 * one is released unstarted (its lease would otherwise have to expire).
 */
async function afterAhead<T>(ctx: Ctx<T>, run: RangeRun<T>, failure: { e: unknown } | null, ahead: Settled<Claim | null>): Promise<Step<T>> {
  const next = ahead.ok ? ahead.value : null;
  const whole = failure === null && next !== null && mayChain(ctx) ? run.whole() : null;
  nextRangeSize(ctx); // this range's sample; the range claimed ahead was sized before it ran
  if (whole !== null) return { next, pend: whole };
  await run.record(failure !== null);
  if (failure) {
    if (next !== null) await releaseUnstarted(ctx, next);
    throw failure.e;
  }
  if (!ahead.ok) throw ahead.error;
  return { next, pend: null };
}

/** Releases a range claimed ahead that will not run: recorded with no outcome, so any poll resumes it at once. */
async function releaseUnstarted<T>(ctx: Ctx<T>, claim: Claim): Promise<void> {
  try {
    const run = rangeOf(ctx, claim);
    if (run !== null) await run.record(true);
  } catch {
    // Already failing: the lease expires and the range is reclaimed then.
  }
}

/** A drain's poll records a range with the next claim while it keeps finding full ranges, for a while. */
export const STEADY_CHAIN_MS = 1_000;

/**
 * Whether the range just run (whole, without a failure) may be recorded together with the next
 * claim: in a drain, after a full range, with no stop, abort or near deadline, and for at most
 * STEADY_CHAIN_MS of the poll, after which the next poll's load looks at the group again
 * (docs/poll-cycle.md#the-steady-state).
 */
function mayChain<T>(ctx: Ctx<T>): boolean {
  if (ctx.state?.sizer === undefined || ctx.sample?.full !== true || ctx.stop || aborted(ctx)) return false;
  if (now() >= ctx.chainUntil) return false;
  return ctx.o.deadline === undefined || ctx.o.deadline - now() >= 2 * ctx.o.recordMargin;
}

/** The drain's sizer sees the range just run before the next is claimed (docs/poll-cycle.md#range-size-in-a-drain). */
function nextRangeSize<T>(ctx: Ctx<T>): void {
  const st = ctx.state;
  if (st?.sizer === undefined || ctx.sample === undefined) return;
  st.sizer.observe(ctx.sample);
  ctx.o.batchLimit = st.sizer.size;
  ctx.sample = st.sample = emptySample();
}

/**
 * Before a claim is repeated after a lost reply: if the first attempt committed, its lease is
 * there under this poll's token; answer as the claim would have (the range's rows, then the
 * header row with what is left of the lease) instead of claiming a second range
 * (docs/crash-recovery.md#unknown-commits). A claim that also recorded the previous range
 * committed that record with it.
 */
async function ownClaim<T>(ctx: Ctx<T>, token: string): Promise<pg.QueryResult | null> {
  // One attempt each: this runs inside the claim's own retries, which try it again after their
  // next pause (retrying here too would multiply the time a poll waits out an outage).
  const own = await query<{ low: string; high: string; left_ms: number }>(ctx.db, ctx.db.pool, S.leaseByToken(ctx.t), [ctx.groupId, token]);
  if (own.rowCount === 0) return null;
  const { low, high, left_ms } = own.rows[0];
  const msgs = (await query<RawMessage>(ctx.db, ctx.db.pool, S.readRange(ctx.t), [low, high])).rows;
  const header = { low, high, id: null, message_key: null, compaction_rank: null, payload: null, options: null, created_at: null, lease_ms: left_ms };
  const rows = [...msgs.map((m) => ({ ...m, payload: JSON.stringify(m.payload), low: null, high: null, lease_ms: null })), header];
  return { command: "SELECT", rowCount: rows.length, oid: 0, fields: [], rows };
}

/** A claim's answer holds a range when its last row is the header (low set). */
function claimed(rows: { low: string | null }[]): boolean {
  return rows.length > 0 && rows[rows.length - 1].low !== null;
}

type FenceHolder = { pid: number | null; age_ms: number | null; app: string | null; query: string | null };

/** A producer transaction of this stream open longer than this is named when it holds a claim. */
export const FENCE_WARN_MS = 2_000;

/** SQL0043: names each backend of this stream's producers that has held the fence for long. */
function warnFenceHolders<T>(ctx: Ctx<T>, rows: ClaimRow[]): void {
  for (const row of rows) {
    if (row.options === null || row.id !== null || row.recorded != null) continue;
    const h = JSON.parse(row.payload as string) as FenceHolder;
    if (h.age_ms !== null && h.age_ms < FENCE_WARN_MS) continue;
    const age = h.age_ms === null ? "unknown" : `${Math.round(h.age_ms / 100) / 10} s`;
    const who = h.pid === null ? "a prepared transaction" : `backend pid ${h.pid}`;
    ctx.db.events.emit({
      level: "warn", code: "SQL0043",
      message: `claims held by the fence: ${who} has a transaction open for ${age} that wrote to stream ${ctx.stream} ` +
        `(application_name ${JSON.stringify(h.app ?? "")}, last statement ${JSON.stringify(h.query ?? "")})`,
      stream: ctx.stream, group: ctx.group, pid: h.pid, xactAgeMs: h.age_ms === null ? null : Math.round(h.age_ms),
      applicationName: h.app, lastStatement: h.query,
    }, String(h.pid));
  }
}

export async function reclaimPhase<T>(ctx: Ctx<T>): Promise<boolean> {
  const { db, t, g } = ctx;
  const sentAt = now();
  // Decided once, so a repeat after a lost COMMIT reply can find this poll's own takeover.
  const token = randomUUID();
  let first: { token: string; low: string; high: string; released: boolean; quarantine: boolean } | null = null;
  type Lease = { token: string; low: string; high: string; reclaims: number; released: boolean; left_ms?: number };
  const taken = await transactionRetry(db, async (c, attempt): Promise<{ range: TakenRange | "none" | "done"; lease?: Lease; reclaims?: number }> => {
    if (attempt > 0 && first !== null) {
      // docs/crash-recovery.md#unknown-commits: the first attempt may have committed unheard.
      const own = await query<Lease>(db, c, S.leaseByToken(t), [ctx.groupId, token]);
      if (own.rowCount !== 0) {
        const o = own.rows[0];
        const msgs = (await query<RawMessage>(db, c, S.readRangeIds(t), [o.low, o.high])).rows;
        // What is left of the lease by the database clock, counted from before the first attempt: never longer than it.
        const leaseMs = o.left_ms as number;
        const lease = { token: first.token, low: o.low, high: o.high, reclaims: o.reclaims, released: first.released };
        return { range: { token, low: o.low, high: o.high, leaseMs, msgs }, lease, reclaims: o.reclaims };
      }
      if (first.quarantine) {
        const old = await query(db, c, S.leaseByToken(t), [ctx.groupId, first.token]);
        if (old.rowCount === 0) {
          db.events.emit({
            level: "warn", code: "SQL0044",
            message: `the reply to the quarantine of range (${first.low}, ${first.high}] was lost; it was done, by this poll or another`,
            stream: ctx.stream, group: ctx.group, low: first.low, high: first.high,
          });
          ctx.advance = true;
          return { range: "done" };
        }
      }
    }
    const l = await query<Lease>(db, c, S.lockExpiredRange(t), [ctx.groupId]);
    if (l.rowCount === 0) return { range: "none" };
    const lease = l.rows[0];
    const reclaims = lease.released ? lease.reclaims : lease.reclaims + 1;
    // Decided from ids, options and keys only: a range whose payloads crash the process (out of
    // memory) is still counted and quarantined (docs/poll-cycle.md#the-byte-bound).
    const msgs = (await query<RawMessage>(db, c, S.readRangeIds(t), [lease.low, lease.high])).rows;
    const quarantineIt = reclaims >= g.maxRangeReclaims || msgs.length === 0;
    first = { token: lease.token, low: lease.low, high: lease.high, released: lease.released, quarantine: quarantineIt };
    if (quarantineIt) {
      if (msgs.length > 0) await quarantine(ctx, c, msgs);
      await query(db, c, S.deleteRange(t), [ctx.groupId, lease.token]);
      ctx.advance = true;
      return { range: "done", lease, reclaims };
    }
    const tmax = Math.max(...msgs.map((m) => resolve(ctx, m).timeout));
    const over = await query<{ lease_ms: number }>(db, c, S.takeOverRange(t), [
      ctx.groupId, lease.token, token, reclaims, tmax, msgs.length, ctx.o.concurrency, ctx.o.recordMargin, rangeLeaseCap(ctx),
    ]);
    const leaseMs = over.rows[0].lease_ms;
    return { range: { token, low: lease.low, high: lease.high, leaseMs, msgs }, lease, reclaims };
  });
  if (taken.range === "none") return false;
  // Counted once, for the attempt that committed (never for a repeat of this poll's own reclaim).
  const { lease, reclaims } = taken;
  if (lease && reclaims !== undefined) {
    if (lease.released) ctx.report.rangesResumed++;
    else {
      ctx.report.rangesReclaimed++;
      db.events.emit({ level: "warn", code: "SQL0035", message: `expired range (${lease.low}, ${lease.high}] reclaimed (reclaim ${reclaims})`, stream: ctx.stream, group: ctx.group, low: lease.low, high: lease.high, reclaims });
    }
  }
  if (taken.range !== "done") {
    // The payloads are read only once the takeover (and its reclaim count) has committed.
    const range = taken.range;
    range.msgs = (await queryRetry<RawMessage>(db, S.readRange(t), [range.low, range.high])).rows;
    if (range.msgs.length > 0) await runRange(ctx, range, sentAt);
    else {
      await queryRetry(db, S.deleteRange(t), [ctx.groupId, range.token]);
      ctx.advance = true;
    }
  }
  return true;
}

/**
 * The cap of a range lease: deadline + recordMargin, and in a drain also the lease bound (or one
 * run of the default timeout when that is longer). A message that would not fit in the remaining
 * lease extends it before it starts (docs/poll-cycle.md#range-size-in-a-drain).
 */
function rangeLeaseCap<T>(ctx: Ctx<T>): number | null {
  const cap = leaseCap(ctx);
  if (ctx.o.rangeLeaseBound === undefined) return cap;
  const bound = Math.max(ctx.o.rangeLeaseBound, ctx.g.defaults.timeout + ctx.o.recordMargin);
  return cap === null ? bound : Math.min(cap, bound);
}

const QUARANTINE_TEXT = "quarantined: range reclaimed too many times";

async function quarantine<T>(ctx: Ctx<T>, c: pg.PoolClient, msgs: RawMessage[]): Promise<void> {
  const rows = msgs.map((m) => ({ message_id: m.id, message_key: m.message_key, concurrency: resolve(ctx, m).concurrency }));
  const ins = await query<{ message_id: string }>(ctx.db, c, S.quarantineRows(ctx.t), [ctx.groupId, JSON.stringify(rows), QUARANTINE_TEXT]);
  if (ctx.mode !== "off" && ins.rows.length > 0) {
    const dl = ins.rows.map((r) => ({ message_id: r.message_id, attempt: 0, status: "failure", error: QUARANTINE_TEXT }));
    await query(ctx.db, c, S.insertDeliveryLog(ctx.t), [ctx.groupId, JSON.stringify(dl)]);
  }
  ctx.report.rangesQuarantined++;
  ctx.db.events.emit({ level: "warn", code: "SQL0036", message: `range quarantined into ${ins.rows.length} exception row(s)`, stream: ctx.stream, group: ctx.group, ids: ins.rows.map((r) => r.message_id) });
}

/** The key leases to release as record_range_N and claim_N take them ([{k, t}], or null for none). */
function keyLeaseJson(rec: Pick<RecordArgs, "keyToken" | "keys">): string | null {
  const t = rec.keyToken;
  return t === null || rec.keys.length === 0 ? null : JSON.stringify(rec.keys.map((k) => ({ k, t })));
}

/** record_take_keys_N's p_rec_keys: none, every lease under the key token ("all"), or the keys named. */
function releaseJson(rec: Pick<RecordArgs, "keys" | "allKeys">): string | null {
  if (rec.keys.length === 0) return null;
  return rec.allKeys ? '"all"' : JSON.stringify(rec.keys);
}

/** A key take's answer as a member's outcome: null (taken: the member runs), superseded or deferred. */
function keyTakeOutcome(res: KeyTake): RunOutcome | null {
  if (res.kind === "taken") return null;
  if (res.kind === "superseded") return { kind: "superseded", head: res.head };
  return { kind: "deferred", reason: deferredReason(res) };
}

function keyed(m: RangeMessage): boolean {
  return m.resolved.concurrency !== "parallel" && m.message_key !== null;
}

/** Same-key exclusive/ordered messages form serial chains; everything else runs alone (docs/ordering.md#chains-inside-a-range). */
function chains(msgs: RangeMessage[]): RangeMessage[][] {
  const units: RangeMessage[][] = [];
  const byKey = new Map<string, RangeMessage[]>();
  for (const m of msgs) {
    if (m.resolved.concurrency !== "parallel" && m.message_key !== null) {
      const chain = byKey.get(m.message_key);
      if (chain) {
        chain.push(m);
        continue;
      }
      const fresh = [m];
      byKey.set(m.message_key, fresh);
      units.push(fresh);
    } else units.push([m]);
  }
  return units;
}

async function runRange<T>(ctx: Ctx<T>, range: TakenRange, sentAt: number): Promise<void> {
  const run = new RangeRun(ctx, range, sentAt);
  await run.takeFirstKeys();
  const failure = await run.dispatch();
  await run.record(failure !== null);
  if (failure) throw failure.e;
}

/** The rows a record writes for a prefix of the range, and what the report counts of it. */
interface RangeRows {
  eq: unknown[];
  dl: unknown[];
  plans: [RangeMessage, Plan][];
  plainSuccesses: number;
}

type KeyState = { held: boolean; expiry: number; result: KeyTake };

/**
 * One claimed range being run (docs/poll-cycle.md#dispatch): its chains, the key leases they hold
 * under one key token, the range lease and its extension, and the outcomes to record.
 */
class RangeRun<T> {
  private readonly msgs: RangeMessage[];
  private readonly units: RangeMessage[][];
  private readonly outcomes = new Map<string, RunOutcome>();
  /**
   * Keys whose lease this range holds under its key token (released when it records, or passed on
   * to the next range of a drain's chain with the token: passKeys).
   */
  private keyLeases: string[] = [];
  private keyToken: string | null;
  /** Keys whose run under this key token was abandoned: their leases outlive the range (abandoned.ts). */
  private abandonedKeys = new Set<string>();
  private keys = new Map<string, KeyState>();
  /** Whether the chains' first keys were asked for up front (takeFirstKeys). */
  private asked = false;
  private leaseExpiry: number;
  /**
   * A lease sized for exactly one run (n <= c) is always a few ms short of timeout + margin by
   * the time its messages start; that slack comes out of the recording margin, not a round trip.
   */
  private readonly slack: number;
  private lost = false;
  private extending: Promise<boolean> | null = null;

  /** The token of this range's lease (a claim ahead names it as the poll's own). */
  get rangeToken(): string {
    return this.range.token;
  }

  constructor(
    private readonly ctx: Ctx<T>,
    private readonly range: TakenRange,
    sentAt: number,
    /**
     * The payloads came as JSON text, as a claim answers (it counted their bytes); each is parsed
     * when its message starts, and the range lets go of it then (runMember).
     */
    private readonly payloadsAsText = false,
  ) {
    this.msgs = range.msgs as RangeMessage[];
    for (const m of this.msgs) m.resolved = resolve(ctx, m);
    this.units = chains(this.msgs);
    this.keyToken = this.msgs.some(keyed) ? randomUUID() : null;
    this.leaseExpiry = sentAt + range.leaseMs;
    this.slack = Math.min(250, ctx.o.recordMargin / 4);
  }

  /** Whether any member is keyed (exclusive or ordered with a key): its chains take key leases. */
  get keyed(): boolean {
    return this.keyToken !== null;
  }

  /** The range lease's length as the claim computed it. */
  get leaseMs(): number {
    return this.range.leaseMs;
  }

  /**
   * A lease covers one run: timeout + recordMargin (+ `headroom`, for a key lease a chain passes
   * on), capped at deadline + recordMargin.
   */
  private runMs(timeout: number, headroom = 0): number {
    const cap = leaseCap(this.ctx);
    const ms = timeout + this.ctx.o.recordMargin + headroom;
    return cap === null ? ms : Math.min(ms, cap);
  }

  /**
   * Takes over the key leases of the range before this one in a drain's chain, whose record goes
   * with this range's key take (docs/ordering.md#key-leases): its key token, the keys held under
   * it and their expiries, and its abandoned runs' keys. The record then releases nothing; this
   * range's record (or the next range's take) does. False when either range has no keyed member.
   */
  private passKeys(prev: RangeRun<T>): boolean {
    if (prev.keyToken === null || this.keyToken === null) return false;
    this.keyToken = prev.keyToken;
    this.keys = prev.keys;
    this.keyLeases = prev.releasedKeys();
    this.abandonedKeys = prev.abandonedKeys;
    prev.keyLeases = [];
    prev.keys = new Map();
    return true;
  }

  /** Whether a run of `timeout` started at `at` (now by default) would end after `expiry`. */
  private outlives(timeout: number, expiry: number, at = now()): boolean {
    return at + timeout + this.ctx.o.recordMargin - this.slack > expiry;
  }

  /** Extends the range lease until a run of `timeout` fits; false when the lease was lost. */
  private async fits(timeout: number): Promise<boolean> {
    const { db, t } = this.ctx;
    while (this.outlives(timeout, this.leaseExpiry)) {
      if (this.extending) {
        if (!(await this.extending)) return false;
        continue;
      }
      const ms = this.runMs(timeout);
      const at = now();
      this.extending = queryRetry(db, S.extendRange(t), [this.ctx.groupId, this.range.token, ms]).then((r) => {
        if (r.rowCount === 0) return false;
        this.leaseExpiry = Math.max(this.leaseExpiry, at + ms);
        return true;
      });
      const ok = await this.extending;
      this.extending = null;
      if (!ok) return false;
      if (at + ms < now() + timeout + this.ctx.o.recordMargin) return true; // capped by the deadline: nothing more to gain
    }
    return true;
  }

  /**
   * The key leases of the chains' first members in one round trip (not the compacted ones: their
   * head is checked at their start). Each lease covers one run; released when the range records, or
   * passed on with the record to the next range of a drain's chain (passKeys).
   */
  async takeFirstKeys(prev: Pending<T> | null = null): Promise<void> {
    const { ctx } = this;
    if (this.keyToken === null || ctx.stop || aborted(ctx)) {
      if (prev !== null) await prev.run.record(false);
      return;
    }
    // In a chain the leases pass from range to range (passKeys), taken with headroom for the
    // ranges after this one; so are a chain's first range's.
    const passed = prev !== null && this.passKeys(prev.run);
    const headroom = passed || mayChain(ctx) ? CHAIN_KEY_HEADROOM_MS : 0;
    const keyToken = this.keyToken;
    // Held already and long enough for a run started a little later: checked, not written.
    const later = now() + HELD_ALLOWANCE_MS;
    const held = new Set<string>();
    const wanted = this.units
      .filter((u) => keyed(u[0]) && u[0].compaction_rank === null)
      .map((u) => {
        const m = u[0];
        const k = m.message_key as string;
        const ks = this.keys.get(k);
        const w = { k, id: m.id, ordered: m.resolved.concurrency === "ordered", ms: this.runMs(m.resolved.timeout, headroom) };
        if (ks?.held !== true || this.outlives(m.resolved.timeout, ks.expiry, later)) return w;
        held.add(k);
        return { ...w, held: true };
      });
    if (wanted.length > 0 || prev !== null) {
      const at = now();
      const ms = new Map(wanted.map((w) => [w.k, w.ms]));
      let refused: KeyRefusal[];
      if (prev === null) {
        refused = (await queryRetry<KeyRefusal>(ctx.db, S.takeKeys(ctx.t), [
          ctx.groupId, keyToken, this.range.low, this.range.high, JSON.stringify(wanted),
        ])).rows;
      } else {
        const { rec } = prev;
        const retry: RetryState = { retried: false };
        const r = await queryRetry<RecordTakeRow>(ctx.db, S.recordTakeKeys(ctx.t), [
          ctx.groupId, rec.token, rec.eq, rec.dl, rec.keyToken, passed ? null : releaseJson(rec),
          keyToken, this.range.low, this.range.high, JSON.stringify(wanted),
        ], retry);
        await prev.run.recordedWithTake(r.rows[0], prev.rows, rec.pastDue, retry);
        refused = r.rows.slice(1) as KeyRefusal[];
      }
      for (const [k, result] of decodeKeyTakes([...ms.keys()], refused)) {
        const before = this.keys.get(k);
        if (before !== undefined && held.has(k)) {
          before.result = result; // nothing written (but the cap below)
          continue;
        }
        this.keys.set(k, { held: result.kind === "taken", expiry: at + (ms.get(k) ?? 0), result });
        if (result.kind === "taken" && before?.held !== true) this.keyLeases.push(k);
      }
      this.capKeys();
    }
    this.asked = true;
  }

  /**
   * After a take: take_keys_N ended every lease under the key token (those passed on and not
   * wanted by this range too) no later than this range's lease. This side's view of each is capped
   * the same way, at its own (earlier) view of the range lease.
   */
  private capKeys(): void {
    for (const ks of this.keys.values()) if (ks.expiry > this.leaseExpiry) ks.expiry = this.leaseExpiry;
  }

  /**
   * Runs the chains on `concurrency` workers. A database error in one unit stops new starts; the
   * running handlers finish and the prefix they resolved is recorded before the error is thrown
   * (docs/crash-recovery.md#database-errors-inside-a-poll).
   */
  async dispatch(): Promise<{ e: unknown } | null> {
    const { ctx, units } = this;
    let next = 0;
    let failure = null as { e: unknown } | null;
    const worker = async () => {
      while (!ctx.stop && next < units.length) {
        try {
          // A lone unkeyed member whose handler returned synchronously settles without a promise.
          const running = this.runUnit(units[next++]);
          if (running !== undefined) await running;
        } catch (e) {
          failure ??= { e };
          ctx.stop = true;
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(ctx.o.concurrency, units.length) }, worker));
    return failure;
  }

  /**
   * A lone message (the hot path: unkeyed, or keyed with its key answered up front), else a chain;
   * undefined when it settled synchronously.
   */
  private runUnit(unit: RangeMessage[]): Promise<void> | undefined {
    const m = unit[0];
    if (unit.length !== 1) return this.runChain(unit);
    if (!mayStart(this.ctx, m.resolved.timeout)) return undefined;
    if (this.outlives(m.resolved.timeout, this.leaseExpiry)) return this.runChain(unit);
    if (keyed(m)) {
      const held = this.heldOutcome(m, unit);
      if (held === undefined) return this.runChain(unit);
      if (held !== null) {
        this.outcomes.set(m.id, held);
        return undefined;
      }
    }
    const outcome = this.runMember(m);
    if (outcome instanceof Promise) return outcome.then((o) => void this.outcomes.set(m.id, o));
    this.outcomes.set(m.id, outcome);
    return undefined;
  }

  /** One chain (or a lone message): its members in order; an ordered member after one that did not complete waits. */
  private async runChain(unit: RangeMessage[]): Promise<void> {
    let blockedBy: string | null = null;
    for (const m of unit) {
      if (blockedBy !== null && m.resolved.concurrency === "ordered") {
        this.outcomes.set(m.id, { kind: "deferred", reason: `deferred: earlier message ${blockedBy} of this key in the range did not complete` });
        continue;
      }
      if (!mayStart(this.ctx, m.resolved.timeout)) return;
      if (this.outlives(m.resolved.timeout, this.leaseExpiry) && !(await this.fits(m.resolved.timeout))) {
        this.lost = true;
        this.ctx.stop = true;
        return;
      }
      // Unkeyed members and handlers that return synchronously cost no await (the hot path).
      const held = keyed(m) ? await this.keyOutcome(m, unit) : null;
      let outcome = held ?? this.runMember(m);
      if (outcome instanceof Promise) outcome = await outcome;
      this.outcomes.set(m.id, outcome);
      if (outcome.kind === "success" || outcome.kind === "superseded") continue;
      const p = plan(outcome, 0, 0, m.resolved, this.ctx.g.exceptionInitialBackoff, this.ctx.mode);
      if (p.row.status !== "dead") blockedBy ??= m.id;
    }
  }

  /**
   * docs/poll-cycle.md#dispatch step 4: null when a keyed member may run (or it has no key), else
   * its outcome without running. The chain's first member usually has its key lease already
   * (taken for the whole range up front); a member whose lease would not cover its run, a later
   * member without the lease, and a compacted member (whose head is checked at its start) take or
   * renew it now, under the range's key token. An abandoned run of the key still running in this
   * process keeps the key (docs/ordering.md#key-leases): the member waits as deferred.
   */
  private async keyOutcome(m: RangeMessage, unit: RangeMessage[]): Promise<RunOutcome | null> {
    if (!keyed(m)) return null;
    const held = this.heldOutcome(m, unit);
    if (held !== undefined) return held;
    const k = m.message_key as string;
    const ks = this.keys.get(k) ?? { held: false, expiry: 0, result: { kind: "busy" } };
    this.keys.set(k, ks);
    return keyTakeOutcome(await this.takeKey(m, ks));
  }

  /**
   * keyOutcome when no round trip is needed (the key was answered up front and its lease covers
   * the run, or an abandoned run holds it); undefined when the member must take or renew its key.
   */
  private heldOutcome(m: RangeMessage, unit: RangeMessage[]): RunOutcome | null | undefined {
    const k = m.message_key as string;
    if (keyAbandoned(this.ctx, k)) return { kind: "deferred", reason: "deferred: an abandoned run of this key has not settled" };
    const ks = this.keys.get(k);
    if (ks === undefined || m.compaction_rank !== null || !this.asked) return undefined;
    if (ks.held ? this.outlives(m.resolved.timeout, ks.expiry) : m !== unit[0]) return undefined;
    return keyTakeOutcome(ks.result);
  }

  private async takeKey(m: RangeMessage, ks: KeyState): Promise<KeyTake> {
    const { ctx, range } = this;
    const k = m.message_key as string;
    const ms = this.runMs(m.resolved.timeout);
    const at = now();
    const r = await queryRetry<{ kind: string; ref: string | null }>(ctx.db, S.takeKey(ctx.t), [
      ctx.groupId, k, this.keyToken, ms, m.id, m.resolved.concurrency === "ordered", range.low, range.high, m.compaction_rank !== null,
    ]);
    const res = decodeKeyTake(r.rows[0]);
    if (res.kind === "taken") {
      if (!ks.held) this.keyLeases.push(k);
      ks.held = true;
      ks.expiry = at + ms;
    }
    this.capKeys();
    return res;
  }

  /** Runs the handler of one member (first delivery, attempt 0). */
  private runMember(m: RangeMessage): RunOutcome | Promise<RunOutcome> {
    const { ctx } = this;
    ctx.report.started++;
    const t0 = ctx.sample ? now() : 0;
    const w = watchRun(ctx, keyed(m) ? m.message_key : null, this.keyToken, m.id, m.resolved.timeout);
    // Parsed at its start and then held by the run alone: a range's parsed payloads are not all
    // alive at once, so most die young (a scavenge copies only the few in flight).
    const payload = this.payloadsAsText ? JSON.parse(m.payload as string) : m.payload;
    m.payload = null;
    const outcome = runHandler(ctx.handler, message(ctx, m, 0, 0, payload), m.resolved.timeout, w.onAbandon);
    if (outcome instanceof Promise) return outcome.then((o) => this.ran(m, w, t0, o));
    return this.ran(m, w, t0, outcome);
  }

  /** After a member's run: its key if the run was abandoned, the drain's sample. */
  private ran(m: RangeMessage, w: { abandoned: boolean }, t0: number, outcome: RunOutcome): RunOutcome {
    if (w.abandoned) this.abandonedKeys.add(m.message_key as string);
    const sample = this.ctx.sample;
    if (sample) {
      sample.ran++;
      sample.slowest = Math.max(sample.slowest, (now() - t0) / m.resolved.timeout);
    }
    return outcome;
  }

  /**
   * The record of a range run whole (every member has an outcome, the lease was never lost), to be
   * sent with the next claim; null when it must be recorded on its own.
   */
  whole(): Pending<T> | null {
    const { msgs, outcomes } = this;
    if (this.lost || msgs.some((m) => !outcomes.has(m.id))) return null;
    const rows = this.rowsOf(msgs);
    return { run: this, rows, rec: this.recordArgs(rows) };
  }

  /** What a record sends: the recorded prefix's exception and delivery-log rows, and the key leases to release. */
  private recordArgs(rows: RangeRows): RecordArgs {
    return {
      token: this.range.token,
      eq: rows.eq.length ? JSON.stringify(rows.eq) : null,
      dl: rows.dl.length ? JSON.stringify(rows.dl) : null,
      keyToken: this.keyToken,
      keys: this.releasedKeys(),
      allKeys: this.abandonedKeys.size === 0,
      pastDue: !this.keyed,
    };
  }

  /**
   * The keys whose leases a record releases (under the key token). An abandoned run's key lease is
   * renewed, then released when the run settles (abandoned.ts), so it is not released here.
   */
  private releasedKeys(): string[] {
    if (this.abandonedKeys.size > 0) this.keyLeases = this.keyLeases.filter((k) => !this.abandonedKeys.has(k));
    return this.keyLeases;
  }

  /**
   * docs/poll-cycle.md#recording-a-range: the contiguous prefix of messages with an outcome is
   * recorded; the rest is released at once (the key leases as releasedKeys says). With `chain`, a
   * range run whole is recorded by the statement that claims the next one, when mayChain allows;
   * that next range is the answer (docs/poll-cycle.md#the-steady-state).
   */
  async record(failed: boolean, chain = false): Promise<Claim | null> {
    const { ctx, range, msgs, outcomes } = this;
    const { db, t } = ctx;
    if (this.lost) {
      lostLease(ctx, `range (${range.low}, ${range.high}]`);
      const keys = keyLeaseJson({ keyToken: this.keyToken, keys: this.releasedKeys() });
      if (keys) await queryRetry(db, S.recordRange(t), [ctx.groupId, randomUUID(), null, null, "[]", "[]", keys]);
      return null;
    }
    const firstOpen = msgs.find((m) => !outcomes.has(m.id));
    const keepFrom = firstOpen ? (big(firstOpen.id) - 1n).toString() : null;
    if (firstOpen) {
      ctx.report.rangesPartial++;
      if (!failed) logNotStarted(ctx, msgs.filter((m) => !outcomes.has(m.id)).length);
    }
    const rows = this.rowsOf(firstOpen ? msgs.filter((m) => big(m.id) < big(firstOpen.id)) : msgs);
    const rec = this.recordArgs(rows);
    if (chain && !failed && !firstOpen && mayChain(ctx)) return this.recordAndClaim(rows, rec);
    const newToken = firstOpen ? randomUUID() : null;
    const retry: RetryState = { retried: false };
    const r = await queryRetry<{ committed: string | null }>(db, S.recordRange(t), [ctx.groupId, range.token, keepFrom, newToken, rec.eq, rec.dl, keyLeaseJson(rec)], retry);
    const committed = r.rows[0].committed;
    if (committed === null) {
      if (!(await this.ownLost(retry, newToken))) return null;
    } else ctx.report.committedAfter = committed;
    this.count(rows);
    return null;
  }

  /**
   * The record of the whole range and the next claim in one statement, one transaction
   * (docs/poll-cycle.md#the-steady-state). Its first row says whether the range was recorded and,
   * if so, what the load would say: anything to reclaim, expire or reserve, or a pause, and no
   * range was claimed; the exception phase of this poll (or the next poll's load) sees to it.
   */
  async recordAndClaim(rows: RangeRows, rec: RecordArgs, resize = true): Promise<Claim | null> {
    const { ctx } = this;
    if (resize) nextRangeSize(ctx);
    const token = randomUUID();
    const sentAt = now();
    const retry: RetryState = { retried: false, recover: () => ownClaim(ctx, token) };
    const r = await sendClaim(ctx, token, claimParams(ctx, token, null, null, rec), retry);
    const first = r.rows[0];
    if (typeof first.recorded !== "boolean") {
      // The recovery found the lease the lost attempt took: it committed, and the record with it.
      ctx.advance = true;
      this.count(rows);
      return { token, sentAt, rows: r.rows };
    }
    if (!(await this.recordRow(first, rows, retry))) return null;
    ctx.report.committedAfter = first.committed as string;
    const rest = r.rows.slice(1);
    if (claimed(rest)) return { token, sentAt, rows: rest };
    if (rest.length > 0) warnFenceHolders(ctx, rest);
    return null;
  }

  /**
   * This range's record went with the next range's key take (docs/poll-cycle.md#keyed-ranges-claimed-ahead):
   * its row says whether it was recorded and what the load would say. Anything to reclaim or
   * expire, a pause, or due rows after a keyed range (`pastDue` false) ends the chain, as after a
   * record that claims, so the poll's exception phase (or the next poll's load) sees to it once
   * the ranges already claimed have run.
   */
  async recordedWithTake(row: RecordTakeRow, rows: RangeRows, pastDue: boolean, retry: RetryState): Promise<void> {
    // No cursor advance here: the chain's last record (or the poll's advance) moves the cursor.
    const recorded = await this.recordRow(row, rows, retry);
    if (!recorded || row.paused || row.reclaimable || row.expirable || (row.reservable && !pastDue)) this.ctx.chainUntil = 0;
  }

  /**
   * The record row of a statement that recorded this range with more (the next claim, or the next
   * range's key take): counts the recorded prefix and notes the expired and due exception rows it
   * saw. False when the record did not land under the range's token (ownLost decides whose it was).
   */
  private async recordRow(
    row: { recorded?: boolean | null; expirable?: boolean | null; reservable?: boolean | null }, rows: RangeRows, retry: RetryState,
  ): Promise<boolean> {
    const { ctx } = this;
    if (!row.recorded) {
      if (await this.ownLost(retry, null)) this.count(rows);
      return false;
    }
    this.count(rows);
    if (row.expirable) ctx.expirable = true;
    if (row.reservable) ctx.reservable = true;
    return true;
  }

  /**
   * The record found no lease under the range's token: lost, or recorded by an attempt whose
   * reply was lost (ownRecord). True when the record is ours (the advance reports the cursor).
   */
  private async ownLost(retry: RetryState, newToken: string | null): Promise<boolean> {
    const { ctx, range } = this;
    const mine = retry.retried ? await ownRecord(ctx, range, newToken, this.leaseExpiry) : "lost";
    if (mine === "lost") lostLease(ctx, `range (${range.low}, ${range.high}]`);
    if (mine !== "mine") return false;
    ctx.advance = true;
    return true;
  }

  /** The report's counters of a recorded prefix. */
  private count(rows: RangeRows): void {
    const { ctx } = this;
    ctx.report.succeeded += rows.plainSuccesses;
    for (const [m, p] of rows.plans) {
      ctx.report[p.counter]++;
      if (p.row.status === "dead") logDead(ctx, m.id, p.row.lastError);
    }
  }

  /** The exception and delivery-log rows of the recorded prefix; plain successes write none. */
  private rowsOf(recorded: RangeMessage[]): RangeRows {
    const { ctx } = this;
    const eq: unknown[] = [];
    const dl: unknown[] = [];
    const plans: [RangeMessage, Plan][] = [];
    let plainSuccesses = 0;
    for (const m of recorded) {
      const out = this.outcomes.get(m.id) as RunOutcome;
      if (out.kind === "success" && ctx.mode !== "all") {
        plainSuccesses++;
        continue;
      }
      const p = plan(out, 0, 0, m.resolved, ctx.g.exceptionInitialBackoff, ctx.mode);
      plans.push([m, p]);
      if (p.row.status !== "delete" && p.row.status !== "superseded") {
        eq.push({
          message_id: m.id, status: p.row.status, message_key: m.message_key, concurrency: m.resolved.concurrency,
          attempts: p.row.attempts, delays: p.row.delays, run_after_ms: p.row.runAfterMs ?? 0, last_error: p.row.lastError,
        });
      }
      if (p.log) dl.push({ message_id: m.id, attempt: p.log.attempt, status: p.log.status, error: p.log.error });
    }
    return { eq, dl, plans, plainSuccesses };
  }
}

/**
 * The record found no lease under the range's token, after an attempt whose reply was lost: was
 * that attempt's commit ours? A partial record left the rest under its new token: found, it is
 * ours. Otherwise, while the lease had not expired nobody could have taken the range over, so the
 * missing lease is our own record. After the expiry nobody can tell: SQL0044
 * (docs/crash-recovery.md#unknown-commits).
 */
async function ownRecord<T>(ctx: Ctx<T>, range: TakenRange, newToken: string | null, leaseExpiry: number): Promise<"mine" | "lost" | "unknown"> {
  const answeredAt = now();
  if (newToken !== null) {
    const rest = await queryRetry(ctx.db, S.leaseByToken(ctx.t), [ctx.groupId, newToken]);
    if (rest.rowCount !== 0) return "mine";
  }
  if (answeredAt < leaseExpiry) return "mine";
  ctx.db.events.emit({
    level: "warn", code: "SQL0044",
    message: `the reply to recording range (${range.low}, ${range.high}] was lost and its lease has expired since: ` +
      "whether its outcomes were recorded is unknown (if not, the range runs again)",
    stream: ctx.stream, group: ctx.group, low: range.low, high: range.high,
  });
  return "unknown";
}
