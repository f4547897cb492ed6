// Helpers for the ordering, exclusivity and compaction scenarios (docs/protocol/ordering.md, docs/protocol/ordering.md#compaction, docs/protocol/conformance.md C18–C21):
// waiting for a condition, lease readers, a ledger of handler runs. The docs/protocol/conformance.md#invariants invariants these
// scenarios check after every step are checkInvariants() of ./invariants.js.
import { setTimeout as sleep } from "node:timers/promises";
import { SCHEMA, type TestClient } from "./streams.js";

/** Resolves once `cond()` is true; polls every 5 ms (no fixed sleeps in scenarios). */
export async function until(cond: () => boolean | Promise<boolean>, what: string, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

export async function keyLeases(t: TestClient, n: string, gid: string) {
  return t.sql<{ message_key: string; token: string; ttl_ms: number }>(
    `SELECT message_key, token::text, (EXTRACT(EPOCH FROM (expires_at - now())) * 1000)::float8 AS ttl_ms
       FROM ${SCHEMA}.message_key_lease_${n} WHERE consumer_group_id = $1 ORDER BY message_key`,
    [gid],
  );
}

/** A range lease row; lease_ms is its length (expires_at - created_at), expired by the database clock. */
export interface ClaimLease {
  token: string;
  low: string;
  high: string;
  reclaims: number;
  released: boolean;
  expires_at: Date;
  lease_ms: number;
  expired: boolean;
}

/** A group's range leases, by low id. */
export async function claimLeases(t: TestClient, n: string, gid: string): Promise<ClaimLease[]> {
  return t.sql<ClaimLease>(
    `SELECT token::text, low::text, high::text, reclaims, released, expires_at,
            (EXTRACT(EPOCH FROM (expires_at - created_at)) * 1000)::float8 AS lease_ms, expires_at < now() AS expired
       FROM ${SCHEMA}.claim_lease_${n} WHERE consumer_group_id = $1 ORDER BY low::bigint`,
    [gid],
  );
}

/** A full image of a group's rows in every per-stream table that a poll writes. */
export async function snapshot(t: TestClient, n: string, gid: string): Promise<unknown> {
  const q = async (table: string, order: string) =>
    t.sql(`SELECT to_jsonb(x) - 'consumer_group_id' AS r FROM ${SCHEMA}.${table}_${n} x WHERE consumer_group_id = $1 ORDER BY ${order}`, [gid]);
  return {
    exceptionQueue: await q("exception_queue", "message_id"),
    deliveryLog: await q("delivery_log", "id"),
    groupCursor: await q("consumer_group_cursor", "consumer_group_id"),
    claimLease: await q("claim_lease", "low"),
    keyLease: await q("message_key_lease", "message_key"),
  };
}

/** In-process record of handler starts and ends, with the checks of I5 and I8. */
export class Ledger {
  seq = 0;
  readonly events: { seq: number; at: number; kind: "start" | "end"; id: bigint; key: string | null; ok: boolean; attempt: number; poller: string }[] = [];
  private readonly running = new Map<string, number>();
  private readonly succeeded = new Set<bigint>();
  runningAll = 0;
  maxRunningAll = 0;
  /** Starts while another handler of the same key was running (I5). */
  overlaps: string[] = [];
  /** Starts of an ordered key's message while an earlier id of that key had not succeeded (G6). */
  orderViolations: string[] = [];

  /** Optionally give the ids of every message per key so that G6 can be checked at start time. */
  constructor(private readonly idsByKey: Map<string, bigint[]> = new Map()) {}

  start(id: string, key: string | null, attempt: number, poller = ""): void {
    const n = BigInt(id);
    this.events.push({ seq: this.seq++, at: performance.now(), kind: "start", id: n, key, ok: false, attempt, poller });
    this.runningAll++;
    this.maxRunningAll = Math.max(this.maxRunningAll, this.runningAll);
    if (key === null) return;
    const r = this.running.get(key) ?? 0;
    if (r > 0) this.overlaps.push(`${key}: ${id} started while ${r} other handler(s) of the key ran`);
    this.running.set(key, r + 1);
    for (const p of this.idsByKey.get(key) ?? []) {
      if (p >= n) break;
      if (!this.succeeded.has(p)) {
        this.orderViolations.push(`${key}: ${id} started before ${p} succeeded`);
        break;
      }
    }
  }

  end(id: string, key: string | null, ok: boolean, attempt: number, poller = ""): void {
    const n = BigInt(id);
    this.events.push({ seq: this.seq++, at: performance.now(), kind: "end", id: n, key, ok, attempt, poller });
    this.runningAll--;
    if (ok) this.succeeded.add(n);
    if (key !== null) this.running.set(key, (this.running.get(key) ?? 1) - 1);
  }

  isSucceeded(id: bigint): boolean {
    return this.succeeded.has(id);
  }

  get succeededCount(): number {
    return this.succeeded.size;
  }

  /** Per key, the ids in the order of their first start (I8 wants them ascending). */
  firstStartOrder(): Map<string, bigint[]> {
    const seen = new Set<bigint>();
    const out = new Map<string, bigint[]>();
    for (const e of this.events) {
      if (e.kind !== "start" || e.key === null || seen.has(e.id)) continue;
      seen.add(e.id);
      out.set(e.key, [...(out.get(e.key) ?? []), e.id]);
    }
    return out;
  }

  /** Per key, the ids in the order of their successful ends. */
  successOrder(): Map<string, bigint[]> {
    const out = new Map<string, bigint[]>();
    for (const e of this.events) {
      if (e.kind !== "end" || !e.ok || e.key === null) continue;
      out.set(e.key, [...(out.get(e.key) ?? []), e.id]);
    }
    return out;
  }

  /** True when handlers of two different keys ran at overlapping times. */
  differentKeysOverlapped(): boolean {
    const live = new Map<bigint, string | null>();
    for (const e of this.events) {
      if (e.kind === "start") {
        for (const k of live.values()) if (k !== e.key) return true;
        live.set(e.id, e.key);
      } else live.delete(e.id);
    }
    return false;
  }
}

export function ascending(ids: bigint[]): boolean {
  for (let i = 1; i < ids.length; i++) if (ids[i - 1] >= ids[i]) return false;
  return true;
}
