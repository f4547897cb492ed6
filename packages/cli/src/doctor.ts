// `sqlstreams doctor`: why is a group stuck, and what to do about it. Each check reads live
// catalog and SQLStreams tables and returns findings with a fix (docs/guide/operations.md#doctor).
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import pg from "pg";
import { STREAM_VERSION, SYSTEM_VERSION, isSqlStreamsError } from "@sqlstreams/core";
import {
  type StreamFamily, connectionUse, controlPlanePresent, fenceHolders, leaseHealth, migrationState, partitionState, registeredGroups, staleFunctions,
} from "@sqlstreams/core/internal";
import type { CommandContext, Values } from "./context.js";
import { DEFAULT_GROUPS_FILES, findDeclaration, handlerFile, loadDeclaration } from "./dev/app.js";
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

interface DoctorOptions {
  /** A fence holder older than this is an error (claims of its stream wait for it). */
  holdMs: number;
  /** Quarantines and kills in this window are reported. */
  recentMs: number;
  /** The app's declaration (--groups, or functions/groups.ts when present), or null to skip that check. */
  declared: Declared | null;
  poolSize: number;
}

/** Runs every check against the control plane in `schema`. */
export async function diagnose(db: pg.Pool, schema: string, o: DoctorOptions): Promise<Finding[]> {
  const out: Finding[] = [];
  if (!(await controlPlanePresent(db, schema))) {
    out.push({ check: "migrations", severity: "error", message: `schema ${schema} has no SQLStreams control plane`, fix: "run `sqlstreams migrate` (or deploy: the migrate function runs it)" });
    return out;
  }
  const streams = await checkMigrations(db, schema, out);
  for (const s of streams) await checkFence(db, schema, s, o, out);
  for (const s of streams) await checkLeases(db, schema, s, o, out);
  for (const s of streams) await checkPartitions(db, schema, s, out);
  await checkDeclaration(db, schema, o.declared, out);
  await checkConnections(db, o.declared, o, out);
  return out;
}

async function checkMigrations(db: pg.Pool, schema: string, out: Finding[]): Promise<StreamFamily[]> {
  const { system: v, streams } = await migrationState(db, schema);
  if (v < SYSTEM_VERSION) out.push({ check: "migrations", severity: "error", message: `control plane of ${schema} is at version ${v}; this library needs ${SYSTEM_VERSION}`, fix: "run `sqlstreams migrate`" });
  else if (v > SYSTEM_VERSION) out.push({ check: "migrations", severity: "error", message: `control plane of ${schema} is at version ${v}, newer than this library (${SYSTEM_VERSION})`, fix: "upgrade @sqlstreams/*" });
  const behind = streams.filter((s) => s.version < STREAM_VERSION);
  for (const s of behind) {
    out.push({ check: "migrations", severity: "error", stream: s.name, message: `stream ${s.name}: table family at version ${s.version}; this library needs ${STREAM_VERSION}`, fix: "run `sqlstreams migrate`" });
  }
  const stale = v === SYSTEM_VERSION ? await staleFunctions(db, schema) : [];
  if (stale.length > 0) {
    const names = stale.map((f) => (f.streamId === null ? f.name : `${f.name}_${f.streamId}`));
    out.push({ check: "migrations", severity: "error", message: `${stale.length} function${stale.length === 1 ? " differs" : "s differ"} from this library's: ${names.slice(0, 5).join(", ")}${names.length > 5 ? ", …" : ""}`, fix: "run `sqlstreams migrate`" });
  }
  if (v === SYSTEM_VERSION && behind.length === 0 && stale.length === 0) out.push({ check: "migrations", severity: "ok", message: `no pending migrations (control plane ${v}, ${streams.length} stream famil${streams.length === 1 ? "y" : "ies"} at ${STREAM_VERSION})` });
  return streams;
}

/** Open transactions holding RowExclusiveLock on the stream's log: claims cannot pass ids they may still commit (docs/protocol/poll-cycle.md#the-fence). */
async function checkFence(db: pg.Pool, schema: string, s: StreamFamily, o: DoctorOptions, out: Finding[]): Promise<void> {
  const holders = await fenceHolders(db, schema, s.id);
  const old = holders.filter((h) => (h.xactAgeMs ?? 0) >= o.holdMs);
  for (const h of old) {
    out.push({
      check: "fence", severity: "error", stream: s.name,
      message: `stream ${s.name}: backend ${h.pid} (${h.applicationName || "no application_name"}) has held the stream's fence for ${age(h.xactAgeMs)} in an open transaction: every group's claims wait for it; last statement: ${h.statement ?? "unknown"}`,
      fix: `commit or roll back that transaction; if it is abandoned: SELECT pg_terminate_backend(${h.pid})`,
      details: { pid: h.pid, ageMs: Math.round(h.xactAgeMs ?? 0), applicationName: h.applicationName, statement: h.statement },
    });
  }
  if (old.length === 0) out.push({ check: "fence", severity: "ok", stream: s.name, message: `stream ${s.name}: no transaction has held the fence for ${age(o.holdMs)} or more${holders.length > 0 ? ` (${holders.length} younger)` : ""}` });
}

async function checkLeases(db: pg.Pool, schema: string, s: StreamFamily, o: DoctorOptions, out: Finding[]): Promise<void> {
  for (const g of await leaseHealth(db, schema, s.id, o.recentMs)) {
    if (g.expiredRanges > 0 || g.expiredRows > 0) {
      out.push({
        check: "leases", severity: "warning", stream: s.name, group: g.group,
        message: `${s.name}/${g.group}: ${g.expiredRanges} expired range lease(s)${g.oldestRangeMs !== null ? ` (oldest expired ${age(g.oldestRangeMs)} ago)` : ""} and ${g.expiredRows} expired row lease(s): a poll crashed or ran past its timeout`,
        fix: "nothing is lost: the next poll reclaims them. If it keeps happening, raise the function timeout or the message timeout, or lower batchLimit; look for crashes in the function's logs",
        details: { expiredRanges: g.expiredRanges, expiredRows: g.expiredRows },
      });
    }
    if (g.quarantined > 0 || g.killed > 0) {
      out.push({
        check: "quarantines", severity: "warning", stream: s.name, group: g.group,
        message: `${s.name}/${g.group}: in the last ${age(o.recentMs)}, ${g.quarantined} message(s) quarantined out of a crash-looping range${g.quarantinedIds.length > 0 ? ` (ids ${g.quarantinedIds.join(", ")})` : ""} and ${g.killed} made dead by the kill backstop`,
        fix: `a message crashes the process: sqlstreams inspect ${s.name} --id <id> shows its attempts; fix the handler, then redrive`,
        details: { quarantined: g.quarantined, ids: g.quarantinedIds, killed: g.killed },
      });
    }
  }
  const bad = out.some((f) => (f.check === "leases" || f.check === "quarantines") && f.stream === s.name);
  if (!bad) out.push({ check: "leases", severity: "ok", stream: s.name, message: `stream ${s.name}: no expired leases, no quarantines in the last ${age(o.recentMs)}` });
}

/** Partition K (the next id's) and K+1 must exist before producers need them (docs/protocol/retention.md). */
async function checkPartitions(db: pg.Pool, schema: string, s: StreamFamily, out: Finding[]): Promise<void> {
  const { nextId: next, current: k, missing } = await partitionState(db, schema, s.id, s.partitionSize);
  if (missing.length === 0) {
    out.push({ check: "partitions", severity: "ok", stream: s.name, message: `stream ${s.name}: partitions ${k} and ${k + 1n} exist (next id ${next})` });
    return;
  }
  const current = missing.includes(k.toString());
  out.push({
    check: "partitions", severity: current ? "error" : "warning", stream: s.name,
    message: `stream ${s.name}: partition${missing.length > 1 ? "s" : ""} ${missing.join(" and ")} missing (next id ${next}, partition size ${s.partitionSize})${current ? ": the next produce must create it itself and fails with SQL0022 if it cannot" : ""}`,
    fix: `run \`sqlstreams maintain --stream ${s.name}\` (and check that the maintain function is scheduled and has DDL rights)`,
    details: { nextId: next.toString(), missing },
  });
}

interface Declared {
  file: string;
  groups: { stream: string; group: string; parallelism: number; mode: string }[];
  /** Groups whose handler file does not exist under the app's root, with the reason. */
  missingHandlers: { stream: string; group: string; message: string }[];
}

async function declaration(file: string, root: string): Promise<Declared> {
  const { resolvedDeclaration } = await import("@sqlstreams/aws");
  const d = await loadDeclaration(file, root);
  const missingHandlers: Declared["missingHandlers"] = [];
  for (const g of d.groups) {
    try {
      handlerFile(root, g);
    } catch (e) {
      if (!isSqlStreamsError(e, "SQL0070")) throw e;
      missingHandlers.push({ stream: g.stream, group: g.group, message: e.message });
    }
  }
  return {
    file: d.shown,
    groups: d.groups.map((g) => {
      const r = resolvedDeclaration(g);
      return { stream: g.stream, group: g.group, parallelism: r.parallelism, mode: r.mode };
    }),
    missingHandlers,
  };
}

async function checkDeclaration(db: pg.Pool, schema: string, d: Declared | null, out: Finding[]): Promise<void> {
  if (d === null) {
    out.push({ check: "declaration", severity: "ok", message: `declaration not checked: no ${DEFAULT_GROUPS_FILES[0]} here (pass --groups PATH, the file that exports your \`groups\`, from the app's root)` });
    return;
  }
  const registeredPairs = await registeredGroups(db, schema);
  const key = (x: { stream: string; group: string }) => `${x.stream}/${x.group}`;
  const registered = new Set(registeredPairs.map(key));
  const declared = new Set(d.groups.map(key));
  let problems = 0;
  for (const m of d.missingHandlers) {
    problems++;
    out.push({
      check: "declaration", severity: "error", stream: m.stream, group: m.group,
      message: `${m.stream}/${m.group}: its handler file is missing: ${m.message.replace(/^SQL0070 /, "").replace(/ \(fix: .*\)$/s, "")}`,
      fix: "correct the group's `function` (<path from the app's root, no extension>.<export>), or run doctor in the app's root",
    });
  }
  for (const g of d.groups) {
    if (registered.has(key(g))) continue;
    problems++;
    out.push({
      check: "declaration", severity: "error", stream: g.stream, group: g.group,
      message: `${key(g)} is declared in ${d.file} but not registered: its poll function fails (SQL0010) and nothing consumes it`,
      fix: `deploy (the migrate function registers every declared group), or locally: sqlstreams dev --groups ${d.file}`,
    });
  }
  for (const g of registeredPairs) {
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
  const { max, reserved, used } = await connectionUse(db);
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

export async function doctor(ctx: CommandContext, v: Values): Promise<number> {
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
  const cwd = ctx.io.cwd;
  // An explicit --groups must load; without it the default file is checked when the app has one.
  const option = str("groups");
  const groupsFile = option !== undefined || DEFAULT_GROUPS_FILES.some((f) => existsSync(resolve(cwd, f))) ? findDeclaration(option, cwd, "doctor") : null;
  // The declaration loads (and fails with its coded error) before the database is asked anything.
  const declared = groupsFile === null ? null : await declaration(groupsFile, cwd);
  ctx.client();
  const findings = await diagnose(ctx.db(), ctx.common.schema, { holdMs: dur("hold-threshold", 5_000), recentMs: dur("recent", 86_400_000), declared, poolSize });
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
