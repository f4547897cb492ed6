// `sqlstreams dashboard`: the operator dashboard of @sqlstreams/aws on node:http, on 127.0.0.1 by
// default. Beyond loopback it needs a token (SQL0060) (docs/operations.md#dashboard).
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createDashboard, type FetchHandler } from "@sqlstreams/aws";
import { SqlStreamsError, type SqlStreams } from "@sqlstreams/core";
import type { Ctx, Values } from "./context.js";
import { usageError } from "./errors.js";

export const DASHBOARD_PORT = 5480;

function loopback(host: string): boolean {
  return host === "127.0.0.1" || host === "::1" || host === "localhost" || /^127\./.test(host);
}

async function toRequest(req: IncomingMessage, origin: string): Promise<Request> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > 1_000_000) throw new Error("request body too large");
    chunks.push(c as Buffer);
  }
  const headers = new Headers();
  for (const [k, v] of Object.entries(req.headers)) {
    if (Array.isArray(v)) for (const x of v) headers.append(k, x);
    else if (v !== undefined) headers.set(k, v);
  }
  const method = req.method ?? "GET";
  return new Request(new URL(req.url ?? "/", origin), { method, headers, ...(method === "GET" || method === "HEAD" ? {} : { body: Buffer.concat(chunks) }) });
}

async function send(res: ServerResponse, r: Response): Promise<void> {
  const headers: Record<string, string | string[]> = {};
  r.headers.forEach((v, k) => {
    headers[k] = k === "set-cookie" ? [...((headers[k] as string[] | undefined) ?? []), v] : v;
  });
  res.writeHead(r.status, headers);
  res.end(Buffer.from(await r.arrayBuffer()));
}

/** Serves a fetch handler; resolves with the server and its URL once listening. */
export async function serve(app: FetchHandler, host: string, port: number): Promise<{ server: Server; url: string }> {
  const server = createServer((req, res) => {
    const origin = `http://${req.headers.host ?? `${host}:${port}`}`;
    toRequest(req, origin)
      .then((r) => app(r))
      .then((r) => send(res, r))
      .catch((e: unknown) => {
        if (!res.headersSent) res.writeHead(500, { "content-type": "text/plain" });
        res.end(`internal error: ${(e as Error).message}\n`);
      });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve());
  });
  const addr = server.address();
  const actual = typeof addr === "object" && addr ? addr.port : port;
  const shown = host.includes(":") ? `[${host}]` : host;
  return { server, url: `http://${shown}:${actual}/` };
}

/** Starts the dashboard for a client (also used by `sqlstreams dev`). */
export async function startDashboard(client: SqlStreams, o: { host: string; port: number; readOnly: boolean; token?: string }): Promise<{ server: Server; url: string }> {
  if (!loopback(o.host) && !o.token) {
    throw new SqlStreamsError("SQL0060", `refusing to serve the dashboard on ${o.host} without authentication`, { host: o.host });
  }
  return serve(createDashboard({ client, readOnly: o.readOnly, ...(o.token ? { token: o.token } : {}) }), o.host, o.port);
}

export async function dashboard(ctx: Ctx, v: Values): Promise<number> {
  const host = typeof v.host === "string" ? v.host : "127.0.0.1";
  const p = typeof v.port === "string" ? v.port : String(DASHBOARD_PORT);
  if (!/^[0-9]{1,5}$/.test(p) || Number(p) > 65_535) throw usageError(`--port must be 0 … 65535, got ${JSON.stringify(p)}`, "dashboard");
  const token = (typeof v.token === "string" ? v.token : undefined) ?? ctx.io.env.SQLSTREAMS_DASHBOARD_TOKEN ?? undefined;
  const client = ctx.client();
  await client.ready();
  const { server, url } = await startDashboard(client, { host, port: Number(p), readOnly: v["read-only"] === true, ...(token ? { token } : {}) });
  if (ctx.json) ctx.io.out(JSON.stringify({ url, readOnly: v["read-only"] === true, auth: token ? "token" : "none" }) + "\n");
  else ctx.print(`dashboard: ${url}${v["read-only"] === true ? " (read-only)" : ""}${token ? " (basic auth: any user, the token as password)" : ""}  — Ctrl-C to stop`);
  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
  });
  await new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeAllConnections();
  return 0;
}
