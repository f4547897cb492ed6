import type pg from "pg";
import type { Runtime, StreamInfo } from "./runtime.js";
import { type MessageOptions, validateMessageOptions, validateStreamOptions, type StreamOptions } from "./config.js";
import { Consumer } from "./consumer.js";
import { RETRY_PAUSES, atEdge, connect, isPoolerAuthMessage, isPoolerNotSent, isTransient, query, transaction } from "./db.js";
import { SqlStreamsError, isSqlStreamsError } from "./errors.js";
import { type InspectTarget, type InspectedMessage, inspectMessages } from "./operator.js";
import { type MaintainOptions, type MaintainReport, maintainStream } from "./maintain.js";
import { type DestroyStreamResult, destroyStream } from "./destroy.js";
import { asPermissionError, lockMigrations, migrateStream } from "./sql/migrate.js";
import { ensurePartition, nextSequenceValue } from "./sql/partitions.js";
import * as P from "./sql/produce.js";
import { encodePayload, idempotencyUuid, validateGroupName, validateKey } from "./validate.js";
import { setTimeout as sleep } from "node:timers/promises";
import { compareIds } from "./ids.js";
import { type ProduceTrace, startProduce, withTraceparent } from "./otel.js";
import { type StandardSchema, checkProduced } from "./typed.js";
import { type Row, type Transactional, type TxExecutor, sqlState, toExecutor } from "./executor.js";

export interface ProduceOptions {
  key?: string;
  idempotencyKey?: string;
  compaction?: { rank?: number };
  message?: MessageOptions;
}
export interface BatchItem<T> {
  payload: T;
  key?: string;
  compaction?: { rank?: number };
  message?: MessageOptions;
}
export interface ProduceResult {
  id: string;
  duplicate: boolean;
}

interface Prepared {
  payload: string;
  bytes: number;
  key: string | null;
  rank: string | null;
  options: string | null;
  idempotency: string | null;
}

const PRODUCE_KEYS = ["key", "idempotencyKey", "compaction", "message"];
const MAX_BATCH = 1_000;
const NO_PARTITION = "23514";

/** Validates one produce call (docs/producing.md#validation), before any statement. */
function prepare(payload: unknown, opts: unknown, allowIdempotency: boolean, where = "options"): Prepared {
  if (opts === undefined || opts === null) opts = {};
  if (typeof opts !== "object" || Array.isArray(opts)) {
    throw new SqlStreamsError("SQL0015", `${where} must be an object`);
  }
  const o = opts as Record<string, unknown>;
  for (const k of Object.keys(o)) {
    if (!PRODUCE_KEYS.includes(k) || (k === "idempotencyKey" && !allowIdempotency && o[k] !== undefined)) {
      const why = k === "idempotencyKey" ? "batch items cannot carry an idempotencyKey; produce them one by one" : `unknown key; allowed: ${PRODUCE_KEYS.join(", ")}`;
      throw new SqlStreamsError("SQL0015", `${where}.${k}: ${why}`, { path: `${where}.${k}` });
    }
  }
  const text = encodePayload(payload);
  const key = o.key === undefined ? null : validateKey(o.key, "key");
  const idem = o.idempotencyKey === undefined ? null : idempotencyUuid(validateKey(o.idempotencyKey, "idempotencyKey"));
  const message = validateMessageOptions(o.message, "message");
  if ((message.concurrency === "exclusive" || message.concurrency === "ordered") && key === null) {
    throw new SqlStreamsError("SQL0019", `message.concurrency '${message.concurrency}' needs a key`, { path: "message.concurrency" });
  }
  let rank: string | null = null;
  if (o.compaction !== undefined) {
    const c = o.compaction as Record<string, unknown> | null;
    if (typeof c !== "object" || c === null || Array.isArray(c)) {
      throw new SqlStreamsError("SQL0020", "compaction must be an object like { rank?: number }", { path: "compaction" });
    }
    if (key === null) throw new SqlStreamsError("SQL0020", "compaction needs a key (the compaction key)", { path: "compaction" });
    const r = c.rank ?? 0;
    if (typeof r !== "number" || !Number.isSafeInteger(r)) {
      throw new SqlStreamsError("SQL0020", `compaction.rank must be a safe integer, got ${String(r)}`, { path: "compaction.rank" });
    }
    for (const k of Object.keys(c)) {
      if (k !== "rank") throw new SqlStreamsError("SQL0020", `compaction.${k}: unknown key; allowed: rank`);
    }
    if (message.concurrency === "ordered") {
      throw new SqlStreamsError("SQL0021", "message.concurrency 'ordered' cannot be combined with compaction", { path: "compaction" });
    }
    rank = String(r);
  }
  return {
    payload: text,
    bytes: Buffer.byteLength(text, "utf8"),
    key,
    rank,
    options: Object.keys(message).length === 0 ? null : JSON.stringify(message),
    idempotency: idem,
  };
}

/**
 * The producer span of a produce call (docs/operations.md#traces), or null when tracing is off;
 * its traceparent goes into every message's stored options.
 */
function startTrace(prepared: Prepared[], stream: string, operation: Parameters<typeof startProduce>[1]): ProduceTrace | null {
  const trace = startProduce(stream, operation, prepared.length);
  if (trace) for (const p of prepared) p.options = withTraceparent(p.options, trace.traceparent);
  return trace;
}

/** Runs the produce inside its span and ends the span with the ids or the error. */
async function inSpan<R extends ProduceResult | ProduceResult[]>(trace: ProduceTrace, run: () => Promise<R>): Promise<R> {
  try {
    const r = await run();
    trace.end(Array.isArray(r) ? r.map((x) => x.id) : [r.id]);
    return r;
  } catch (e) {
    trace.end(null, e);
    throw e;
  }
}

function checkSize(p: Prepared, info: StreamInfo): void {
  if (p.bytes > info.maxPayloadBytes) {
    throw new SqlStreamsError(
      "SQL0017",
      `payload is ${p.bytes} bytes of JSON; stream ${info.name} accepts at most ${info.maxPayloadBytes}`,
      { bytes: p.bytes, limit: info.maxPayloadBytes },
    );
  }
}

function isNoPartition(e: unknown): boolean {
  return (e as { code?: string })?.code === NO_PARTITION;
}

/** Errors that arrive without a server SQLSTATE after the statement was sent: outcome unknown. */
/**
 * The produce statement may have committed: the connection failed after it was sent (a network
 * error, a pooler's 08P01 for a crashed server connection) or no answer came within its bound.
 */
function connectionLost(e: unknown): boolean {
  if (isSqlStreamsError(e, "SQL0050")) return e.details.sent === true;
  const code = (e as { code?: string })?.code;
  if (code === "08P01") return !isPoolerNotSent(e) && !isPoolerAuthMessage(String((e as Error).message));
  if (code === "08006" || code === "08003") return true;
  return !code || !/^[0-9A-Z]{5}$/.test(code) ? isTransient(e) : false;
}

/** Validates a batch (at most 1000 items, no idempotency keys), before any statement. */
function prepareBatch<T>(items: BatchItem<T>[]): Prepared[] {
  if (!Array.isArray(items)) throw new SqlStreamsError("SQL0015", "produceBatch takes an array of items");
  if (items.length > MAX_BATCH) {
    throw new SqlStreamsError("SQL0015", `produceBatch takes at most ${MAX_BATCH} items, got ${items.length}`, { count: items.length });
  }
  return items.map((it, i) => {
    if (typeof it !== "object" || it === null) throw new SqlStreamsError("SQL0015", `items[${i}] must be an object { payload, key?, ... }`);
    const { payload, ...rest } = it;
    if (!("payload" in it)) throw new SqlStreamsError("SQL0015", `items[${i}].payload is missing`);
    return prepare(payload, rest, false, `items[${i}]`);
  });
}

/** The one statement of a batch: a JSON document reduced in SQL with compaction, else an insert from JSON arrays. */
function batchStatement(q: string, streamId: string, prepared: Prepared[]): { text: string; values: unknown[] } {
  if (prepared.some((p) => p.rank !== null)) {
    // Compaction needs the batch's winners per key: one JSON document, reduced in SQL.
    const parts: string[] = [];
    for (const p of prepared) {
      parts.push(`{"p":${p.payload},"k":${p.key === null ? "null" : JSON.stringify(p.key)},"r":${p.rank ?? "null"},"o":${p.options ?? "null"}}`);
    }
    return { text: P.produceBatch(q, streamId), values: [`[${parts.join(",")}]`] };
  }
  const meta = prepared.some((p) => p.key !== null || p.options !== null);
  const payloads = P.jsonArray(prepared.map((p) => p.payload));
  const values = meta
    ? [payloads, P.jsonArray(prepared.map((p) => (p.key === null ? null : JSON.stringify(p.key)))), P.jsonArray(prepared.map((p) => p.options))]
    : [payloads];
  return { text: P.produceBatchArrays(q, streamId, meta), values };
}

export class Stream<T = unknown> {
  /** Partitions this handle has seen or created (create-ahead is skipped for them). */
  private readonly seenPartitions = new Set<bigint>();

  constructor(
    private readonly client: Runtime,
    readonly name: string,
    /** A typed stream's schema (docs/producing.md#typed-streams): payloads are checked on produce and on consume. */
    readonly schema?: StandardSchema<T>,
  ) {}

  /** The payload to store: the schema's output when the stream has one (SQL0067 when it refuses). */
  private async typed(payload: T, item?: number): Promise<T> {
    return this.schema ? checkProduced(this.schema, payload, { stream: this.name, item }) : payload;
  }

  /** Batch items with their payloads checked by the stream's schema. */
  private async typedItems(items: BatchItem<T>[]): Promise<BatchItem<T>[]> {
    if (!this.schema || !Array.isArray(items)) return items;
    const out: BatchItem<T>[] = [];
    for (let i = 0; i < items.length; i++) {
      const it = items[i];
      out.push(typeof it === "object" && it !== null && "payload" in it ? { ...it, payload: await this.typed(it.payload, i) } : it);
    }
    return out;
  }

  /** Creates the stream_config row and the table family; on an existing stream replaces its settings. */
  register(opts: StreamOptions = {}): Promise<void> {
    return atEdge(`register() of stream ${this.name}`, async () => {
      const o = validateStreamOptions(opts);
      const db = this.client.db;
      if ((await this.client.controlPlaneVersion()) === 0) await this.client.migrate();
      else await this.client.ready();
      try {
        await transaction(db, async (c) => {
          await lockMigrations(db, c);
          const found = await query<{ id: string; partition_size: string }>(
            db,
            c,
            `SELECT id::text, partition_size::text FROM ${db.q}.stream_config WHERE name = $1 FOR UPDATE`,
            [this.name],
          );
          let id: string;
          let size: string;
          if (found.rowCount) {
            id = found.rows[0].id;
            size = found.rows[0].partition_size;
            if (o.partitionSize !== undefined && String(o.partitionSize) !== size) {
              throw new SqlStreamsError("SQL0011", `stream ${this.name} has partitionSize ${size}; it cannot change to ${o.partitionSize}`, {
                stored: size,
                given: o.partitionSize,
              });
            }
            await query(
              db,
              c,
              `UPDATE ${db.q}.stream_config SET retention_ms = $2, delivery_log_mode = $3, idempotency_key_ttl_ms = $4,
                      max_payload_bytes = $5, updated_at = now() WHERE id = $1`,
              [id, o.retentionMs, o.deliveryLog, o.idempotencyKeyTtlMs, o.maxPayloadBytes],
            );
          } else {
            size = String(o.partitionSize ?? 1_000_000);
            const ins = await query<{ id: string }>(
              db,
              c,
              `INSERT INTO ${db.q}.stream_config (name, partition_size, retention_ms, delivery_log_mode, idempotency_key_ttl_ms, max_payload_bytes)
               VALUES ($1, $2, $3, $4, $5, $6) RETURNING id::text`,
              [this.name, size, o.retentionMs, o.deliveryLog, o.idempotencyKeyTtlMs, o.maxPayloadBytes],
            );
            id = ins.rows[0].id;
          }
          await migrateStream(db, c, id, size);
        });
      } catch (e) {
        throw asPermissionError(e);
      }
      this.client.forgetStream(this.name);
    });
  }

  consumer(group: string): Consumer<T> {
    return new Consumer<T>(this.client, this.name, validateGroupName(group), this.schema);
  }

  /** Appends one message in its own transaction. */
  produce(payload: T, opts: ProduceOptions = {}): Promise<ProduceResult> {
    return atEdge(`produce() of stream ${this.name}`, async () => {
      const p = prepare(this.schema ? await this.typed(payload) : payload, opts, true);
      const info = await this.client.streamInfo(this.name);
      checkSize(p, info);
      const trace = startTrace([p], this.name, "produce");
      return trace ? inSpan(trace, () => this.produceStored(p, info)) : this.produceStored(p, info);
    });
  }

  private async produceStored(p: Prepared, info: StreamInfo): Promise<ProduceResult> {
    const db = this.client.db;
    const text = p.idempotency ? P.produceIdempotent(db.q, info.id) : P.produceOne(db.q, info.id);
    const values: unknown[] = [p.key, p.rank, p.payload, p.options];
    if (p.idempotency) values.push(p.idempotency);
    let rows: { id: string; duplicate: boolean }[];
    try {
      rows = await this.runProduce<{ id: string; duplicate: boolean }>(info, text, values, 1);
    } catch (e) {
      // A concurrent produce of the same key committed first: the key insert failed and took this
      // statement's message row with it (docs/producing.md#idempotency-keys).
      if (!p.idempotency || !P.isIdempotencyRace(e)) throw e;
      rows = [];
    }
    let result: ProduceResult;
    if (rows.length === 0) {
      // The key's first produce committed after this statement's snapshot: read it now.
      const again = await query<{ id: string }>(db, db.pool, P.idempotencyLookup(db.q, info.id), [p.idempotency]);
      result = { id: again.rows[0].id, duplicate: true };
    } else {
      result = { id: rows[0].id, duplicate: rows[0].duplicate };
    }
    if (!result.duplicate) {
      await this.createAhead(info, [result.id]);
      await this.client.afterProduce(this.name);
    }
    return result;
  }

  /** Appends up to 1000 messages in one transaction, all or nothing; ids ascend in item order. */
  produceBatch(items: BatchItem<T>[]): Promise<ProduceResult[]> {
    return atEdge(`produceBatch() of stream ${this.name}`, async () => {
      const prepared = prepareBatch(this.schema ? await this.typedItems(items) : items);
      if (prepared.length === 0) return [];
      const info = await this.client.streamInfo(this.name);
      for (const p of prepared) checkSize(p, info);
      const trace = startTrace(prepared, this.name, "produceBatch");
      return trace ? inSpan(trace, () => this.produceBatchStored(prepared, info)) : this.produceBatchStored(prepared, info);
    });
  }

  private async produceBatchStored(prepared: Prepared[], info: StreamInfo): Promise<ProduceResult[]> {
    const st = batchStatement(this.client.db.q, info.id, prepared);
    const rows = await this.runProduce<{ id: string }>(info, st.text, st.values, prepared.length);
    // Ids were drawn in item order; RETURNING order is not promised, so order them.
    const ids = rows.map((r) => r.id).sort(compareIds);
    await this.createAhead(info, ids);
    await this.client.afterProduce(this.name);
    return ids.map((id) => ({ id, duplicate: false }));
  }

  /**
   * Appends one message inside the caller's open transaction: a pg client after BEGIN, a
   * postgres.js or Prisma transaction, or any TxExecutor (docs/producing.md#producing-inside-your-transaction).
   * It becomes visible when the caller commits; a failed insert rolls back to a savepoint only.
   */
  produceInTx(tx: Transactional, payload: T, opts: ProduceOptions = {}): Promise<ProduceResult> {
    return atEdge(`produceInTx() of stream ${this.name}`, async () => {
      const ex = toExecutor(tx, "produceInTx");
      const p = prepare(this.schema ? await this.typed(payload) : payload, opts, true);
      const info = await this.client.streamInfo(this.name);
      checkSize(p, info);
      const trace = startTrace([p], this.name, "produceInTx");
      return trace ? inSpan(trace, () => this.produceInTxStored(ex, p, info)) : this.produceInTxStored(ex, p, info);
    });
  }

  private async produceInTxStored(ex: TxExecutor, p: Prepared, info: StreamInfo): Promise<ProduceResult> {
    const q = this.client.db.q;
    const text = p.idempotency ? P.produceIdempotent(q, info.id) : P.produceOne(q, info.id);
    const values: unknown[] = [p.key, p.rank, p.payload, p.options];
    if (p.idempotency) values.push(p.idempotency);
    let rows: { id: string; duplicate: boolean }[];
    try {
      rows = await this.runInTx<{ id: string; duplicate: boolean }>(ex, info, text, values, 1, "produceInTx");
    } catch (e) {
      // Same-key race: the insert was rolled back to the savepoint, no second message remains.
      if (!p.idempotency || !P.isIdempotencyRace(e)) throw e;
      rows = [];
    }
    if (rows.length === 0) {
      // The key's first produce committed after this statement's snapshot: read it now.
      const again = await this.send<{ id: string }>(ex, P.idempotencyLookup(q, info.id), [p.idempotency]);
      return { id: again[0].id, duplicate: true };
    }
    return { id: rows[0].id, duplicate: rows[0].duplicate };
  }

  /**
   * Appends up to 1000 messages inside the caller's open transaction, like produceInTx; all of
   * them commit or roll back with it. Ids ascend in item order.
   */
  produceBatchInTx(tx: Transactional, items: BatchItem<T>[]): Promise<ProduceResult[]> {
    return atEdge(`produceBatchInTx() of stream ${this.name}`, async () => {
      const ex = toExecutor(tx, "produceBatchInTx");
      const prepared = prepareBatch(this.schema ? await this.typedItems(items) : items);
      if (prepared.length === 0) return [];
      const info = await this.client.streamInfo(this.name);
      for (const p of prepared) checkSize(p, info);
      const trace = startTrace(prepared, this.name, "produceBatchInTx");
      return trace ? inSpan(trace, () => this.produceBatchInTxStored(ex, prepared, info)) : this.produceBatchInTxStored(ex, prepared, info);
    });
  }

  private async produceBatchInTxStored(ex: TxExecutor, prepared: Prepared[], info: StreamInfo): Promise<ProduceResult[]> {
    const st = batchStatement(this.client.db.q, info.id, prepared);
    const rows = await this.runInTx<{ id: string }>(ex, info, st.text, st.values, prepared.length, "produceBatchInTx");
    return rows.map((r) => r.id).sort(compareIds).map((id) => ({ id, duplicate: false }));
  }

  /** Sends one statement on the caller's executor, through the client's query hook and statement bound. */
  private async send<R extends Row>(ex: TxExecutor, text: string, values?: unknown[]): Promise<R[]> {
    const r = await query(this.client.db, ex as unknown as pg.PoolClient, text, values);
    return r.rows as R[];
  }

  /**
   * Runs a produce statement behind a savepoint in the caller's transaction: a failed insert
   * rolls back to it only, and a missing partition is created (on another pooled connection,
   * at most 2 s) and the insert tried again (docs/producing.md#partitions).
   */
  private async runInTx<R extends Row>(ex: TxExecutor, info: StreamInfo, text: string, values: unknown[], n: number, where: string): Promise<R[]> {
    try {
      await this.send(ex, "SAVEPOINT sqlstreams_produce");
    } catch (e) {
      if (sqlState(e) === "25P01") {
        throw new SqlStreamsError("SQL0015", `${where} needs a connection inside an open transaction: call BEGIN first`, {}, e);
      }
      throw e;
    }
    for (let attempt = 0; ; attempt++) {
      try {
        const rows = await this.send<R>(ex, text, values);
        await this.send(ex, "RELEASE SAVEPOINT sqlstreams_produce");
        return rows;
      } catch (e) {
        await this.send(ex, "ROLLBACK TO SAVEPOINT sqlstreams_produce");
        const noPartition = sqlState(e) === NO_PARTITION;
        if (!noPartition || attempt >= 3) {
          if (noPartition) throw new SqlStreamsError("SQL0023", "partition creation cannot keep up with the id sequence", {}, e);
          throw e;
        }
        try {
          await this.recoverPartitions(info, n, 2_000);
        } catch (err) {
          throw new SqlStreamsError("SQL0022", `the partition for the next id of ${this.name} is missing and could not be created now`, {}, err);
        }
      }
    }
  }

  /** Runs maintenance for this stream. */
  maintain(opts: MaintainOptions = {}): Promise<MaintainReport> {
    return atEdge(`maintain() of stream ${this.name}`, async () => {
      await this.client.ready();
      return maintainStream(this.client, this.name, opts);
    });
  }

  /** Drops the stream and its whole table family; refused while it holds messages or groups unless forced. */
  /**
   * One message (by id) or a key's latest messages, each with where it stands in every consumer
   * group and its delivery-log timeline (docs/operations.md#inspect). SQL0058 when there is none.
   */
  inspect(target: InspectTarget): Promise<InspectedMessage<T>[]> {
    return atEdge(`inspect() of stream ${this.name}`, async () => {
      return inspectMessages<T>(this.client, this.name, target);
    });
  }

  destroy(opts: { force?: boolean } = {}): Promise<DestroyStreamResult> {
    return atEdge(`destroy() of stream ${this.name}`, async () => {
      const r = await destroyStream(this.client, this.name, opts);
      this.client.forgetStream(this.name);
      return r;
    });
  }

  /** Sends a produce statement with transient retries and missing-partition recovery (docs/producing.md#partitions, docs/producing.md#failures). */
  private async runProduce<R extends pg.QueryResultRow>(info: StreamInfo, text: string, values: unknown[], n: number): Promise<R[]> {
    const db = this.client.db;
    let recoveries = 0;
    let transient = 0;
    for (;;) {
      let c: pg.PoolClient;
      try {
        c = await connect(db);
      } catch (e) {
        if (transient < RETRY_PAUSES.length && isTransient(e)) {
          await sleep(RETRY_PAUSES[transient++]);
          continue;
        }
        throw e;
      }
      try {
        const r = await query<R>(db, c, text, values);
        c.release();
        return r.rows;
      } catch (e) {
        // A same-key race is an ordinary statement failure: the connection stays usable.
        c.release(P.isIdempotencyRace(e) ? undefined : true);
        if (isNoPartition(e)) {
          if (recoveries >= 3) throw new SqlStreamsError("SQL0023", "partition creation cannot keep up with the id sequence after 3 retries", {}, e);
          recoveries++;
          await this.recoverPartitions(info, n);
          continue;
        }
        if (connectionLost(e)) {
          throw new SqlStreamsError(
            "SQL0024",
            isSqlStreamsError(e, "SQL0050")
              ? `the database did not answer the produce within ${String(e.details.timeoutMs)} ms: the message may or may not exist; an idempotencyKey makes a retry safe`
              : "the connection was lost while the produce was committing: the message may or may not exist; an idempotencyKey makes a retry safe",
            {},
            e,
          );
        }
        if (transient < RETRY_PAUSES.length && isTransient(e)) {
          await sleep(RETRY_PAUSES[transient++]);
          continue;
        }
        throw e;
      }
    }
  }

  /**
   * Creates every partition covering the next n ids after an insert found none (SQL0041). With
   * `timeoutMs` (produceInTx: the caller's connection is busy in its transaction, so the work
   * needs another pooled one) it gives up after that long; creating a partition is idempotent,
   * so work still under way when it gives up does no harm.
   */
  private async recoverPartitions(info: StreamInfo, n: number, timeoutMs?: number): Promise<void> {
    if (timeoutMs === undefined) return this.createPartitionsAhead(info, n);
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no partition could be created within ${timeoutMs} ms`)), timeoutMs);
    });
    const work = this.createPartitionsAhead(info, n);
    work.catch(() => {});
    try {
      await Promise.race([work, expired]);
    } finally {
      clearTimeout(timer);
    }
  }

  private async createPartitionsAhead(info: StreamInfo, n: number): Promise<void> {
    const db = this.client.db;
    const next = await nextSequenceValue(db, info.id);
    const first = next / info.partitionSize;
    const last = (next + BigInt(n)) / info.partitionSize;
    for (let k = first; k <= last; k++) {
      await ensurePartition(db, info.id, info.partitionSize, k);
      this.seenPartitions.add(k);
    }
    db.events.emit({ level: "warn", code: "SQL0041", message: `missing partition of ${info.name} recovered`, stream: info.name, from: String(first), to: String(last) });
  }

  /** Ensures the next partition exists once a produce lands in the last tenth of one (docs/producing.md#partitions). */
  private async createAhead(info: StreamInfo, ids: string[]): Promise<void> {
    const size = info.partitionSize;
    const x = BigInt(ids[ids.length - 1]);
    const k = x / size;
    // The next partition once this one is 90 % used, and every partition the next call of the
    // same size would reach, so a batch as large as a partition does not fail and burn its ids.
    let last = (x + BigInt(ids.length)) / size;
    if ((x - k * size) * 10n >= 9n * size && last < k + 1n) last = k + 1n;
    try {
      for (let j = k + 1n; j <= last; j++) {
        if (this.seenPartitions.has(j)) continue;
        await ensurePartition(this.client.db, info.id, size, j);
        this.seenPartitions.add(j);
      }
    } catch (e) {
      this.client.db.events.emit({
        level: "warn",
        code: "SQL0041",
        message: `create-ahead of partitions after ${k} of ${info.name} failed: ${(e as Error).message}`,
        stream: info.name,
      });
    }
  }
}
