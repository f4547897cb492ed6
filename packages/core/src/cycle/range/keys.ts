// The key leases of a range (docs/protocol/ordering.md#key-leases): the chains' first keys asked for up
// front in one round trip, a later member's key taken or renewed at its start, all under one key
// token that a drain's chain passes on from range to range.
import { randomUUID } from "node:crypto";
import type { KeyRefusalRow, TakeKeysParams } from "../../sql/cycle.js";
import * as statements from "../../sql/cycle.js";
import { type KeyTake, decodeKeyTake, decodeKeyTakes, deferredReason } from "../../sql/results.js";
import { type PollContext, type RangeMessage, isKeyed, runLeaseMs } from "../context.js";
import { keyAbandoned } from "../abandoned.js";
import type { RunOutcome } from "../plan.js";
import { type MonotonicMs, after, now } from "../../clock.js";

/**
 * A drain's chain of keyed ranges passes its key leases on from range to range instead of
 * releasing and taking them again; a lease taken there lasts this much beyond its run, so ranges a
 * little later in the chain still find it long enough (docs/protocol/ordering.md#key-leases).
 */
export const CHAIN_KEY_HEADROOM_MS = 2_000;

/** A held key counts as long enough for a range when it would still cover a run started this much later. */
const HELD_ALLOWANCE_MS = 500;

/** What this side knows of one key: whether its lease is held, until when (monotonic ms), and the last answer. */
interface KeyState {
  held: boolean;
  expiry: MonotonicMs;
  result: KeyTake;
}

/** Whether a run of `timeout` started at `at` (now by default) would end after `expiry` (RangeRun.outlives). */
type Outlives = (timeout: number, expiry: MonotonicMs, at?: MonotonicMs) => boolean;

/** Whether a range member takes a key lease. */
export function keyedMember(m: RangeMessage): m is RangeMessage & { message_key: string } {
  return isKeyed(m.resolved.concurrency, m.message_key);
}

/** A key take's answer as a member's outcome: null (taken: the member runs), superseded or deferred. */
export function keyTakeOutcome(res: KeyTake): RunOutcome | null {
  if (res.kind === "taken") return null;
  if (res.kind === "superseded") return { kind: "superseded", head: res.head };
  return { kind: "deferred", reason: deferredReason(res) };
}

/** The up-front take of a range: what take_keys_N is asked, and which keys are held long enough already. */
export interface FirstTake {
  wanted: { k: string; id: string; ordered: boolean; ms: number; held?: true }[];
  held: Set<string>;
  at: MonotonicMs;
}

/** The key leases one range holds (or a chain of ranges, passed on), under one key token. */
export class KeyLeases<T> {
  /** Null when the range has no keyed member. */
  token: string | null;
  private states = new Map<string, KeyState>();
  /** Keys whose lease is held under the token (released when the range records, or passed on). */
  private held: string[] = [];
  /** Keys whose run under this token was abandoned: their leases outlive the range (abandoned.ts). */
  abandoned = new Set<string>();
  /** Whether the chains' first keys were asked for up front. */
  asked = false;

  constructor(
    private readonly ctx: PollContext<T>,
    keyed: boolean,
  ) {
    this.token = keyed ? randomUUID() : null;
  }

  /**
   * Takes over the leases of the range before this one in a drain's chain, whose record goes with
   * this range's key take (docs/protocol/ordering.md#key-leases): its token, the keys held under it and
   * their expiries, and its abandoned runs' keys. That record then releases nothing; this range's
   * record (or the next range's take) does. False when either range has no keyed member.
   */
  adopt(prev: KeyLeases<T>): boolean {
    if (prev.token === null || this.token === null) return false;
    this.token = prev.token;
    this.states = prev.states;
    this.held = prev.released();
    this.abandoned = prev.abandoned;
    prev.held = [];
    prev.states = new Map();
    return true;
  }

  /** Whether keyed members hold their leases under this token. */
  get takesKeys(): boolean {
    return this.token !== null;
  }

  /** The key leases a record releases: the token, its keys, and whether an abandoned run keeps one. */
  release(): KeyRelease {
    return { token: this.token, keys: this.released(), all: this.abandoned.size === 0 };
  }

  /**
   * The keys held under the token but those of abandoned runs: an abandoned run's key lease is
   * renewed, then released when the run settles (abandoned.ts), so a record does not release it.
   */
  private released(): string[] {
    if (this.abandoned.size > 0) this.held = this.held.filter((k) => !this.abandoned.has(k));
    return this.held;
  }

  /** What the first take asks for: the chains' first keyed members (not compacted ones: their head is checked at their start). */
  firstTake(units: RangeMessage[][], headroom: number, outlives: Outlives): FirstTake {
    const later = after(now(), HELD_ALLOWANCE_MS);
    const held = new Set<string>();
    const wanted = units
      .map((u) => u[0])
      .filter((m) => keyedMember(m) && m.compaction_rank === null)
      .map((m) => {
        const k = m.message_key as string;
        const ks = this.states.get(k);
        const w = { k, id: m.id, ordered: m.resolved.concurrency === "ordered", ms: runLeaseMs(this.ctx, m.resolved.timeout, headroom) };
        // Held already and long enough for a run started a little later: checked, not written.
        if (ks?.held !== true || outlives(m.resolved.timeout, ks.expiry, later)) return w;
        held.add(k);
        return { ...w, held: true as const };
      });
    return { wanted, held, at: now() };
  }

  /** take_keys_N's parameters for a first take. */
  takeParams(take: FirstTake, low: string, high: string): TakeKeysParams {
    return { groupId: this.ctx.groupId, keyToken: this.token as string, low, high, wanted: JSON.stringify(take.wanted) };
  }

  /** Notes the answer to a first take (take_keys_N returns only the keys it refused), capped at the range lease. */
  took(take: FirstTake, refused: readonly KeyRefusalRow[], rangeExpiry: MonotonicMs): void {
    const ms = new Map(take.wanted.map((w) => [w.k, w.ms]));
    for (const [k, result] of decodeKeyTakes([...ms.keys()], refused)) {
      const before = this.states.get(k);
      if (before !== undefined && take.held.has(k)) {
        before.result = result; // nothing written (but the cap below)
        continue;
      }
      this.states.set(k, { held: result.kind === "taken", expiry: after(take.at, ms.get(k) ?? 0), result });
      if (result.kind === "taken" && before?.held !== true) this.held.push(k);
    }
    this.cap(rangeExpiry);
    this.asked = true;
  }

  /**
   * A member's outcome when no round trip is needed (its key was answered up front and its lease
   * covers the run, or an abandoned run holds it); undefined when it must take or renew its key.
   */
  heldOutcome(m: RangeMessage, first: boolean, outlives: Outlives): RunOutcome | null | undefined {
    const k = m.message_key as string;
    if (keyAbandoned(this.ctx, k)) return { kind: "deferred", reason: "deferred: an abandoned run of this key has not settled" };
    const ks = this.states.get(k);
    if (ks === undefined || m.compaction_rank !== null || !this.asked) return undefined;
    if (ks.held ? outlives(m.resolved.timeout, ks.expiry) : !first) return undefined;
    return keyTakeOutcome(ks.result);
  }

  /** Takes or renews one member's key lease (take_key_N) under the token, within (low, high]. */
  async take(m: RangeMessage, low: string, high: string, rangeExpiry: MonotonicMs): Promise<KeyTake> {
    const { ctx } = this;
    const k = m.message_key as string;
    const ks: KeyState = this.states.get(k) ?? { held: false, expiry: 0 as MonotonicMs, result: { kind: "busy" } };
    this.states.set(k, ks);
    const at = now();
    const ms = this.covering(ks, runLeaseMs(ctx, m.resolved.timeout), at);
    const r = await statements.takeKey.retry(ctx.db, ctx.tables, {
      groupId: ctx.groupId, key: k, keyToken: this.token as string, ms, messageId: m.id,
      ordered: m.resolved.concurrency === "ordered", low, high, compacted: m.compaction_rank !== null,
    });
    const res = decodeKeyTake(r.rows[0]);
    if (res.kind === "taken") {
      if (!ks.held) this.held.push(k);
      ks.held = true;
      ks.expiry = after(at, ms);
    }
    this.cap(rangeExpiry);
    return res;
  }

  /**
   * A renewal's length: one run's, or with keyConcurrency > 1 at least what the lease has left, since
   * other chains of the key may be running under it (docs/protocol/ordering.md#key-concurrency).
   */
  private covering(ks: KeyState, ms: number, at: MonotonicMs): number {
    if (this.ctx.resolution.keyConcurrency === 1 || !ks.held) return ms;
    return Math.max(ms, Math.ceil(ks.expiry - at));
  }

  /**
   * After a take: take_keys_N ended every lease under the key token (those passed on and not
   * wanted by this range too) no later than this range's lease. This side's view of each is capped
   * the same way, at its own (earlier) view of the range lease.
   */
  private cap(rangeExpiry: MonotonicMs): void {
    for (const ks of this.states.values()) if (ks.expiry > rangeExpiry) ks.expiry = rangeExpiry;
  }

}

/** The key leases a record releases: the key token and its keys, and whether no abandoned run holds one. */
export interface KeyRelease {
  token: string | null;
  keys: string[];
  /** No abandoned run holds a lease under the token: every lease under it goes, named by the token alone. */
  all: boolean;
}

/** The key leases to release as record_range_N and claim_N take them ([{k, t}], or null for none). */
export function keyLeaseJson(r: KeyRelease): string | null {
  const t = r.token;
  return t === null || r.keys.length === 0 ? null : JSON.stringify(r.keys.map((k) => ({ k, t })));
}

/** record_take_keys_N's released keys: none, every lease under the key token ("all"), or the keys named. */
export function releaseJson(r: KeyRelease): string | null {
  if (r.keys.length === 0) return null;
  return r.all ? '"all"' : JSON.stringify(r.keys);
}
