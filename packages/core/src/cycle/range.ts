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

// ---------------------------------------------------------------------------------------------
// Range phase
// ---------------------------------------------------------------------------------------------

interface TakenRange {
  token: string;
  low: string;
  high: string;
  leaseMs: number;
  msgs: RawMessage[];
}

/** Pauses before asking the fence again while older write transactions are still open. */
const FENCE_WAITS_MS = [5, 10, 20, 40, 80, 160, 320, 400];

export async function claimPhase<T>(ctx: Ctx<T>, L: LoadRow): Promise<boolean> {
  const tb = timeoutBounds(ctx.g);
  const token = randomUUID();
  let sentAt: number;
  let r: pg.QueryResult<RawMessage & { low: string; high: string }>;
  for (let wait = 0; ; wait++) {
    sentAt = now();
    r = await queryRetry<RawMessage & { low: string; high: string }>(ctx.db, S.claim(ctx.t), [
      ctx.groupId, ctx.o.batchLimit, L.head, L.obs, token, tb.def, tb.min, tb.max, ctx.o.concurrency, ctx.o.recordMargin, rangeLeaseCap(ctx),
      ctx.o.batchBytes,
    ], { retried: false, recover: () => ownClaim(ctx, token) });
    // No range with a non-idle observation means the fence could not prove the head yet: a
    // transaction of this stream's producers is still open (docs/poll-cycle.md#the-fence). They
    // are usually milliseconds from committing, so ask again a few times before giving up.
    if (claimed(r) || wait >= FENCE_WAITS_MS.length || ctx.stop || aborted(ctx)) break;
    if (ctx.o.deadline !== undefined && ctx.o.deadline - now() < ctx.o.recordMargin + FENCE_WAITS_MS[wait]) break;
    await sleep(FENCE_WAITS_MS[wait]);
  }
  if (!claimed(r)) {
    ctx.fenceBlocked = true;
    warnFenceHolders(ctx, r.rows.map((row) => ({ payload: JSON.parse(row.payload as string) as FenceRow["payload"] })));
    return false;
  }
  ctx.report.rangesClaimed++;
  // The header row (low and high of the range) follows the messages; payloads come as JSON text,
  // counted against batchBytes by the claim (docs/poll-cycle.md#the-byte-bound).
  const first = r.rows[r.rows.length - 1];
  if (ctx.sample) ctx.sample.full = big(first.high) - big(first.low) >= BigInt(ctx.o.batchLimit);
  if (r.rows.length === 1) {
    ctx.advance = true; // an empty range: no lease, the advance passes its ids
    return true;
  }
  const msgs = byId(r.rows.slice(0, -1));
  for (const m of msgs) m.payload = JSON.parse(m.payload as string);
  // The same formula the function used, from this side's resolutions: never longer than the lease.
  const leaseMs = rangeLeaseMs(ctx, msgs.map((m) => resolve(ctx, m).timeout));
  const t0 = ctx.sample ? now() : 0;
  await runRange(ctx, { token, low: first.low, high: first.high, leaseMs, msgs }, sentAt);
  if (ctx.sample) ctx.sample.ms = now() - t0;
  return true;
}

/**
 * Before a claim is repeated after a lost reply: if the first attempt committed, its lease is
 * there under this poll's token; answer as the claim would have (header row, then the range's
 * rows) instead of claiming a second range (docs/crash-recovery.md#unknown-commits).
 */
async function ownClaim<T>(ctx: Ctx<T>, token: string): Promise<pg.QueryResult | null> {
  const own = await queryRetry<{ low: string; high: string }>(ctx.db, S.leaseByToken(ctx.t), [ctx.groupId, token]);
  if (own.rowCount === 0) return null;
  const { low, high } = own.rows[0];
  const msgs = (await queryRetry<RawMessage>(ctx.db, S.readRange(ctx.t), [low, high])).rows;
  const header = { low, high, id: null, message_key: null, compaction_rank: null, payload: null, options: null, created_at: null };
  const rows = [...msgs.map((m) => ({ ...m, payload: JSON.stringify(m.payload), low: null, high: null })), header];
  return { command: "SELECT", rowCount: rows.length, oid: 0, fields: [], rows };
}

/** A claim's answer holds a range when its last row is the header (low set). */
function claimed(r: pg.QueryResult<{ low: string | null }>): boolean {
  return r.rows.length > 0 && r.rows[r.rows.length - 1].low !== null;
}

interface FenceRow {
  payload: { pid: number | null; age_ms: number | null; app: string | null; query: string | null };
}

/** A producer transaction of this stream open longer than this is named when it holds a claim. */
export const FENCE_WARN_MS = 2_000;

/** SQL0043: names each backend of this stream's producers that has held the fence for long. */
function warnFenceHolders<T>(ctx: Ctx<T>, rows: FenceRow[]): void {
  for (const { payload: h } of rows) {
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
  type Lease = { token: string; low: string; high: string; reclaims: number; released: boolean };
  const taken = await transactionRetry(db, async (c, attempt): Promise<{ range: TakenRange | "none" | "done"; lease?: Lease; reclaims?: number }> => {
    if (attempt > 0 && first !== null) {
      // docs/crash-recovery.md#unknown-commits: the first attempt may have committed unheard.
      const own = await query<Lease>(db, c, S.leaseByToken(t), [ctx.groupId, token]);
      if (own.rowCount !== 0) {
        const o = own.rows[0];
        const msgs = (await query<RawMessage>(db, c, S.readRangeIds(t), [o.low, o.high])).rows;
        const leaseMs = rangeLeaseMs(ctx, msgs.map((m) => resolve(ctx, m).timeout));
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
    const leaseMs = rangeLeaseMs(ctx, msgs.map((m) => resolve(ctx, m).timeout));
    await query(db, c, S.takeOverRange(t), [ctx.groupId, lease.token, token, reclaims, leaseMs]);
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

/** docs/poll-cycle.md#the-range-lease: Tmax × ceil(n / c) + recordMargin, capped (rangeLeaseCap) like claim_N caps it. */
function rangeLeaseMs<T>(ctx: Ctx<T>, timeouts: number[]): number {
  const tmax = Math.max(...timeouts);
  const lease = tmax * Math.ceil(timeouts.length / ctx.o.concurrency) + ctx.o.recordMargin;
  const cap = rangeLeaseCap(ctx);
  return Math.max(1, cap === null ? lease : Math.min(lease, cap));
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

type KeyState = { held: boolean; expiry: number; result: KeyTake };

/**
 * One claimed range being run (docs/poll-cycle.md#dispatch): its chains, the key leases they hold
 * under one key token, the range lease and its extension, and the outcomes to record.
 */
class RangeRun<T> {
  private readonly msgs: RangeMessage[];
  private readonly units: RangeMessage[][];
  private readonly outcomes = new Map<string, RunOutcome>();
  private keyLeases: { k: string; t: string }[] = [];
  private readonly keyToken: string | null;
  /** Keys whose run in this range was abandoned: their leases outlive the range (abandoned.ts). */
  private readonly abandonedKeys = new Set<string>();
  private readonly keys = new Map<string, KeyState>();
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

  constructor(
    private readonly ctx: Ctx<T>,
    private readonly range: TakenRange,
    sentAt: number,
  ) {
    this.msgs = range.msgs as RangeMessage[];
    for (const m of this.msgs) m.resolved = resolve(ctx, m);
    this.units = chains(this.msgs);
    this.keyToken = this.msgs.some(keyed) ? randomUUID() : null;
    this.leaseExpiry = sentAt + range.leaseMs;
    this.slack = Math.min(250, ctx.o.recordMargin / 4);
  }

  /** A lease covers one run: timeout + recordMargin, capped at deadline + recordMargin. */
  private runMs(timeout: number): number {
    const cap = leaseCap(this.ctx);
    const ms = timeout + this.ctx.o.recordMargin;
    return cap === null ? ms : Math.min(ms, cap);
  }

  /** Whether a run of `timeout` started now would end after `expiry`. */
  private outlives(timeout: number, expiry: number): boolean {
    return now() + timeout + this.ctx.o.recordMargin - this.slack > expiry;
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
   * head is checked at their start). Each lease covers one run; released when the range records.
   */
  async takeFirstKeys(): Promise<void> {
    const { ctx, keyToken } = this;
    if (keyToken === null || ctx.stop || aborted(ctx)) return;
    const wanted = this.units
      .filter((u) => keyed(u[0]) && u[0].compaction_rank === null)
      .map((u) => ({ k: u[0].message_key as string, id: u[0].id, ordered: u[0].resolved.concurrency === "ordered", ms: this.runMs(u[0].resolved.timeout) }));
    if (wanted.length > 0) {
      const at = now();
      const ms = new Map(wanted.map((w) => [w.k, w.ms]));
      const r = await queryRetry<KeyRefusal>(ctx.db, S.takeKeys(ctx.t), [
        ctx.groupId, keyToken, this.range.low, this.range.high, JSON.stringify(wanted),
      ]);
      for (const [k, result] of decodeKeyTakes([...ms.keys()], r.rows)) {
        this.keys.set(k, { held: result.kind === "taken", expiry: at + (ms.get(k) ?? 0), result });
        if (result.kind === "taken") this.keyLeases.push({ k, t: keyToken });
      }
    }
    this.asked = true;
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
          await this.runUnit(units[next++]);
        } catch (e) {
          failure ??= { e };
          ctx.stop = true;
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(ctx.o.concurrency, units.length) }, worker));
    return failure;
  }

  /** One chain (or a lone message): its members in order; an ordered member after one that did not complete waits. */
  private async runUnit(unit: RangeMessage[]): Promise<void> {
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
      const outcome = (await this.keyOutcome(m, unit)) ?? (await this.runMember(m));
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
    const k = m.message_key as string;
    if (keyAbandoned(this.ctx, k)) return { kind: "deferred", reason: "deferred: an abandoned run of this key has not settled" };
    const ks = this.keys.get(k) ?? { held: false, expiry: 0, result: { kind: "busy" } };
    this.keys.set(k, ks);
    const need = m.compaction_rank !== null || (ks.held ? this.outlives(m.resolved.timeout, ks.expiry) : m !== unit[0] || !this.asked);
    const res = need ? await this.takeKey(m, ks) : ks.result;
    if (res.kind === "taken") return null;
    if (res.kind === "superseded") return { kind: "superseded", head: res.head };
    return { kind: "deferred", reason: deferredReason(res) };
  }

  private async takeKey(m: RangeMessage, ks: KeyState): Promise<KeyTake> {
    const { ctx, range } = this;
    const k = m.message_key as string;
    const ms = this.runMs(m.resolved.timeout);
    const at = now();
    const r = await queryRetry<{ result: string | null }>(ctx.db, S.takeKey(ctx.t), [
      ctx.groupId, k, this.keyToken, ms, m.id, m.resolved.concurrency === "ordered", range.low, range.high, m.compaction_rank !== null,
    ]);
    const res = decodeKeyTake(r.rows[0].result);
    if (res.kind === "taken") {
      if (!ks.held) this.keyLeases.push({ k, t: this.keyToken as string });
      ks.held = true;
      ks.expiry = at + ms;
    }
    return res;
  }

  /** Runs the handler of one member (first delivery, attempt 0). */
  private async runMember(m: RangeMessage): Promise<RunOutcome> {
    const { ctx } = this;
    ctx.report.started++;
    const sample = ctx.sample;
    const t0 = sample ? now() : 0;
    const w = watchRun(ctx, keyed(m) ? m.message_key : null, this.keyToken, m.id, m.resolved.timeout);
    const outcome = await runHandler(ctx.handler, message(ctx, m, 0, 0), m.resolved.timeout, w.onAbandon);
    if (w.abandoned) this.abandonedKeys.add(m.message_key as string);
    if (sample) {
      sample.ran++;
      sample.slowest = Math.max(sample.slowest, (now() - t0) / m.resolved.timeout);
    }
    return outcome;
  }

  /**
   * docs/poll-cycle.md#recording-a-range: the contiguous prefix of messages with an outcome is
   * recorded; the rest is released at once. An abandoned run's key lease is renewed, then
   * released when the run settles (abandoned.ts), so it is not released here.
   */
  async record(failed: boolean): Promise<void> {
    const { ctx, range, msgs, outcomes } = this;
    const { db, t } = ctx;
    if (this.abandonedKeys.size > 0) this.keyLeases = this.keyLeases.filter((l) => !this.abandonedKeys.has(l.k));
    const keys = this.keyLeases.length ? JSON.stringify(this.keyLeases) : null;
    if (this.lost) {
      lostLease(ctx, `range (${range.low}, ${range.high}]`);
      if (keys) await queryRetry(db, S.recordRange(t), [ctx.groupId, randomUUID(), null, null, "[]", "[]", keys]);
      return;
    }
    const firstOpen = msgs.find((m) => !outcomes.has(m.id));
    const keepFrom = firstOpen ? (big(firstOpen.id) - 1n).toString() : null;
    if (firstOpen) {
      ctx.report.rangesPartial++;
      if (!failed) logNotStarted(ctx, msgs.filter((m) => !outcomes.has(m.id)).length);
    }
    const rows = this.rowsOf(firstOpen ? msgs.filter((m) => big(m.id) < big(firstOpen.id)) : msgs);
    const newToken = firstOpen ? randomUUID() : null;
    const retry: RetryState = { retried: false };
    const r = await queryRetry<{ committed: string | null }>(db, S.recordRange(t), [
      ctx.groupId, range.token, keepFrom, newToken,
      rows.eq.length ? JSON.stringify(rows.eq) : null, rows.dl.length ? JSON.stringify(rows.dl) : null, keys,
    ], retry);
    const committed = r.rows[0].committed;
    if (committed === null) {
      const mine = retry.retried ? await ownRecord(ctx, range, newToken, this.leaseExpiry) : "lost";
      if (mine === "lost") lostLease(ctx, `range (${range.low}, ${range.high}]`);
      if (mine !== "mine") return;
      ctx.advance = true; // recorded by the attempt whose reply was lost: the advance reports the cursor
    } else ctx.report.committedAfter = committed;
    ctx.report.succeeded += rows.plainSuccesses;
    for (const [m, p] of rows.plans) {
      ctx.report[p.counter]++;
      if (p.row.status === "dead") logDead(ctx, m.id, p.row.lastError);
    }
  }

  /** The exception and delivery-log rows of the recorded prefix; plain successes write none. */
  private rowsOf(recorded: RangeMessage[]) {
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
