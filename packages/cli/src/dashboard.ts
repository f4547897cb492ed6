// `sqlstreams dashboard`: the operator dashboard of @sqlstreams/aws on node:http, on 127.0.0.1 by
// default. Every start has a token: a random one printed in the URL (`/?token=…`, which sets a
// cookie), or one configured in the environment or a file; the server answers only its own Host
// names, which defeats DNS rebinding. Beyond loopback it needs a configured token of 32+
// characters (SQL0060) and TLS in front (docs/guide/operations.md#dashboard).
import { randomBytes } from "node:crypto";
import { lookup } from "node:dns/promises";
import { readFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { isIP } from "node:net";
import { createDashboard, type FetchHandler } from "@sqlstreams/aws";
import { SqlStreamsError, type SqlStreams } from "@sqlstreams/core";
import type { CommandContext, Values } from "./context.js";
import { usageError } from "./errors.js";

export const DASHBOARD_PORT = 5480;
export const MIN_TOKEN_LENGTH = 32;

const METHODS = new Set(["GET", "HEAD", "POST"]);

function loopbackAddress(a: string): boolean {
  if (isIP(a) === 4) return a.startsWith("127.");
  const v6 = a.toLowerCase();
  return v6 === "::1" || /^::ffff:127\./.test(v6);
}

/**
 * What `--host` binds to and whether that is loopback: an IP literal as given, a name by what
 * it resolves to (every address loopback, or it counts as beyond loopback). `127.evil.example`
 * is a name like any other.
 */
export async function resolveHost(host: string): Promise<{ address: string; loopback: boolean }> {
  const literal = host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host;
  if (isIP(literal)) return { address: literal, loopback: loopbackAddress(literal) };
  if (!/^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$/.test(host)) {
    throw new SqlStreamsError("SQL0091", `--host ${JSON.stringify(host)} is neither an IP address nor a host name`, { host });
  }
  let found: { address: string }[];
  try {
    found = await lookup(host, { all: true, verbatim: true });
  } catch (e) {
    throw new SqlStreamsError("SQL0091", `--host ${host} does not resolve (${(e as { code?: string }).code ?? (e as Error).message}); give an IP address`, { host });
  }
  if (found.length === 0) throw new SqlStreamsError("SQL0091", `--host ${host} resolves to no address`, { host });
  return { address: found[0].address, loopback: found.every((f) => loopbackAddress(f.address)) };
}

function bracket(h: string): string {
  return h.includes(":") && !h.startsWith("[") ? `[${h}]` : h;
}

/** The Host header values the server answers on `port`: the loopback names, the bound address and any configured names. */
export function hostAllowlist(host: string, address: string, port: number, names: string[] = []): string[] {
  const out = new Set<string>();
  for (const n of ["127.0.0.1", "localhost", "[::1]", bracket(address), bracket(host), ...names.map(bracket)]) {
    out.add(`${n.toLowerCase()}:${port}`);
    if (port === 80) out.add(n.toLowerCase());
  }
  return [...out];
}

async function toRequest(req: IncomingMessage, base: string): Promise<Request> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > 1_000_000) throw new SqlStreamsError("SQL0090", "request body larger than 1 MB");
    chunks.push(c as Buffer);
  }
  const headers = new Headers();
  for (const [k, v] of Object.entries(req.headers)) {
    if (Array.isArray(v)) for (const x of v) headers.append(k, x);
    else if (v !== undefined) headers.set(k, v);
  }
  const method = req.method ?? "GET";
  // The URL is built on the bound address, never on the client's Host (checked by the app).
  return new Request(new URL(`${base}${req.url ?? "/"}`), { method, headers, ...(method === "GET" || method === "HEAD" ? {} : { body: Buffer.concat(chunks) }) });
}

async function send(res: ServerResponse, r: Response): Promise<void> {
  const headers: Record<string, string | string[]> = {};
  r.headers.forEach((v, k) => {
    headers[k] = k === "set-cookie" ? [...((headers[k] as string[] | undefined) ?? []), v] : v;
  });
  res.writeHead(r.status, headers);
  res.end(Buffer.from(await r.arrayBuffer()));
}

function refuse(res: ServerResponse, status: number, text: string): void {
  res.writeHead(status, { "content-type": "text/plain; charset=utf-8", "cache-control": "no-store", ...(status === 405 ? { allow: "GET, HEAD, POST" } : {}) });
  res.end(`error SQL0090: ${text}\n`);
}

/**
 * Serves a fetch handler made for the port it listens on; resolves with the server and its
 * address once listening.
 */
export async function serve(make: (port: number) => FetchHandler, address: string, port: number): Promise<{ server: Server; port: number }> {
  const bound: { app?: FetchHandler; base: string } = { base: "" };
  const throttle = new AuthThrottle();
  const server = createServer((req, res) => {
    const app = bound.app;
    if (app === undefined) return refuse(res, 503, "starting");
    if (!METHODS.has(req.method ?? "")) return refuse(res, 405, `method ${JSON.stringify(req.method)} not allowed`);
    if (!(req.url ?? "/").startsWith("/")) return refuse(res, 400, "the request target must be a path");
    const from = req.socket.remoteAddress ?? "?";
    const wait = throttle.blockedFor(from);
    if (wait > 0) {
      res.writeHead(429, { "content-type": "text/plain; charset=utf-8", "retry-after": String(Math.ceil(wait / 1_000)) });
      return res.end(`error SQL0090: too many requests without the token from ${from}; try again in ${Math.ceil(wait / 1_000)} s\n`);
    }
    toRequest(req, bound.base)
      .then((r) => app(r))
      .then((r) => {
        if (r.status === 401) throttle.failed(from);
        return send(res, r);
      })
      .catch((e: unknown) => {
        if (res.headersSent) return res.end();
        if (e instanceof SqlStreamsError || e instanceof TypeError) return refuse(res, 400, (e as Error).message);
        res.writeHead(500, { "content-type": "text/plain" });
        res.end("internal error\n");
      });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, address, () => resolve());
  });
  const addr = server.address();
  const actual = typeof addr === "object" && addr ? addr.port : port;
  bound.base = `http://${bracket(address)}:${actual}`;
  bound.app = make(actual);
  return { server, port: actual };
}

/** Failed token attempts per client address: past AUTH_FAILURES in AUTH_WINDOW_MS, 429 until the window ends. */
export const AUTH_FAILURES = 10;
export const AUTH_WINDOW_MS = 60_000;

class AuthThrottle {
  private readonly seen = new Map<string, { failures: number; until: number }>();

  /** ms this address must wait (monotonic clock), 0 when it may try. */
  blockedFor(from: string): number {
    const e = this.seen.get(from);
    if (!e) return 0;
    const left = e.until - performance.now();
    if (left <= 0) {
      this.seen.delete(from);
      return 0;
    }
    return e.failures >= AUTH_FAILURES ? left : 0;
  }

  failed(from: string): void {
    const now = performance.now();
    const e = this.seen.get(from);
    if (e && e.until > now) e.failures++;
    else {
      // Bounded memory: a flood of addresses forgets the oldest first.
      if (this.seen.size >= 10_000) this.seen.delete(this.seen.keys().next().value as string);
      this.seen.set(from, { failures: 1, until: now + AUTH_WINDOW_MS });
    }
  }
}

/** Refuses a short token, and a host beyond loopback without a configured token, before anything starts. */
export async function checkDashboard(o: { host: string; token?: string }): Promise<{ address: string; loopback: boolean }> {
  if (o.token !== undefined && o.token.length < MIN_TOKEN_LENGTH) {
    throw new SqlStreamsError("SQL0091", `the dashboard token has ${o.token.length} characters; it needs at least ${MIN_TOKEN_LENGTH}`, { length: o.token.length });
  }
  const r = await resolveHost(o.host);
  if (!r.loopback && o.token === undefined) {
    throw new SqlStreamsError(
      "SQL0060",
      `refusing to serve the dashboard on ${o.host} without a configured token: set SQLSTREAMS_DASHBOARD_TOKEN or --token-file (${MIN_TOKEN_LENGTH}+ characters), and put TLS in front (the token travels with every request)`,
      { host: o.host },
    );
  }
  return r;
}

export interface StartDashboardOptions {
  host: string;
  port: number;
  readOnly: boolean;
  /** A configured token (environment or file); default a random one for this start, shown in `url`. */
  token?: string;
  /** Further Host names the server answers (a proxy's or a DNS name). */
  allowHosts?: string[];
}

/**
 * Starts the dashboard for a client (also used by `sqlstreams dev`). `url` is the one to open:
 * with the per-start token in it when the token was generated here (never a configured one).
 */
export async function startDashboard(client: SqlStreams, o: StartDashboardOptions): Promise<{ server: Server; url: string; tokenShown: boolean }> {
  const { address } = await checkDashboard(o);
  const token = o.token ?? randomBytes(32).toString("base64url");
  const { server, port } = await serve(
    (p) => createDashboard({ client, readOnly: o.readOnly, token, hosts: hostAllowlist(o.host, address, p, o.allowHosts) }),
    address,
    o.port,
  );
  const shown = `http://${bracket(isIP(address) && isIP(o.host.replace(/^\[|\]$/g, "")) ? address : o.host)}:${port}/`;
  return { server, url: o.token === undefined ? `${shown}?token=${token}` : shown, tokenShown: o.token === undefined };
}

/** The configured token: SQLSTREAMS_DASHBOARD_TOKEN or --token-file, never argv (visible in `ps`). */
function configuredToken(ctx: CommandContext, v: Values): string | undefined {
  if (v.token !== undefined) {
    throw new SqlStreamsError("SQL0091", "--token on the command line is visible to every user in `ps`: put it in SQLSTREAMS_DASHBOARD_TOKEN or a file given with --token-file");
  }
  if (typeof v["token-file"] === "string") {
    let text: string;
    try {
      text = readFileSync(v["token-file"], "utf8");
    } catch (e) {
      throw new SqlStreamsError("SQL0091", `--token-file ${v["token-file"]}: ${(e as { code?: string }).code ?? (e as Error).message}`);
    }
    return text.trim();
  }
  const env = ctx.io.env.SQLSTREAMS_DASHBOARD_TOKEN;
  return env === undefined || env === "" ? undefined : env;
}

export async function dashboard(ctx: CommandContext, v: Values): Promise<number> {
  const host = typeof v.host === "string" ? v.host : "127.0.0.1";
  const p = typeof v.port === "string" ? v.port : String(DASHBOARD_PORT);
  if (!/^[0-9]{1,5}$/.test(p) || Number(p) > 65_535) throw usageError(`--port must be 0 … 65535, got ${JSON.stringify(p)}`, "dashboard");
  const token = configuredToken(ctx, v);
  const allowHosts = typeof v["allow-host"] === "string" ? v["allow-host"].split(",").map((x) => x.trim()).filter((x) => x !== "") : [];
  await checkDashboard({ host, ...(token !== undefined ? { token } : {}) });
  const client = ctx.client();
  await client.ready();
  const readOnly = v["read-only"] === true;
  const { server, url } = await startDashboard(client, { host, port: Number(p), readOnly, allowHosts, ...(token !== undefined ? { token } : {}) });
  if (ctx.json) ctx.io.out(JSON.stringify({ url, readOnly, auth: token !== undefined ? "configured token" : "token in url" }) + "\n");
  else ctx.print(`dashboard: ${url}${readOnly ? " (read-only)" : ""}${token !== undefined ? " (token from SQLSTREAMS_DASHBOARD_TOKEN / --token-file)" : ""}  — Ctrl-C to stop`);
  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
  });
  await new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeAllConnections();
  return 0;
}
