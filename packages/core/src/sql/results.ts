// The typed boundary between the protocol functions and the cycle: what each function returns,
// decoded here once into a discriminated union, so the cycle code never parses result text.
// The encodings are the functions' own (migrations/stream/functions/, docs/protocol/poll-cycle.md); the row types
// are beside their statements (sql/cycle.ts).
import type { ExceptionStepRow, KeyRefusalRow } from "./cycle.js";

/** take_key_N and take_keys_N: whether a key lease was taken, and why not. */
export type KeyTake =
  | { kind: "taken" }
  | { kind: "busy" }
  | { kind: "pred"; id: string }
  | { kind: "superseded"; head: string };

/** take_key_N's row: kind 'taken' | 'busy' | 'pred' (ref the predecessor) | 'superseded' (ref the head, NULL: none). */
export function decodeKeyTake(r: { kind: string; ref: string | null }): KeyTake {
  switch (r.kind) {
    case "taken":
    case "busy":
      return { kind: r.kind };
    case "pred":
      return { kind: "pred", id: r.ref as string };
    case "superseded":
      return { kind: "superseded", head: r.ref ?? "none" };
  }
  throw new Error(`unexpected key lease result ${JSON.stringify(r)}`);
}

/** One answer shared by every key taken (never mutated). */
const TAKEN: KeyTake = Object.freeze({ kind: "taken" });

/**
 * take_keys_N returns only the keys it did not take: every other key asked for is taken. One
 * result per key of `keys`.
 */
export function decodeKeyTakes(keys: readonly string[], refused: readonly KeyRefusalRow[]): Map<string, KeyTake> {
  const out = new Map<string, KeyTake>();
  for (const k of keys) out.set(k, TAKEN);
  for (const r of refused) {
    if (r.kind === "busy") out.set(r.k, { kind: "busy" });
    else if (r.kind === "pred" && r.pred_id !== null) out.set(r.k, { kind: "pred", id: r.pred_id });
    else throw new Error(`unexpected key lease row ${JSON.stringify(r)}`);
  }
  return out;
}

/** Why a key could not be taken (take_key_N / take_keys_N, or a batch start). */
export type KeyBlocked = Extract<KeyTake, { kind: "busy" } | { kind: "pred" }>;

/**
 * The reason a message whose key could not be taken is deferred with (delivery_log and
 * last_error), on the range path and the exception path alike: the one place this text is made
 * (docs/protocol/exception-lifecycle.md#retries).
 */
export function deferredReason(k: KeyBlocked): string {
  return k.kind === "busy" ? "deferred: key busy" : `deferred: ordered predecessor ${k.id} unresolved`;
}

/** start_exceptions_N, per row: started, lost (reservation gone), or resolved at start (superseded, expired, deferred; nothing written yet). */
export type ExceptionStart =
  | { kind: "started" }
  | { kind: "lost" }
  | { kind: "superseded"; head: string }
  | { kind: "expired" }
  | { kind: "deferred"; blocked: KeyBlocked };

/**
 * record_exceptions_N, per row: lost (nothing written), or recorded (the run's key lease maybe
 * taken over meanwhile); "unknown" only after a repeat whose first reply was lost (set by the caller,
 * docs/protocol/crash-recovery.md#unknown-commits).
 */
export type ExceptionRecord = { kind: "lost" } | { kind: "recorded"; keyTakenOver: boolean } | { kind: "unknown" };

export interface ExceptionStep {
  starts: Map<string, ExceptionStart>;
  records: Map<string, ExceptionRecord>;
}

/** A start's typed columns (exception_step_N, reserve_exceptions_N): kind, reason kind, id. */
export function decodeStart(r: { kind: string; reason: string | null; ref: string | null }): ExceptionStart {
  switch (r.kind) {
    case "started":
    case "lost":
    case "expired":
      return { kind: r.kind };
    case "superseded":
      return { kind: "superseded", head: r.ref ?? "none" };
    case "deferred":
      if (r.reason === "busy") return { kind: "deferred", blocked: { kind: "busy" } };
      if (r.reason === "pred" && r.ref !== null) return { kind: "deferred", blocked: { kind: "pred", id: r.ref } };
  }
  throw new Error(`unexpected exception start result ${JSON.stringify(r)}`);
}

/** record_exceptions_N's kind, per row (exception_step_N, reserve_exceptions_N). */
export function decodeRecord(r: { kind: string | null }): ExceptionRecord {
  if (r.kind === "lost") return { kind: "lost" };
  if (r.kind === "recorded" || r.kind === "key_taken_over") return { kind: "recorded", keyTakenOver: r.kind === "key_taken_over" };
  throw new Error(`unexpected exception record result ${JSON.stringify(r)}`);
}

export function decodeExceptionStep(rows: ExceptionStepRow[]): ExceptionStep {
  const out: ExceptionStep = { starts: new Map(), records: new Map() };
  for (const r of rows) {
    if (r.step === "start") out.starts.set(r.message_id, decodeStart(r));
    else if (r.step === "record") out.records.set(r.message_id, decodeRecord(r));
    else throw new Error(`unexpected exception step ${JSON.stringify(r.step)}`);
  }
  return out;
}
