// One bounded claim cycle (SPEC §5): load → range phase → exception phase → cursor advance.
import { randomUUID } from "node:crypto";
import type pg from "pg";
import type { SqlStreams } from "../client.js";
import {
  type ConsumerConfig, type DeliveryLogMode, type GroupResolution, type MessageOptions, type ResolvedMessage,
  type ResolvedPollOptions, groupResolution, resolveMessage, timeoutBounds,
} from "../config.js";
import { type Db, query, queryRetry, sleep, transactionRetry } from "../db.js";
import { SqlStreamsError, isSqlStreamsError } from "../errors.js";
import * as S from "../sql/cycle.js";
import { type Plan, type RunOutcome, plan, planExpired } from "./plan.js";
import { RunMessage, runHandler } from "./run.js";
import { type CycleReport, type Handler, emptyReport } from "./types.js";

interface RawMessage {
  id: string;
  message_key: string | null;
  compaction_rank: string | null;
  payload: unknown;
  options: MessageOptions | null;
  /** A Date, or epoch milliseconds where claim_N returns it so. */
  created_at: Date | number;
}
interface RangeMessage extends RawMessage {
  resolved: ResolvedMessage;
}
interface LoadRow {
  group_id: string;
  config: ConsumerConfig;
  paused: boolean;
  mode: DeliveryLogMode;
  claimed: string;
  committed: string;
  settled_head: string;
  pending_head: string;
  head: string;
  has_cursor: boolean;
  reclaimable: boolean;
  expirable: boolean;
  reservable: boolean;
  target: string;
  obs: string;
}

interface Ctx<T> {
  client: SqlStreams;
  db: Db;
  t: S.Tables;
  stream: string;
  group: string;
  groupId: string;
  g: GroupResolution;
  mode: DeliveryLogMode;
  handler: Handler<T>;
  o: ResolvedPollOptions;
  report: CycleReport;
  /** Set once no further handler may start in this poll (abort, deadline, lost lease). */
  stop: boolean;
  deadlineLogged: boolean;
  advance: boolean;
  /** The fence could not prove visible ids yet (an older write transaction is still open). */
  fenceBlocked: boolean;
  /** Resolutions of messages produced without options, by (has key, compacted). */
  plain: Map<number, ResolvedMessage>;
}

const big = (s: string) => BigInt(s);

/** Poll facts a drain needs beyond the report. */
export interface PollState {
  fenceBlocked: boolean;
}

export async function pollOnce<T>(
  client: SqlStreams, stream: string, group: string, handler: Handler<T>, o: ResolvedPollOptions, state?: PollState,
): Promise<CycleReport> {
  const started = Date.now();
  const report = emptyReport(stream, group);
  report.polls = 1;
  const db = client.db;
  try {
    const info = await client.streamInfo(stream);
    const t = S.tables(db.q, info.id);
    const loaded = await queryRetry<LoadRow>(db, S.load(db.q, t), [info.id, group]);
    if (loaded.rowCount === 0) {
      await client.streamInfo(stream, true); // throws SQL0009 when the stream is gone
      throw new SqlStreamsError("SQL0010", `consumer group ${JSON.stringify(group)} is not registered on stream ${stream}`, { stream, group });
    }
    const L = loaded.rows[0];
    if (!L.has_cursor) throw new SqlStreamsError("SQL0010", `consumer group ${group} has no cursor on stream ${stream}`, { stream, group });
    report.committedBefore = report.committedAfter = L.committed;
    if (L.paused) {
      report.paused = true;
      return finish(report, started);
    }
    if (o.deadline !== undefined && o.deadline - Date.now() < o.recordMargin) {
      report.idle = true;
      return finish(report, started);
    }
    const ctx: Ctx<T> = {
      client, db, t, stream, group, groupId: L.group_id, g: groupResolution(L.config ?? {}), mode: L.mode,
      handler, o, report, stop: false, deadlineLogged: false, advance: big(L.target) > big(L.committed), fenceBlocked: false, plain: new Map(),
    };
    let tookRange = false;
    let tookRows = false;

    // Range phase (§5.3): an expired range first, else a fresh one.
    if (L.reclaimable) tookRange = await reclaimPhase(ctx);
    if (!tookRange && L.obs !== "0") tookRange = await claimPhase(ctx, L);

    // Exception phase (§5.4).
    if (L.expirable) tookRows = (await expirePhase(ctx)) || tookRows;
    if (L.reservable && !ctx.stop && !aborted(ctx)) tookRows = (await exceptionPhase(ctx)) || tookRows;

    // Cursor advance (§5.5) when anything this poll did, or saw, can move it.
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

/** Orders rows by id (they usually arrive in order from the index scan: then this is one pass). */
function byId<R extends { id: string }>(rows: R[]): R[] {
  for (let i = 1; i < rows.length; i++) {
    const a = rows[i - 1].id;
    const b = rows[i].id;
    if (a.length > b.length || (a.length === b.length && a > b)) {
      return rows.sort((x, y) => (x.id.length !== y.id.length ? x.id.length - y.id.length : x.id < y.id ? -1 : x.id > y.id ? 1 : 0));
    }
  }
  return rows;
}

function finish(r: CycleReport, started: number): CycleReport {
  r.durationMs = Date.now() - started;
  return r;
}

function aborted<T>(ctx: Ctx<T>): boolean {
  return ctx.o.signal?.aborted === true;
}

function leaseCap<T>(ctx: Ctx<T>): number | null {
  return ctx.o.deadline === undefined ? null : Math.max(1, Math.floor(ctx.o.deadline - Date.now()) + ctx.o.recordMargin);
}

function resolve<T>(ctx: Ctx<T>, m: RawMessage, stored?: MessageOptions | null): ResolvedMessage {
  const opts = stored === undefined ? m.options : stored;
  if (opts === null) {
    const k = (m.message_key !== null ? 1 : 0) + (m.compaction_rank !== null ? 2 : 0);
    let hit = ctx.plain.get(k);
    if (!hit) {
      hit = resolveMessage(ctx.g, null, m.message_key !== null, m.compaction_rank !== null).resolved;
      ctx.plain.set(k, hit);
    }
    return hit;
  }
  const r = resolveMessage(ctx.g, stored === undefined ? m.options : stored, m.message_key !== null, m.compaction_rank !== null);
  for (const f of r.clamped) {
    ctx.db.events.emit({
      level: "info", code: "SQL0039", message: `produced option ${f} of message ${m.id} was clamped to the group's bounds`,
      stream: ctx.stream, group: ctx.group, field: f, messageId: m.id,
    }, f); // at most once per group and field per minute (SPEC §4.4)
  }
  return r.resolved;
}

/** The abort and deadline checks before a start (§5.3.6 steps 1–2). False means: do not start. */
function mayStart<T>(ctx: Ctx<T>, timeout: number): boolean {
  if (ctx.stop) return false;
  if (aborted(ctx)) {
    ctx.stop = true;
    return false;
  }
  if (ctx.o.deadline !== undefined && Date.now() + timeout + ctx.o.recordMargin > ctx.o.deadline) {
    ctx.stop = true;
    return false;
  }
  return true;
}

function logNotStarted<T>(ctx: Ctx<T>, n: number): void {
  if (n <= 0) return;
  ctx.report.notStarted += n;
  ctx.db.events.emit({
    level: "warn", code: "SQL0040", message: `${n} message(s) not started because of the deadline or an abort`,
    stream: ctx.stream, group: ctx.group, count: n,
  });
}

function lostLease<T>(ctx: Ctx<T>, what: string): void {
  ctx.report.leaseLost++;
  ctx.db.events.emit({ level: "warn", code: "SQL0034", message: `lease lost: ${what}; its outcomes were discarded`, stream: ctx.stream, group: ctx.group });
}

function logDead<T>(ctx: Ctx<T>, id: string, error: string | null): void {
  ctx.db.events.emit({ level: "warn", code: "SQL0037", message: `message ${id} is dead: ${(error ?? "").split("\n")[0]}`, stream: ctx.stream, group: ctx.group, messageId: id }, false);
}

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

async function claimPhase<T>(ctx: Ctx<T>, L: LoadRow): Promise<boolean> {
  const tb = timeoutBounds(ctx.g);
  const token = randomUUID();
  let sentAt: number;
  let r: pg.QueryResult<RawMessage & { low: string; high: string }>;
  for (let wait = 0; ; wait++) {
    sentAt = Date.now();
    r = await queryRetry<RawMessage & { low: string; high: string }>(ctx.db, S.claim(ctx.t), [
      ctx.groupId, ctx.o.batchLimit, L.head, L.obs, token, tb.def, tb.min, tb.max, ctx.o.concurrency, ctx.o.recordMargin, leaseCap(ctx),
    ]);
    // No row with a non-idle observation means the fence could not prove the head yet: a write
    // transaction older than the observation is still open somewhere in the cluster. They are
    // usually milliseconds from committing, so ask again a few times before giving up.
    if (r.rowCount !== 0 || wait >= FENCE_WAITS_MS.length || ctx.stop || aborted(ctx)) break;
    if (ctx.o.deadline !== undefined && ctx.o.deadline - Date.now() < ctx.o.recordMargin + FENCE_WAITS_MS[wait]) break;
    await sleep(FENCE_WAITS_MS[wait]);
  }
  if (r.rowCount === 0) {
    ctx.fenceBlocked = true;
    return false;
  }
  ctx.report.rangesClaimed++;
  const first = r.rows[0]; // the header row: low and high of the range
  if (r.rows.length === 1) {
    ctx.advance = true; // an empty range: no lease, the advance passes its ids
    return true;
  }
  const msgs = byId(r.rows.slice(1));
  // The same formula the function used, from this side's resolutions: never longer than the lease.
  const leaseMs = rangeLeaseMs(ctx, msgs.map((m) => resolve(ctx, m).timeout));
  await runRange(ctx, { token, low: first.low, high: first.high, leaseMs, msgs }, sentAt);
  return true;
}

async function reclaimPhase<T>(ctx: Ctx<T>): Promise<boolean> {
  const { db, t, g } = ctx;
  const sentAt = Date.now();
  const taken = await transactionRetry(db, async (c): Promise<TakenRange | "none" | "done"> => {
    const l = await query<{ token: string; low: string; high: string; reclaims: number; released: boolean }>(db, c, S.lockExpiredRange(t), [ctx.groupId]);
    if (l.rowCount === 0) return "none";
    const lease = l.rows[0];
    const reclaims = lease.released ? lease.reclaims : lease.reclaims + 1;
    const msgs = (await query<RawMessage>(db, c, S.readRange(t), [lease.low, lease.high])).rows;
    if (lease.released) ctx.report.rangesResumed++;
    else {
      ctx.report.rangesReclaimed++;
      db.events.emit({ level: "warn", code: "SQL0035", message: `expired range (${lease.low}, ${lease.high}] reclaimed (reclaim ${reclaims})`, stream: ctx.stream, group: ctx.group, low: lease.low, high: lease.high, reclaims });
    }
    if (reclaims >= g.maxRangeReclaims || msgs.length === 0) {
      if (msgs.length > 0) await quarantine(ctx, c, msgs);
      await query(db, c, S.deleteRange(t), [ctx.groupId, lease.token]);
      ctx.advance = true;
      return "done";
    }
    const token = randomUUID();
    const leaseMs = rangeLeaseMs(ctx, msgs.map((m) => resolve(ctx, m).timeout));
    await query(db, c, S.takeOverRange(t), [ctx.groupId, lease.token, token, reclaims, leaseMs]);
    return { token, low: lease.low, high: lease.high, leaseMs, msgs };
  });
  if (taken === "none") return false;
  if (taken !== "done") await runRange(ctx, taken, sentAt);
  return true;
}

/** §5.3.5: Tmax × ceil(n / c) + recordMargin, capped at deadline + recordMargin. */
function rangeLeaseMs<T>(ctx: Ctx<T>, timeouts: number[]): number {
  const tmax = Math.max(...timeouts);
  const lease = tmax * Math.ceil(timeouts.length / ctx.o.concurrency) + ctx.o.recordMargin;
  const cap = leaseCap(ctx);
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

/** Same-key exclusive/ordered messages form serial chains; everything else runs alone (§7.4). */
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
  const { db, t, o } = ctx;
  const msgs = range.msgs as RangeMessage[];
  for (const m of msgs) m.resolved = resolve(ctx, m);
  const outcomes = new Map<string, RunOutcome>();
  const keyLeases: { k: string; t: string }[] = [];
  const keyToken = msgs.some(keyed) ? randomUUID() : null;
  /** A key lease covers one run: timeout + recordMargin, capped at deadline + recordMargin. */
  const keyMs = (timeout: number) => {
    const cap = leaseCap(ctx);
    return cap === null ? timeout + o.recordMargin : Math.min(timeout + o.recordMargin, cap);
  };
  let leaseExpiry = sentAt + range.leaseMs;
  // A lease sized for exactly one run (n <= c) is always a few ms short of timeout + margin by
  // the time its messages start; that slack comes out of the recording margin, not a round trip.
  const slack = Math.min(250, o.recordMargin / 4);
  let lost = false;
  let extending: Promise<boolean> | null = null;

  const fits = async (timeout: number): Promise<boolean> => {
    while (Date.now() + timeout + o.recordMargin - slack > leaseExpiry) {
      if (!extending) {
        const cap = leaseCap(ctx);
        const ms = cap === null ? timeout + o.recordMargin : Math.min(timeout + o.recordMargin, cap);
        const at = Date.now();
        extending = queryRetry(db, S.extendRange(t), [ctx.groupId, range.token, ms]).then((r) => {
          if (r.rowCount === 0) return false;
          leaseExpiry = Math.max(leaseExpiry, at + ms);
          return true;
        });
        const ok = await extending;
        extending = null;
        if (!ok) return false;
        if (at + ms < Date.now() + timeout + o.recordMargin) return true; // capped by the deadline: nothing more to gain
      } else if (!(await extending)) return false;
    }
    return true;
  };

  const runUnit = async (unit: RangeMessage[]) => {
    let blockedBy: string | null = null;
    for (const m of unit) {
      const ordered = m.resolved.concurrency === "ordered";
      if (blockedBy !== null && ordered) {
        outcomes.set(m.id, { kind: "deferred", reason: `deferred: earlier message ${blockedBy} of this key in the range did not complete` });
        continue;
      }
      if (!mayStart(ctx, m.resolved.timeout)) return;
      if (Date.now() + m.resolved.timeout + o.recordMargin - slack > leaseExpiry && !(await fits(m.resolved.timeout))) {
        lost = true;
        ctx.stop = true;
        return;
      }
      let outcome: RunOutcome | null = null;
      if (keyed(m)) {
        // §5.3.6 step 4. The chain's first member usually has its key lease already (taken for
        // the whole range up front); a member whose lease would not cover its run, a later
        // member without the lease, and a compacted member (whose head is checked at its start)
        // take or renew it now, under the range's key token.
        const k = m.message_key as string;
        const ks = keys.get(k) ?? { held: false, expiry: 0, result: "busy" as string | null };
        keys.set(k, ks);
        const need = m.compaction_rank !== null || (ks.held ? Date.now() + m.resolved.timeout + o.recordMargin - slack > ks.expiry : m !== unit[0] || !asked);
        let res = ks.result;
        if (need) {
          const ms = keyMs(m.resolved.timeout);
          const at = Date.now();
          const r = await queryRetry<{ result: string | null }>(db, S.takeKey(t), [
            ctx.groupId, k, keyToken, ms, m.id, ordered, range.low, range.high, m.compaction_rank !== null,
          ]);
          res = r.rows[0].result;
          if (res === null) {
            if (!ks.held) keyLeases.push({ k, t: keyToken as string });
            ks.held = true;
            ks.expiry = at + ms;
          }
        }
        if (res !== null) {
          if (res === "busy") outcome = { kind: "deferred", reason: "deferred: key busy" };
          else if (res.startsWith("pred:")) outcome = { kind: "deferred", reason: `deferred: ordered predecessor ${res.slice(5)} unresolved` };
          else outcome = { kind: "superseded", head: res.slice("superseded:".length) };
        }
      }
      if (outcome === null) {
        ctx.report.started++;
        outcome = await runHandler(ctx.handler, message(ctx, m, 0, 0), m.resolved.timeout);
        if (outcome.kind === "success") {
          outcomes.set(m.id, outcome);
          continue;
        }
      }
      outcomes.set(m.id, outcome);
      if (outcome.kind !== "superseded") {
        const p = plan(outcome, 0, 0, m.resolved, ctx.g.exceptionInitialBackoff, ctx.mode);
        if (p.row.status !== "dead") blockedBy = blockedBy ?? m.id;
      }
    }
  };

  const units = chains(msgs);
  // The key leases of the chains' first members in one round trip (not the compacted ones: their
  // head is checked at their start). Each lease covers one run; released when the range records.
  const keys = new Map<string, { held: boolean; expiry: number; result: string | null }>();
  let asked = false;
  if (keyToken !== null && !ctx.stop && !aborted(ctx)) {
    const wanted = units
      .filter((u) => keyed(u[0]) && u[0].compaction_rank === null)
      .map((u) => ({
        k: u[0].message_key as string,
        id: u[0].id,
        ordered: u[0].resolved.concurrency === "ordered",
        ms: keyMs(u[0].resolved.timeout),
      }));
    if (wanted.length > 0) {
      const at = Date.now();
      const ms = new Map(wanted.map((w) => [w.k, w.ms]));
      const r = await queryRetry<{ k: string; result: string | null }>(db, S.takeKeys(t), [
        ctx.groupId, keyToken, range.low, range.high, JSON.stringify(wanted),
      ]);
      for (const row of r.rows) {
        keys.set(row.k, { held: row.result === null, expiry: at + (ms.get(row.k) ?? 0), result: row.result });
        if (row.result === null) keyLeases.push({ k: row.k, t: keyToken });
      }
    }
    asked = true;
  }
  let next = 0;
  // A database error in one unit stops new starts; the running handlers finish and the prefix
  // they resolved is recorded before the error is thrown (§5.8).
  let failure = null as { e: unknown } | null;
  const worker = async () => {
    while (!ctx.stop && next < units.length) {
      try {
        await runUnit(units[next++]);
      } catch (e) {
        failure ??= { e };
        ctx.stop = true;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(o.concurrency, units.length) }, worker));

  if (lost) {
    lostLease(ctx, `range (${range.low}, ${range.high}]`);
    if (keyLeases.length) await queryRetry(db, S.recordRange(t), [ctx.groupId, randomUUID(), null, null, "[]", "[]", JSON.stringify(keyLeases)]);
    return;
  }
  // The contiguous prefix of messages with an outcome is recorded; the rest is released (§5.3.7).
  const firstOpen = msgs.find((m) => !outcomes.has(m.id));
  const keepFrom = firstOpen ? (big(firstOpen.id) - 1n).toString() : null;
  const recorded = firstOpen ? msgs.filter((m) => big(m.id) < big(firstOpen.id)) : msgs;
  if (firstOpen) {
    ctx.report.rangesPartial++;
    if (!failure) logNotStarted(ctx, msgs.filter((m) => !outcomes.has(m.id)).length);
  }
  const eq: unknown[] = [];
  const dl: unknown[] = [];
  const plans: [RangeMessage, Plan][] = [];
  let plainSuccesses = 0;
  for (const m of recorded) {
    const out = outcomes.get(m.id) as RunOutcome;
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
  const r = await queryRetry<{ committed: string | null }>(db, S.recordRange(t), [
    ctx.groupId, range.token, keepFrom, firstOpen ? randomUUID() : null,
    eq.length ? JSON.stringify(eq) : null, dl.length ? JSON.stringify(dl) : null, keyLeases.length ? JSON.stringify(keyLeases) : null,
  ]);
  const committed = r.rows[0].committed;
  if (committed === null) {
    lostLease(ctx, `range (${range.low}, ${range.high}]`);
    return;
  }
  ctx.report.committedAfter = committed;
  ctx.report.succeeded += plainSuccesses;
  for (const [m, p] of plans) {
    ctx.report[p.counter]++;
    if (p.row.status === "dead") logDead(ctx, m.id, p.row.lastError);
  }
  if (failure) throw failure.e;
}

function message<T>(ctx: Ctx<T>, m: RawMessage, attempt: number, delays: number): RunMessage<T> {
  const createdAt = typeof m.created_at === "number" ? new Date(m.created_at) : m.created_at;
  return new RunMessage<T>(m.id, m.payload as T, m.message_key, attempt, delays, ctx.stream, ctx.group, createdAt);
}

// ---------------------------------------------------------------------------------------------
// Exception phase
// ---------------------------------------------------------------------------------------------

/** §5.4.1: charge or kill inflight rows whose run lease expired. */
async function expirePhase<T>(ctx: Ctx<T>): Promise<boolean> {
  const { db, t } = ctx;
  const counts = await transactionRetry(db, async (c) => {
    const rows = (await query<{ message_id: string; attempts: number; delays: number; last_error: string | null; message_key: string | null; options: MessageOptions | null; compacted: boolean | null }>(db, c, S.lockExpiredRuns(t), [ctx.groupId])).rows;
    if (rows.length === 0) return { expired: 0, killed: 0, killedIds: [] as string[] };
    const updates: unknown[] = [];
    const logs: unknown[] = [];
    let expired = 0;
    const killedIds: string[] = [];
    for (const r of rows) {
      const resolved = resolveMessage(ctx.g, r.options, r.message_key !== null, r.compacted === true).resolved;
      const e = planExpired(r.attempts, r.delays, r.last_error, resolved, ctx.g.exceptionInitialBackoff);
      updates.push({ message_id: r.message_id, status: e.status, attempts: e.attempts, run_after_ms: e.runAfterMs, last_error: e.lastError });
      if (ctx.mode !== "off") logs.push({ message_id: r.message_id, ...e.log });
      if (e.status === "dead") killedIds.push(r.message_id);
      else expired++;
    }
    await query(db, c, S.applyExpired(t), [ctx.groupId, JSON.stringify(updates)]);
    if (logs.length) await query(db, c, S.insertDeliveryLog(t), [ctx.groupId, JSON.stringify(logs)]);
    return { expired, killed: killedIds.length, killedIds };
  });
  ctx.report.expired += counts.expired;
  ctx.report.killed += counts.killed;
  ctx.report.dead += counts.killed;
  for (const id of counts.killedIds) {
    db.events.emit({ level: "warn", code: "SQL0038", message: `kill backstop: message ${id} crash-looped until its budget ran out; now dead`, stream: ctx.stream, group: ctx.group, messageId: id }, false);
  }
  if (counts.expired + counts.killed > 0) ctx.advance = true;
  return counts.expired + counts.killed > 0;
}

interface ReservedRow extends RawMessage {
  message_id: string;
  status: string;
  concurrency: string;
  attempts: number;
  delays: number;
}

/** §5.4.2–§5.4.5: reserve due rows, start each under its own lease, run, record, release the rest. */
async function exceptionPhase<T>(ctx: Ctx<T>): Promise<boolean> {
  const { db, t, o } = ctx;
  const tb = timeoutBounds(ctx.g);
  const token = randomUUID();
  const res = await queryRetry<ReservedRow>(db, S.reserve(t), [
    ctx.groupId, o.batchLimit, tb.def, tb.min, tb.max, o.concurrency, o.recordMargin, leaseCap(ctx), token,
  ]);
  const rows = res.rows
    .map((r) => ({ ...r, id: r.message_id }))
    .sort((a, b) => (big(a.id) < big(b.id) ? -1 : 1));
  if (rows.length === 0) return false;
  let unstarted = 0;
  let next = 0;
  const runRow = async (row: ReservedRow & { id: string }) => {
    const resolved = resolve(ctx, row);
    if (!mayStart(ctx, resolved.timeout)) {
      unstarted++;
      return;
    }
    const keyed = row.concurrency !== "parallel" && row.message_key !== null;
    const keyToken = keyed ? randomUUID() : null;
    const cap = leaseCap(ctx);
    const runMs = cap === null ? resolved.timeout + o.recordMargin : Math.min(resolved.timeout + o.recordMargin, cap);
    const s = (await queryRetry<{ result: string }>(db, S.startException(t), [ctx.groupId, row.id, token, keyToken, runMs, ctx.mode !== "off"])).rows[0].result;
    if (s === "lost") {
      lostLease(ctx, `exception row ${row.id}`);
      return;
    }
    ctx.advance = true;
    if (s.startsWith("superseded:")) {
      ctx.report.superseded++;
      return;
    }
    if (s.startsWith("deferred:")) {
      ctx.report.deferred++;
      return;
    }
    ctx.report.started++;
    const outcome = await runHandler(ctx.handler, message(ctx, row, row.attempts, row.delays), resolved.timeout);
    const p = plan(outcome, row.attempts, row.delays, resolved, ctx.g.exceptionInitialBackoff, ctx.mode);
    const rec = (await queryRetry<{ result: number }>(db, S.recordException(t), [
      ctx.groupId, row.id, token, row.message_key, keyToken, p.row.status === "delete" ? "deleted" : p.row.status,
      p.row.attempts, p.row.delays, p.row.runAfterMs, p.row.lastError,
      p.log?.status ?? null, p.log?.attempt ?? null, p.log?.error ?? null,
    ])).rows[0].result;
    if (rec === 0) {
      lostLease(ctx, `exception row ${row.id}`);
      return;
    }
    if (rec === 2) {
      db.events.emit({ level: "warn", code: "SQL0034", message: `key lease of message ${row.id} expired during its run and was taken over`, stream: ctx.stream, group: ctx.group, messageId: row.id });
    }
    ctx.report[p.counter]++;
    if (p.row.status === "dead") logDead(ctx, row.id, p.row.lastError);
  };
  // A database error in one row stops new starts; running rows finish and record, the unstarted
  // reservations are released, then the error is thrown (§5.8).
  let failure = null as { e: unknown } | null;
  const worker = async () => {
    while (next < rows.length) {
      try {
        await runRow(rows[next++]);
      } catch (e) {
        failure ??= { e };
        ctx.stop = true;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(o.concurrency, rows.length) }, worker));
  if (failure) {
    // Best effort: rows left reserved become selectable when the reservation expires, uncharged.
    await queryRetry(db, S.releaseReservations(t), [ctx.groupId, token]).catch(() => {});
    throw failure.e;
  }
  if (unstarted > 0) {
    logNotStarted(ctx, unstarted);
    await queryRetry(db, S.releaseReservations(t), [ctx.groupId, token]);
  }
  return true;
}
