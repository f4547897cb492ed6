// Maintenance (docs/protocol/retention.md): partitions ahead of the producers, retention drops and sweeps, TTLs,
// expired key leases, empty compaction heads, progress samples. Driven from outside (the maintain
// Lambda, `sqlstreams dev`, stream.maintain()); every step is bounded, independent and safe to run
// from several invocations at once. One file per step, each with its statements:
// partitions.ts (1), drop.ts (2), sweep.ts (3), held.ts (the floor's report), sweeps.ts (4–6);
// run.ts holds what the steps share.
import type { Runtime } from "../runtime.js";
import type { Db } from "../db.js";
import { SqlStreamsError } from "../errors.js";
import * as History from "../sql/history.js";
import * as MaintainSql from "../sql/maintain.js";
import { schemaNames, tables } from "../sql/names.js";
import { MOVE_LIMIT, moveScheduled } from "../sql/scheduled.js";
import { validateStreamName } from "../validate.js";
import { monotonicDeadline } from "../clock.js";
import { dropExpired } from "./drop.js";
import { noteHeldRetention } from "./held.js";
import { createAhead } from "./partitions.js";
import { type MaintainReport, type MaintainedStream, MaintainRun } from "./run.js";
import { sweep } from "./sweep.js";
import { deleteEmptyHeads, deleteExpiredKeyLeases, deleteIdempotencyKeys } from "./sweeps.js";

export type { MaintainReport } from "./run.js";

export interface MaintainOptions {
  /** Epoch ms. No step or batch starts when less than 2 000 ms remain. */
  deadline?: number;
}

/** The maintenance settings of every stream, or of the named ones (unknown names are left out). */
async function loadStreams(db: Db, names?: string[]): Promise<MaintainedStream[]> {
  const r =
    names === undefined
      ? await MaintainSql.allStreamSettings.query(db, db.pool, schemaNames(db.q), {})
      : await MaintainSql.streamSettingsByName.query(db, db.pool, schemaNames(db.q), { names });
  return r.rows.map((x) => ({
    id: x.id,
    name: x.name,
    partitionSize: BigInt(x.partition_size),
    retentionMs: BigInt(x.retention_ms),
    idempotencyKeyTtlMs: BigInt(x.idempotency_key_ttl_ms),
  }));
}

/** Runs maintenance for every registered stream, or the named ones (all must exist: SQL0009). */
export async function maintainStreams(
  client: Runtime,
  opts: MaintainOptions & { streams?: string[] },
): Promise<Record<string, MaintainReport>> {
  const db = client.db;
  let names: string[] | undefined;
  if (opts.streams !== undefined) {
    if (!Array.isArray(opts.streams)) throw new SqlStreamsError("SQL0015", "maintain({ streams }) takes an array of stream names");
    names = opts.streams.map((n) => validateStreamName(n));
  }
  checkDeadline(opts.deadline);
  await client.ready();
  const streams = await loadStreams(db, names);
  if (names !== undefined) {
    const found = new Set(streams.map((s) => s.name));
    const missing = names.filter((n) => !found.has(n));
    if (missing.length > 0) {
      throw new SqlStreamsError("SQL0009", `stream ${JSON.stringify(missing[0])} is not registered`, { stream: missing[0], missing });
    }
  }
  const out: Record<string, MaintainReport> = {};
  for (const s of streams) out[s.name] = await maintainOne(client, s, opts.deadline);
  return out;
}

/** Runs maintenance for one stream (what `stream.maintain()` calls). */
export async function maintainStream(client: Runtime, streamName: string, opts: MaintainOptions = {}): Promise<MaintainReport> {
  const name = validateStreamName(streamName);
  checkDeadline(opts.deadline);
  await client.ready();
  const [s] = await loadStreams(client.db, [name]);
  if (!s) throw new SqlStreamsError("SQL0009", `stream ${JSON.stringify(name)} is not registered`, { stream: name });
  return maintainOne(client, s, opts.deadline);
}

/** One mover call (a missing partition counts as none moved: the next maintain creates it first). */
async function moveDue(client: Runtime, s: MaintainedStream): Promise<number> {
  const moved = (await moveScheduled.query(client.db, client.db.pool, tables(client.db.q, s.id), { limit: MOVE_LIMIT })).rows[0].moved;
  if (moved > 0) await client.afterProduce(s.name);
  return Math.max(0, moved);
}

function checkDeadline(deadline: unknown): void {
  if (deadline !== undefined && (typeof deadline !== "number" || !Number.isFinite(deadline))) {
    throw new SqlStreamsError("SQL0015", "maintain({ deadline }) must be epoch milliseconds (a finite number)", { deadline });
  }
}

async function maintainOne(client: Runtime, s: MaintainedStream, deadline: number | undefined): Promise<MaintainReport> {
  const db = client.db;
  // The deadline moves onto the monotonic clock once (docs/protocol/poll-cycle.md#options).
  const run = new MaintainRun(client, s, deadline === undefined ? undefined : monotonicDeadline(deadline));
  await run.step("partitions", () => createAhead(run));
  const r = run.report;
  if (s.retentionMs > 0n && run.stateKnown) {
    await run.step("drop", () => dropExpired(run));
    await run.step("sweep", () => sweep(run));
    await run.step("floor", () => noteHeldRetention(run));
  }
  // Due scheduled messages, after the partitions they need (docs/guide/producing.md#scheduled-delivery).
  await run.batches("scheduled", () => moveDue(client, s), (n) => (r.scheduledMoved += n));
  // 4.–6. TTL and lease sweeps, in batches until a batch comes back short.
  await run.batches("idempotencyKeys", () => deleteIdempotencyKeys(db, s.id, s.idempotencyKeyTtlMs), (n) => (r.idempotencyKeysDeleted += n));
  await run.batches("keyLeases", () => deleteExpiredKeyLeases(db, s.id), (n) => (r.keyLeasesDeleted += n));
  await run.batches("emptyHeads", () => deleteEmptyHeads(db, s.id), (n) => (r.emptyHeadsDeleted += n));
  // 7. A progress sample of every group, with the history's pruning in the same statement
  // (docs/protocol/data-model.md#progress-history). A deadlock with another maintain()'s partition DDL is
  // repeated by step(), like every step's.
  await run.step("history", async () => {
    r.progressSampled = (await History.sampleProgress.query(db, db.pool, tables(db.q, s.id), { streamId: s.id })).rowCount ?? 0;
  });
  return r;
}
