// The dashboard behind a Lambda Function URL (docs/guide/operations.md#dashboard). Deploy it with the
// URL's auth type AWS_IAM: IAM authenticates every request, so no token is needed. It is
// read-only unless read-write is asked for in so many words: `readWrite: true` (or
// `readOnly: false`), or SQLSTREAMS_DASHBOARD_READ_WRITE=1 (or READ_ONLY=0); a flag it cannot
// read is an error.
import { SqlStreamsError, type SqlStreams } from "@sqlstreams/core";
import { DatabaseProvider, defaultDatabase } from "../database.js";
import { createDashboard, type FetchHandler } from "./app.js";

/** The parts of a Function URL (payload 2.0) event the dashboard reads. */
export interface FunctionUrlEvent {
  rawPath: string;
  rawQueryString?: string;
  headers?: Record<string, string | undefined>;
  cookies?: string[];
  body?: string;
  isBase64Encoded?: boolean;
  requestContext: { http: { method: string }; domainName?: string };
}

export interface FunctionUrlResult {
  statusCode: number;
  headers: Record<string, string>;
  cookies?: string[];
  body: string;
}

export interface DashboardHandlerOptions {
  /** Allow actions (redrive, discard, pause, seek). Default false: see resolveReadOnly(). */
  readWrite?: boolean;
  /** The same switch the other way round; `readOnly: false` asks for read-write too. */
  readOnly?: boolean;
  token?: string;
  basePath?: string;
  database?: DatabaseProvider;
}

const TRUE = new Set(["1", "true", "yes"]);
const FALSE = new Set(["0", "false", "no"]);

/** A flag of the environment: exactly 1/true/yes or 0/false/no, unset or empty is undefined; anything else SQL0091. */
function flag(env: Record<string, string | undefined>, name: string): boolean | undefined {
  const v = env[name];
  if (v === undefined || v === "") return undefined;
  if (TRUE.has(v)) return true;
  if (FALSE.has(v)) return false;
  throw new SqlStreamsError("SQL0091", `${name}=${JSON.stringify(v)}: must be exactly 1, true or yes, or 0, false or no`, { variable: name });
}

/**
 * Whether the dashboard refuses actions: yes unless read-write is asked for explicitly: the
 * options (`readWrite: true` or `readOnly: false`), else SQLSTREAMS_DASHBOARD_READ_WRITE=1 or
 * SQLSTREAMS_DASHBOARD_READ_ONLY=0 (what the SST component sets for `readOnly: false`).
 * Contradictions and unreadable values are SQL0091, at construction.
 */
export function resolveReadOnly(o: { readWrite?: unknown; readOnly?: unknown }, env: Record<string, string | undefined> = process.env): boolean {
  for (const k of ["readWrite", "readOnly"] as const) {
    if (o[k] !== undefined && typeof o[k] !== "boolean") throw new SqlStreamsError("SQL0091", `createDashboardHandler: ${k} must be true or false`, { [k]: typeof o[k] });
  }
  if (o.readWrite !== undefined || o.readOnly !== undefined) {
    if (o.readWrite !== undefined && o.readOnly !== undefined && o.readWrite === o.readOnly) {
      throw new SqlStreamsError("SQL0091", `createDashboardHandler: readWrite: ${String(o.readWrite)} and readOnly: ${String(o.readOnly)} contradict each other`);
    }
    return !(o.readWrite === true || o.readOnly === false);
  }
  const rw = flag(env, "SQLSTREAMS_DASHBOARD_READ_WRITE");
  const ro = flag(env, "SQLSTREAMS_DASHBOARD_READ_ONLY");
  if (rw !== undefined && ro !== undefined && rw === ro) {
    throw new SqlStreamsError("SQL0091", "SQLSTREAMS_DASHBOARD_READ_WRITE and SQLSTREAMS_DASHBOARD_READ_ONLY contradict each other: keep one", { variable: "SQLSTREAMS_DASHBOARD_READ_WRITE" });
  }
  return !(rw === true || ro === false);
}

export function createDashboardHandler(o: DashboardHandlerOptions = {}): (event: FunctionUrlEvent) => Promise<FunctionUrlResult> {
  const readOnly = resolveReadOnly(o);
  const db = o.database ?? defaultDatabase();
  let app: FetchHandler | undefined;
  let appClient: SqlStreams | undefined;
  return async (event) => {
    const headers = new Headers();
    for (const [k, v] of Object.entries(event.headers ?? {})) if (v !== undefined) headers.set(k, v);
    if (event.cookies?.length) headers.set("cookie", event.cookies.join("; "));
    const host = event.headers?.host ?? event.requestContext.domainName ?? "localhost";
    const url = `https://${host}${event.rawPath}${event.rawQueryString ? `?${event.rawQueryString}` : ""}`;
    const method = event.requestContext.http.method.toUpperCase();
    if (method !== "GET" && method !== "HEAD" && method !== "POST") {
      return { statusCode: 405, headers: { "content-type": "text/plain; charset=utf-8", allow: "GET, HEAD, POST" }, body: `error SQL0090: method ${JSON.stringify(method)} not allowed\n` };
    }
    const body = event.body === undefined || method === "GET" || method === "HEAD" ? undefined : event.isBase64Encoded ? Buffer.from(event.body, "base64") : event.body;
    const res = await db.use(async (client) => {
      if (!app || appClient !== client) {
        app = createDashboard({ client, readOnly, ...(o.token !== undefined ? { token: o.token } : {}), ...(o.basePath !== undefined ? { basePath: o.basePath } : {}) });
        appClient = client;
      }
      return app(new Request(url, { method, headers, ...(body !== undefined ? { body } : {}) }));
    });
    const out: Record<string, string> = {};
    const cookies: string[] = [];
    res.headers.forEach((v, k) => {
      if (k === "set-cookie") cookies.push(v);
      else out[k] = v;
    });
    return { statusCode: res.status, headers: out, ...(cookies.length ? { cookies } : {}), body: await res.text() };
  };
}
