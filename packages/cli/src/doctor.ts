// `sqlstreams doctor`: why is a group stuck, and what to do about it. Each check reads live
// catalog and SQLStreams tables and returns findings with a fix (docs/operations.md#doctor).
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import pg from "pg";
import { STREAM_VERSION, SYSTEM_VERSION } from "@sqlstreams/core";
import { staleFunctions } from "@sqlstreams/core/internal";
import type { Ctx, Values } from "./context.js";
import { usageError } from "./errors.js";
import { age, paint, parseDuration } from "./format.js";

export type Severity = "error" | "warning" | "ok";

export interface Finding {
  check: "migrations" | "fence" | "leases" | "quarantines" | "declaration" | "connections" | "partitions";
  severity: Severity;
  message: string;
  fix?: string;
  stream?: string;
  group?: string;
  details?: Record<string, unknown>;
}

interface StreamRow {
  id: string;
  name: string;
  partition_size: string;
  version: number;
}

interface DoctorOptions {
  /** A fence holder older than this is an error (claims of its stream wait for it). */
  holdMs: number;
  /** Quarantines and kills in this window are reported. */
  recentMs: number;
  /** The deployment's declaration (built groups.mjs), or null to skip that check. */
  groupsFile: string | null;
  poolSize: number;
}

/** Runs every check; `q` is the quoted schema. */
export async function diagnose(db: pg.Pool, schema: string, o: DoctorOptions): Promise<Finding[]> {
  const q = pg.escapeIdentifier(schema);
  const out: Finding[] = [];
  const present = await db.query<{ ok: boolean }>("SELECT to_regclass($1) IS NOT NULL AS ok", [`${q}.migration_log`]);
  if (!present.rows[0].ok) {
    out.push({ check: "migrations", severity: "error", message: `schema ${schema} has no SQLStreams control plane`, fix: "run `sqlstreams migrate` (or deploy: the migrate function runs it)" });
    return out;
  }
  const streams = await checkMigrations(db, q, schema, out);
  for (const s of streams) await checkFence(db, q, s, o, out);
  for (const s of streams) await checkLeases(db, q, s, o, out);
  for (const s of streams) await checkPartitions(db, q, s, out);
  const declared = o.groupsFile === null ? null : await loadDeclaration(o.groupsFile);
  await checkDeclaration(db, q, declared, out);
  await checkConnections(db, declared, o, out);
  return out;
}

async function checkMigrations(db: pg.Pool, q: string, schema: string, out: Finding[]): Promise<StreamRow[]> {
  const sys = await db.query<{ v: number }>(`SELECT COALESCE(max(version), 0)::int AS v FROM ${q}.migration_log WHERE scope = 'system' AND status = 'success'`);
  const v = sys.rows[0].v;
  if (v < SYSTEM_VERSION) out.push({ check: "migrations", severity: "error", message: `control plane of ${schema} is at version ${v}; this library needs ${SYSTEM_VERSION}`, fix: "run `sqlstreams migrate`" });
  else if (v > SYSTEM_VERSION) out.push({ check: "migrations", severity: "error", message: `control plane of ${schema} is at version ${v}, newer than this library (${SYSTEM_VERSION})`, fix: "upgrade @sqlstreams/*" });
  const r = await db.query<StreamRow>(
    `SELECT s.id::text, s.name, s.partition_size::text,
            COALESCE((SELECT max(m.version) FROM ${q}.migration_log m WHERE m.scope = 'stream' AND m.stream_id = s.id AND m.status = 'success'), 0)::int AS version
       FROM ${q}.stream_config s ORDER BY s.id`,
  );
  const behind = r.rows.filter((s) => s.version < STREAM_VERSION);
  for (const s of behind) {
    out.push({ check: "migrations", severity: "error", stream: s.name, message: `stream ${s.name}: table family at version ${s.version}; this library needs ${STREAM_VERSION}`, fix: "run `sqlstreams migrate`" });
  }
  const stale = v === SYSTEM_VERSION ? await staleFunctions(db, q) : [];
  if (stale.length > 0) {
    const names = stale.map((f) => (f.streamId === null ? f.name : `${f.name}_${f.streamId}`));
    out.push({ check: "migrations", severity: "error", message: `${stale.length} function${stale.length === 1 ? " differs" : "s differ"} from this library's: ${names.slice(0, 5).join(", ")}${names.length > 5 ? ", …" : ""}`, fix: "run `sqlstreams migrate`" });
  }
  if (v === SYSTEM_VERSION && behind.length === 0 && stale.length === 0) out.push({ check: "migrations", severity: "ok", message: `no pending migrations (control plane ${v}, ${r.rows.length} stream famil${r.rows.length === 1 ? "y" : "ies"} at ${STREAM_VERSION})` });
  return r.rows;
}

function fam(q: string, s: StreamRow, t: string): string {
  if (!/^[1-9][0-9]{0,18}$/.test(s.id)) throw new Error(`invalid stream id ${s.id}`);
  return `${q}.${t}_${s.id}`;
}

/** Open transactions holding RowExclusiveLock on the stream's log: claims cannot pass ids they may still commit (docs/poll-cycle.md#the-fence). */
async function checkFence(db: pg.Pool, q: string, s: StreamRow, o: DoctorOptions, out: Finding[]): Promise<void> {
  const r = await db.query<{ pid: number; xact_age_ms: number | null; application_name: string | null; query: string | null }>(
    `SELECT pid, xact_age_ms, application_name, query FROM ${fam(q, s, "fence_holders")}()`,
  );
  // One row per lock (the log and each partition the transaction wrote): one finding per backend.
  const byPid = new Map(r.rows.map((h) => [h.pid, h]));
  const old = [...byPid.values()].filter((h) => (h.xact_age_ms ?? 0) >= o.holdMs);
  for (const h of old) {
    out.push({
      check: "fence", severity: "error", stream: s.name,
      message: `stream ${s.name}: backend ${h.pid} (${h.application_name || "no application_name"}) has held the stream's fence for ${age(h.xact_age_ms)} in an open transaction: every group's claims wait for it; last statement: ${(h.query ?? "").replace(/\s+/g, " ").slice(0, 200)}`,
      fix: `commit or roll back that transaction; if it is abandoned: SELECT pg_terminate_backend(${h.pid})`,
      details: { pid: h.pid, ageMs: Math.round(h.xact_age_ms ?? 0), applicationName: h.application_name, query: h.query },
    });
  }
  if (old.length === 0) out.push({ check: "fence", severity: "ok", stream: s.name, message: `stream ${s.name}: no transaction has held the fence for ${age(o.holdMs)} or more${byPid.size > 0 ? ` (${byPid.size} younger)` : ""}` });
}

async function checkLeases(db: pg.Pool, q: string, s: StreamRow, o: DoctorOptions, out: Finding[]): Promise<void> {
  const r = await db.query<{ group: string; expired_ranges: number; oldest_range_ms: number | null; expired_rows: number; quarantined: number; killed: number; quarantined_ids: string[] | null }>(
    `SELECT g.name AS "group",
            (SELECT count(*)::int FROM ${fam(q, s, "claim_lease")} l WHERE l.consumer_group_id = g.id AND l.expires_at < now() AND NOT l.released) AS expired_ranges,
            (SELECT (EXTRACT(EPOCH FROM now() - min(l.expires_at)) * 1000)::float8 FROM ${fam(q, s, "claim_lease")} l
              WHERE l.consumer_group_id = g.id AND l.expires_at < now() AND NOT l.released) AS oldest_range_ms,
            (SELECT count(*)::int FROM ${fam(q, s, "exception_queue")} e WHERE e.consumer_group_id = g.id AND e.status = 'inflight' AND e.lease_expires_at < now()) AS expired_rows,
            (SELECT count(*)::int FROM ${fam(q, s, "exception_queue")} e WHERE e.consumer_group_id = g.id AND e.last_error LIKE 'quarantined:%'
                AND e.created_at > now() - $2 * interval '1 millisecond') AS quarantined,
            (SELECT array_agg(x.message_id::text) FROM (SELECT e.message_id FROM ${fam(q, s, "exception_queue")} e WHERE e.consumer_group_id = g.id
                AND e.last_error LIKE 'quarantined:%' AND e.created_at > now() - $2 * interval '1 millisecond' ORDER BY e.message_id LIMIT 10) x) AS quarantined_ids,
            (SELECT count(*)::int FROM ${fam(q, s, "delivery_log")} d WHERE d.consumer_group_id = g.id AND d.status = 'killed'
                AND d.attempted_at > now() - $2 * interval '1 millisecond') AS killed
       FROM ${q}.consumer_group_config g WHERE g.stream_id = $1 ORDER BY g.name`,
    [s.id, o.recentMs],
  );
  for (const g of r.rows) {
    if (g.expired_ranges > 0 || g.expired_rows > 0) {
      out.push({
        check: "leases", severity: "warning", stream: s.name, group: g.group,
        message: `${s.name}/${g.group}: ${g.expired_ranges} expired range lease(s)${g.oldest_range_ms !== null ? ` (oldest expired ${age(g.oldest_range_ms)} ago)` : ""} and ${g.expired_rows} expired row lease(s): a poll crashed or ran past its timeout`,
        fix: "nothing is lost: the next poll reclaims them. If it keeps happening, raise the function timeout or the message timeout, or lower batchLimit; look for crashes in the function's logs",
        details: { expiredRanges: g.expired_ranges, expiredRows: g.expired_rows },
      });
    }
    if (g.quarantined > 0 || g.killed > 0) {
      out.push({
        check: "quarantines", severity: "warning", stream: s.name, group: g.group,
        message: `${s.name}/${g.group}: in the last ${age(o.recentMs)}, ${g.quarantined} message(s) quarantined out of a crash-looping range${g.quarantined_ids ? ` (ids ${g.quarantined_ids.join(", ")})` : ""} and ${g.killed} made dead by the kill backstop`,
        fix: `a message crashes the process: sqlstreams inspect ${s.name} --id <id> shows its attempts; fix the handler, then redrive`,
        details: { quarantined: g.quarantined, ids: g.quarantined_ids ?? [], killed: g.killed },
      });
    }
  }
  const bad = out.some((f) => (f.check === "leases" || f.check === "quarantines") && f.stream === s.name);
  if (!bad) out.push({ check: "leases", severity: "ok", stream: s.name, message: `stream ${s.name}: no expired leases, no quarantines in the last ${age(o.recentMs)}` });
}

/** Partition K (the next id's) and K+1 must exist before producers need them (docs/retention.md). */
async function checkPartitions(db: pg.Pool, q: string, s: StreamRow, out: Finding[]): Promise<void> {
  const seq = await db.query<{ last_value: string; is_called: boolean }>(`SELECT last_value::text, is_called FROM ${fam(q, s, "message_log")}_id_seq`);
  const next = seq.rows[0].is_called ? BigInt(seq.rows[0].last_value) + 1n : BigInt(seq.rows[0].last_value);
  const size = BigInt(s.partition_size);
  const k = next / size;
  const parts = await db.query<{ k: string; ok: boolean }>(
    "SELECT k::text, to_regclass($1 || '_' || k::text) IS NOT NULL AS ok FROM unnest(ARRAY[$2::bigint, $2::bigint + 1]) AS k",
    [fam(q, s, "message_log"), k.toString()],
  );
  const missing = parts.rows.filter((p) => !p.ok).map((p) => p.k);
  if (missing.length === 0) {
    out.push({ check: "partitions", severity: "ok", stream: s.name, message: `stream ${s.name}: partitions ${k} and ${k + 1n} exist (next id ${next})` });
    return;
  }
  const current = missing.includes(k.toString());
  out.push({
    check: "partitions", severity: current ? "error" : "warning", stream: s.name,
    message: `stream ${s.name}: partition${missing.length > 1 ? "s" : ""} ${missing.join(" and ")} missing (next id ${next}, partition size ${size})${current ? ": the next produce must create it itself and fails with SQL0022 if it cannot" : ""}`,
    fix: `run \`sqlstreams maintain --stream ${s.name}\` (and check that the maintain function is scheduled and has DDL rights)`,
    details: { nextId: next.toString(), missing },
  });
}

interface Declared {
  file: string;
  groups: { stream: string; group: string; parallelism: number; mode: string }[];
}

async function loadDeclaration(file: string): Promise<Declared> {
  const mod = (await import(pathToFileURL(file).href)) as { groups?: unknown };
  if (!Array.isArray(mod.groups)) throw usageError(`${file} exports no \`groups\` array`, "doctor");
  return {
    file,
    groups: (mod.groups as Record<string, unknown>[]).map((g) => ({
      stream: String(g.stream), group: String(g.group), parallelism: typeof g.parallelism === "number" ? g.parallelism : 1, mode: typeof g.mode === "string" ? g.mode : "drain",
    })),
  };
}

async function checkDeclaration(db: pg.Pool, q: string, d: Declared | null, out: Finding[]): Promise<void> {
  if (d === null) {
    out.push({ check: "declaration", severity: "ok", message: "declaration not checked: no built functions/groups.ts (run `npm run build`, or pass --groups PATH to a built groups.mjs)" });
    return;
  }
  const r = await db.query<{ stream: string; group: string }>(
    `SELECT s.name AS stream, g.name AS "group" FROM ${q}.consumer_group_config g JOIN ${q}.stream_config s ON s.id = g.stream_id ORDER BY 1, 2`,
  );
  const key = (x: { stream: string; group: string }) => `${x.stream}/${x.group}`;
  const registered = new Set(r.rows.map(key));
  const declared = new Set(d.groups.map(key));
  let problems = 0;
  for (const g of d.groups) {
    if (registered.has(key(g))) continue;
    problems++;
    out.push({
      check: "declaration", severity: "error", stream: g.stream, group: g.group,
      message: `${key(g)} is declared in ${d.file} but not registered: its poll function fails (SQL0010) and nothing consumes it`,
      fix: "deploy (the migrate function registers every declared group), or run `sqlstreams dev` locally",
    });
  }
  for (const g of r.rows) {
    if (declared.has(key(g))) continue;
    problems++;
    out.push({
      check: "declaration", severity: "warning", stream: g.stream, group: g.group,
      message: `${key(g)} is registered but not declared in ${d.file}: nothing polls it, and its position holds the stream's retention`,
      fix: `declare it again, or remove it: sqlstreams destroy --stream ${g.stream} --group ${g.group}`,
    });
  }
  if (problems === 0) out.push({ check: "declaration", severity: "ok", message: `the ${d.groups.length} declared group(s) of ${d.file} are exactly the registered ones` });
}

/**
 * Connection headroom: each poller holds a pool of `poolSize` connections (1, the default of
 * @sqlstreams/aws); a group runs `parallelism` pollers per tick, twice that in continuous mode
 * (an invocation may still run when the next tick starts); plus maintain and migrate.
 */
async function checkConnections(db: pg.Pool, d: Declared | null, o: DoctorOptions, out: Finding[]): Promise<void> {
  const r = await db.query<{ max: number; reserved: number; used: number }>(
    `SELECT current_setting('max_connections')::int AS max, current_setting('superuser_reserved_connections')::int AS reserved,
            (SELECT count(*)::int FROM pg_catalog.pg_stat_activity WHERE backend_type = 'client backend') AS used`,
  );
  const { max, reserved, used } = r.rows[0];
  const usable = max - reserved;
  const pollers = d === null ? null : d.groups.reduce((n, g) => n + g.parallelism * (g.mode === "continuous" ? 2 : 1), 0);
  const need = pollers === null ? null : (pollers + 2) * o.poolSize;
  const details = { maxConnections: max, reserved, inUse: used, pollers, poolSize: o.poolSize, needed: need };
  if (need !== null && need > usable) {
    out.push({
      check: "connections", severity: "error", details,
      message: `the deployment can open ${need} connections (${pollers} pollers + maintain + migrate, × pool size ${o.poolSize}) but max_connections allows ${usable} (${max} − ${reserved} reserved)`,
      fix: "put RDS Proxy or PgBouncer (transaction mode) in front, lower parallelism, or raise max_connections",
    });
  } else if (need !== null && used + need > usable) {
    out.push({
      check: "connections", severity: "warning", details,
      message: `${used} connections are in use; with the deployment's ${need} more the server would pass its ${usable} usable connections`,
      fix: "put RDS Proxy or PgBouncer (transaction mode) in front, lower parallelism, or raise max_connections",
    });
  } else {
    out.push({ check: "connections", severity: "ok", details, message: `connections: ${used} of ${usable} usable in use${need !== null ? `; the deployment needs up to ${need}` : ""}` });
  }
}

export async function doctor(ctx: Ctx, v: Values): Promise<number> {
  const str = (n: string) => (typeof v[n] === "string" ? (v[n] as string) : undefined);
  const dur = (n: string, dflt: number) => {
    const x = str(n);
    if (x === undefined) return dflt;
    const ms = parseDuration(x);
    if (ms === null) throw usageError(`--${n} must be a duration such as 500ms, 5s, 1h, got ${JSON.stringify(x)}`, "doctor");
    return ms;
  };
  const poolSize = str("pool-size") === undefined ? 1 : Number(str("pool-size"));
  if (!Number.isInteger(poolSize) || poolSize < 1 || poolSize > 1000) throw usageError("--pool-size must be an integer 1 … 1000", "doctor");
  let groupsFile: string | null = null;
  if (str("groups") !== undefined) {
    groupsFile = resolve(ctx.io.cwd, str("groups") as string);
    if (!existsSync(groupsFile)) throw usageError(`--groups ${str("groups")}: no such file`, "doctor");
  } else {
    const dflt = resolve(ctx.io.cwd, str("build") ?? ".build", "functions", "groups.mjs");
    if (existsSync(dflt)) groupsFile = dflt;
  }
  ctx.client();
  const findings = await diagnose(ctx.db(), ctx.common.schema, { holdMs: dur("hold-threshold", 5_000), recentMs: dur("recent", 86_400_000), groupsFile, poolSize });
  const errors = findings.filter((f) => f.severity === "error").length;
  const warnings = findings.filter((f) => f.severity === "warning").length;
  if (ctx.json) {
    ctx.printJson({ errors, warnings, findings });
  } else {
    const c = ctx.colour;
    const mark = { error: paint(c, "red", "error  "), warning: paint(c, "yellow", "warning"), ok: paint(c, "green", "ok     ") };
    for (const f of findings) {
      if (f.severity === "ok" && v.quiet === true) continue;
      ctx.print(`${mark[f.severity]}  ${f.check.padEnd(11)}  ${f.message}`);
      if (f.fix && f.severity !== "ok") ctx.print(`${" ".repeat(22)}fix: ${f.fix}`);
    }
    ctx.print(`${errors} error(s), ${warnings} warning(s)`);
  }
  return errors > 0 ? 1 : 0;
}
