// Several poller processes on one keyed group (docs/protocol/ordering.md#ranges-of-several-pollers): three
// real pollers drain an ordered (and an exclusive) group of 50 keys while a producer appends
// 330 messages a second, in bursts, so that every range holds every key and ranges of different
// pollers are open at once. A claim ends its range before a key another poll's open range holds;
// a range not cut there would be deferred whole (each key's predecessor in that range, or its
// lease taken), and every later message behind it.
// Asserted: few messages written `deferred` (a count of delivery-log rows, not a timing), every
// message delivered, and the order and exclusivity ledger clean; once with a poller SIGKILLed in
// the middle of a range.
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { useFreshDatabase } from "../../support/db.js";
import { checkInvariants } from "../../support/invariants.js";
import { Ledger } from "../../support/keyed.js";
import { type ChildMessage, type NodeChild, spawnPoller } from "../../support/processes.js";
import { SCHEMA, groupIdOf, streamIdOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();

const KEYS = 50;
const PER_BURST = 330;
const BURSTS = 4;
const MESSAGES = PER_BURST * BURSTS;
const POLLERS = 3;
/** Deferred delivery-log rows allowed per message. */
const DEFERRED_SHARE = 0.05;

const keyOf = (i: number) => `k${i % KEYS}`;

interface Run {
  deferred: number;
  ledger: Ledger;
  ids: Map<string, bigint[]>;
  starts: number;
}

async function scenario(stream: string, policy: "ordered" | "exclusive", kill: boolean): Promise<Run> {
  const t = testClient(url());
  const s = t.client.stream<{ i: number }>(stream);
  await s.register();
  // A short timeout keeps the range lease of a killed poller short (timeout × ceil(n / c) + margin).
  await s.consumer("g").register({ concurrencyOverride: policy, message: { timeout: 500 } });
  const n = await streamIdOf(t, stream);
  const gid = await groupIdOf(t, "g", stream);

  const pollers: NodeChild[] = [];
  for (let p = 0; p < POLLERS; p++) {
    pollers.push(spawnPoller(url(), {
      stream, method: "loop", waitForGo: true, defaultAction: "sleep", sleepMs: 5,
      opts: { concurrency: 16, batchLimit: 100 },
    }, `${stream} poller ${p}`));
  }
  await Promise.all(pollers.map((c) => c.waitFor({ event: "ready" })));
  for (const c of pollers) c.send("go");

  // The kill: the poller that started a handler last is told to SIGKILL itself at its next
  // handler start, so it dies in the middle of a range, holding its range and key leases. If it
  // got no more work within a while (another poller has the keys), it is told to live after all
  // and the latest starter then is told instead. Answers the pollers that died.
  const killer = async (): Promise<NodeChild[]> => {
    const told: NodeChild[] = [];
    for (let i = 0; i < 6 && told.every((c) => c.exitInfo() === undefined); i++) {
      let last: { c: NodeChild; t: number } | null = null;
      for (const c of pollers) {
        if (told.includes(c) || c.exitInfo() !== undefined) continue;
        const st = c.messages.filter((m) => m.event === "start").at(-1);
        if (st !== undefined && (last === null || (st.t as number) > last.t)) last = { c, t: st.t as number };
      }
      if (last === null) break;
      last.c.send("die");
      told.push(last.c);
      await Promise.race([last.c.exited, sleep(1500)]);
      if (last.c.exitInfo() === undefined) last.c.send("live");
    }
    return told.filter((c) => c.exitInfo() !== undefined);
  };
  let killing: Promise<NodeChild[]> | null = null;

  const ids = new Map<string, bigint[]>();
  for (let b = 0; b < BURSTS; b++) {
    const items = Array.from({ length: PER_BURST }, (_, j) => {
      const i = b * PER_BURST + j;
      return { payload: { i }, key: keyOf(i) };
    });
    const made = await s.produceBatch(items);
    made.forEach((r, j) => ids.set(items[j].key, [...(ids.get(items[j].key) ?? []), BigInt(r.id)]));
    if (kill && b === 1) {
      await sleep(30);
      killing = killer();
    }
    await sleep(1000);
  }

  // Every message delivered: no message without a success, no exception row left, cursor at head.
  const succeeded = () => {
    const ok = new Set<string>();
    for (const c of pollers) for (const m of c.messages) if (m.event === "end" && m.ok === true) ok.add(m.id as string);
    return ok.size;
  };
  const end = Date.now() + 90_000;
  for (;;) {
    const [r] = await t.sql<{ rows: number; lag: string }>(
      `SELECT (SELECT count(*)::int FROM ${SCHEMA}.exception_queue_${n}) AS rows,
              ((SELECT max(id) FROM ${SCHEMA}.message_log_${n}) - (SELECT committed FROM ${SCHEMA}.consumer_group_cursor_${n} WHERE consumer_group_id = $1))::text AS lag`,
      [gid],
    );
    if (succeeded() === MESSAGES && r.rows === 0 && r.lag === "0") break;
    if (Date.now() > end) throw new Error(`not drained: ${succeeded()} of ${MESSAGES} succeeded, ${r.rows} exception rows, lag ${r.lag}`);
    await sleep(100);
  }
  const told = killing === null ? [] : await killing;
  for (const c of pollers) if (c.exitInfo() === undefined) c.send("stop");
  await Promise.all(pollers.map((c) => c.waitForExit(30_000)));
  // At least one poller died by its own SIGKILL in the middle of a range (its handler had started).
  if (kill) expect(told.filter((c) => c.exitInfo()?.signal === "SIGKILL" && c.messages.at(-1)?.event === "start").length).toBeGreaterThan(0);

  // One ledger over every child's starts and ends in time order (an end before a start at the
  // same instant); a run of the killed child that never ended is left out.
  const ended = new Set<string>();
  const events: (ChildMessage & { p: number })[] = [];
  pollers.forEach((c, p) => {
    for (const m of c.messages) {
      if (m.event === "end") ended.add(`${p}:${m.id as string}:${m.attempt as number}`);
      if (m.event === "start" || m.event === "end") events.push({ ...m, p });
    }
  });
  events.sort((x, y) => (x.t as number) - (y.t as number) || (x.event === "end" ? -1 : 1) - (y.event === "end" ? -1 : 1));
  const ledger = new Ledger(policy === "ordered" ? ids : new Map());
  let starts = 0;
  for (const e of events) {
    const id = e.id as string;
    const attempt = e.attempt as number;
    if (e.event === "start") {
      if (!ended.has(`${e.p}:${id}:${attempt}`)) continue;
      starts++;
      ledger.start(id, e.key as string, attempt, String(e.p));
    } else ledger.end(id, e.key as string, e.ok === true, attempt, String(e.p));
  }
  const [d] = await t.sql<{ deferred: number }>(
    `SELECT count(*)::int AS deferred FROM ${SCHEMA}.delivery_log_${n} WHERE consumer_group_id = $1 AND status = 'deferred'`,
    [gid],
  );
  await checkInvariants(t, n);
  return { deferred: d.deferred, ledger, ids, starts };
}

function expectClean(r: Run, name: string): void {
  console.log(`${name}: ${JSON.stringify({ messages: MESSAGES, deferred: r.deferred, starts: r.starts })}`);
  expect(r.ledger.overlaps, "exclusivity").toEqual([]);
  expect(r.ledger.orderViolations, "order").toEqual([]);
  expect(r.ledger.succeededCount).toBe(MESSAGES);
  expect(r.deferred, "deferred delivery-log rows").toBeLessThanOrEqual(MESSAGES * DEFERRED_SHARE);
}

describe("several pollers on one keyed group keep it on the range path", () => {
  it("ordered, 3 pollers, 50 keys: few deferrals, order and exclusivity kept", { timeout: 150_000 }, async () => {
    const r = await scenario("pollers.ordered", "ordered", false);
    expectClean(r, "ordered");
    for (const [k, want] of r.ids) expect(r.ledger.successOrder().get(k), `successes of ${k}`).toEqual(want);
  });

  it("ordered, 3 pollers, 50 keys, one SIGKILLed mid-range: few deferrals, order and exclusivity kept", { timeout: 150_000 }, async () => {
    const r = await scenario("pollers.killed", "ordered", true);
    expectClean(r, "ordered with a kill");
  });

  it("exclusive, 3 pollers, 50 keys: few deferrals, exclusivity kept", { timeout: 150_000 }, async () => {
    expectClean(await scenario("pollers.exclusive", "exclusive", false), "exclusive");
  });
});
