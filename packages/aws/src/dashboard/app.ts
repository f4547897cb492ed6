// The operator dashboard as one fetch handler (Request → Response): served by `sqlstreams
// dashboard` on node:http, or behind a Lambda Function URL (createDashboardHandler). Server-
// rendered HTML; state changes are POSTs guarded by a double-submit token and the browser's
// Origin / Sec-Fetch-Site headers; read-only mode refuses them (docs/guide/operations.md#dashboard).
import { randomBytes } from "node:crypto";
import { undisplayablePayload } from "@sqlstreams/core/internal";
import { SqlStreamsError, isSqlStreamsError, type FailureFilter, type Progress, type SqlStreams } from "@sqlstreams/core";
import { SCRIPT_HASH, age, esc, page, postForm, table } from "./html.js";
import { BLOCKED_ON_PAGE, blockedSection } from "./blocked.js";
import { allowedOrigin, authCookieName, authorized, cookie, sameOrigin, sameSecret } from "./guard.js";

export interface DashboardOptions {
  client: SqlStreams;
  /** Refuse every action (SQL0061); pages hide their buttons. */
  readOnly?: boolean;
  /**
   * When set, every request needs it: opening any page with `?token=…` once (which sets a cookie
   * and redirects), HTTP basic auth (any user, this password) or `Authorization: Bearer`.
   */
  token?: string;
  /**
   * The `Host` header values (`name:port`, as a browser sends them) the app answers; any other
   * gets 421 (SQL0090), which defeats DNS rebinding. `Origin` is checked against the same list.
   * Default: none checked, Origin compared with Host (behind a Function URL, AWS routes by Host).
   */
  hosts?: string[];
  /** Path prefix the app is mounted under (e.g. "/ops"); default none. */
  basePath?: string;
}

export type FetchHandler = (req: Request) => Promise<Response>;

const CSRF_COOKIE = "sqlstreams_csrf";
const STATUSES = ["dead", "expired", "ready", "deferred", "inflight"] as const;
const PAGE = 50;
/** Rows one bulk redrive or discard acts on. */
const BULK_LIMIT = 10_000;

/** A request the dashboard refuses with a 4xx; shown as SQL0090. */
class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** Codes that say the database could not be used now, not that the request was wrong: 503 and a retry. */
const UNAVAILABLE = ["SQL0032", "SQL0033", "SQL0050"];
/** Seconds a 503 asks the client to wait (the page's own refresh is 5 s). */
const RETRY_AFTER_S = "5";

/** The status and the coded text of a failed request: 4xx for anything the request got wrong, 503 for an unavailable database, 500 for the rest. */
function describe(e: unknown): { status: number; message: string } {
  if (e instanceof HttpError) return { status: e.status, message: `SQL0090 ${e.message}` };
  if (isSqlStreamsError(e)) {
    const status = ["SQL0009", "SQL0010", "SQL0058"].includes(e.code) ? 404 : e.code === "SQL0061" ? 403 : UNAVAILABLE.includes(e.code) ? 503 : 400;
    return { status, message: e.message };
  }
  const code = (e as { code?: unknown } | null)?.code;
  // Class 22, data exception: a value from the request Postgres cannot take (an id beyond bigint, a
  // timestamp out of range, an unsupported escape in a JSON filter).
  if (typeof code === "string" && code.startsWith("22")) return { status: 400, message: `SQL0090 the request carries a value the database cannot take: ${(e as Error).message}` };
  return { status: 500, message: e instanceof Error ? e.message : String(e) };
}

/**
 * The banners an action's redirect may show: fixed texts, filled with numbers only (`?done=code&n=1,0`),
 * so a link cannot make the dashboard say words of someone else's choosing.
 */
const BANNERS = {
  redriven: (n: string[]) => (n.length === 2 ? `redrove ${n[0]} dead message(s)${n[1] !== "0" ? `, skipped ${n[1]}` : ""}` : null),
  discarded: (n: string[]) => (n.length === 2 ? `discarded ${n[0]} dead message(s)${n[1] !== "0" ? `, skipped ${n[1]}` : ""}; audit rows written` : null),
  paused: (n: string[]) => (n.length === 0 ? "paused" : null),
  resumed: (n: string[]) => (n.length === 0 ? "resumed" : null),
  seek: (n: string[]) => (n.length === 5 ? `seek: claimed ${n[0]} → ${n[1]}, committed ${n[2]} → ${n[3]}; ${n[4]} exception row(s) above the new position deleted` : null),
} as const;

function banner(u: URL): string | null {
  const code = u.searchParams.get("done") ?? "";
  if (!Object.hasOwn(BANNERS, code)) return null;
  const raw = u.searchParams.get("n") ?? "";
  const n = raw === "" ? [] : raw.split(",");
  if (n.some((x) => !/^[0-9]{1,20}$/.test(x))) return null;
  return BANNERS[code as keyof typeof BANNERS](n);
}

/** U+0000 can be neither stored nor compared in Postgres text: refused in any parameter. */
function noNul(params: URLSearchParams): void {
  for (const [k, v] of params) if (k.includes("\u0000") || v.includes("\u0000")) throw new HttpError(400, `parameter ${JSON.stringify(k)} contains U+0000`);
}

/** A message id as Postgres stores it: a bigint, 0 … 9223372036854775807. */
function messageId(x: string, what: string): string {
  if (!/^[0-9]{1,19}$/.test(x) || BigInt(x) > 9_223_372_036_854_775_807n) throw new HttpError(400, `${what} must be a message id (0 … 9223372036854775807), got ${JSON.stringify(x.slice(0, 40))}`);
  return x;
}

function html(body: string, status = 200, headers: Record<string, string> = {}): Response {
  return new Response(body, {
    status,
    headers: {
      "content-type": "text/html; charset=utf-8",
      "cache-control": "no-store",
      "x-frame-options": "DENY",
      "x-content-type-options": "nosniff",
      "referrer-policy": "same-origin",
      "content-security-policy": `default-src 'none'; style-src 'unsafe-inline'; script-src '${SCRIPT_HASH}'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'`,
      ...headers,
    },
  });
}

function plain(status: number, text: string, headers: Record<string, string> = {}): Response {
  return new Response(`${text}\n`, { status, headers: { "content-type": "text/plain; charset=utf-8", "cache-control": "no-store", ...headers } });
}

export function createDashboard(o: DashboardOptions): FetchHandler {
  const base = (o.basePath ?? "").replace(/\/+$/, "");
  const readOnly = o.readOnly === true;
  const hosts = o.hosts ? new Set(o.hosts.map((h) => h.toLowerCase())) : undefined;
  return async (req) => {
    const url = new URL(req.url);
    // DNS rebinding: a page of attacker.example that now resolves to this machine sends its own Host.
    if (hosts && !hosts.has((req.headers.get("host") ?? "").toLowerCase())) {
      return plain(421, "error SQL0090: this dashboard does not answer for that Host header; open it by the URL it printed");
    }
    // Another origin's page (another port, another name) may neither read nor act, GET or POST.
    const origin = req.headers.get("origin");
    if (origin !== null && origin !== "null" && !allowedOrigin(origin, req, url, hosts)) {
      return plain(403, "error SQL0061: request from another origin refused");
    }
    if (o.token !== undefined) {
      const given = url.searchParams.get("token");
      if (given !== null && (req.method === "GET" || req.method === "HEAD") && sameSecret(given, o.token)) {
        // The printed URL's token becomes a cookie; the redirect drops it from the address bar.
        url.searchParams.delete("token");
        const secure = url.protocol === "https:" ? "; Secure" : "";
        return new Response(null, {
          status: 303,
          headers: {
            location: `${url.pathname}${url.search}`,
            "cache-control": "no-store",
            "referrer-policy": "no-referrer",
            "set-cookie": `${authCookieName(o.token)}=${encodeURIComponent(o.token)}; Path=${base || "/"}; HttpOnly; SameSite=Strict${secure}`,
          },
        });
      }
      if (!authorized(req, o.token)) {
        return plain(401, "authentication required: open the dashboard with the URL it printed (…/?token=…), or send the token as the basic-auth password", { "www-authenticate": 'Basic realm="sqlstreams dashboard", charset="UTF-8"' });
      }
    }
    // One random token per browser, in a cookie the page's forms repeat (double submit).
    const existing = cookie(req, CSRF_COOKIE);
    const csrf = existing && /^[A-Za-z0-9_-]{20,64}$/.test(existing) ? existing : randomBytes(18).toString("base64url");
    const setCookie: Record<string, string> = existing === csrf ? {} : { "set-cookie": `${CSRF_COOKIE}=${csrf}; Path=${base || "/"}; HttpOnly; SameSite=Strict${url.protocol === "https:" ? "; Secure" : ""}` };
    let path = url.pathname;
    if (base && path.startsWith(base)) path = path.slice(base.length);
    if (path === "") path = "/";
    const ctx: View = { client: o.client, base, readOnly, csrf, url };
    try {
      if (req.method === "POST") {
        const r = await action(ctx, req, path, existing);
        return r instanceof Response ? r : html(r, 200, setCookie);
      }
      if (req.method !== "GET" && req.method !== "HEAD") throw new HttpError(405, `method ${req.method} not allowed`);
      noNul(url.searchParams);
      if (path === "/") return html(await overview(ctx), 200, setCookie);
      if (path === "/group") return html(await groupPage(ctx), 200, setCookie);
      if (path === "/message") return html(await messagePage(ctx), 200, setCookie);
      if (path === "/healthz") return new Response("ok\n", { headers: { "content-type": "text/plain" } });
      throw new HttpError(404, `no page ${path}`);
    } catch (e) {
      const { status, message } = describe(e);
      const headers = status === 503 ? { ...setCookie, "retry-after": RETRY_AFTER_S } : setCookie;
      return html(page({ title: "error", base, readOnly, error: message }, `<p><a href="${esc(base)}/">Back to the overview</a></p>`), status, headers);
    }
  };
}

/**
 * A line chart of one series as inline SVG (no script): `points` are [epoch ms, value], oldest
 * first. The label names it for screen readers; the last value is printed beside it.
 */
function chart(label: string, points: [number, number][], unit: string): string {
  if (points.length < 2) return `<p class="muted">${esc(label)}: not enough samples yet (maintain() writes one per run).</p>`;
  const w = 360;
  const h = 60;
  const xs = points.map((p) => p[0]);
  const ys = points.map((p) => p[1]);
  const x0 = Math.min(...xs);
  const dx = Math.max(1, Math.max(...xs) - x0);
  const top = Math.max(1, ...ys);
  const path = points.map((p, i) => `${i === 0 ? "M" : "L"}${(((p[0] - x0) / dx) * w).toFixed(1)},${(h - (Math.max(0, p[1]) / top) * h).toFixed(1)}`).join(" ");
  const last = ys[ys.length - 1];
  return `<figure style="display:inline-block;margin:0 2rem 1rem 0"><svg role="img" aria-label="${esc(`${label}: last ${last} ${unit}, peak ${top}`)}" width="${w}" height="${h + 2}" viewBox="0 -1 ${w} ${h + 2}" style="border-bottom:1px solid #999">
<path d="${path}" fill="none" stroke="#0b57d0" stroke-width="2"/></svg><figcaption>${esc(label)}: ${esc(last)} ${esc(unit)} now, peak ${esc(top)} (${esc(age(dx))})</figcaption></figure>`;
}

/** Lag and throughput over time from the progress history (docs/protocol/data-model.md#progress-history). */
async function historyCharts(v: View, stream: string, group: string): Promise<string> {
  const samples = await v.client.stream(stream).consumer(group).history({ limit: 288 });
  const lag: [number, number][] = samples.map((x) => [x.sampledAt.getTime(), Number(x.lag)]);
  const rate: [number, number][] = [];
  for (let i = 1; i < samples.length; i++) {
    const dt = (samples[i].sampledAt.getTime() - samples[i - 1].sampledAt.getTime()) / 60_000;
    const d = Number(BigInt(samples[i].committed) - BigInt(samples[i - 1].committed));
    if (dt > 0) rate.push([samples[i].sampledAt.getTime(), Math.max(0, Math.round(d / dt))]);
  }
  return `<section aria-labelledby="history-h"><h2 id="history-h">Over time</h2>${chart("Lag", lag, "ids")}${chart("Throughput", rate, "messages/min")}</section>`;
}

/** The first line of an error, the rest (a stack) behind a disclosure. */
function errorCell(e: string | null): string {
  if (!e) return "-";
  const cut = e.search(/\s+at\s+\S+\s+\(|\s+at\s+\//);
  if (cut < 0 && e.length <= 300) return `<div class="err">${esc(e)}</div>`;
  const head = (cut < 0 ? e : e.slice(0, cut)).slice(0, 300);
  return `<div class="err">${esc(head)}<details><summary>full error</summary><pre>${esc(e)}</pre></details></div>`;
}

interface View {
  client: SqlStreams;
  base: string;
  readOnly: boolean;
  csrf: string;
  url: URL;
}

function link(v: View, path: string, params: Record<string, string | undefined>): string {
  const q = new URLSearchParams();
  for (const [k, x] of Object.entries(params)) if (x !== undefined && x !== "") q.set(k, x);
  const s = q.toString();
  return `${v.base}${path}${s ? `?${s}` : ""}`;
}

async function overview(v: View): Promise<string> {
  const pairs = await v.client.consumerGroups();
  const progress: Progress[] = [];
  for (const p of pairs) progress.push(await v.client.stream(p.stream).consumer(p.group).progress());
  const rows = progress.map((p) => [
    esc(p.stream),
    `<a href="${esc(link(v, "/group", { stream: p.stream, group: p.group }))}">${esc(p.group)}</a>`,
    esc(p.head), esc(p.committed), esc(p.lag),
    esc(`${p.openLeases}/${p.expiredLeases}`),
    String(p.exceptions.ready), String(p.exceptions.deferred), String(p.exceptions.inflight),
    p.exceptions.dead > 0 ? `<span class="bad">${p.exceptions.dead}</span>` : "0",
    String(p.exceptions.superseded),
    esc(age(p.oldestUnresolvedAgeMs)),
    p.paused ? '<span class="warn">paused</span>' : "no",
    p.retention.held ? esc(`${p.retention.heldBy ?? "?"}${p.retention.heldForMs !== null ? ` for ${age(p.retention.heldForMs)}` : ""}`) : "-",
  ]);
  const streams = [...new Set(pairs.map((p) => p.stream))];
  const lookup = streams.length === 0 ? "" : `<form method="get" action="${esc(v.base)}/message"><fieldset><legend>Find a message</legend>
<label for="m-stream">Stream</label><select id="m-stream" name="stream">${streams.map((s) => `<option>${esc(s)}</option>`).join("")}</select>
<label for="m-id">Id</label><input id="m-id" name="id" inputmode="numeric" size="10">
<label for="m-key">or key</label><input id="m-key" name="key" size="20">
<button type="submit">Inspect</button></fieldset></form>`;
  const dead = progress.filter((p) => p.exceptions.dead > 0).length;
  return page(
    { title: "overview", base: v.base, readOnly: v.readOnly, flash: banner(v.url), refresh: true },
    `<h1>Streams and consumer groups</h1>
<p>${progress.length} group(s)${dead > 0 ? `; <span class="bad">${dead} with dead messages</span> (lag 0 with dead rows is not success)` : ""}.</p>
${table(
  "Groups",
  ["Stream", "Group", { text: "Head", num: true }, { text: "Committed", num: true }, { text: "Lag", num: true }, { text: "Leases open/expired", num: true },
    { text: "Ready", num: true }, { text: "Deferred", num: true }, { text: "Inflight", num: true }, { text: "Dead", num: true }, { text: "Superseded", num: true },
    "Oldest unresolved", "Paused", "Holds retention"],
  rows,
)}
<p class="muted" id="history">Lag and throughput over time: on each group's page (from the progress history maintain() records).</p>
${lookup}`,
  );
}

type Filter = Omit<FailureFilter, "status" | "limit" | "offset" | "after" | "beforeCursor">;

function filterOf(u: URL): { status: (typeof STATUSES)[number]; filter: Filter; page: { after?: string; beforeCursor?: string }; raw: Record<string, string> } {
  const g = (k: string) => u.searchParams.get(k) ?? "";
  const status = (STATUSES as readonly string[]).includes(g("status")) ? (g("status") as (typeof STATUSES)[number]) : "dead";
  const filter: Filter = {};
  if (g("error")) filter.errorContains = g("error");
  if (g("key")) filter.key = g("key");
  if (g("since")) filter.since = g("since");
  if (g("payload")) {
    try {
      filter.payloadContains = JSON.parse(g("payload")) as unknown;
    } catch {
      throw new HttpError(400, `payload filter must be JSON, e.g. {"customer":7}`);
    }
  }
  // Keyset paging: the rows after (older than) or before (newer than) a row's cursor.
  const page = g("after") ? { after: g("after") } : g("before") ? { beforeCursor: g("before") } : {};
  return { status, filter, page, raw: { status, error: g("error"), key: g("key"), since: g("since"), payload: g("payload") } };
}

function need(u: URL | URLSearchParams, k: string): string {
  const x = (u instanceof URL ? u.searchParams : u).get(k);
  if (!x) throw new HttpError(400, `missing ${k}`);
  return x;
}

/** A payload as indented JSON, or the sentence saying it nests too deep to show (and how to fetch it). */
function payloadCell(v: View, stream: string, id: string, payload: unknown, indent: number): string {
  const not = undisplayablePayload(payload, { schema: v.client.schema, stream, id });
  return not === null ? `<pre>${esc(JSON.stringify(payload, null, indent))}</pre>` : `<p class="warn">${esc(not)}</p>`;
}

async function groupPage(v: View): Promise<string> {
  const stream = need(v.url, "stream");
  const group = need(v.url, "group");
  const c = v.client.stream(stream).consumer(group);
  const p = await c.progress();
  const f = filterOf(v.url);
  // One row more than a page, read from the index after the cursor: whether a further page exists.
  const read = await c.failures({ ...f.filter, ...f.page, status: f.status, limit: PAGE + 1 });
  const backward = f.page.beforeCursor !== undefined;
  const further = read.length > PAGE;
  const rows = further ? (backward ? read.slice(1) : read.slice(0, PAGE)) : read;
  const older = backward || further;
  const newer = f.page.after !== undefined || (backward && further);
  // Counted no further than the bulk actions reach: above it the page says "10,000+".
  const total = await c.countFailures({ ...f.filter, status: f.status }, BULK_LIMIT);
  const capped = total > BULK_LIMIT;
  const totalText = capped ? `${BULK_LIMIT.toLocaleString("en-US")}+` : total.toLocaleString("en-US");
  const blocked = p.blockedKeys > 0 ? await c.blockedKeys({ limit: BLOCKED_ON_PAGE }) : [];
  const sg = { stream, group };
  const now = Date.now();
  const actions = (id: string) =>
    v.readOnly || (f.status !== "dead" && f.status !== "expired")
      ? ""
      : `${postForm(`${v.base}/action/redrive`, v.csrf, { ...sg, ids: id }, "Redrive", { ariaLabel: `Redrive message ${id}` })} ${postForm(`${v.base}/action/discard`, v.csrf, { ...sg, ids: id }, "Discard", { danger: true, ariaLabel: `Discard message ${id}` })}`;
  const body = rows.map((r) => [
    `<a href="${esc(link(v, "/message", { stream, id: r.messageId }))}">${esc(r.messageId)}</a>`,
    esc(r.key ?? "-"),
    `<span class="${r.status === "dead" ? "bad" : "warn"}">${esc(r.status)}</span>`,
    String(r.attempts), String(r.delays),
    esc(`${age(now - r.updatedAt.getTime())} ago`),
    payloadCell(v, stream, r.messageId, r.payload, 1),
    errorCell(r.lastError),
    actions(r.messageId),
  ]);
  const raw = f.raw;
  const filterForm = `<form method="get" action="${esc(v.base)}/group"><fieldset><legend>Filter exception rows</legend>
<input type="hidden" name="stream" value="${esc(stream)}"><input type="hidden" name="group" value="${esc(group)}">
<label for="f-status">Status</label><select id="f-status" name="status">${STATUSES.map((s) => `<option${s === f.status ? " selected" : ""}>${s}</option>`).join("")}</select>
<label for="f-error">Error contains</label><input id="f-error" name="error" value="${esc(raw.error)}" size="16">
<label for="f-key">Key</label><input id="f-key" name="key" value="${esc(raw.key)}" size="12">
<label for="f-since">Updated since</label><input id="f-since" name="since" value="${esc(raw.since)}" placeholder="2024-05-01T12:00Z" size="18">
<label for="f-payload">Payload contains (JSON)</label><input id="f-payload" name="payload" value="${esc(raw.payload)}" size="16">
<button type="submit">Apply</button></fieldset></form>`;
  const matching = { ...sg, error: raw.error, key: raw.key, since: raw.since, payload: raw.payload };
  // One action handles at most BULK_LIMIT rows: the labels say how many this press acts on.
  const many = capped;
  const howMany = many ? `${BULK_LIMIT.toLocaleString("en-US")} of the ${totalText} matching` : `all ${totalText} matching`;
  const bulk = v.readOnly || f.status !== "dead" || total === 0 ? "" : `<p>${postForm(`${v.base}/action/redrive`, v.csrf, { ...matching, all: "1" }, `Redrive ${howMany}`)} ${postForm(`${v.base}/action/discard`, v.csrf, { ...matching, all: "1" }, `Discard ${howMany}`, { danger: true })}${many ? ` <span class="muted">(at most ${BULK_LIMIT.toLocaleString("en-US")} a press; press again for more)</span>` : ""}</p>`;
  const controls = v.readOnly ? "" : `<fieldset><legend>Group</legend>
${p.paused ? postForm(`${v.base}/action/resume`, v.csrf, sg, "Resume") : postForm(`${v.base}/action/pause`, v.csrf, sg, "Pause")}
<form class="inline" method="post" action="${esc(v.base)}/action/seek"><input type="hidden" name="csrf" value="${esc(v.csrf)}"><input type="hidden" name="stream" value="${esc(stream)}"><input type="hidden" name="group" value="${esc(group)}">
<label for="s-id">Seek to id</label><input id="s-id" name="id" inputmode="numeric" size="10"> <label for="s-time">or time</label><input id="s-time" name="time" size="20" placeholder="2024-05-01T12:00Z">
<button type="submit">Seek…</button></form></fieldset>`;
  const next = older && rows.length > 0 ? `<a href="${esc(link(v, "/group", { ...sg, ...raw, after: rows[rows.length - 1].cursor }))}">Next page</a>` : "";
  const prev = newer && rows.length > 0 ? `<a href="${esc(link(v, "/group", { ...sg, ...raw, before: rows[0].cursor }))}">Previous page</a>` : "";
  return page(
    { title: `${stream} / ${group}`, base: v.base, readOnly: v.readOnly, flash: banner(v.url), refresh: true },
    `<h1>${esc(stream)} / ${esc(group)}</h1>
<p>head ${esc(p.head)}, committed ${esc(p.committed)}, lag ${esc(p.lag)}; ready ${p.exceptions.ready}, deferred ${p.exceptions.deferred}, inflight ${p.exceptions.inflight},
<span class="${p.exceptions.dead > 0 ? "bad" : ""}">dead ${p.exceptions.dead}</span>, superseded ${p.exceptions.superseded}, expired ${p.exceptions.expired}; oldest unresolved ${esc(age(p.oldestUnresolvedAgeMs))}; ${p.paused ? '<span class="warn">paused</span>' : "running"}; drains ${p.concurrency.running}${p.concurrency.max === null ? "" : ` of maxConcurrency ${p.concurrency.max} (${p.concurrency.capped} capped polls)`}${p.concurrency.perKey > 1 ? `; keyConcurrency ${p.concurrency.perKey}` : ""}; ${p.rateLimit === null ? "no rate limit" : `rateLimit ${p.rateLimit.perSecond}/s, burst ${p.rateLimit.burst} (${p.rateLimit.limited} rate-limited claims)`}; ${p.blockedKeys} blocked key(s); ${p.scheduled.waiting} scheduled message(s) of the stream waiting${p.scheduled.nextDueAt === null ? "" : `, next due ${esc(p.scheduled.nextDueAt.toISOString())}`}.</p>
${await historyCharts(v, stream, group)}
${blockedSection(blocked, p.blockedKeys, (id) => link(v, "/message", { stream, id }))}
${controls}${filterForm}${bulk}
${table(`${f.status} rows ${total === 0 ? "" : `(${rows.length} shown of ${totalText} matching, newest first)`}`, [{ text: "Message", num: true }, "Key", "Status", { text: "Attempts", num: true }, { text: "Delays", num: true }, "Updated", "Payload", "Last error", v.readOnly ? "" : "Actions"], body)}
<p>${prev} ${next}</p>`,
  );
}

async function messagePage(v: View): Promise<string> {
  const stream = need(v.url, "stream");
  const rawId = v.url.searchParams.get("id") || undefined;
  const id = rawId === undefined ? undefined : messageId(rawId, "id");
  const key = v.url.searchParams.get("key") || undefined;
  if ((id === undefined) === (key === undefined)) throw new HttpError(400, "give a message id or a key");
  const found = await v.client.stream(stream).inspect(id !== undefined ? { id } : { key });
  const now = Date.now();
  const parts = found.map((m) => {
    const groups = m.groups.map((g) => {
      const r = g.row;
      const state = r === null
        ? { waiting: "not reached yet", claimed: "in a claimed range, not committed yet", resolved: "resolved" }[g.position as "waiting"]
        : `${r.status} exception row: attempts ${r.attempts}, delays ${r.delays}${r.status === "dead" || r.status === "superseded" || r.status === "expired" ? "" : `, runs ${r.canRunAfter.getTime() > now ? `in ${age(r.canRunAfter.getTime() - now)}` : "now"}`}`;
      const act = !v.readOnly && (r?.status === "dead" || r?.status === "expired")
        ? ` ${postForm(`${v.base}/action/redrive`, v.csrf, { stream, group: g.group, ids: m.id, back: "message" }, "Redrive")} ${postForm(`${v.base}/action/discard`, v.csrf, { stream, group: g.group, ids: m.id, back: "message" }, "Discard", { danger: true })}`
        : "";
      return `<section aria-labelledby="g-${esc(m.id)}-${esc(g.group)}"><h3 id="g-${esc(m.id)}-${esc(g.group)}"><a href="${esc(link(v, "/group", { stream, group: g.group }))}">${esc(g.group)}</a>: <span class="${r?.status === "dead" ? "bad" : r ? "warn" : "ok"}">${esc(state)}</span>${act}</h3>
${r?.lastError ? `<p>last error:</p>${errorCell(r.lastError)}` : ""}
${table(`Delivery log of ${g.group}`, ["At", { text: "Attempt", num: true }, "Status", "Error"], g.timeline.map((t) => [esc(t.at.toISOString()), String(t.attempt), esc(t.status), esc(t.error || "-")]))}</section>`;
    });
    return `<article><h2>Message ${esc(m.id)}</h2>
<p>key ${esc(m.key ?? "-")}; created ${esc(m.createdAt.toISOString())} (${esc(age(now - m.createdAt.getTime()))} ago); options ${esc(m.options === null ? "-" : JSON.stringify(m.options))}</p>
${payloadCell(v, stream, m.id, m.payload, 2)}${groups.join("\n")}</article>`;
  });
  return page({ title: `${stream} message ${id ?? key}`, base: v.base, readOnly: v.readOnly, flash: banner(v.url) }, `<h1>${esc(stream)}</h1>${parts.join("\n")}`);
}

async function action(v: View, req: Request, path: string, cookieToken: string | undefined): Promise<Response | string> {
  if (v.readOnly) throw new SqlStreamsError("SQL0061", "the dashboard is read-only: actions are disabled");
  const form = new URLSearchParams(await req.text());
  noNul(form);
  const sent = form.get("csrf") ?? "";
  if (!sameOrigin(req) || cookieToken === undefined || sent === "" || !sameSecret(sent, cookieToken)) {
    throw new SqlStreamsError("SQL0061", "the request failed the cross-site check (missing or wrong form token, or another site's page)");
  }
  const stream = need(form, "stream");
  const group = need(form, "group");
  const c = v.client.stream(stream).consumer(group);
  const back = (done: keyof typeof BANNERS, counts: (number | string | bigint)[] = []) => {
    const n = counts.length > 0 ? counts.map(String).join(",") : undefined;
    const to = form.get("back") === "message" && form.get("ids")
      ? link(v, "/message", { stream, id: form.get("ids") ?? undefined, done, n })
      : link(v, "/group", { stream, group, done, n });
    return new Response(null, { status: 303, headers: { location: to, "cache-control": "no-store" } });
  };
  const selector = () => {
    if (form.get("ids")) return { ids: (form.get("ids") as string).split(",").map((x) => messageId(x, "ids")) };
    const f = filterOf(new URL(`http://x/?${new URLSearchParams({ error: form.get("error") ?? "", key: form.get("key") ?? "", since: form.get("since") ?? "", payload: form.get("payload") ?? "" }).toString()}`)).filter;
    return { ...(f.errorContains ? { errorContains: f.errorContains } : {}), ...(f.key ? { key: f.key } : {}), ...(f.since ? { deadSince: f.since } : {}), ...(f.payloadContains !== undefined ? { payloadContains: f.payloadContains } : {}), all: true as const, limit: BULK_LIMIT };
  };
  switch (path) {
    case "/action/redrive": {
      const r = await c.redrive(selector(), { reason: "dashboard" });
      return back("redriven", [r.redriven, r.skipped]);
    }
    case "/action/discard": {
      const r = await c.discard(selector(), { reason: "dashboard" });
      return back("discarded", [r.discarded, r.skipped]);
    }
    case "/action/pause":
      await c.pause();
      return back("paused");
    case "/action/resume":
      await c.resume();
      return back("resumed");
    case "/action/seek": {
      const rawId = form.get("id") || undefined;
      const id = rawId === undefined ? undefined : messageId(rawId, "id");
      const time = form.get("time") || undefined;
      if ((id === undefined) === (time === undefined)) throw new HttpError(400, "seek needs an id or a time");
      if (form.get("confirm") !== "yes") return confirmSeek(v, stream, group, id, time);
      const r = await c.seek(id !== undefined ? { id } : { time }, { force: form.get("force") === "yes" });
      return back("seek", [r.previous.claimed, r.claimed, r.previous.committed, r.committed, r.deletedRows]);
    }
    default:
      throw new HttpError(404, `no action ${path}`);
  }
}

async function confirmSeek(v: View, stream: string, group: string, id: string | undefined, time: string | undefined): Promise<string> {
  const p = await v.client.stream(stream).consumer(group).progress();
  return page(
    { title: `seek ${stream} / ${group}`, base: v.base, readOnly: v.readOnly },
    `<h1>Seek ${esc(stream)} / ${esc(group)}?</h1>
<p>The group is at committed ${esc(p.committed)} (claimed ${esc(p.claimed)}, head ${esc(p.head)}). Seeking to ${id !== undefined ? `id ${esc(id)}` : `time ${esc(time)}`}
replays history for this group when it moves back, and skips messages when it moves forward. Exception rows above the new position are deleted.
${p.openLeases > 0 ? '<strong class="warn">The group holds leases: pause it and wait, or force (running polls lose their leases).</strong>' : ""}</p>
${postForm(`${v.base}/action/seek`, v.csrf, { stream, group, id, time, confirm: "yes", force: p.openLeases > 0 ? "yes" : undefined }, p.openLeases > 0 ? "Seek now (force)" : "Seek now", { danger: true })}
<p><a href="${esc(link(v, "/group", { stream, group }))}">Cancel</a></p>`,
  );
}
