// The operator commands: migrate, status, failures, redrive, seek, pause, resume, destroy,
// maintain. Each takes the parsed options and prints a table (or JSON with --json).
import { SqlStreamsError, type FailureRow, type Progress, type RedriveSelector } from "@sqlstreams/core";
import type { Ctx } from "./context.js";
import { usageError } from "./errors.js";
import { age, table, truncate, yesNo } from "./format.js";

export type Values = Record<string, string | boolean | undefined>;

function str(v: Values, name: string): string | undefined {
  const x = v[name];
  return typeof x === "string" ? x : undefined;
}

function required(v: Values, name: string, command: string): string {
  const x = str(v, name);
  if (x === undefined || x === "") throw usageError(`--${name} is required`, command);
  return x;
}

function int(v: Values, name: string, command: string, min: number, max: number): number | undefined {
  const x = str(v, name);
  if (x === undefined) return undefined;
  if (!/^[0-9]+$/.test(x) || Number(x) < min || Number(x) > max) {
    throw usageError(`--${name} must be an integer between ${min} and ${max}, got ${JSON.stringify(x)}`, command);
  }
  return Number(x);
}

/** Checks the control plane (SQL0003) and that the stream exists (SQL0009). */
async function knownStream(ctx: Ctx, stream: string): Promise<void> {
  const names = await ctx.client().streamNames();
  if (!names.includes(stream)) {
    throw new SqlStreamsError("SQL0009", `stream ${JSON.stringify(stream)} is not registered`, { stream, registered: names });
  }
}

/** (stream, group) pairs of the deployment, optionally filtered; SQL0009/SQL0010 when a named one is missing. */
export async function listGroups(ctx: Ctx, stream?: string, group?: string): Promise<{ stream: string; group: string }[]> {
  const client = ctx.client();
  const names = await client.streamNames();
  if (stream !== undefined && !names.includes(stream)) {
    throw new SqlStreamsError("SQL0009", `stream ${JSON.stringify(stream)} is not registered`, { stream, registered: names });
  }
  const q = ctx.q();
  const r = await ctx.db().query<{ stream: string; group: string }>(
    `SELECT s.name AS stream, g.name AS "group"
       FROM ${q}.stream_config s JOIN ${q}.consumer_group_config g ON g.stream_id = s.id
      WHERE ($1::text IS NULL OR s.name = $1) AND ($2::text IS NULL OR g.name = $2)
      ORDER BY s.name, g.name`,
    [stream ?? null, group ?? null],
  );
  if (group !== undefined && r.rows.length === 0) {
    throw new SqlStreamsError(
      "SQL0010",
      stream !== undefined
        ? `consumer group ${JSON.stringify(group)} is not registered on stream ${stream}`
        : `no stream has a consumer group named ${JSON.stringify(group)}`,
      { stream, group },
    );
  }
  return r.rows;
}

export async function migrate(ctx: Ctx): Promise<void> {
  const started = Date.now();
  const client = ctx.client();
  await client.migrate();
  const version = await client.controlPlaneVersion();
  const durationMs = Date.now() - started;
  if (ctx.json) ctx.printJson({ migrated: true, schema: client.schema, version, durationMs });
  else ctx.print(`migrated schema ${client.schema}: control plane at version ${version} (${durationMs} ms)`);
}

export async function status(ctx: Ctx, v: Values): Promise<void> {
  const stream = str(v, "stream");
  const group = str(v, "group");
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
    if (p.expiredLeases > 0) notes.push(`${p.stream}/${p.group}: ${p.expiredLeases} expired lease(s) — a poll crashed or timed out; the next poll reclaims them`);
  }
  if (ctx.json) {
    ctx.printJson({ groups: progress, notes });
    return;
  }
  if (progress.length === 0) {
    ctx.print(stream ? `stream ${stream} has no consumer groups` : "no consumer groups registered");
    return;
  }
  ctx.print(
    table(
      ["STREAM", "GROUP", "HEAD", "COMMITTED", "LAG", "LEASES", "READY", "DEFERRED", "INFLIGHT", "DEAD", "SUPERSEDED", "OLDEST", "PAUSED"],
      progress.map((p) => [
        p.stream, p.group, p.head, p.committed, p.lag, `${p.openLeases}/${p.expiredLeases}`,
        String(p.exceptions.ready), String(p.exceptions.deferred), String(p.exceptions.inflight), String(p.exceptions.dead),
        String(p.exceptions.superseded), age(p.oldestUnresolvedAgeMs), yesNo(p.paused),
      ]),
    ),
  );
  ctx.print("LEASES = open/expired claim leases; OLDEST = age of the oldest unresolved message");
  for (const n of notes) ctx.print(`note: ${n}`);
}

const STATUSES = ["dead", "ready", "deferred", "inflight"] as const;

export async function failures(ctx: Ctx, v: Values): Promise<void> {
  const stream = required(v, "stream", "failures");
  const group = required(v, "group", "failures");
  const st = str(v, "status") ?? "dead";
  if (!(STATUSES as readonly string[]).includes(st)) throw usageError(`--status must be one of ${STATUSES.join(", ")}, got ${JSON.stringify(st)}`, "failures");
  const limit = int(v, "limit", "failures", 1, 1_000) ?? 100;
  const rows: FailureRow[] = await ctx.client().stream(stream).consumer(group).failures({ status: st as (typeof STATUSES)[number], limit });
  if (ctx.json) {
    ctx.printJson({ stream, group, status: st, limit, rows });
    return;
  }
  if (rows.length === 0) {
    ctx.print(`${stream}/${group}: no ${st} rows`);
    return;
  }
  const now = Date.now();
  ctx.print(
    table(
      ["MESSAGE", "KEY", "STATUS", "ATTEMPTS", "DELAYS", "UPDATED", "RUN AFTER", "PAYLOAD", "LAST ERROR"],
      rows.map((r) => [
        r.messageId, r.key ?? "-", r.status, String(r.attempts), String(r.delays), `${age(now - r.updatedAt.getTime())} ago`,
        r.canRunAfter.getTime() > now ? `in ${age(r.canRunAfter.getTime() - now)}` : "now",
        truncate(JSON.stringify(r.payload) ?? "null", 40), r.lastError ?? "-",
      ]),
      { maxLast: 100 },
    ),
  );
  ctx.print(`${rows.length} ${st} row(s)${rows.length === limit ? ` (limit ${limit}; --limit for more)` : ""}, newest first`);
  if (st === "dead") ctx.print(`redrive after the fix: sqlstreams redrive --stream ${stream} --group ${group} --ids ${rows.slice(0, 3).map((r) => r.messageId).join(",")}${rows.length > 3 ? ",…" : ""}`);
}

export async function redrive(ctx: Ctx, v: Values): Promise<void> {
  const stream = required(v, "stream", "redrive");
  const group = required(v, "group", "redrive");
  const ids = str(v, "ids");
  let selector: RedriveSelector;
  if (ids !== undefined) {
    if (v["error-contains"] !== undefined || v.all || v["dead-since"] !== undefined || v["dead-before"] !== undefined || v.limit !== undefined) {
      throw new SqlStreamsError("SQL0030", "--ids takes no other criteria (--error-contains, --dead-since, --dead-before, --all, --limit)");
    }
    selector = { ids: ids.split(",").map((s) => s.trim()).filter((s) => s.length > 0) };
  } else {
    const f: { errorContains?: string; deadSince?: string; deadBefore?: string; all?: boolean; limit?: number } = {};
    if (str(v, "error-contains") !== undefined) f.errorContains = str(v, "error-contains");
    if (str(v, "dead-since") !== undefined) f.deadSince = str(v, "dead-since");
    if (str(v, "dead-before") !== undefined) f.deadBefore = str(v, "dead-before");
    if (v.all === true) f.all = true;
    const limit = int(v, "limit", "redrive", 1, 10_000);
    if (limit !== undefined) f.limit = limit;
    if (Object.keys(f).filter((k) => k !== "limit").length === 0) {
      throw new SqlStreamsError("SQL0030", "redrive needs a selector: --ids 1,2,3, --error-contains TEXT, --dead-since/--dead-before TIME, or --all");
    }
    selector = f;
  }
  const reason = str(v, "reason");
  const r = await ctx.client().stream(stream).consumer(group).redrive(selector, reason === undefined ? {} : { reason });
  if (ctx.json) ctx.printJson({ stream, group, ...r });
  else ctx.print(`${stream}/${group}: redrove ${r.redriven} dead row(s), skipped ${r.skipped} (not dead or message gone)`);
}

export async function seek(ctx: Ctx, v: Values): Promise<void> {
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

export async function setPaused(ctx: Ctx, v: Values, paused: boolean): Promise<void> {
  const command = paused ? "pause" : "resume";
  const stream = required(v, "stream", command);
  const group = required(v, "group", command);
  const c = ctx.client().stream(stream).consumer(group);
  if (paused) await c.pause();
  else await c.resume();
  if (ctx.json) ctx.printJson({ stream, group, paused });
  else ctx.print(`${stream}/${group}: ${paused ? "paused (polls return at once; leases already taken run out)" : "resumed"}`);
}

export async function destroy(ctx: Ctx, v: Values): Promise<void> {
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

export async function maintain(ctx: Ctx, v: Values): Promise<number> {
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
