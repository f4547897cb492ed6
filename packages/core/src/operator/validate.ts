// Validation of the operator calls' arguments (docs/guide/operations.md): ids, times, failures()
// filters, redrive()/discard() selectors and batch options, each with the call's own error code.
import { SqlStreamsError } from "../errors.js";
import type { BatchOptions, FailureFilter } from "./types.js";

const ID = /^-?[0-9]{1,19}$/;

export function asId(v: unknown, what: string, code: "SQL0015" | "SQL0030" | "SQL0059"): string {
  const s = typeof v === "bigint" || typeof v === "number" ? String(v) : v;
  if (typeof s !== "string" || !ID.test(s)) throw new SqlStreamsError(code, `${what} must be a message id (decimal string, integer or bigint), got ${String(v)}`);
  return s;
}

export function asTime(v: unknown, what: string, code: "SQL0015" | "SQL0030" | "SQL0059"): Date {
  const d = v instanceof Date ? v : typeof v === "string" || typeof v === "number" ? new Date(v) : null;
  if (!d || Number.isNaN(d.getTime())) throw new SqlStreamsError(code, `${what} must be a Date, an ISO string or epoch ms, got ${String(v)}`);
  return d;
}

export interface Selector {
  ids: string[] | null;
  errorContains: string | null;
  key: string | null;
  payload: string | null;
  deadSince: Date | null;
  deadBefore: Date | null;
  /** The status a filter selects (ids select dead and expired rows alike). */
  status: "dead" | "expired";
  limit: number;
}

export interface Batch {
  reason: string;
  rate: number | null;
  batchSize: number;
  signal: AbortSignal | undefined;
  onBatch: BatchOptions["onBatch"];
}

export function validateBatch(o: BatchOptions, code: "SQL0030" | "SQL0059", what: string): Batch {
  if (typeof o !== "object" || o === null) throw new SqlStreamsError(code, `${what}() options must be an object`);
  const reason = o.reason ?? "no reason given";
  if (typeof reason !== "string") throw new SqlStreamsError(code, `${what} reason must be a string`);
  if (o.rate !== undefined && (typeof o.rate !== "number" || !Number.isFinite(o.rate) || o.rate <= 0 || o.rate > 100_000)) {
    throw new SqlStreamsError(code, `${what} rate must be a number of rows per second, above 0 and at most 100000, got ${String(o.rate)}`);
  }
  const rate = o.rate ?? null;
  const batchSize = o.batchSize ?? Math.max(1, Math.min(100, Math.floor(rate ?? 100)));
  if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > 10_000) throw new SqlStreamsError(code, `${what} batchSize must be an integer 1 … 10000, got ${String(o.batchSize)}`);
  if (o.onBatch !== undefined && typeof o.onBatch !== "function") throw new SqlStreamsError(code, `${what} onBatch must be a function`);
  return { reason, rate, batchSize, signal: o.signal, onBatch: o.onBatch };
}

/** A JSON object or array for jsonb containment, as text; `what` names it in the error. */
function containment(v: unknown, code: "SQL0015" | "SQL0030" | "SQL0059", what: string): string | null {
  if (v === undefined) return null;
  let text: string | undefined;
  try {
    text = typeof v === "object" && v !== null ? JSON.stringify(v) : undefined;
  } catch {
    text = undefined;
  }
  if (text === undefined) throw new SqlStreamsError(code, `${what} must be a JSON object or array (jsonb containment, e.g. { "customer": 7 }), got ${String(v)}`);
  return text;
}

function optionalText(v: unknown, code: "SQL0015" | "SQL0030" | "SQL0059", what: string): string | null {
  if (v === undefined) return null;
  if (typeof v !== "string" || v.length === 0) throw new SqlStreamsError(code, `${what} must be a non-empty string`);
  return v;
}

export interface FailureQuery {
  status: string;
  limit: number;
  offset: number;
  errorContains: string | null;
  key: string | null;
  since: Date | null;
  before: Date | null;
  payload: string | null;
  /** A keyset cursor, decoded: the page after or before the row at updatedAt (UTC, µs) and id. */
  keyset: { dir: "after" | "before"; updatedAt: string; id: string } | null;
}

const CURSOR = /^([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z)~([0-9]{1,19})$/;

function keysetOf(o: FailureFilter, offset: number): FailureQuery["keyset"] {
  if (o.after !== undefined && o.beforeCursor !== undefined) throw new SqlStreamsError("SQL0015", "failures(): pass after or beforeCursor, not both");
  const dir = o.after !== undefined ? "after" : o.beforeCursor !== undefined ? "before" : null;
  if (dir === null) return null;
  if (offset !== 0) throw new SqlStreamsError("SQL0015", `failures(): ${dir === "after" ? "after" : "beforeCursor"} pages by cursor; pass no offset with it`);
  const c = dir === "after" ? o.after : o.beforeCursor;
  const m = typeof c === "string" ? CURSOR.exec(c) : null;
  if (m === null || BigInt(m[2]) > 9_223_372_036_854_775_807n) {
    throw new SqlStreamsError("SQL0015", `failures(): ${dir === "after" ? "after" : "beforeCursor"} must be a row's cursor (from failures()), got ${JSON.stringify(String(c).slice(0, 60))}`);
  }
  return { dir, updatedAt: m[1], id: m[2] };
}

export function validateFailureFilter(o: FailureFilter): FailureQuery {
  if (typeof o !== "object" || o === null) throw new SqlStreamsError("SQL0015", "failures() takes an options object");
  const allowed = ["status", "limit", "offset", "after", "beforeCursor", "errorContains", "key", "since", "before", "payloadContains"];
  for (const k of Object.keys(o)) if (!allowed.includes(k)) throw new SqlStreamsError("SQL0015", `failures(): unknown option ${k}; allowed: ${allowed.join(", ")}`);
  const status = o.status ?? "dead";
  if (!["dead", "expired", "ready", "deferred", "inflight"].includes(status)) throw new SqlStreamsError("SQL0015", `failures() status must be dead, expired, ready, deferred or inflight, got ${String(status)}`);
  const limit = o.limit ?? 100;
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new SqlStreamsError("SQL0015", `failures() limit must be an integer 1 … 1000, got ${String(limit)}`);
  const offset = o.offset ?? 0;
  if (!Number.isInteger(offset) || offset < 0 || offset > 10_000_000) throw new SqlStreamsError("SQL0015", `failures() offset must be an integer 0 … 10000000, got ${String(offset)}`);
  return {
    status, limit, offset,
    errorContains: optionalText(o.errorContains, "SQL0015", "failures() errorContains"),
    key: optionalText(o.key, "SQL0015", "failures() key"),
    since: o.since === undefined ? null : asTime(o.since, "failures() since", "SQL0015"),
    before: o.before === undefined ? null : asTime(o.before, "failures() before", "SQL0015"),
    payload: containment(o.payloadContains, "SQL0015", "failures() payloadContains"),
    keyset: keysetOf(o, offset),
  };
}

export function validateSelector(s: unknown, code: "SQL0030" | "SQL0059", what: string, paced: boolean): Selector {
  if (typeof s !== "object" || s === null || Array.isArray(s)) throw new SqlStreamsError(code, `${what}() takes { ids } or a filter { errorContains?, key?, payloadContains?, deadSince?, deadBefore?, all?, limit? }`);
  const o = s as Record<string, unknown>;
  const none = { errorContains: null, key: null, payload: null, deadSince: null, deadBefore: null };
  if ("ids" in o) {
    if (Object.keys(o).length !== 1) throw new SqlStreamsError(code, `${what}({ ids }) takes no other criteria`);
    const max = paced ? 1_000_000 : 10_000;
    if (!Array.isArray(o.ids) || o.ids.length < 1 || o.ids.length > max) throw new SqlStreamsError(code, `${what} ids must be an array of 1 … ${max} message ids`);
    const ids = [...new Set(o.ids.map((v) => asId(v, `${what} id`, code)))];
    return { ids, ...none, status: "dead", limit: ids.length };
  }
  const allowed = ["errorContains", "key", "payloadContains", "deadSince", "deadBefore", "all", "limit", "status"];
  for (const k of Object.keys(o)) if (!allowed.includes(k)) throw new SqlStreamsError(code, `${what} filter: unknown key ${k}; allowed: ids or ${allowed.join(", ")}`);
  if (o.all !== undefined && o.all !== true) throw new SqlStreamsError(code, `${what} filter: all must be true when given`);
  const status = o.status ?? "dead";
  if (status !== "dead" && status !== "expired") throw new SqlStreamsError(code, `${what} filter: status must be dead or expired, got ${String(status)}`);
  const errorContains = optionalText(o.errorContains, code, `${what} filter: errorContains`);
  const key = optionalText(o.key, code, `${what} filter: key`);
  const payload = containment(o.payloadContains, code, `${what} filter: payloadContains`);
  const hasCriterion = errorContains !== null || key !== null || payload !== null || o.deadSince !== undefined || o.deadBefore !== undefined;
  if (!hasCriterion && o.all !== true) throw new SqlStreamsError(code, `${what} filter needs errorContains, key, payloadContains, deadSince, deadBefore, or all: true`);
  const maxLimit = paced ? 1_000_000_000 : 10_000;
  const limit = o.limit ?? (paced ? maxLimit : 1_000);
  if (typeof limit !== "number" || !Number.isInteger(limit) || limit < 1 || limit > maxLimit) throw new SqlStreamsError(code, `${what} filter: limit must be an integer 1 … ${maxLimit}`);
  return {
    ids: null, errorContains, key, payload,
    deadSince: o.deadSince === undefined ? null : asTime(o.deadSince, "deadSince", code),
    deadBefore: o.deadBefore === undefined ? null : asTime(o.deadBefore, "deadBefore", code),
    status, limit,
  };
}

