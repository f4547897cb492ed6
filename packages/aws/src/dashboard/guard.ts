// Who may use the dashboard: the token (cookie, bearer or basic auth), the request's origin. The
// Host allowlist and the CSRF token are checked in app.ts, where each request is routed.
import { createHash, timingSafeEqual } from "node:crypto";

export function sameSecret(a: string, b: string): boolean {
  const x = createHash("sha256").update(a).digest();
  const y = createHash("sha256").update(b).digest();
  return timingSafeEqual(x, y);
}

/** The auth cookie's name: one per token, so dashboards on other ports of the same host don't clash. */
export function authCookieName(token: string): string {
  return `sqlstreams_auth_${createHash("sha256").update(`cookie:${token}`).digest("hex").slice(0, 12)}`;
}

export function authorized(req: Request, token: string): boolean {
  const fromCookie = cookie(req, authCookieName(token));
  if (fromCookie !== undefined && sameSecret(decodeURIComponent(fromCookie), token)) return true;
  const h = req.headers.get("authorization") ?? "";
  if (h.startsWith("Bearer ")) return sameSecret(h.slice(7).trim(), token);
  if (h.startsWith("Basic ")) {
    const decoded = Buffer.from(h.slice(6).trim(), "base64").toString("utf8");
    const i = decoded.indexOf(":");
    return i >= 0 && sameSecret(decoded.slice(i + 1), token);
  }
  return false;
}

export function cookie(req: Request, name: string): string | undefined {
  for (const part of (req.headers.get("cookie") ?? "").split(";")) {
    const [k, ...v] = part.trim().split("=");
    if (k === name) return v.join("=");
  }
  return undefined;
}

/** The request's Origin is one of the app's own (its hosts, else the request's Host). */
export function allowedOrigin(origin: string, req: Request, url: URL, hosts: Set<string> | undefined): boolean {
  try {
    const o = new URL(origin);
    if (o.protocol !== url.protocol) return false;
    return hosts ? hosts.has(o.host.toLowerCase()) : o.host === (req.headers.get("host") ?? url.host);
  } catch {
    return false;
  }
}

/**
 * Cross-site requests are refused: the browser's Sec-Fetch-Site, and an Origin other than the
 * app's own was already refused before any page or action ran; "null" (sandboxed, file:) is refused.
 */
export function sameOrigin(req: Request): boolean {
  const site = req.headers.get("sec-fetch-site");
  if (site !== null && site !== "same-origin" && site !== "none") return false;
  return req.headers.get("origin") !== "null";
}
