// The operator commands: migrate, status, failures, redrive, seek, pause, resume, destroy,
// maintain. Each takes the parsed options and prints a table (or JSON with --json).
import { SqlStreamsError, type FailureRow, type Progress, type ProgressSample, type RedriveSelector } from "@sqlstreams/core";
import { registeredGroups, undisplayablePayload } from "@sqlstreams/core/internal";
import type { CommandContext, Values } from "./context.js";
import { deadSelector, failureFilter, progressLine, rateOption } from "./operate.js";
import { usageError } from "./errors.js";
import { required, str } from "./args.js";
import { age, escapeControls, paint, parseDuration, sparkline, table, truncate, yesNo } from "./format.js";

export type { Values } from "./context.js";


function int(v: Values, name: string, command: string, min: number, max: number): number | undefined {
  const x = str(v, name);
  if (x === undefined) return undefined;
  if (!/^[0-9]+$/.test(x) || Number(x) < min || Number(x) > max) {
    throw usageError(`--${name} must be an integer between ${min} and ${max}, got ${JSON.stringify(x)}`, command);
  }
  return Number(x);
}

/** Checks the control plane (SQL0003) and that the stream exists (SQL0009). */
async function knownStream(ctx: CommandContext, stream: string): Promise<void> {
  const names = await ctx.client().streamNames();
  if (!names.includes(stream)) {
    throw new SqlStreamsError("SQL0009", `stream ${JSON.stringify(stream)} is not registered`, { stream, registered: names });
  }
}

/** (stream, group) pairs of the deployment, optionally filtered; SQL0009/SQL0010 when a named one is missing. */
export async function listGroups(ctx: CommandContext, stream?: string, group?: string): Promise<{ stream: string; group: string }[]> {
  const client = ctx.client();
  const names = await client.streamNames();
  if (stream !== undefined && !names.includes(stream)) {
    throw new SqlStreamsError("SQL0009", `stream ${JSON.stringify(stream)} is not registered`, { stream, registered: names });
  }
  const rows = await registeredGroups(ctx.db(), ctx.common.schema, { stream, group });
  if (group !== undefined && rows.length === 0) {
    throw new SqlStreamsError(
      "SQL0010",
      stream !== undefined
        ? `consumer group ${JSON.stringify(group)} is not registered on stream ${stream}`
        : `no stream has a consumer group named ${JSON.stringify(group)}`,
      { stream, group },
    );
  }
  return rows;
}

export async function migrate(ctx: CommandContext): Promise<void> {
  const started = Date.now();
  const client = ctx.client();
  await client.migrate();
  const version = await client.controlPlaneVersion();
  const durationMs = Date.now() - started;
  if (ctx.json) ctx.printJson({ migrated: true, schema: client.schema, version, durationMs });
  else ctx.print(`migrated schema ${client.schema}: control plane at version ${version} (${durationMs} ms)`);
}

/** Drains running now, out of maxConcurrency and with the polls capped so far when it is set. */
function drains(p: Progress): string {
  const c = p.concurrency;
  return c.max === null ? String(c.running) : `${c.running}/${c.max} (${c.capped})`;
}

/** The group's rateLimit and how often its bucket held work back; "-" without one. */
function rate(p: Progress): string {
  const r = p.rateLimit;
  return r === null ? "-" : `${r.perSecond}/s (${r.limited})`;
}

async function statusOnce(ctx: CommandContext, stream: string | undefined, group: string | undefined, alert: Alert | null, frame: boolean): Promise<string[]> {
  const pairs = await listGroups(ctx, stream, group);
  const progress: Progress[] = [];
  for (const p of pairs) progress.push(await ctx.client().stream(p.stream).consumer(p.group).progress());
  const notes: string[] = [];
  for (const p of progress) {
    if (p.exceptions.dead > 0) {
      notes.push(
        `${p.stream}/${p.group}: ${p.exceptions.dead} dead message(s)${p.lag === "0" ? " — lag 0 with dead rows is not success" : ""}; ` +
          `see \`sqlstreams failures --stream ${p.stream} --group ${p.group}\``,
      );
    }
    if (p.paused) notes.push(`${p.stream}/${p.group} is paused: it consumes nothing and holds retention; \`sqlstreams resume --stream ${p.stream} --group ${p.group}\``);
    if (p.retention.held && p.retention.heldBy === p.group) {
      const since = p.retention.heldForMs === null ? "" : ` for ${age(p.retention.heldForMs)}`;
      notes.push(`${p.stream}/${p.group} holds the stream's retention${since}: expired messages above its position (floor ${p.retention.floor}) cannot be removed until it catches up`);
    }
    if (p.blockedKeys > 0) notes.push(`${p.stream}/${p.group}: ${p.blockedKeys} key(s) wait behind an unresolved earlier message; see \`sqlstreams blocked --stream ${p.stream} --group ${p.group}\``);
    if (p.scheduled.overdue > 0) notes.push(`${p.stream}: ${p.scheduled.overdue} scheduled message(s) past their due time, not yet moved to the log; the next poll of any group (or maintain) moves them`);
    if (p.expiredLeases > 0) notes.push(`${p.stream}/${p.group}: ${p.expiredLeases} expired lease(s) — a poll crashed or timed out; the next poll reclaims them`);
  }
  const alerts = alert === null ? [] : alertsOf(progress, alert);
  if (ctx.json) {
    const doc = { groups: progress, notes, ...(alert === null ? {} : { alerts }) };
    if (frame) ctx.io.out(JSON.stringify({ time: new Date().toISOString(), ...doc }) + "\n");
    else ctx.printJson(doc);
    return alerts;
  }
  const out: string[] = [];
  if (progress.length === 0) {
    out.push(stream ? `stream ${stream} has no consumer groups` : "no consumer groups registered");
  } else {
    const c = ctx.colour;
    out.push(
    table(
      ["STREAM", "GROUP", "HEAD", "COMMITTED", "LAG", "LEASES", "READY", "DEFERRED", "INFLIGHT", "DEAD", "SUPERSEDED", "EXPIRED", "OLDEST", "PAUSED", "DRAINS", "RATE", "BLOCKED", "SCHEDULED"],
      progress.map((p) => [
        p.stream, p.group, p.head, p.committed, p.lag, `${p.openLeases}/${p.expiredLeases}`,
        String(p.exceptions.ready), String(p.exceptions.deferred), String(p.exceptions.inflight),
        p.exceptions.dead > 0 ? paint(c, "red", String(p.exceptions.dead)) : String(p.exceptions.dead),
        String(p.exceptions.superseded), String(p.exceptions.expired), age(p.oldestUnresolvedAgeMs), p.paused ? paint(c, "yellow", "yes") : yesNo(p.paused),
        drains(p), rate(p), p.blockedKeys > 0 ? paint(c, "yellow", String(p.blockedKeys)) : "0", String(p.scheduled.waiting),
      ]),
    ),
    );
    out.push("LEASES = open/expired claim leases; OLDEST = age of the oldest unresolved message; DRAINS = running/maxConcurrency (capped polls); RATE = rateLimit per second (rate-limited claims); BLOCKED = keys waiting behind an unresolved message; SCHEDULED = the stream's messages waiting for their due time");
    for (const n of notes) out.push(`note: ${n}`);
  }
  for (const a of alerts) out.push(paint(ctx.colour, "red", `alert: ${a}`));
  if (frame && ctx.io.isTTY) ctx.io.out("\u001b[H\u001b[2J");
  if (frame) out.unshift(`${new Date().toISOString()}  (refreshing; Ctrl-C to stop)`);
  ctx.print(out.join("\n"));
  return alerts;
}

/**
 * `status --history`: per group, sparklines of lag, throughput (ids committed per minute between
 * samples) and dead rows over the samples maintain() wrote (docs/protocol/data-model.md#progress-history).
 */
async function history(ctx: CommandContext, stream: string | undefined, group: string | undefined, v: Values): Promise<void> {
  const samples = int(v, "samples", "status", 2, 5_000) ?? 48;
  const sinceText = str(v, "since");
  let since: Date | undefined;
  if (sinceText !== undefined) {
    const ms = parseDuration(sinceText);
    if (ms === null) throw usageError(`--since must be a duration such as 1h, 6h or 7d, got ${JSON.stringify(sinceText)}`, "status");
    since = new Date(Date.now() - ms);
  }
  const pairs = await listGroups(ctx, stream, group);
  const out: { stream: string; group: string; samples: ProgressSample[] }[] = [];
  for (const p of pairs) {
    const h = await ctx.client().stream(p.stream).consumer(p.group).history({ limit: samples, ...(since ? { since } : {}) });
    out.push({ stream: p.stream, group: p.group, samples: h });
  }
  if (ctx.json) {
    ctx.printJson({ groups: out });
    return;
  }
  if (out.length === 0) {
    ctx.print(stream ? `stream ${stream} has no consumer groups` : "no consumer groups registered");
    return;
  }
  const rows = out.map(({ stream: s, group: g, samples: h }) => {
    if (h.length === 0) return [s, g, "0", "-", "-", "-", "-", "-", "-"];
    const lag = h.map((x) => Number(x.lag));
    const rate: number[] = [];
    for (let i = 1; i < h.length; i++) {
      const minutes = (h[i].sampledAt.getTime() - h[i - 1].sampledAt.getTime()) / 60_000;
      const moved = Number(BigInt(h[i].committed) - BigInt(h[i - 1].committed));
      rate.push(minutes > 0 ? Math.max(0, moved) / minutes : 0);
    }
    const last = h[h.length - 1];
    return [
      s, g, String(h.length), age(Date.now() - h[0].sampledAt.getTime()),
      sparkline(lag), last.lag, sparkline(rate), rate.length > 0 ? String(Math.round(rate[rate.length - 1])) : "-",
      `${sparkline(h.map((x) => x.exceptions.dead))} ${last.exceptions.dead}`,
    ];
  });
  ctx.print(
    [
      table(["STREAM", "GROUP", "SAMPLES", "SPAN", "LAG", "NOW", "THROUGHPUT/MIN", "NOW", "DEAD"], rows),
      "samples are written by maintain() (every 5 minutes on AWS), kept 7 days; SPAN = age of the oldest sample shown",
    ].join("\n"),
  );
}

interface Alert {
  /** Oldest unresolved message older than this (ms) is an alert; null: only dead rows are. */
  maxAgeMs: number | null;
}

function alertsOf(progress: Progress[], a: Alert): string[] {
  const out: string[] = [];
  for (const p of progress) {
    if (p.exceptions.dead > 0) out.push(`${p.stream}/${p.group} has ${p.exceptions.dead} dead message(s)`);
    if (a.maxAgeMs !== null && p.oldestUnresolvedAgeMs !== null && p.oldestUnresolvedAgeMs > a.maxAgeMs) {
      out.push(`${p.stream}/${p.group}: oldest unresolved message is ${age(p.oldestUnresolvedAgeMs)} old (threshold ${age(a.maxAgeMs)})`);
    }
  }
  return out;
}

/**
 * `status`: one table, or with --watch a refreshing one. With --check (or --max-age) the exit
 * code is 2 when any group has dead rows or an unresolved message older than --max-age, so a
 * cron job or an alerting probe can run it (docs/guide/operations.md#the-operator-cli).
 */
export async function status(ctx: CommandContext, v: Values): Promise<number> {
  const stream = str(v, "stream");
  const group = str(v, "group");
  if (v.history === true) {
    if (v.watch === true || v.check === true || v["max-age"] !== undefined) throw usageError("--history goes alone (with --stream, --group, --since, --samples)", "status");
    await history(ctx, stream, group, v);
    return 0;
  }
  if (v.since !== undefined || v.samples !== undefined) throw usageError("--since and --samples go with --history", "status");
  const maxAge = str(v, "max-age");
  let alert: Alert | null = v.check === true ? { maxAgeMs: null } : null;
  if (maxAge !== undefined) {
    const ms = parseDuration(maxAge);
    if (ms === null) throw usageError(`--max-age must be a duration such as 90s, 5m, 2h or 1d, got ${JSON.stringify(maxAge)}`, "status");
    alert = { maxAgeMs: ms };
  }
  if (v.watch !== true) {
    if (v.interval !== undefined || v.iterations !== undefined) throw usageError("--interval and --iterations go with --watch", "status");
    const alerts = await statusOnce(ctx, stream, group, alert, false);
    return alerts.length > 0 ? 2 : 0;
  }
  const interval = str(v, "interval") === undefined ? 2_000 : parseDuration(str(v, "interval") as string);
  if (interval === null || interval < 200 || interval > 3_600_000) throw usageError("--interval must be a duration between 200ms and 1h (e.g. 2s)", "status");
  const iterations = int(v, "iterations", "status", 1, 1_000_000);
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  let alerted = false;
  try {
    for (let n = 1; ; n++) {
      const alerts = await statusOnce(ctx, stream, group, alert, true);
      alerted ||= alerts.length > 0;
      if (iterations !== undefined && n >= iterations) break;
      await new Promise<void>((res) => {
        const t = setTimeout(res, interval);
        stop.signal.addEventListener("abort", () => { clearTimeout(t); res(); }, { once: true });
      });
      if (stop.signal.aborted) break;
    }
  } finally {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
  }
  return alerted ? 2 : 0;
}

const STATUSES = ["dead", "expired", "ready", "deferred", "inflight"] as const;

export async function failures(ctx: CommandContext, v: Values): Promise<void> {
  const stream = required(v, "stream", "failures");
  const group = required(v, "group", "failures");
  const st = str(v, "status") ?? "dead";
  if (!(STATUSES as readonly string[]).includes(st)) throw usageError(`--status must be one of ${STATUSES.join(", ")}, got ${JSON.stringify(st)}`, "failures");
  const limit = int(v, "limit", "failures", 1, 1_000) ?? 100;
  const offset = int(v, "offset", "failures", 0, 10_000_000) ?? 0;
  const filter = failureFilter(v, "failures");
  const c = ctx.client().stream(stream).consumer(group);
  const status = st as (typeof STATUSES)[number];
  const rows: FailureRow[] = await c.failures({ ...filter, status, limit, offset });
  const total = await c.countFailures({ ...filter, status });
  const next = offset + rows.length < total ? offset + rows.length : null;
  const schema = ctx.client().schema;
  const notShown = rows.map((r) => undisplayablePayload(r.payload, { schema, stream, id: r.messageId }));
  if (ctx.json) {
    // A payload too deep to show is left out (JSON.stringify would overflow the stack) and said so.
    const out = rows.map((r, i) => (notShown[i] === null ? r : { ...r, payload: null, payloadNotDisplayable: notShown[i] }));
    ctx.printJson({ stream, group, status: st, limit, offset, total, nextOffset: next, filter, rows: out });
    return;
  }
  const filtered = Object.keys(filter).length > 0 ? " matching the filter" : "";
  if (rows.length === 0) {
    ctx.print(`${stream}/${group}: no ${st} rows${filtered}${offset > 0 ? ` from offset ${offset} (${total} in all)` : ""}`);
    return;
  }
  const now = Date.now();
  ctx.print(
    table(
      ["MESSAGE", "KEY", "STATUS", "ATTEMPTS", "DELAYS", "UPDATED", "RUN AFTER", "PAYLOAD", "LAST ERROR"],
      rows.map((r, i) => [
        r.messageId, r.key === null ? "-" : escapeControls(r.key), paint(ctx.colour, r.status === "dead" ? "red" : "yellow", r.status), String(r.attempts), String(r.delays),
        `${age(now - r.updatedAt.getTime())} ago`,
        r.canRunAfter.getTime() > now ? `in ${age(r.canRunAfter.getTime() - now)}` : "now",
        notShown[i] === null ? truncate(JSON.stringify(r.payload) ?? "null", 40) : "not displayable (see below)", r.lastError ?? "-",
      ]),
      { maxLast: 100 },
    ),
  );
  ctx.print(
    `${rows.length} ${st} row(s)${filtered} (${offset + 1}–${offset + rows.length} of ${total}), newest first` +
      (next !== null ? `; next page: --offset ${next}` : ""),
  );
  for (const why of notShown) if (why !== null) ctx.print(why);
  if (st === "dead") ctx.print(`redrive after the fix: sqlstreams redrive --stream ${stream} --group ${group} --ids ${rows.slice(0, 3).map((r) => r.messageId).join(",")}${rows.length > 3 ? ",…" : ""}`);
}

export async function redrive(ctx: CommandContext, v: Values): Promise<void> {
  const stream = required(v, "stream", "redrive");
  const group = required(v, "group", "redrive");
  const rate = rateOption(v, "redrive");
  const selector: RedriveSelector = deadSelector(v, "redrive", "SQL0030", rate !== undefined);
  const reason = str(v, "reason");
  const r = await ctx.client().stream(stream).consumer(group).redrive(selector, {
    ...(reason === undefined ? {} : { reason }),
    ...(rate === undefined ? {} : { rate, onBatch: progressLine(ctx, "redriven") }),
  });
  if (ctx.json) ctx.printJson({ stream, group, ...r });
  else ctx.print(`${stream}/${group}: redrove ${r.redriven} dead row(s), skipped ${r.skipped} (not dead or message gone)${r.batches !== undefined ? ` in ${r.batches} batch(es)` : ""}`);
}

export async function seek(ctx: CommandContext, v: Values): Promise<void> {
  const stream = required(v, "stream", "seek");
  const group = required(v, "group", "seek");
  const id = str(v, "id");
  const time = str(v, "time");
  if ((id === undefined) === (time === undefined)) throw usageError("pass exactly one of --id N or --time ISO-8601", "seek");
  if (id !== undefined && !/^[0-9]+$/.test(id)) throw usageError(`--id must be a message id (a non-negative integer), got ${JSON.stringify(id)}`, "seek");
  let at: string | undefined;
  if (time !== undefined) {
    const d = new Date(time);
    if (Number.isNaN(d.getTime())) throw usageError(`--time must be an ISO-8601 time such as 2024-05-01T12:00:00Z, got ${JSON.stringify(time)}`, "seek");
    at = d.toISOString();
  }
  const r = await ctx.client().stream(stream).consumer(group).seek(id !== undefined ? { id } : { time: at }, { force: v.force === true });
  if (ctx.json) {
    ctx.printJson({ stream, group, ...r });
    return;
  }
  ctx.print(
    `${stream}/${group}: claimed ${r.previous.claimed} -> ${r.claimed}, committed ${r.previous.committed} -> ${r.committed}; ` +
      `${r.deletedRows} exception row(s) above the new position deleted`,
  );
}

export async function setPaused(ctx: CommandContext, v: Values, paused: boolean): Promise<void> {
  const command = paused ? "pause" : "resume";
  const stream = required(v, "stream", command);
  const group = required(v, "group", command);
  const c = ctx.client().stream(stream).consumer(group);
  if (paused) await c.pause();
  else await c.resume();
  if (ctx.json) ctx.printJson({ stream, group, paused });
  else ctx.print(`${stream}/${group}: ${paused ? "paused (polls return at once; leases already taken run out)" : "resumed"}`);
}

export async function destroy(ctx: CommandContext, v: Values): Promise<void> {
  const stream = required(v, "stream", "destroy");
  const group = str(v, "group");
  const force = v.force === true;
  const s = ctx.client().stream(stream);
  if (group !== undefined) await s.consumer(group).destroy({ force });
  else await s.destroy({ force });
  const what = group !== undefined ? `consumer group ${stream}/${group}` : `stream ${stream}`;
  if (ctx.json) ctx.printJson({ destroyed: group !== undefined ? { stream, group } : { stream }, force });
  else ctx.print(`destroyed ${what}${force ? " (forced)" : ""}`);
}

export async function maintain(ctx: CommandContext, v: Values): Promise<number> {
  const stream = str(v, "stream");
  if (stream !== undefined) await knownStream(ctx, stream);
  const reports = await ctx.client().maintain(stream !== undefined ? { streams: [stream] } : {});
  const list = Object.values(reports);
  const failed = list.some((r) => r.errors.length > 0);
  if (ctx.json) {
    ctx.printJson({ streams: reports });
  } else if (list.length === 0) {
    ctx.print("no streams registered: nothing to maintain");
  } else {
    ctx.print(
      table(
        ["STREAM", "PARTITIONS+", "PARTITIONS-", "ROWS SWEPT", "IDEMPOTENCY KEYS", "KEY LEASES", "EMPTY HEADS", "ERRORS"],
        list.map((r) => [
          r.stream, String(r.partitionsCreated), String(r.partitionsDropped), String(r.rowsSwept), String(r.idempotencyKeysDeleted),
          String(r.keyLeasesDeleted), String(r.emptyHeadsDeleted), String(r.errors.length),
        ]),
      ),
    );
    for (const r of list) for (const e of r.errors) ctx.io.err(`error ${e.code}: ${r.stream}: step ${e.step}: ${e.message}\n`);
  }
  return failed ? 1 : 0;
}

/** sqlstreams blocked: the keys waiting behind an unresolved earlier message (docs/guide/operations.md#blocked-keys). */
export async function blocked(ctx: CommandContext, v: Values): Promise<void> {
  const stream = required(v, "stream", "blocked");
  const group = required(v, "group", "blocked");
  const limit = int(v, "limit", "blocked", 1, 1_000) ?? 100;
  const c = ctx.client().stream(stream).consumer(group);
  const keys = await c.blockedKeys({ limit });
  if (ctx.json) {
    ctx.printJson({ stream, group, limit, keys });
    return;
  }
  if (keys.length === 0) {
    ctx.print(`${stream}/${group}: no key waits behind an unresolved message`);
    return;
  }
  const now = Date.now();
  ctx.print(
    table(
      ["KEY", "BLOCKED BY", "STATUS", "ATTEMPTS", "SINCE", "RUN AFTER", "WAITING"],
      keys.map((k) => [
        escapeControls(k.key), k.blockingId, paint(ctx.colour, "yellow", k.status), String(k.attempts),
        `${age(now - k.since.getTime())} ago`,
        k.runsAfter === null ? "running" : k.runsAfter.getTime() > now ? `in ${age(k.runsAfter.getTime() - now)}` : "now",
        String(k.waiting),
      ]),
    ),
  );
  ctx.print(`${keys.length} blocked key(s), oldest block first; WAITING = later unresolved rows of the key + its messages not claimed yet`);
}
