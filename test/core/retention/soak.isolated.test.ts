// Soak: producers write across many small partitions while two groups consume (one pauses for a
// while and holds retention back) and two maintainers run maintain() concurrently. Checks that
// storage stays bounded by retention and the lowest group, that every message reaches every group
// (nothing unconsumed is dropped), that no maintain() fails, and that no dead or delivery-log row
// outlives its message. Prints the table sizes at the peak, before and after the final maintain(),
// next to a control stream without retention.
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { Permanent, type MaintainReport } from "@sqlstreams/core";
import { floorOf } from "../../../packages/core/dist/maintain/floor.js";
import { useFreshDatabase } from "../../support/db.js";
import { SCHEMA, type TestClient, count, streamIdOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();

const PARTITION = 250;
const BATCHES = 120;
const BATCH = 250; // 30 000 messages, 120 partitions
const RETENTION = 1000;
const PAUSE_FROM = 30; // the slow group stops consuming at this batch ...
const PAUSE_TO = 60; // ... and resumes here

interface Sizes {
  partitions: number;
  messages: number;
  logBytes: number;
  exceptionRows: number;
  exceptionBytes: number;
  deliveryRows: number;
  deliveryBytes: number;
  otherBytes: number;
}

async function sizes(t: TestClient, n: string): Promise<Sizes> {
  const r = await t.sql<Record<string, string>>(
    `SELECT (SELECT count(*) FROM pg_partition_tree($1::regclass) WHERE isleaf)::text AS partitions,
            (SELECT count(*) FROM ${SCHEMA}.message_log_${n})::text AS messages,
            (SELECT COALESCE(sum(pg_total_relation_size(relid)), 0) FROM pg_partition_tree($1::regclass))::text AS log_bytes,
            (SELECT count(*) FROM ${SCHEMA}.exception_queue_${n})::text AS eq_rows,
            pg_total_relation_size('${SCHEMA}.exception_queue_${n}')::text AS eq_bytes,
            (SELECT count(*) FROM ${SCHEMA}.delivery_log_${n})::text AS dl_rows,
            pg_total_relation_size('${SCHEMA}.delivery_log_${n}')::text AS dl_bytes,
            (pg_total_relation_size('${SCHEMA}.compaction_head_${n}') + pg_total_relation_size('${SCHEMA}.idempotency_key_${n}')
             + pg_total_relation_size('${SCHEMA}.claim_lease_${n}') + pg_total_relation_size('${SCHEMA}.message_key_lease_${n}')
             + pg_total_relation_size('${SCHEMA}.consumer_group_cursor_${n}'))::text AS other_bytes`,
    [`${SCHEMA}.message_log_${n}`],
  );
  const x = r[0];
  return {
    partitions: Number(x.partitions),
    messages: Number(x.messages),
    logBytes: Number(x.log_bytes),
    exceptionRows: Number(x.eq_rows),
    exceptionBytes: Number(x.eq_bytes),
    deliveryRows: Number(x.dl_rows),
    deliveryBytes: Number(x.dl_bytes),
    otherBytes: Number(x.other_bytes),
  };
}

const kb = (b: number) => `${(b / 1024).toFixed(0)} kB`;

describe("retention soak", () => {
  it("produces and consumes across many partitions with maintenance running concurrently: bounded, nothing lost", { timeout: 180_000 }, async () => {
    const t = testClient(url());
    await t.client.migrate();
    const consumers = testClient(url());
    const maintainers = [testClient(url()), testClient(url())];
    const observer = testClient(url());

    const s = t.client.stream<{ i: number; pad: string }>("soak.events");
    await s.register({ partitionSize: PARTITION, retention: RETENTION, deliveryLog: "all" });
    const control = t.client.stream<{ i: number; pad: string }>("soak.control");
    await control.register({ partitionSize: PARTITION });
    const n = await streamIdOf(t, "soak.events");
    const nc = await streamIdOf(t, "soak.control");

    const fast = consumers.client.stream("soak.events").consumer("fast");
    const slow = consumers.client.stream("soak.events").consumer("slow");
    await fast.register();
    await slow.register({ exceptionInitialBackoff: 20, message: { retry: { baseDelay: 20, maxDelay: 50 } } });

    const produced: string[] = [];
    const compacted = new Set<string>();
    const timeline: { at: number; head: number }[] = [];
    const seen = { fast: new Set<string>(), slow: new Set<string>() };
    const reports: MaintainReport[] = [];
    const violations: string[] = [];
    let batchNo = 0;
    let consuming = true;
    let peak: Sizes | null = null;
    let heldObserved = 0;

    const pad = "x".repeat(200);
    const producer = (async () => {
      for (batchNo = 0; batchNo < BATCHES; batchNo++) {
        const items = Array.from({ length: BATCH }, (_, j) => {
          const i = batchNo * BATCH + j;
          return i % 10 === 0 ? { payload: { i, pad }, key: `c${i % 50}`, compaction: {} } : { payload: { i, pad } };
        });
        const r = await s.produceBatch(items);
        r.forEach((x, j) => {
          produced.push(x.id);
          if (items[j].compaction) compacted.add(x.id);
        });
        await control.produceBatch(items.map(({ payload }) => ({ payload })));
        timeline.push({ at: Date.now(), head: Number(r[r.length - 1].id) });
        await sleep(15);
      }
    })();

    const consume = async (g: typeof fast, name: "fast" | "slow") => {
      for (;;) {
        if (name === "slow" && batchNo >= PAUSE_FROM && batchNo < PAUSE_TO) {
          await sleep(20);
          continue;
        }
        const r = await g.drain(
          (m) => {
            seen[name].add(m.id);
            const i = (m.payload as { i: number }).i;
            if (name === "fast" && i % 97 === 0) return Permanent(new Error(`poison ${i}`));
            if (name === "slow" && i % 89 === 0 && m.attempt === 0) throw new Error(`flaky ${i}`);
          },
          { batchLimit: 250 },
        );
        if (!consuming && r.idle) return;
        if (r.idle) await sleep(10);
      }
    };
    const consumerLoops = [consume(fast, "fast"), consume(slow, "slow")];

    let maintaining = true;
    let slowestMaintainMs = 0;
    const maintainerLoops = maintainers.map(async (m, k) => {
      await sleep(k * 37);
      while (maintaining) {
        const started = performance.now();
        reports.push(await m.client.stream("soak.events").maintain({ deadline: Date.now() + 30_000 }));
        slowestMaintainMs = Math.max(slowestMaintainMs, performance.now() - started);
        await sleep(40 + k * 25);
      }
    });

    // Storage bound: a partition stays only while it is above the floor, holds messages younger
    // than retention, is the active one, or is created ahead — give or take the maintenance
    // cadence, so the floor and the clock are taken SLACK ms back, plus twice the slowest
    // maintain() so far (a loaded machine stretches a run, and a partition can become droppable
    // just after a run passed it).
    const SLACK = 3000;
    const floors: { at: number; floor: number }[] = [];
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        // The observer reads every partition while maintainers create and drop them: when Postgres
        // picks its read as a deadlock's victim, that sample is skipped (the next one is 100 ms on).
        const read = await (async () => [await floorOf(observer.client.db, n), await sizes(observer, n)] as const)().catch(
          (e: { code?: string }) => {
            if (e?.code === "40P01") return null;
            throw e;
          },
        );
        if (!read) {
          await sleep(100);
          continue;
        }
        const [f, sz] = read;
        if (!peak || sz.logBytes + sz.deliveryBytes > peak.logBytes + peak.deliveryBytes) peak = sz;
        const now = Date.now();
        floors.push({ at: now, floor: Number(f.floor) });
        const slack = SLACK + 2 * slowestMaintainMs;
        const old = [...timeline].reverse().find((p) => p.at <= now - (RETENTION + slack));
        const lagged = [...floors].reverse().find((p) => p.at <= now - slack);
        const head = Number(f.head);
        const youngIds = head - (old ? old.head : 0);
        const bound = Math.ceil((head - (lagged ? lagged.floor : 0)) / PARTITION) + Math.ceil(youngIds / PARTITION) + 4;
        if (sz.partitions > bound) violations.push(`at head ${head}: ${sz.partitions} partitions > bound ${bound} (floor ${f.floor})`);
        if (f.heldBy?.group === "slow" && Number(f.floor) < head - 2 * BATCH) heldObserved++;
        await sleep(100);
      }
    })();

    // Deleted delivery-log and exception rows leave dead tuples that only VACUUM makes reusable;
    // this loop stands in for autovacuum (whose one-minute nap is longer than the soak).
    let vacuuming = true;
    const vacuumer = (async () => {
      while (vacuuming) {
        await sleep(1000);
        await observer.sql(`VACUUM ${SCHEMA}.delivery_log_${n}, ${SCHEMA}.exception_queue_${n}`);
      }
    })();

    await producer;
    // Let both groups catch up completely, then stop them.
    for (;;) {
      const [pf, ps] = [await fast.progress(), await slow.progress()];
      const unresolved = (p: typeof pf) => p.exceptions.ready + p.exceptions.deferred + p.exceptions.inflight;
      if (pf.lag === "0" && ps.lag === "0" && unresolved(pf) === 0 && unresolved(ps) === 0) break;
      await sleep(50);
    }
    consuming = false;
    await Promise.all(consumerLoops);
    maintaining = false;
    await Promise.all(maintainerLoops);
    sampling = false;
    await sampler;
    vacuuming = false;
    await vacuumer;

    // What is left once everything is consumed: the tail still inside retention (and whatever the
    // last maintenance pass had not reached yet).
    const before = await sizes(observer, n);
    // Every message is old enough now (the clock is moved, not waited for): the final run leaves
    // only the active partition and the ones ahead of it.
    await t.sql(`UPDATE ${SCHEMA}.message_log_${n} SET created_at = created_at - interval '1 hour'`);
    const final = await s.maintain();
    expect(final.errors).toEqual([]);
    const after = await sizes(observer, n);
    const controlSizes = await sizes(observer, nc);

    // Nothing unconsumed was dropped: every produced message reached both groups.
    expect(produced.length).toBe(BATCHES * BATCH);
    const missing = (g: Set<string>) => produced.filter((id) => !g.has(id));
    // Compacted non-heads may be filtered (resolved without a delivery); everything else arrives.
    const nonCompacted = (id: string) => !compacted.has(id);
    expect(missing(seen.fast).filter(nonCompacted)).toEqual([]);
    expect(missing(seen.slow).filter(nonCompacted)).toEqual([]);

    // No maintain() failed; drops happened while everything ran; the slow group held retention.
    const errors = reports.flatMap((r) => r.errors);
    expect(errors).toEqual([]);
    const dropped = reports.reduce((a, r) => a + r.partitionsDropped, 0) + final.partitionsDropped;
    expect(dropped).toBeGreaterThan(BATCHES * BATCH / PARTITION - 4);
    // The slow group's pause held retention: seen by a maintain() report or by the sampler (which
    // of the two catches it depends on scheduling on a busy machine).
    expect(reports.some((r) => r.retentionHeldBy?.group === "slow") || heldObserved > 0).toBe(true);
    expect(violations).toEqual([]);

    // Bounded at the end: the active partition and the ones ahead, no orphaned rows.
    // (How large the retained log got at its peak depends on how long the slow group's pause
    // held retention in wall time, which a busy machine stretches; the sampled partition bound
    // above is the exact check. The peak is printed below for the record.)
    expect(after.partitions).toBeLessThanOrEqual(3);
    expect(after.messages).toBeLessThanOrEqual(PARTITION);
    expect(
      await count(t, `exception_queue_${n}`, `NOT EXISTS (SELECT 1 FROM ${SCHEMA}.message_log_${n} m WHERE m.id = message_id)`),
    ).toBe(0);
    expect(await count(t, `delivery_log_${n}`, `NOT EXISTS (SELECT 1 FROM ${SCHEMA}.message_log_${n} m WHERE m.id = message_id)`)).toBe(0);
    expect(
      await count(t, `compaction_head_${n}`, `message_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM ${SCHEMA}.message_log_${n} m WHERE m.id = message_id)`),
    ).toBe(0);

    const p = peak as unknown as Sizes;
    const rows = [
      ["", "partitions", "messages", "message_log", "exception rows", "exception_queue", "delivery rows", "delivery_log", "other"],
      ["control, no retention", controlSizes.partitions, controlSizes.messages, kb(controlSizes.logBytes), "-", "-", "-", "-", "-"],
      ["peak during soak", p.partitions, p.messages, kb(p.logBytes), p.exceptionRows, kb(p.exceptionBytes), p.deliveryRows, kb(p.deliveryBytes), kb(p.otherBytes)],
      ["end, before final maintain", before.partitions, before.messages, kb(before.logBytes), before.exceptionRows, kb(before.exceptionBytes), before.deliveryRows, kb(before.deliveryBytes), kb(before.otherBytes)],
      ["after final maintain", after.partitions, after.messages, kb(after.logBytes), after.exceptionRows, kb(after.exceptionBytes), after.deliveryRows, kb(after.deliveryBytes), kb(after.otherBytes)],
    ].map((r) => r.map(String));
    const widths = rows[0].map((_, c) => Math.max(...rows.map((r) => r[c].length)));
    const table = rows.map((r) => r.map((v, c) => (c === 0 ? v.padEnd(widths[c]) : v.padStart(widths[c]))).join("  ")).join("\n");
    const totals = {
      messages: produced.length,
      maintainRuns: reports.length + 1,
      partitionsDropped: dropped,
      partitionsSkipped: reports.reduce((a, r) => a + r.partitionsSkipped, 0),
      rowsSwept: reports.reduce((a, r) => a + r.rowsSwept, 0) + final.rowsSwept,
      deliveryLogRowsDeleted: reports.reduce((a, r) => a + r.deliveryLogRowsDeleted, 0) + final.deliveryLogRowsDeleted,
      exceptionRowsDeleted: reports.reduce((a, r) => a + r.exceptionRowsDeleted, 0) + final.exceptionRowsDeleted,
      heldBySlowRuns: reports.filter((r) => r.retentionHeldBy?.group === "slow").length,
    };
    console.log(`retention soak: table sizes of stream ${n} (partitionSize ${PARTITION}, retention ${RETENTION} ms, mode all)\n${table}\n${JSON.stringify(totals)}`);
  });
});
