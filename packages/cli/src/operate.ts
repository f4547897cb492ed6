// The operator commands that find and fix one message: inspect, discard, produce, and the
// filters shared by failures / redrive / discard (docs/guide/operations.md#the-operator-cli).
import { readFile } from "node:fs/promises";
import { resolve } from "node:path";
import { SqlStreamsError, type DeadSelector, type FailureFilter, type InspectedMessage, type ProduceOptions } from "@sqlstreams/core";
import { undisplayablePayload } from "@sqlstreams/core/internal";
import type { CommandContext, Values } from "./context.js";
import { usageError } from "./errors.js";
import { required, str } from "./args.js";
import { age, escapeControls, paint, parseDuration, table, truncate } from "./format.js";


export function intOption(v: Values, name: string, command: string, min: number, max: number): number | undefined {
  const x = str(v, name);
  if (x === undefined) return undefined;
  if (!/^[0-9]+$/.test(x) || Number(x) < min || Number(x) > max) {
    throw usageError(`--${name} must be an integer between ${min} and ${max}, got ${JSON.stringify(x)}`, command);
  }
  return Number(x);
}

function timeOption(v: Values, name: string, command: string): string | undefined {
  const x = str(v, name);
  if (x === undefined) return undefined;
  const d = new Date(x);
  if (Number.isNaN(d.getTime())) throw usageError(`--${name} must be an ISO-8601 time such as 2024-05-01T12:00:00Z, got ${JSON.stringify(x)}`, command);
  return d.toISOString();
}

function jsonOption(v: Values, name: string, command: string): unknown {
  const x = str(v, name);
  if (x === undefined) return undefined;
  try {
    return JSON.parse(x) as unknown;
  } catch (e) {
    throw usageError(`--${name} must be JSON (e.g. '{"customer":7}'): ${(e as Error).message}`, command);
  }
}

/** The row filters of failures / redrive / discard (each given one must match). */
export const FILTER_OPTIONS = {
  "error-contains": { type: "string" as const },
  key: { type: "string" as const },
  since: { type: "string" as const },
  before: { type: "string" as const },
  "payload-contains": { type: "string" as const },
};

export const FILTER_HELP = `  --error-contains X   the last error contains X (case-insensitive)
  --key K              rows of this message key
  --since TIME         rows last updated at or after TIME (ISO-8601)
  --before TIME        rows last updated before TIME
  --payload-contains J the payload contains the JSON J (jsonb containment, e.g. '{"customer":7}')`;

export function failureFilter(v: Values, command: string): Omit<FailureFilter, "status" | "limit" | "offset"> {
  const f: Omit<FailureFilter, "status" | "limit" | "offset"> = {};
  const e = str(v, "error-contains");
  if (e !== undefined) f.errorContains = e;
  const k = str(v, "key");
  if (k !== undefined) f.key = k;
  const since = timeOption(v, "since", command) ?? timeOption(v, "dead-since", command);
  if (since !== undefined) f.since = since;
  const before = timeOption(v, "before", command) ?? timeOption(v, "dead-before", command);
  if (before !== undefined) f.before = before;
  const p = jsonOption(v, "payload-contains", command);
  if (p !== undefined) f.payloadContains = p;
  return f;
}

/** --ids, or the filters (with --all when there is none), as a redrive/discard selector. */
export function deadSelector(v: Values, command: string, code: "SQL0030" | "SQL0059", paced: boolean): DeadSelector {
  const ids = str(v, "ids");
  const f = failureFilter(v, command);
  const hasFilter = Object.keys(f).length > 0;
  if (ids !== undefined) {
    if (hasFilter || v.all || v.limit !== undefined || v.expired) {
      throw new SqlStreamsError(code, "--ids takes no other criteria (--error-contains, --key, --since, --before, --payload-contains, --all, --limit, --expired)");
    }
    return { ids: ids.split(",").map((s) => s.trim()).filter((s) => s.length > 0) };
  }
  if (!hasFilter && v.all !== true) {
    throw new SqlStreamsError(code, `${command} needs a selector: --ids 1,2,3, a filter (--error-contains, --key, --since, --before, --payload-contains), or --all`);
  }
  const sel: DeadSelector = {};
  if (f.errorContains !== undefined) sel.errorContains = f.errorContains;
  if (f.key !== undefined) sel.key = f.key;
  if (f.since !== undefined) sel.deadSince = f.since;
  if (f.before !== undefined) sel.deadBefore = f.before;
  if (f.payloadContains !== undefined) sel.payloadContains = f.payloadContains;
  if (v.all === true) sel.all = true;
  if (v.expired === true) sel.status = "expired";
  const limit = intOption(v, "limit", command, 1, paced ? 1_000_000_000 : 10_000);
  if (limit !== undefined) sel.limit = limit;
  return sel;
}

export async function discard(ctx: CommandContext, v: Values): Promise<void> {
  const stream = required(v, "stream", "discard");
  const group = required(v, "group", "discard");
  const rate = rateOption(v, "discard");
  const selector = deadSelector(v, "discard", "SQL0059", rate !== undefined);
  const reason = str(v, "reason");
  const r = await ctx.client().stream(stream).consumer(group).discard(selector, {
    ...(reason === undefined ? {} : { reason }),
    ...(rate === undefined ? {} : { rate, onBatch: progressLine(ctx, "discarded") }),
  });
  if (ctx.json) ctx.printJson({ stream, group, ...r });
  else ctx.print(`${stream}/${group}: discarded ${r.discarded} dead row(s) (audit rows written to the delivery log), skipped ${r.skipped} (not dead)`);
}

export function rateOption(v: Values, command: string): number | undefined {
  const x = str(v, "rate");
  if (x === undefined) return undefined;
  const n = Number(x);
  if (!/^[0-9]+(\.[0-9]+)?$/.test(x) || !(n > 0) || n > 100_000) throw usageError(`--rate must be rows per second, above 0 and at most 100000, got ${JSON.stringify(x)}`, command);
  return n;
}

/** With a rate, one progress line per batch on stderr (stdout stays the result). */
export function progressLine(ctx: CommandContext, verb: string): (p: { done: number; skipped: number; batches: number }) => void {
  return (p) => {
    if (!ctx.json) ctx.io.err(`batch ${p.batches}: ${verb} ${p.done}, skipped ${p.skipped}\n`);
  };
}

/** The stream named by the first positional argument (or --stream). */
function streamArg(v: Values, positionals: string[], command: string): string {
  const s = positionals[0] ?? str(v, "stream");
  if (s === undefined || s === "") throw usageError(`name the stream: sqlstreams ${command} <stream>`, command);
  return s;
}

export async function inspect(ctx: CommandContext, v: Values, positionals: string[]): Promise<number> {
  const stream = streamArg(v, positionals, "inspect");
  if (positionals.length > 1) throw usageError(`unexpected argument ${JSON.stringify(positionals[1])}`, "inspect");
  const id = str(v, "id");
  const key = str(v, "key");
  if ((id === undefined) === (key === undefined)) throw usageError("pass exactly one of --id N or --key K", "inspect");
  const limit = intOption(v, "limit", "inspect", 1, 100);
  const found = await ctx.client().stream(stream).inspect(id !== undefined ? { id } : { key, ...(limit === undefined ? {} : { limit }) });
  const schema = ctx.client().schema;
  const notShown = found.map((m) => undisplayablePayload(m.payload, { schema, stream, id: m.id }));
  if (ctx.json) {
    // A payload too deep to show is left out (JSON.stringify would overflow the stack) and said so.
    ctx.printJson({ stream, messages: found.map((m, i) => (notShown[i] === null ? m : { ...m, payload: null, payloadNotDisplayable: notShown[i] })) });
    return 0;
  }
  found.forEach((m, i) => {
    if (i > 0) ctx.print("");
    printMessage(ctx, m, notShown[i]);
  });
  return 0;
}

const POSITION_TEXT: Record<string, string> = {
  waiting: "not reached yet (above the claimed cursor)",
  claimed: "in a claimed range, not committed yet",
  resolved: "resolved (at or below the committed cursor)",
};

function printMessage(ctx: CommandContext, m: InspectedMessage, notShown: string | null): void {
  const c = ctx.colour;
  const now = Date.now();
  ctx.print(paint(c, "bold", `message ${m.id} of ${m.stream}`));
  ctx.print(`  key:        ${m.key === null ? "-" : escapeControls(m.key)}${m.compactionRank !== null ? ` (compaction rank ${m.compactionRank})` : ""}`);
  ctx.print(`  created:    ${m.createdAt.toISOString()} (${age(now - m.createdAt.getTime())} ago)`);
  ctx.print(`  options:    ${m.options === null ? "-" : escapeControls(JSON.stringify(m.options))}`);
  ctx.print(`  payload:    ${notShown ?? truncate(JSON.stringify(m.payload) ?? "null", 2_000)}`);
  if (m.groups.length === 0) ctx.print("  no consumer groups");
  for (const g of m.groups) {
    const r = g.row;
    const state = r === null
      ? POSITION_TEXT[g.position]
      : `${paint(c, r.status === "dead" ? "red" : r.status === "superseded" ? "dim" : "yellow", r.status)} exception row: attempts ${r.attempts}, delays ${r.delays}` +
        (r.status === "dead" || r.status === "superseded" || r.status === "expired" ? "" : `, runs ${r.canRunAfter.getTime() > now ? `in ${age(r.canRunAfter.getTime() - now)}` : "now"}`) +
        (r.leaseExpiresAt ? `, leased until ${r.leaseExpiresAt.toISOString()}` : "");
    ctx.print(`  group ${paint(c, "bold", g.group)}${g.paused ? " (paused)" : ""}: ${state}`);
    if (r?.lastError) ctx.print(`    last error: ${truncate(r.lastError, 300)}`);
    if (g.timeline.length > 0) {
      ctx.print(
        table(
          ["    AT", "ATTEMPT", "STATUS", "ERROR"],
          g.timeline.map((t) => [`    ${t.at.toISOString()}`, String(t.attempt), t.status, t.error || "-"]),
          { maxLast: 120 },
        ),
      );
    }
  }
}

/** `produce <stream> [payload]`: the payload from the argument, --file, or stdin. */
export async function produce(ctx: CommandContext, v: Values, positionals: string[]): Promise<void> {
  const stream = streamArg(v, positionals, "produce");
  if (positionals.length > 2) throw usageError(`unexpected argument ${JSON.stringify(positionals[2])}`, "produce");
  const file = str(v, "file");
  if (positionals[1] !== undefined && file !== undefined) throw usageError("pass the payload as an argument or with --file, not both", "produce");
  let text: string;
  let from: string;
  if (positionals[1] !== undefined) {
    text = positionals[1];
    from = "the payload argument";
  } else if (file !== undefined) {
    from = file === "-" ? "stdin" : `--file ${file}`;
    text = file === "-" ? await stdin(ctx) : await readFile(resolve(ctx.io.cwd, file), "utf8").catch((e: Error) => {
      throw usageError(`cannot read --file ${file}: ${e.message}`, "produce");
    });
  } else {
    if (ctx.io.stdinIsTTY) throw usageError("give the payload as an argument ('{\"n\":1}'), with --file PATH, or on stdin", "produce");
    from = "stdin";
    text = await stdin(ctx);
  }
  const payload = parseJson(text, from);
  const opts: ProduceOptions = {};
  const key = str(v, "key");
  if (key !== undefined) opts.key = key;
  const idem = str(v, "idempotency-key");
  if (idem !== undefined) opts.idempotencyKey = idem;
  const message = str(v, "message");
  if (message !== undefined) opts.message = parseJson(message, "--message") as ProduceOptions["message"];
  const rank = str(v, "rank");
  if (rank !== undefined) {
    if (!/^-?[0-9]+$/.test(rank)) throw usageError(`--rank must be an integer, got ${JSON.stringify(rank)}`, "produce");
    opts.compaction = { rank: Number(rank) };
  } else if (v.compaction === true) {
    opts.compaction = {};
  }
  scheduleFlags(v, opts);
  const r = await ctx.client().stream(stream).produce(payload, opts);
  if (ctx.json) ctx.printJson({ stream, ...r });
  else if (r.scheduled) ctx.print(`${stream}: ${r.duplicate ? "duplicate of " : ""}scheduled message ${r.id}${r.deliverAt ? `, due ${r.deliverAt.toISOString()}` : ""} (cancel with stream.cancelScheduled("${r.id}"))`);
  else ctx.print(`${stream}: ${r.duplicate ? `duplicate of message ${r.id} (idempotency key seen before; nothing written)` : `produced message ${r.id}`}`);
}

/** --delay and --deliver-at (docs/guide/producing.md#scheduled-delivery); produce() checks the pair. */
function scheduleFlags(v: Values, opts: ProduceOptions): void {
  const delay = str(v, "delay");
  if (delay !== undefined) {
    const ms = parseDuration(delay);
    if (ms === null) throw usageError(`--delay must be a duration such as 90s, 15m or 2d, got ${JSON.stringify(delay)}`, "produce");
    opts.delay = ms;
  }
  const at = str(v, "deliver-at");
  if (at !== undefined) {
    const ms = /^[0-9]+$/.test(at) ? Number(at) : Date.parse(at);
    if (Number.isNaN(ms)) throw usageError(`--deliver-at must be an ISO 8601 time or epoch ms, got ${JSON.stringify(at)}`, "produce");
    opts.deliverAt = ms;
  }
}

async function stdin(ctx: CommandContext): Promise<string> {
  if (!ctx.io.readStdin) throw usageError("stdin is not available here; pass the payload as an argument", "produce");
  return ctx.io.readStdin();
}

function parseJson(text: string, from: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch (e) {
    throw new SqlStreamsError("SQL0062", `${from} is not valid JSON: ${(e as Error).message}`, { from });
  }
}
