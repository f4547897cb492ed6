// Destroying a consumer group or a whole stream. Guarded: refused with SQL0042 while there is
// live work (open range leases, live key leases, unresolved exception rows) or, for a stream,
// while it still holds messages — unless { force: true }.
import type pg from "pg";
import type { Runtime } from "./runtime.js";
import { type Db, RETRY_PAUSES, query, transaction } from "./db.js";
import { SqlStreamsError } from "./errors.js";
import { advisoryXactLock, localLockTimeout, relationExists } from "./sql/catalog.js";
import * as Destroy from "./sql/destroy.js";
import { retentionLockKey } from "./maintain/floor.js";
import { lockMigrations } from "./sql/migrate.js";
import { type Tables, schemaNames, tables } from "./sql/names.js";
import { validateGroupName, validateStreamName } from "./validate.js";
import { setTimeout as sleep } from "node:timers/promises";

export interface DestroyOptions {
  /** Destroy even with live leases, unresolved rows or (for a stream) retained messages. */
  force?: boolean;
}

/** What a group holds that a destroy would throw away while it is still work. */
export interface LiveWork {
  /** Range leases of the group (open, expired or released: the ids inside are unresolved). */
  rangeLeases: number;
  /** Key leases that have not expired. */
  keyLeases: number;
  ready: number;
  deferred: number;
  inflight: number;
}

export interface DestroyGroupResult {
  stream: string;
  group: string;
  forced: boolean;
  /** The live work found (and, when forced, discarded). */
  live: LiveWork;
  deleted: { exceptionRows: number; deliveryLogRows: number; rangeLeases: number; keyLeases: number };
}

export interface DestroyStreamResult {
  stream: string;
  streamId: string;
  forced: boolean;
  /** Whether the stream still held messages. */
  hadMessages: boolean;
  /** Names of the groups destroyed with it. */
  groups: string[];
}

/** Lock waits of a destroy; a busy stream fails with SQL0042 rather than queueing producers for long. */
const DESTROY_LOCK_TIMEOUT_MS = 5_000;

function opt(opts: unknown): boolean {
  if (opts === undefined || opts === null) return false;
  if (typeof opts !== "object" || Array.isArray(opts)) throw new SqlStreamsError("SQL0015", "destroy options must be an object like { force?: boolean }");
  const f = (opts as DestroyOptions).force;
  if (f !== undefined && typeof f !== "boolean") throw new SqlStreamsError("SQL0015", `destroy option force must be a boolean, got ${String(f)}`);
  for (const k of Object.keys(opts)) {
    if (k !== "force") throw new SqlStreamsError("SQL0015", `destroy option ${k}: unknown key; allowed: force`);
  }
  return f === true;
}

/** The live work of one group (`id` a group id) or of every group of a stream (`id` the stream id). */
async function liveWork(db: Db, c: pg.PoolClient, streamId: string, of: "group" | "stream", id: string): Promise<LiveWork> {
  const r = await Destroy.liveWorkOf[of].query(db, c, tables(db.q, streamId), { id });
  const x = r.rows[0];
  return { rangeLeases: x.range_leases, keyLeases: x.key_leases, ready: x.ready, deferred: x.deferred, inflight: x.inflight };
}

function hasLiveWork(w: LiveWork): boolean {
  return w.rangeLeases + w.keyLeases + w.ready + w.deferred + w.inflight > 0;
}

function describe(w: LiveWork): string {
  const parts: string[] = [];
  if (w.rangeLeases) parts.push(`${w.rangeLeases} range lease(s)`);
  if (w.keyLeases) parts.push(`${w.keyLeases} live key lease(s)`);
  const unresolved = w.ready + w.deferred + w.inflight;
  if (unresolved) parts.push(`${unresolved} unresolved exception row(s) (ready ${w.ready}, deferred ${w.deferred}, inflight ${w.inflight})`);
  return parts.join(", ");
}

function lockBusy(e: unknown, what: string): unknown {
  if ((e as { code?: string })?.code === "55P03") {
    return new SqlStreamsError("SQL0042", `${what} refused: its tables are in use (lock wait over ${DESTROY_LOCK_TIMEOUT_MS}ms); retry when producers and pollers are idle`, {}, e);
  }
  return e;
}

/**
 * One destroy transaction, repeated (100, 200, 400 ms) when Postgres picked it as a deadlock
 * victim: destroys take table and row locks that a running poll may also want, and lose the race
 * rather than make the poll fail. A lock wait over the timeout becomes SQL0042.
 */
async function destroyTx<T>(db: Db, what: string, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await transaction(db, async (c) => {
        await query(db, c, localLockTimeout(`${Math.trunc(DESTROY_LOCK_TIMEOUT_MS)}ms`));
        return fn(c);
      });
    } catch (e) {
      const code = (e as { code?: string })?.code;
      if ((code === "40P01" || code === "40001") && attempt < RETRY_PAUSES.length) {
        await sleep(RETRY_PAUSES[attempt]);
        continue;
      }
      throw lockBusy(e, what);
    }
  }
}

async function streamIdOf(db: Db, c: pg.PoolClient, name: string): Promise<string> {
  const s = await Destroy.streamIdByName.update.query(db, c, schemaNames(db.q), { stream: name });
  if (s.rowCount === 0) throw new SqlStreamsError("SQL0009", `stream ${JSON.stringify(name)} is not registered`, { stream: name });
  return s.rows[0].id;
}

/**
 * Deletes a consumer group: its config, cursor, exception rows, delivery-log rows and leases, in
 * one transaction. Refused (SQL0042) while the group has range leases, live key leases or
 * unresolved exception rows, unless forced. A poll of the group that is still running finds its
 * leases gone and writes nothing. Removing a lagging group releases the retention it held.
 */
export async function destroyGroup(client: Runtime, stream: string, group: string, opts: DestroyOptions = {}): Promise<DestroyGroupResult> {
  const streamName = validateStreamName(stream);
  const groupName = validateGroupName(group);
  const force = opt(opts);
  await client.ready();
  const db = client.db;
  const result = await destroyTx(db, `destroy of group ${streamName}/${groupName}`, async (c) => {
    // Share-lock the stream row so a concurrent destroyStream() cannot drop the tables under us.
    const s = await Destroy.streamIdByName.share.query(db, c, schemaNames(db.q), { stream: streamName });
    if (s.rowCount === 0) throw new SqlStreamsError("SQL0009", `stream ${JSON.stringify(streamName)} is not registered`, { stream: streamName });
    const streamId = s.rows[0].id;
    const t = tables(db.q, streamId);
    const g = await Destroy.lockGroup.query(db, c, t, { streamId, group: groupName });
    if (g.rowCount === 0) {
      throw new SqlStreamsError("SQL0010", `consumer group ${JSON.stringify(groupName)} is not registered on stream ${streamName}`, { stream: streamName, group: groupName });
    }
    const groupId = g.rows[0].id;
    // Locks in the order the poll takes them (Destroy.lockGroupWork), then exception rows before
    // key leases (starting and recording a row lock it, then its key).
    for (const lock of Destroy.lockGroupWork) await lock.query(db, c, t, { groupId });
    const live = await liveWork(db, c, streamId, "group", groupId);
    if (hasLiveWork(live) && !force) {
      throw new SqlStreamsError(
        "SQL0042",
        `destroy of group ${streamName}/${groupName} refused: it has ${describe(live)}; pause it and let the work finish (or expire), or pass { force: true }`,
        { stream: streamName, group: groupName, ...live },
      );
    }
    const deleted: Partial<Record<(typeof Destroy.GROUP_TABLES)[number], number>> = {};
    for (const { name, statement } of Destroy.deleteGroupRows) deleted[name] = (await statement.query(db, c, t, { groupId })).rowCount ?? 0;
    await Destroy.deleteGroup.query(db, c, t, { groupId });
    const out: DestroyGroupResult = {
      stream: streamName,
      group: groupName,
      forced: force,
      live,
      deleted: {
        exceptionRows: deleted.exception_queue ?? 0,
        deliveryLogRows: deleted.delivery_log ?? 0,
        rangeLeases: deleted.claim_lease ?? 0,
        keyLeases: deleted.message_key_lease ?? 0,
      },
    };
    return out;
  });
  db.events.emit(
    { level: "warn", code: "DESTROY", message: `group ${streamName}/${groupName} destroyed${force ? " (forced)" : ""}`, stream: streamName, group: groupName, deleted: result.deleted },
    false,
  );
  return result;
}

/**
 * Drops a stream: its whole table family (every partition, the sequence, the protocol functions),
 * its groups and its control-plane rows, in one transaction that also holds the migration lock.
 * Refused (SQL0042) while the stream still holds messages or any group has live work, unless
 * forced. Producers and pollers that still know the stream's id fail afterwards; a stream
 * registered again under the same name gets a new id and an empty family.
 */
export async function destroyStream(client: Runtime, stream: string, opts: DestroyOptions = {}): Promise<DestroyStreamResult> {
  const streamName = validateStreamName(stream);
  const force = opt(opts);
  await client.ready();
  const db = client.db;
  const result = await destroyTx(db, `destroy of stream ${streamName}`, async (c) => {
    await lockMigrations(db, c);
    const streamId = await streamIdOf(db, c, streamName);
    const t = tables(db.q, streamId);
    // Waits for a partition drop or sweep batch of a running maintain().
    await advisoryXactLock.query(db, c, t, { lockKey: retentionLockKey(db, streamId) });
    const present = await relationExists.query(db, c, t, { name: t.messageLog });
    let hadMessages = false;
    if (present.rows[0].ok) {
      // No message can arrive between the check below and the drop. (A poll that holds a family
      // table and waits for the log can deadlock with us here; Postgres breaks it and destroyTx
      // runs again.)
      await Destroy.lockLog.query(db, c, t, {});
      hadMessages = (await Destroy.logHasMessages.query(db, c, t, {})).rows[0].any;
      hadMessages = (await hasScheduled(db, c, t)) || hadMessages;
    }
    const groups = await Destroy.groupNames.query(db, c, t, { streamId });
    if (!force) {
      const familyPresent = present.rows[0].ok;
      const live = familyPresent
        ? await liveWork(db, c, streamId, "stream", streamId)
        : null;
      if (hadMessages || (live && hasLiveWork(live))) {
        const why = [hadMessages ? "it still holds messages" : "", live && hasLiveWork(live) ? `its groups have ${describe(live)}` : ""]
          .filter(Boolean)
          .join("; ");
        throw new SqlStreamsError(
          "SQL0042",
          `destroy of stream ${streamName} refused: ${why}; let retention empty it and the groups finish, or pass { force: true }`,
          { stream: streamName, hadMessages, groups: groups.rows.map((g) => g.name), ...(live ?? {}) },
        );
      }
    }
    await query(db, c, Destroy.dropFamily(db.q, streamId));
    const fns = await Destroy.familyFunctions.query(db, c, t, { schema: db.schema, pattern: Destroy.familyFunctionPattern(streamId) });
    for (const f of fns.rows) await query(db, c, Destroy.dropFunction(f.sig));
    await Destroy.deleteStream.query(db, c, t, { streamId });
    const out: DestroyStreamResult = { stream: streamName, streamId, forced: force, hadMessages, groups: groups.rows.map((g) => g.name) };
    return out;
  });
  client.forgetStream(streamName);
  db.events.emit(
    { level: "warn", code: "DESTROY", message: `stream ${streamName} (id ${result.streamId}) destroyed${force ? " (forced)" : ""}`, stream: streamName, groups: result.groups },
    false,
  );
  return result;
}

/** Locks the stream's scheduled table (a family registered by a library without scheduled delivery has none) and says whether a message waits in it. */
async function hasScheduled(db: Db, c: pg.PoolClient, t: Tables): Promise<boolean> {
  if (!(await relationExists.query(db, c, t, { name: t.fn("scheduled_message") })).rows[0].ok) return false;
  await Destroy.lockScheduled.query(db, c, t, {});
  return (await Destroy.scheduledHasMessages.query(db, c, t, {})).rows[0].any;
}
