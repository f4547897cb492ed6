// The dashboard behind a Lambda Function URL (docs/operations.md#dashboard). Deploy it with the
// URL's auth type AWS_IAM: IAM authenticates every request, so no token is needed; pass
// `readOnly: true` (or set SQLSTREAMS_DASHBOARD_READ_ONLY=1) for a view-only deployment.
import type { SqlStreams } from "@sqlstreams/core";
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
  readOnly?: boolean;
  token?: string;
  basePath?: string;
  database?: DatabaseProvider;
}

export function createDashboardHandler(o: DashboardHandlerOptions = {}): (event: FunctionUrlEvent) => Promise<FunctionUrlResult> {
  const db = o.database ?? defaultDatabase();
  const readOnly = o.readOnly ?? ["1", "true", "yes"].includes((process.env.SQLSTREAMS_DASHBOARD_READ_ONLY ?? "").toLowerCase());
  let app: FetchHandler | undefined;
  let appClient: SqlStreams | undefined;
  return async (event) => {
    const headers = new Headers();
    for (const [k, v] of Object.entries(event.headers ?? {})) if (v !== undefined) headers.set(k, v);
    if (event.cookies?.length) headers.set("cookie", event.cookies.join("; "));
    const host = event.headers?.host ?? event.requestContext.domainName ?? "localhost";
    const url = `https://${host}${event.rawPath}${event.rawQueryString ? `?${event.rawQueryString}` : ""}`;
    const method = event.requestContext.http.method.toUpperCase();
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
