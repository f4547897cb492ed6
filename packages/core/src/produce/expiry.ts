// A produce's expiry (docs/guide/producing.md#expiry): expiresAt (a Date or epoch ms) or ttl (ms), checked
// before any statement and stored in the message's options, where the poll cycle reads it.
import { SqlStreamsError } from "../errors.js";

/** The largest epoch milliseconds a Date can hold. */
const MAX_EPOCH_MS = 8_640_000_000_000_000;

/**
 * What a message stores of its expiry: {expiresAt: epoch ms} or {ttl: ms} (counted from its
 * created_at, the database's now() at the insert), or null for neither. SQL0015 for a bad value.
 */
export function validateExpiry(expiresAt: unknown, ttl: unknown, where: string): { expiresAt: number } | { ttl: number } | null {
  if (expiresAt === undefined && ttl === undefined) return null;
  if (expiresAt !== undefined && ttl !== undefined) {
    throw new SqlStreamsError("SQL0015", `${where}: expiresAt and ttl cannot both be set; pass one of them`, { path: `${where}.ttl` });
  }
  if (ttl !== undefined) {
    if (typeof ttl !== "number" || !Number.isFinite(ttl) || ttl <= 0 || ttl > Number.MAX_SAFE_INTEGER) {
      throw new SqlStreamsError("SQL0015", `${where}.ttl must be a number of milliseconds > 0, got ${String(ttl)}`, { path: `${where}.ttl` });
    }
    return { ttl };
  }
  const ms = expiresAt instanceof Date ? expiresAt.getTime() : expiresAt;
  if (typeof ms !== "number" || !Number.isFinite(ms) || Math.abs(ms) > MAX_EPOCH_MS) {
    const got = expiresAt instanceof Date ? "an invalid Date" : String(expiresAt);
    throw new SqlStreamsError("SQL0015", `${where}.expiresAt must be a Date or epoch milliseconds, got ${got}`, { path: `${where}.expiresAt` });
  }
  return { expiresAt: ms };
}
