// The four produce paths (docs/guide/producing.md): one message or a batch, in its own transaction or
// inside the caller's; each validated first (prepare.ts), traced when tracing is on, then sent (send.ts).
import type { Runtime, StreamInfo } from "../runtime.js";
import { compareIds } from "../ids.js";
import { type ProduceTrace, startProduce, withTraceparent } from "../otel.js";
import type { TxExecutor } from "../executor.js";
import { tables } from "../sql/names.js";
import * as ProduceSql from "../sql/produce.js";
import { produceScheduled } from "../sql/scheduled.js";
import type { PartitionUpkeep } from "./partitions.js";
import { type Prepared, type ProduceResult, checkSize } from "./prepare.js";
import { batchStatement, sendInTx, sendOn, sendProduce } from "./send.js";

/** What the produce paths need of a stream handle. */
export interface ProduceTarget {
  client: Runtime;
  name: string;
  partitions: PartitionUpkeep;
}

type Operation = Parameters<typeof startProduce>[1];

/**
 * Looks the stream up, checks every payload's size, and runs `send` inside the producer span of
 * the call when tracing is on (docs/guide/operations.md#traces); its traceparent goes into every
 * message's stored options.
 */
async function traced<R extends ProduceResult | ProduceResult[]>(
  target: ProduceTarget, prepared: Prepared[], operation: Operation, send: (info: StreamInfo) => Promise<R>,
): Promise<R> {
  const info = await target.client.streamInfo(target.name);
  for (const p of prepared) checkSize(p, info);
  const trace = startProduce(target.name, operation, prepared.length);
  if (!trace) return send(info);
  for (const p of prepared) p.options = withTraceparent(p.options, trace.traceparent);
  return inSpan(trace, () => send(info));
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

function singleStatement(q: string, info: StreamInfo, p: Prepared): { text: string; values: unknown[] } {
  const t = tables(q, info.id);
  if (p.schedule) {
    const params = { key: p.key, rank: p.rank, payload: p.payload, options: p.options, idempotency: p.idempotency, ...p.schedule };
    return { text: produceScheduled.sql(t), values: produceScheduled.values(params) };
  }
  const message = { key: p.key, rank: p.rank, payload: p.payload, options: p.options };
  if (p.idempotency === null) return { text: ProduceSql.produceOne.sql(t), values: ProduceSql.produceOne.values(message) };
  const guarded = { ...message, idempotencyKey: p.idempotency };
  return { text: ProduceSql.produceIdempotent.sql(t), values: ProduceSql.produceIdempotent.values(guarded) };
}

type SingleRow = { id: string; duplicate: boolean; scheduled?: boolean; due_at?: Date | null };
type BatchRow = { id: string; scheduled?: boolean; due_at?: Date | null };

/**
 * A produce's answer. An idempotency key stored for a message still scheduled holds its scheduled
 * id negated (docs/guide/producing.md#scheduled-delivery): it answers that scheduled id.
 */
function resultOf(r: SingleRow): ProduceResult {
  const negative = r.id.startsWith("-");
  const out: ProduceResult = { id: negative ? r.id.slice(1) : r.id, duplicate: r.duplicate };
  if (negative || r.scheduled) out.scheduled = true;
  if (r.due_at) out.deliverAt = r.due_at;
  return out;
}

/**
 * One result per item, in item order: each kind's ids (log ids, scheduled ids) were drawn in item
 * order, and RETURNING order is not promised, so each kind is sorted and dealt out in turn.
 */
function batchResults(prepared: Prepared[], rows: BatchRow[]): ProduceResult[] {
  const now = rows.filter((r) => !r.scheduled).sort((a, b) => compareIds(a.id, b.id));
  const later = rows.filter((r) => r.scheduled).sort((a, b) => compareIds(a.id, b.id));
  let i = 0;
  let j = 0;
  return prepared.map((p) => {
    if (!p.schedule) return { id: now[i++].id, duplicate: false };
    const r = later[j++];
    return { id: r.id, duplicate: false, scheduled: true, ...(r.due_at ? { deliverAt: r.due_at } : {}) };
  });
}

/** Appends one message in its own transaction. */
export function produceOne(target: ProduceTarget, p: Prepared): Promise<ProduceResult> {
  return traced(target, [p], "produce", async (info) => {
    const db = target.client.db;
    const st = singleStatement(db.q, info, p);
    let rows: SingleRow[];
    try {
      rows = await sendProduce<SingleRow>(db, target.partitions, info, st.text, st.values, 1);
    } catch (e) {
      // A concurrent produce of the same key committed first: the key insert failed and took this
      // statement's message row with it (docs/guide/producing.md#idempotency-keys).
      if (!p.idempotency || !ProduceSql.isIdempotencyRace(e)) throw e;
      rows = [];
    }
    let result: ProduceResult;
    if (rows.length === 0) {
      // The key's first produce committed after this statement's snapshot: read it now.
      const again = await ProduceSql.idempotencyLookup.query(db, db.pool, tables(db.q, info.id), { idempotencyKey: p.idempotency });
      result = resultOf({ id: again.rows[0].id, duplicate: true });
    } else {
      result = resultOf(rows[0]);
    }
    if (!result.duplicate && !result.scheduled) {
      await target.partitions.createAhead(info, [result.id]);
      await target.client.afterProduce(target.name);
    }
    return result;
  });
}

/** Appends up to 1000 messages in one transaction, all or nothing; ids ascend in item order. */
export function produceMany(target: ProduceTarget, prepared: Prepared[]): Promise<ProduceResult[]> {
  return traced(target, prepared, "produceBatch", async (info) => {
    const st = batchStatement(target.client.db.q, info.id, prepared);
    const rows = await sendProduce<BatchRow>(target.client.db, target.partitions, info, st.text, st.values, prepared.length);
    const results = batchResults(prepared, rows);
    const ids = results.filter((r) => !r.scheduled).map((r) => r.id);
    if (ids.length > 0) {
      await target.partitions.createAhead(info, ids);
      await target.client.afterProduce(target.name);
    }
    return results;
  });
}

/** Appends one message inside the caller's open transaction; a failed insert rolls back to a savepoint only. */
export function produceOneInTx(target: ProduceTarget, ex: TxExecutor, p: Prepared): Promise<ProduceResult> {
  return traced(target, [p], "produceInTx", async (info) => {
    const db = target.client.db;
    const st = singleStatement(db.q, info, p);
    let rows: SingleRow[];
    try {
      rows = await sendInTx<SingleRow>(db, target.partitions, ex, info, st.text, st.values, 1, "produceInTx");
    } catch (e) {
      // Same-key race: the insert was rolled back to the savepoint, no second message remains.
      if (!p.idempotency || !ProduceSql.isIdempotencyRace(e)) throw e;
      rows = [];
    }
    if (rows.length === 0) {
      // The key's first produce committed after this statement's snapshot: read it now.
      const lookup = ProduceSql.idempotencyLookup;
      const again = await sendOn<{ id: string }>(db, ex, lookup.sql(tables(db.q, info.id)), lookup.values({ idempotencyKey: p.idempotency }));
      return resultOf({ id: again[0].id, duplicate: true });
    }
    return resultOf(rows[0]);
  });
}

/** Appends up to 1000 messages inside the caller's open transaction; ids ascend in item order. */
export function produceManyInTx(target: ProduceTarget, ex: TxExecutor, prepared: Prepared[]): Promise<ProduceResult[]> {
  return traced(target, prepared, "produceBatchInTx", async (info) => {
    const st = batchStatement(target.client.db.q, info.id, prepared);
    const rows = await sendInTx<BatchRow>(target.client.db, target.partitions, ex, info, st.text, st.values, prepared.length, "produceBatchInTx");
    return batchResults(prepared, rows);
  });
}
