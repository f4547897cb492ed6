// Validation of a produce call (docs/guide/producing.md#validation): options, payload encoding, keys,
// compaction and size, all before any statement is sent.
import type { StreamInfo } from "../runtime.js";
import { type MessageOptions, validateMessageOptions } from "../config.js";
import { SqlStreamsError } from "../errors.js";
import { type StandardSchema, checkProduced } from "../typed.js";
import { encodePayload, idempotencyUuid, validateKey } from "../validate.js";
import { validateExpiry } from "./expiry.js";

/** When a message may first be delivered (docs/guide/producing.md#scheduled-delivery): one of the two. */
export interface ScheduleOptions {
  /** No group sees the message before this instant (a Date or epoch ms). */
  deliverAt?: Date | number;
  /** No group sees the message before this many ms after the database's now(). */
  delay?: number;
}
export interface ProduceOptions extends ScheduleOptions {
  key?: string;
  idempotencyKey?: string;
  compaction?: { rank?: number };
  message?: MessageOptions;
  /** Not delivered to a group that has not started it by then (docs/guide/producing.md#expiry). */
  expiresAt?: Date | number;
  /** Milliseconds from now (the database's clock at the insert): expiresAt relative. */
  ttl?: number;
}
export interface BatchItem<T> extends ScheduleOptions {
  payload: T;
  key?: string;
  compaction?: { rank?: number };
  message?: MessageOptions;
  expiresAt?: Date | number;
  ttl?: number;
}
export interface ProduceResult {
  /** The message id; with `scheduled`, the scheduled id (what cancelScheduled takes), not a log id. */
  id: string;
  duplicate: boolean;
  /** True when the message waits for its due time: `id` is then its scheduled id. */
  scheduled?: boolean;
  /** A waiting message's due time (database clock). */
  deliverAt?: Date;
}

/** One message as it is sent: the payload's JSON text and the stored columns. */
export interface Prepared {
  payload: string;
  bytes: number;
  key: string | null;
  rank: string | null;
  options: string | null;
  idempotency: string | null;
  /** A scheduled message's due time: epoch ms, or ms after the database's now() (null: append now). */
  schedule: { at: number | null; delay: number | null } | null;
}

const PRODUCE_KEYS = ["key", "idempotencyKey", "compaction", "message", "deliverAt", "delay", "expiresAt", "ttl"];
/** The latest instant a Date holds, in ms from the epoch; also the longest delay. */
const MAX_MS = 8.64e15;
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
  const expiry = validateExpiry(o.expiresAt, o.ttl, where);
  const schedule = scheduleOf(o.deliverAt, o.delay, where);
  if (expiry !== null && "expiresAt" in expiry && schedule?.at != null && expiry.expiresAt <= schedule.at) {
    throw new SqlStreamsError("SQL0015", `${where}.expiresAt is not after deliverAt: the message could never be delivered`, {
      path: `${where}.expiresAt`,
    });
  }
  const stored = { ...message, ...expiry };
  return {
    payload: text,
    bytes: Buffer.byteLength(text, "utf8"),
    key,
    rank,
    options: Object.keys(stored).length === 0 ? null : JSON.stringify(stored),
    idempotency: idem,
    schedule,
  };
}

/** The schedule of deliverAt / delay (SQL0015 for a bad or doubled one); null when neither is given. */
export function scheduleOf(deliverAt: unknown, delay: unknown, where = "options"): Prepared["schedule"] {
  if (deliverAt !== undefined && delay !== undefined) {
    throw new SqlStreamsError("SQL0015", `${where}: give deliverAt or delay, not both`, { path: `${where}.deliverAt` });
  }
  if (deliverAt !== undefined) {
    const at = deliverAt instanceof Date ? deliverAt.getTime() : deliverAt;
    if (typeof at !== "number" || !Number.isFinite(at) || at < 0 || at > MAX_MS) {
      throw new SqlStreamsError("SQL0015", `${where}.deliverAt must be a valid Date or epoch milliseconds (a finite number from 0 to 8.64e15), got ${String(deliverAt)}`, { path: `${where}.deliverAt` });
    }
    return { at, delay: null };
  }
  if (delay !== undefined) {
    if (typeof delay !== "number" || !Number.isFinite(delay) || delay < 0 || delay > MAX_MS) {
      throw new SqlStreamsError("SQL0015", `${where}.delay must be a finite number of milliseconds >= 0, got ${String(delay)}`, { path: `${where}.delay` });
    }
    return { at: null, delay };
  }
  return null;
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
