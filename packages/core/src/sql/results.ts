// The typed boundary between the protocol functions and the cycle: what each function returns,
// decoded here once into a discriminated union, so the cycle code never parses result text.
// The encodings are the functions' own (migrations/stream/*.sql, docs/poll-cycle.md).

/** take_key_N: NULL when the lease was taken, else why not (take_keys_N: decodeKeyTakes below). */
export type KeyTake =
  | { kind: "taken" }
  | { kind: "busy" }
  | { kind: "pred"; id: string }
  | { kind: "superseded"; head: string };

export function decodeKeyTake(r: string | null): KeyTake {
  if (r === null) return { kind: "taken" };
  if (r === "busy") return { kind: "busy" };
  if (r.startsWith("pred:")) return { kind: "pred", id: r.slice("pred:".length) };
  if (r.startsWith("superseded:")) return { kind: "superseded", head: r.slice("superseded:".length) };
  throw new Error(`unexpected key lease result ${JSON.stringify(r)}`);
}

/** A row of take_keys_N: a key it did not take, kind 'busy' or 'pred' (pred_id set). */
export type KeyRefusal = { k: string; kind: string; pred_id: string | null };

/**
 * take_keys_N returns only the keys it did not take: every other key asked for is taken. One
 * result per key of `keys`.
 */
export function decodeKeyTakes(keys: readonly string[], refused: readonly KeyRefusal[]): Map<string, KeyTake> {
  const out = new Map<string, KeyTake>(keys.map((k) => [k, { kind: "taken" } as KeyTake]));
  for (const r of refused) {
    if (r.kind === "busy") out.set(r.k, { kind: "busy" });
    else if (r.kind === "pred" && r.pred_id !== null) out.set(r.k, { kind: "pred", id: r.pred_id });
    else throw new Error(`unexpected key lease row ${JSON.stringify(r)}`);
  }
  return out;
}

/** The reason a range member whose key could not be taken is deferred with (delivery_log and last_error). */
export function deferredReason(k: Exclude<KeyTake, { kind: "taken" } | { kind: "superseded" }>): string {
  return k.kind === "busy" ? "deferred: key busy" : `deferred: ordered predecessor ${k.id} unresolved`;
}

/** start_exception_N: started, lost (reservation gone), or resolved at start. */
export type ExceptionStart =
  | { kind: "started" }
  | { kind: "lost" }
  | { kind: "superseded"; head: string }
  | { kind: "deferred"; reason: string };

export function decodeExceptionStart(r: string): ExceptionStart {
  if (r === "started") return { kind: "started" };
  if (r === "lost") return { kind: "lost" };
  if (r.startsWith("superseded:")) return { kind: "superseded", head: r.slice("superseded:".length) };
  if (r.startsWith("deferred:")) return { kind: "deferred", reason: r.slice("deferred:".length) };
  throw new Error(`unexpected exception start result ${JSON.stringify(r)}`);
}

/** record_exception_N: 0 lost, 1 recorded, 2 recorded but the run's key lease had been taken over. */
export type ExceptionRecord = { kind: "lost" } | { kind: "recorded"; keyTakenOver: boolean };

export function decodeExceptionRecord(r: number): ExceptionRecord {
  if (r === 0) return { kind: "lost" };
  if (r === 1 || r === 2) return { kind: "recorded", keyTakenOver: r === 2 };
  throw new Error(`unexpected exception record result ${r}`);
}
