// Input checks that run before any statement is sent (docs/protocol/data-model.md#names, docs/guide/producing.md#validation, docs/guide/producing.md#idempotency-keys). Pure.
import { createHash } from "node:crypto";
import { types } from "node:util";
import { SqlStreamsError } from "./errors.js";

const NAME = /^[a-z0-9][a-z0-9._-]{0,199}$/;
const SCHEMA = /^[a-z_][a-z0-9_]{0,62}$/;
const UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;
const IDEMPOTENCY_NAMESPACE = "a7b11702-1bce-48fd-bb62-d476e1c647ce";
const RESERVED = "__system.";

function shown(name: unknown): string {
  const s = typeof name === "string" ? name : String(name);
  return JSON.stringify(s.length > 60 ? s.slice(0, 57) + "..." : s);
}

export function validateStreamName(name: unknown): string {
  if (typeof name === "string" && name.startsWith(RESERVED)) {
    throw new SqlStreamsError("SQL0007", `stream name ${shown(name)} uses the reserved prefix ${RESERVED}`, { name });
  }
  if (typeof name !== "string" || !NAME.test(name)) {
    throw new SqlStreamsError("SQL0006", `stream name ${shown(name)} does not match ${NAME.source}`, { name });
  }
  return name;
}

export function validateGroupName(name: unknown): string {
  if (typeof name === "string" && name.startsWith(RESERVED)) {
    throw new SqlStreamsError("SQL0007", `group name ${shown(name)} uses the reserved prefix ${RESERVED}`, { name });
  }
  if (typeof name !== "string" || !NAME.test(name)) {
    throw new SqlStreamsError("SQL0008", `group name ${shown(name)} does not match ${NAME.source}`, { name });
  }
  return name;
}

export function validateSchemaName(name: unknown): string {
  if (typeof name !== "string" || !SCHEMA.test(name)) {
    throw new SqlStreamsError("SQL0001", `schema ${shown(name)} does not match ${SCHEMA.source}`, { schema: name });
  }
  return name;
}

/** Matches a UTF-16 surrogate that is not part of a pair: it has no UTF-8 form. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
type WellFormed = { isWellFormed?: () => boolean };
/** True when the string has no lone surrogate (native String#isWellFormed where the runtime has it). */
const wellFormed: (s: string) => boolean =
  typeof (String.prototype as WellFormed).isWellFormed === "function"
    ? (s) => (s as unknown as Required<WellFormed>).isWellFormed()
    : (s) => !LONE_SURROGATE.test(s);

/** Where the first lone surrogate of s is, for the error message. */
function surrogateAt(s: string): number {
  return s.search(LONE_SURROGATE);
}

/** A message key or idempotency key: 1..1024 UTF-8 bytes, no U+0000, no lone surrogate (SQL0018). */
export function validateKey(v: unknown, what: "key" | "idempotencyKey"): string {
  if (typeof v !== "string" || v.length === 0) {
    throw new SqlStreamsError("SQL0018", `${what} must be a non-empty string, got ${shown(v)}`, { field: what });
  }
  if (v.includes("\u0000")) throw new SqlStreamsError("SQL0018", `${what} contains U+0000`, { field: what });
  // A lone surrogate has no UTF-8 form: encoding turns it into U+FFFD, so two different keys
  // would become one (an idempotency key would then drop the second message as a duplicate).
  if (!wellFormed(v)) {
    throw new SqlStreamsError("SQL0018", `${what} contains a lone UTF-16 surrogate at index ${surrogateAt(v)}, which has no UTF-8 form and would be stored as U+FFFD`, { field: what, index: surrogateAt(v) });
  }
  const bytes = Buffer.byteLength(v, "utf8");
  if (bytes > 1024) throw new SqlStreamsError("SQL0018", `${what} is ${bytes} UTF-8 bytes; the limit is 1024`, { field: what, bytes });
  return v;
}

/** Deepest nesting of arrays and objects a payload may have (deeper ones overflow the stack). */
export const MAX_PAYLOAD_DEPTH = 1000;

/**
 * Encodes a payload as JSON text after checking it can be stored losslessly (SQL0016):
 * no BigInt, cycle, function, symbol, non-finite number, U+0000 or lone surrogate, no Map, Set,
 * typed array or other built-in whose data JSON drops, nesting at most MAX_PAYLOAD_DEPTH deep,
 * and not undefined.
 */
export function encodePayload(payload: unknown): string {
  // The fast walk builds no paths; only a payload it cannot vouch for gets the careful walk,
  // which finds and names the offending value (or clears a deep but valid payload).
  const careful = !plainJson(payload, 0);
  if (careful) checkJson(payload, "payload", new Set());
  let text: string | undefined;
  try {
    text = JSON.stringify(payload);
  } catch (e) {
    throw new SqlStreamsError("SQL0016", `payload cannot be encoded as JSON: ${(e as Error).message}`, { path: "payload" }, e);
  }
  if (typeof text !== "string") throw new SqlStreamsError("SQL0016", "payload encodes to nothing (undefined)", { path: "payload" });
  // The fast walk does not look inside strings: JSON.stringify writes U+0000 and a lone surrogate
  // (in a value or a key) as a \u escape, so a text without one has neither, and one with a \u
  // (those, other control characters, or a backslash before a u) gets the careful walk.
  if (!careful && text.includes("\\u")) checkJson(payload, "payload", new Set());
  return text;
}

const hasOwn = Object.prototype.hasOwnProperty;

/** True when the value certainly stores as JSON unchanged; false means "look closer". */
function plainJson(v: unknown, depth: number): boolean {
  switch (typeof v) {
    case "string":
      return true; // checked on the encoded text (encodePayload)
    case "number":
      return Number.isFinite(v);
    case "boolean":
      return true;
    case "undefined":
      return depth > 0;
    case "object": {
      if (v === null) return true;
      if (depth > 100) return false; // deep, or a cycle: the careful walk decides
      const withToJson = v as { toJSON?: () => unknown };
      if (typeof withToJson.toJSON === "function") return plainJson(withToJson.toJSON(), depth + 1);
      if (Array.isArray(v)) {
        for (let i = 0; i < v.length; i++) {
          const x: unknown = v[i];
          if (x === undefined || typeof x === "function" || typeof x === "symbol" || !plainJson(x, depth + 1)) return false;
        }
        return true;
      }
      // Only plain objects here: a Map, Set, typed array or class instance gets the careful walk.
      const proto: unknown = Object.getPrototypeOf(v);
      if (proto !== Object.prototype && proto !== null) return false;
      for (const k in v) {
        if (!hasOwn.call(v, k)) continue;
        const x: unknown = (v as Record<string, unknown>)[k];
        if (typeof x === "function" || typeof x === "symbol") return false;
        if (x !== undefined && !plainJson(x, depth + 1)) return false;
      }
      return true;
    }
    default:
      return false; // bigint, function, symbol
  }
}

function bad(path: string, why: string): never {
  throw new SqlStreamsError("SQL0016", `payload cannot be stored as JSON: ${why} at ${path}`, { path });
}

/** A built-in whose data lives outside its own enumerable properties: JSON would store it as {}. */
function opaqueKind(v: object): string | null {
  if (types.isMap(v)) return "a Map";
  if (types.isSet(v)) return "a Set";
  if (types.isWeakMap(v) || types.isWeakSet(v)) return "a WeakMap or WeakSet";
  if (types.isArrayBufferView(v)) return "a typed array, Buffer or DataView";
  if (types.isAnyArrayBuffer(v)) return "an ArrayBuffer";
  if (types.isRegExp(v)) return "a RegExp";
  if (types.isPromise(v)) return "a Promise";
  if (types.isNativeError(v)) return "an Error";
  if (types.isBoxedPrimitive(v) && (types.isSymbolObject(v) || types.isBigIntObject(v))) return "a boxed Symbol or BigInt";
  if (typeof WeakRef === "function" && v instanceof WeakRef) return "a WeakRef";
  return null;
}

const OPAQUE_FIX: Record<string, string> = {
  "a Map": "convert it with Object.fromEntries(map) or [...map]",
  "a Set": "convert it with [...set]",
  "a typed array, Buffer or DataView": "convert it with Array.from(...) or to a base64 string",
  "an ArrayBuffer": "convert it to a base64 string or an array of numbers",
  "an Error": "store { name, message } instead",
  "a RegExp": "store its source string",
};

function checkJson(v: unknown, path: string, seen: Set<object>, depth = 0): void {
  switch (typeof v) {
    case "string":
      if (v.includes("\u0000")) bad(path, "a string contains U+0000");
      if (!wellFormed(v)) bad(path, `a string contains a lone UTF-16 surrogate at index ${surrogateAt(v)} (it has no UTF-8 form; remove it or replace it with U+FFFD yourself)`);
      return;
    case "number":
      if (!Number.isFinite(v)) bad(path, `the number ${v} is not finite`);
      return;
    case "boolean":
      return;
    case "bigint":
      bad(path, "a BigInt has no JSON form (convert it to a string)");
    // falls through (bad never returns)
    case "function":
    case "symbol":
      bad(path, `a ${typeof v} has no JSON form`);
    // falls through
    case "undefined":
      if (path === "payload") bad(path, "the payload is undefined");
      return;
    case "object": {
      if (v === null) return;
      if (depth >= MAX_PAYLOAD_DEPTH) bad(path, `nesting is deeper than ${MAX_PAYLOAD_DEPTH} levels (flatten the structure)`);
      const withToJson = v as { toJSON?: () => unknown };
      if (typeof withToJson.toJSON === "function") {
        checkJson(withToJson.toJSON(), path, seen, depth + 1);
        return;
      }
      if (seen.has(v)) bad(path, "the value contains a cycle");
      const opaque = opaqueKind(v);
      if (opaque !== null) bad(path, `${opaque} has no lossless JSON form (it would be stored as {}); ${OPAQUE_FIX[opaque] ?? "convert it to plain objects and arrays"}`);
      seen.add(v);
      if (Array.isArray(v)) {
        for (let i = 0; i < v.length; i++) {
          const item = v[i];
          if (typeof item === "function" || typeof item === "symbol" || item === undefined) {
            bad(`${path}[${i}]`, "an array item has no JSON form");
          }
          checkJson(item, `${path}[${i}]`, seen, depth + 1);
        }
      } else {
        for (const k of Object.keys(v)) {
          if (k.includes("\u0000")) bad(path, "an object key contains U+0000");
          if (!wellFormed(k)) bad(path, `an object key contains a lone UTF-16 surrogate at index ${surrogateAt(k)} (it has no UTF-8 form)`);
          const item = (v as Record<string, unknown>)[k];
          if (typeof item === "function" || typeof item === "symbol") bad(`${path}.${k}`, `a ${typeof item} has no JSON form`);
          checkJson(item, `${path}.${k}`, seen, depth + 1);
        }
      }
      seen.delete(v);
      return;
    }
  }
}

/** The UUID stored for an idempotency key (docs/guide/producing.md#idempotency-keys): verbatim when it is one, else UUIDv5. */
export function idempotencyUuid(key: string): string {
  if (UUID.test(key)) return key.toLowerCase();
  const ns = Buffer.from(IDEMPOTENCY_NAMESPACE.replace(/-/g, ""), "hex");
  const hash = createHash("sha1").update(ns).update(Buffer.from(key, "utf8")).digest();
  const b = hash.subarray(0, 16);
  b[6] = (b[6] & 0x0f) | 0x50;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = b.toString("hex");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}
