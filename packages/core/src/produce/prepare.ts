// Validation of a produce call (docs/guide/producing.md#validation): options, payload encoding, keys,
// compaction and size, all before any statement is sent.
import type { StreamInfo } from "../runtime.js";
import { type MessageOptions, validateMessageOptions } from "../config.js";
import { SqlStreamsError } from "../errors.js";
import { type StandardSchema, checkProduced } from "../typed.js";
import { encodePayload, idempotencyUuid, validateKey } from "../validate.js";
import { validateExpiry } from "./expiry.js";

export interface ProduceOptions {
  key?: string;
  idempotencyKey?: string;
  compaction?: { rank?: number };
  message?: MessageOptions;
  /** Not delivered to a group that has not started it by then (docs/guide/producing.md#expiry). */
  expiresAt?: Date | number;
  /** Milliseconds from now (the database's clock at the insert): expiresAt relative. */
  ttl?: number;
}
export interface BatchItem<T> {
  payload: T;
  key?: string;
  compaction?: { rank?: number };
  message?: MessageOptions;
  expiresAt?: Date | number;
  ttl?: number;
}
export interface ProduceResult {
  id: string;
  duplicate: boolean;
}

/** One message as it is sent: the payload's JSON text and the stored columns. */
export interface Prepared {
  payload: string;
  bytes: number;
  key: string | null;
  rank: string | null;
  options: string | null;
  idempotency: string | null;
}

const PRODUCE_KEYS = ["key", "idempotencyKey", "compaction", "message", "expiresAt", "ttl"];
const MAX_BATCH = 1_000;

/** Validates one produce call, before any statement. */
export function prepare(payload: unknown, opts: unknown, allowIdempotency: boolean, where = "options"): Prepared {
  if (opts === undefined || opts === null) opts = {};
  if (typeof opts !== "object" || Array.isArray(opts)) {
    throw new SqlStreamsError("SQL0015", `${where} must be an object`);
  }
  const o = opts as Record<string, unknown>;
  for (const k of Object.keys(o)) {
    if (!PRODUCE_KEYS.includes(k) || (k === "idempotencyKey" && !allowIdempotency && o[k] !== undefined)) {
      const why = k === "idempotencyKey" ? "batch items cannot carry an idempotencyKey; produce them one by one" : `unknown key; allowed: ${PRODUCE_KEYS.join(", ")}`;
      throw new SqlStreamsError("SQL0015", `${where}.${k}: ${why}`, { path: `${where}.${k}` });
    }
  }
  const text = encodePayload(payload);
  const key = o.key === undefined ? null : validateKey(o.key, "key");
  const idem = o.idempotencyKey === undefined ? null : idempotencyUuid(validateKey(o.idempotencyKey, "idempotencyKey"));
  const message = validateMessageOptions(o.message, "message");
  if ((message.concurrency === "exclusive" || message.concurrency === "ordered") && key === null) {
    throw new SqlStreamsError("SQL0019", `message.concurrency '${message.concurrency}' needs a key`, { path: "message.concurrency" });
  }
  const rank = compactionRank(o.compaction, key, message.concurrency === "ordered");
  const stored = { ...message, ...validateExpiry(o.expiresAt, o.ttl, where) };
  return {
    payload: text,
    bytes: Buffer.byteLength(text, "utf8"),
    key,
    rank,
    options: Object.keys(stored).length === 0 ? null : JSON.stringify(stored),
    idempotency: idem,
  };
}

/** The compaction rank as text (null without compaction); SQL0020/SQL0021 for a bad combination. */
function compactionRank(compaction: unknown, key: string | null, ordered: boolean): string | null {
  if (compaction === undefined) return null;
  const c = compaction as Record<string, unknown> | null;
  if (typeof c !== "object" || c === null || Array.isArray(c)) {
    throw new SqlStreamsError("SQL0020", "compaction must be an object like { rank?: number }", { path: "compaction" });
  }
  if (key === null) throw new SqlStreamsError("SQL0020", "compaction needs a key (the compaction key)", { path: "compaction" });
  const r = c.rank ?? 0;
  if (typeof r !== "number" || !Number.isSafeInteger(r)) {
    throw new SqlStreamsError("SQL0020", `compaction.rank must be a safe integer, got ${String(r)}`, { path: "compaction.rank" });
  }
  for (const k of Object.keys(c)) {
    if (k !== "rank") throw new SqlStreamsError("SQL0020", `compaction.${k}: unknown key; allowed: rank`);
  }
  if (ordered) {
    throw new SqlStreamsError("SQL0021", "message.concurrency 'ordered' cannot be combined with compaction", { path: "compaction" });
  }
  return String(r);
}

/** Validates a batch (at most 1000 items, no idempotency keys), before any statement. */
export function prepareBatch<T>(items: BatchItem<T>[]): Prepared[] {
  if (!Array.isArray(items)) throw new SqlStreamsError("SQL0015", "produceBatch takes an array of items");
  if (items.length > MAX_BATCH) {
    throw new SqlStreamsError("SQL0015", `produceBatch takes at most ${MAX_BATCH} items, got ${items.length}`, { count: items.length });
  }
  return items.map((it, i) => {
    if (typeof it !== "object" || it === null) throw new SqlStreamsError("SQL0015", `items[${i}] must be an object { payload, key?, ... }`);
    const { payload, ...rest } = it;
    if (!("payload" in it)) throw new SqlStreamsError("SQL0015", `items[${i}].payload is missing`);
    return prepare(payload, rest, false, `items[${i}]`);
  });
}

/** SQL0017 when a payload is over the stream's maxPayloadBytes. */
export function checkSize(p: Prepared, info: StreamInfo): void {
  if (p.bytes > info.maxPayloadBytes) {
    throw new SqlStreamsError(
      "SQL0017",
      `payload is ${p.bytes} bytes of JSON; stream ${info.name} accepts at most ${info.maxPayloadBytes}`,
      { bytes: p.bytes, limit: info.maxPayloadBytes },
    );
  }
}

/**
 * The payload to store: a typed stream's schema output (SQL0067 when it refuses;
 * docs/guide/producing.md#typed-streams), else the payload as given.
 */
export async function typedPayload<T>(schema: StandardSchema<T> | undefined, stream: string, payload: T, item?: number): Promise<T> {
  return schema ? checkProduced(schema, payload, { stream, item }) : payload;
}

/** Batch items with their payloads checked by a typed stream's schema. */
export async function typedItems<T>(schema: StandardSchema<T> | undefined, stream: string, items: BatchItem<T>[]): Promise<BatchItem<T>[]> {
  if (!schema || !Array.isArray(items)) return items;
  const out: BatchItem<T>[] = [];
  for (let i = 0; i < items.length; i++) {
    const it = items[i];
    out.push(typeof it === "object" && it !== null && "payload" in it ? { ...it, payload: await typedPayload(schema, stream, it.payload, i) } : it);
  }
  return out;
}
