// Handler outcomes and the exception queue (docs/protocol/exception-lifecycle.md#attempts-and-budget, docs/protocol/poll-cycle.md#the-exception-phase, docs/protocol/exception-lifecycle.md#running-a-handler, docs/protocol/exception-lifecycle.md; scenarios C3–C9, C36).
// Backoff values are asserted from the stored rows (can_run_after − updated_at); instead of
// waiting, rows are made due by moving can_run_after into the past.
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { Delay, Permanent, type ConsumerConfig, type Handler, type Message } from "@sqlstreams/core";
import { useFreshDatabase } from "../../support/db.js";
import { checkInvariants, tableSnapshot } from "../../support/invariants.js";
import { SCHEMA, type SetupOptions, type TestClient, cursor, deliveryLogRows, exceptionRows, latch, makeDue, pollPastFence, setupGroup, testClient } from "../../support/streams.js";

const url = useFreshDatabase();
let shared: TestClient | undefined;
const T = () => (shared ??= testClient(url()));

const setup = (stream: string, opts: SetupOptions = {}) => setupGroup(T(), stream, opts);

const GAP_TOLERANCE = 250;
function expectGap(row: { gap_ms: number }, ms: number) {
  expect(Math.abs(row.gap_ms - ms), `gap ${row.gap_ms} ms, expected ${ms} ms`).toBeLessThanOrEqual(GAP_TOLERANCE);
}

const row = (r: { message_id: string; status: string; attempts: number; delays: number; lease_token: string | null }) => ({
  message_id: r.message_id, status: r.status, attempts: r.attempts, delays: r.delays, lease_token: r.lease_token,
});
const deliveryLog = (rows: { message_id: string; attempt: number; status: string }[]) => rows.map((r) => [r.message_id, r.attempt, r.status]);

describe("retries and exhaustion (C3, C4, C5, C36)", () => {
  async function retryThenSuccess(stream: string, mode: "failures" | "all" | "off") {
    const { t, s, g, sid, gid } = await setup(stream, { stream: { deliveryLog: mode } });
    await s.produce({ n: 1 }, { key: "k1" });
    const attempts: number[] = [];
    const msgs: Omit<Message, "signal" | "attempt">[] = [];
    const h = (m: Message) => {
      attempts.push(m.attempt);
      msgs.push({ id: m.id, payload: m.payload, key: m.key, delays: m.delays, stream: m.stream, group: m.group, createdAt: m.createdAt });
      if (m.attempt === 0) throw new Error("first delivery fails");
    };
    const r1 = await pollPastFence(g, h);
    expect(r1).toMatchObject({ started: 1, failed: 1, succeeded: 0, dead: 0 });
    const exceptionQueue = await exceptionRows(t, sid, gid);
    expect(exceptionQueue.map(row)).toEqual([{ message_id: "1", status: "ready", attempts: 1, delays: 0, lease_token: null }]);
    expectGap(exceptionQueue[0], 5_000);
    expect(exceptionQueue[0].last_error).toMatch(/^Error: first delivery fails\n {4}at /);
    expect(exceptionQueue[0].concurrency).toBe("parallel");
    expect(await cursor(t, sid, gid)).toMatchObject({ claimed: "1", committed: "0" });
    await checkInvariants(t, sid);

    // Not due yet: a poll changes nothing at all.
    const before = await tableSnapshot(t, sid);
    const r2 = await g.poll(h);
    expect(r2).toMatchObject({ idle: true, started: 0 });
    expect(await tableSnapshot(t, sid)).toEqual(before);
    expect(attempts).toEqual([0]);

    await makeDue(t, sid);
    const r3 = await g.poll(h);
    expect(r3).toMatchObject({ started: 1, succeeded: 1, committedAfter: "1" });
    expect(await exceptionRows(t, sid, gid)).toEqual([]);
    expect(await cursor(t, sid, gid)).toMatchObject({ claimed: "1", committed: "1" });
    expect(attempts).toEqual([0, 1]);
    // the retry sees the same message as the first delivery
    expect(msgs[0]).toMatchObject({ id: "1", payload: { n: 1 }, key: "k1", delays: 0, stream, group: "g" });
    expect(msgs[0].createdAt).toBeInstanceOf(Date);
    expect(msgs[1]).toEqual(msgs[0]);
    await checkInvariants(t, sid);
    return { deliveryLog: await deliveryLogRows(t, sid, gid), exceptionQueue };
  }

  it("C3: a failed first delivery is retried after the initial backoff, then succeeds", async () => {
    const { deliveryLog: log, exceptionQueue } = await retryThenSuccess("c3.retry", "failures");
    expect(log).toEqual([{ message_id: "1", attempt: 0, status: "failure", error: exceptionQueue[0].last_error }]);
  });

  it("C36: mode off writes the same exception rows and no delivery-log row", async () => {
    const { deliveryLog: log } = await retryThenSuccess("c36.off", "off");
    expect(log).toEqual([]);
  });

  it("C3 in mode all: the retry's success is logged at its attempt", async () => {
    const { deliveryLog: log } = await retryThenSuccess("c3.all", "all");
    expect(log.map((r) => [r.attempt, r.status])).toEqual([[0, "failure"], [1, "success"]]);
    expect(log[1].error).toBe("");
  });

  it("a redeclared delivery-log mode applies from the next poll; exception rows are written the same in every mode", async () => {
    const { t, s, g, sid, gid } = await setup("mode.switch");
    await s.produce({});
    const h = (m: Message) => {
      if (m.attempt < 2) throw new Error(`fail ${m.attempt}`);
    };
    await pollPastFence(g, h);
    await s.register({ deliveryLog: "off" });
    await makeDue(t, sid);
    await g.poll(h);
    expect((await exceptionRows(t, sid, gid)).map(row)).toEqual([{ message_id: "1", status: "ready", attempts: 2, delays: 0, lease_token: null }]);
    expect(deliveryLog(await deliveryLogRows(t, sid, gid))).toEqual([["1", 0, "failure"]]);
    await s.register({ deliveryLog: "all" });
    await makeDue(t, sid);
    await g.poll(h);
    expect(await exceptionRows(t, sid, gid)).toEqual([]);
    expect(deliveryLog(await deliveryLogRows(t, sid, gid))).toEqual([["1", 0, "failure"], ["1", 2, "success"]]);
    await checkInvariants(t, sid);
  });

  /** Runs an always-throwing handler to the end; returns the gaps and rows seen after each run. */
  async function exhaust(stream: string, group?: ConsumerConfig) {
    const { t, s, g, sid, gid } = await setup(stream, { group });
    await s.produce({ n: 1 });
    const calls: number[] = [];
    const h = (m: Message) => {
      calls.push(m.attempt);
      throw new Error(`boom at attempt ${m.attempt}`);
    };
    await pollPastFence(g, h);
    const gaps: number[] = [];
    const rows: { status: string; attempts: number }[] = [];
    for (let i = 0; i < 20; i++) {
      const [r] = await exceptionRows(t, sid, gid);
      rows.push({ status: r.status, attempts: r.attempts });
      await checkInvariants(t, sid);
      if (r.status === "dead") break;
      expect(r.status).toBe("ready");
      gaps.push(Math.round(r.gap_ms));
      // committed stays below the unresolved row
      expect((await cursor(t, sid, gid)).committed).toBe("0");
      await makeDue(t, sid);
      const rep = await g.poll(h);
      expect(rep.started).toBe(1);
    }
    return { t, sid, gid, calls, gaps, rows, final: (await exceptionRows(t, sid, gid))[0], log: await deliveryLogRows(t, sid, gid) };
  }

  it("C4: with defaults an always-failing message runs four times (gaps 5 000, 1 000, 2 000) and ends dead", async () => {
    const { t, sid, gid, calls, gaps, rows, final, log } = await exhaust("c4.exhaust");
    expect(calls).toEqual([0, 1, 2, 3]);
    expect(gaps.length).toBe(3);
    [5_000, 1_000, 2_000].forEach((ms, i) => expect(Math.abs(gaps[i] - ms)).toBeLessThanOrEqual(GAP_TOLERANCE));
    expect(rows).toEqual([
      { status: "ready", attempts: 1 }, { status: "ready", attempts: 2 }, { status: "ready", attempts: 3 }, { status: "dead", attempts: 3 },
    ]);
    expect(row(final)).toEqual({ message_id: "1", status: "dead", attempts: 3, delays: 0, lease_token: null });
    expect(final.last_error).toMatch(/^Error: boom at attempt 3\n/);
    expect(deliveryLog(log)).toEqual([["1", 0, "failure"], ["1", 1, "failure"], ["1", 2, "failure"], ["1", 3, "failure"]]);
    expect(log.map((r) => r.error.split("\n")[0])).toEqual([0, 1, 2, 3].map((a) => `Error: boom at attempt ${a}`));
    expect(t.events.filter((e) => e.code === "SQL0037" && e.stream === "c4.exhaust" && e.messageId === "1")).toHaveLength(1);
    // dead rows do not hold the cursor
    expect(await cursor(t, sid, gid)).toMatchObject({ claimed: "1", committed: "1" });
    await checkInvariants(t, sid);
  });

  it("C5: the seed retry curve (maxRetries 5, baseDelay 2000): gaps 5 000, 2 000, 4 000, 8 000, 16 000, then dead at attempts 5", async () => {
    const { t, sid, calls, gaps, final, log } = await exhaust("c5.curve", { message: { timeout: 30_000, retry: { maxRetries: 5, baseDelay: 2000 } } });
    expect(calls).toEqual([0, 1, 2, 3, 4, 5]);
    expect(gaps.length).toBe(5);
    [5_000, 2_000, 4_000, 8_000, 16_000].forEach((ms, i) => expect(Math.abs(gaps[i] - ms)).toBeLessThanOrEqual(GAP_TOLERANCE));
    expect(row(final)).toEqual({ message_id: "1", status: "dead", attempts: 5, delays: 0, lease_token: null });
    expect(log.map((r) => r.attempt)).toEqual([0, 1, 2, 3, 4, 5]);
    await checkInvariants(t, sid);
  });

  it("the curve is capped at maxDelay and uses exponent and exceptionInitialBackoff from the group", async () => {
    const { gaps, final } = await exhaust("curve.capped", {
      exceptionInitialBackoff: 0,
      message: { retry: { maxRetries: 4, baseDelay: 100, exponent: 3, maxDelay: 500 } },
    });
    // initial 0, then 100 × 3^0, 100 × 3^1, min(100 × 3^2, 500)
    expect(gaps.length).toBe(4);
    [0, 100, 300, 500].forEach((ms, i) => expect(Math.abs(gaps[i] - ms)).toBeLessThanOrEqual(GAP_TOLERANCE));
    expect(final.attempts).toBe(4);
  });

  it("maxRetries 0: the first failure is final (dead, attempts 0)", async () => {
    const { t, s, g, sid, gid } = await setup("budget.zero", { group: { message: { retry: { maxRetries: 0 } } } });
    await s.produce({});
    const r = await pollPastFence(g, () => {
      throw new Error("only chance");
    });
    expect(r).toMatchObject({ dead: 1, failed: 0 });
    const [e] = await exceptionRows(t, sid, gid);
    expect(row(e)).toEqual({ message_id: "1", status: "dead", attempts: 0, delays: 0, lease_token: null });
    expect(e.last_error).toMatch(/^Error: only chance\n/);
    expect(deliveryLog(await deliveryLogRows(t, sid, gid))).toEqual([["1", 0, "failure"]]);
    expect((await cursor(t, sid, gid)).committed).toBe("1");
    await checkInvariants(t, sid);
  });

  it("maxRetries 0: delays never consume budget, so a Delay is followed by one run whose failure is final", async () => {
    const { t, s, g, sid, gid } = await setup("budget.zero.delay", { group: { message: { retry: { maxRetries: 0 } } } });
    await s.produce({});
    const calls: [number, number][] = [];
    const h = (m: Message) => {
      calls.push([m.attempt, m.delays]);
      if (m.attempt === 0) return Delay(10);
      throw new Error("then fails");
    };
    await pollPastFence(g, h);
    expect((await exceptionRows(t, sid, gid)).map(row)).toEqual([{ message_id: "1", status: "ready", attempts: 1, delays: 1, lease_token: null }]);
    await makeDue(t, sid);
    const r = await g.poll(h);
    expect(r).toMatchObject({ started: 1, dead: 1 });
    expect((await exceptionRows(t, sid, gid)).map(row)).toEqual([{ message_id: "1", status: "dead", attempts: 1, delays: 1, lease_token: null }]);
    expect(calls).toEqual([[0, 0], [1, 1]]);
    expect(deliveryLog(await deliveryLogRows(t, sid, gid))).toEqual([["1", 0, "delayed"], ["1", 1, "failure"]]);
    await checkInvariants(t, sid);
  });
});

describe("per-message resolution in the outcome path (docs/guide/configuration.md#resolving-a-messages-options)", () => {
  it("a produced maxRetries below the group's applies; one above is capped at the group default; maxDelays from the message", async () => {
    const { t, s, g, sid, gid } = await setup("resolve.outcomes");
    await s.produce({ n: 1 }, { message: { retry: { maxRetries: 1 } } });
    await s.produce({ n: 2 }, { message: { retry: { maxRetries: 10 } } });
    await s.produce({ n: 3 }, { message: { retry: { maxDelays: 1 } } });
    const h = ((m: Message<{ n: number }>) => {
      if (m.payload.n === 3) return Delay(1);
      throw new Error("always");
    }) as Handler;
    await pollPastFence(g, h);
    for (let i = 0; i < 6; i++) {
      await makeDue(t, sid);
      await g.poll(h);
    }
    const rows = await exceptionRows(t, sid, gid);
    expect(rows.map((r) => [r.message_id, r.status, r.attempts, r.delays])).toEqual([
      ["1", "dead", 1, 0], ["2", "dead", 3, 0], ["3", "dead", 1, 1],
    ]);
    expect(rows[2].last_error).toBe("SQL0025 delay limit reached: 1 delays");
    // one SQL0039 per group and field (docs/guide/configuration.md#resolving-a-messages-options): maxRetries of message 2 (maxDelays 1 is inside the bounds)
    expect(t.events.filter((e) => e.code === "SQL0039" && e.stream === "resolve.outcomes").map((e) => e.field)).toEqual(["maxRetries"]);
    expect((await cursor(t, sid, gid)).committed).toBe("3");
    await checkInvariants(t, sid);
    // a clamp of another field within the minute is still reported, once
    await s.produce({ n: 4 }, { message: { timeout: 60_000, retry: { maxRetries: 9 } } });
    await pollPastFence(g, () => {});
    expect(t.events.filter((e) => e.code === "SQL0039" && e.stream === "resolve.outcomes").map((e) => e.field)).toEqual(["maxRetries", "timeout"]);
  });
});

describe("Permanent (C6)", () => {
  it("C6: Permanent at first delivery is dead at once with attempts 0 and never retried", async () => {
    const { t, s, g, sid, gid } = await setup("c6.permanent");
    await s.produce({ bad: true });
    let calls = 0;
    const h = () => {
      calls++;
      throw Permanent(new Error("cannot parse"));
    };
    const r = await pollPastFence(g, h);
    expect(r).toMatchObject({ started: 1, dead: 1, failed: 0 });
    const [e] = await exceptionRows(t, sid, gid);
    expect(row(e)).toEqual({ message_id: "1", status: "dead", attempts: 0, delays: 0, lease_token: null });
    expect(e.last_error).toMatch(/^SQL0026 permanent: Error: cannot parse\n/);
    const log = await deliveryLogRows(t, sid, gid);
    expect(log).toEqual([{ message_id: "1", attempt: 0, status: "failure", error: e.last_error }]);
    expect(t.events.some((x) => x.code === "SQL0037" && x.stream === "c6.permanent")).toBe(true);
    expect((await cursor(t, sid, gid)).committed).toBe("1");
    await checkInvariants(t, sid);
    // never retried, even when everything is made due
    await makeDue(t, sid);
    const again = await g.poll(h);
    expect(again).toMatchObject({ idle: true, started: 0 });
    expect(calls).toBe(1);
  });

  it("C6: Permanent returned at attempt 2 of a retried row is dead with attempts 2", async () => {
    const { t, s, g, sid, gid } = await setup("c6.permanent.late");
    await s.produce({});
    const calls: number[] = [];
    const h = (m: Message) => {
      calls.push(m.attempt);
      if (m.attempt < 2) throw new Error(`transient ${m.attempt}`);
      return Permanent("gave up");
    };
    await pollPastFence(g, h);
    for (let i = 0; i < 2; i++) {
      await makeDue(t, sid);
      await g.poll(h);
    }
    expect(calls).toEqual([0, 1, 2]);
    const [e] = await exceptionRows(t, sid, gid);
    expect(row(e)).toEqual({ message_id: "1", status: "dead", attempts: 2, delays: 0, lease_token: null });
    expect(e.last_error).toBe("SQL0026 permanent: non-error thrown: gave up");
    expect(deliveryLog(await deliveryLogRows(t, sid, gid))).toEqual([["1", 0, "failure"], ["1", 1, "failure"], ["1", 2, "failure"]]);
    expect((await cursor(t, sid, gid)).committed).toBe("1");
    await checkInvariants(t, sid);
  });
});

describe("Delay (C7)", () => {
  it("C7: Delay(21600000) is not a failure: ready, attempts 1, delays 1, due in 6 h, not reserved before", async () => {
    const { t, s, g, sid, gid } = await setup("c7.delay");
    await s.produce({});
    let calls = 0;
    const h = () => {
      calls++;
      throw Delay(21_600_000);
    };
    const r = await pollPastFence(g, h);
    expect(r).toMatchObject({ delayed: 1, failed: 0, dead: 0 });
    const [e] = await exceptionRows(t, sid, gid);
    expect(row(e)).toEqual({ message_id: "1", status: "ready", attempts: 1, delays: 1, lease_token: null });
    expectGap(e, 21_600_000);
    expect(e.last_error).toBe("SQL0025 delayed: run again in 21600000 ms");
    expect(await deliveryLogRows(t, sid, gid)).toEqual([{ message_id: "1", attempt: 0, status: "delayed", error: "SQL0025 delayed: run again in 21600000 ms" }]);
    expect((await cursor(t, sid, gid)).committed).toBe("0");
    const before = await tableSnapshot(t, sid);
    expect(await g.poll(h)).toMatchObject({ idle: true, started: 0 });
    expect(await tableSnapshot(t, sid)).toEqual(before);
    expect(calls).toBe(1);
    await checkInvariants(t, sid);
  });

  it("C7: repeated delays keep attempts − delays constant; with maxDelays 2 the third Delay is dead", async () => {
    const { t, s, g, sid, gid } = await setup("c7.maxdelays", { group: { message: { retry: { maxDelays: 2 } } } });
    await s.produce({});
    const seen: [number, number][] = [];
    const h = (m: Message) => {
      seen.push([m.attempt, m.delays]);
      return Delay(1_000);
    };
    await pollPastFence(g, h);
    const states: [string, number, number][] = [];
    for (let i = 0; i < 5; i++) {
      const [e] = await exceptionRows(t, sid, gid);
      states.push([e.status, e.attempts, e.delays]);
      if (e.status === "dead") break;
      expectGap(e, 1_000);
      expect(e.attempts - e.delays).toBe(0);
      await makeDue(t, sid);
      await g.poll(h);
      await checkInvariants(t, sid);
    }
    expect(seen).toEqual([[0, 0], [1, 1], [2, 2]]);
    expect(states).toEqual([["ready", 1, 1], ["ready", 2, 2], ["dead", 2, 2]]);
    const [e] = await exceptionRows(t, sid, gid);
    expect(e.last_error).toBe("SQL0025 delay limit reached: 2 delays");
    const log = await deliveryLogRows(t, sid, gid);
    expect(deliveryLog(log)).toEqual([["1", 0, "delayed"], ["1", 1, "delayed"], ["1", 2, "failure"]]);
    expect(log[2].error).toBe("SQL0025 delay limit reached: 2 delays");
    expect((await cursor(t, sid, gid)).committed).toBe("1");
  });

  it("C7: maxDelays 0 allows any number of delays, which never spend the retry budget", async () => {
    const { t, s, g, sid, gid } = await setup("c7.unlimited", { group: { message: { retry: { maxRetries: 1 } } } });
    await s.produce({});
    const h = (m: Message) => (m.attempt < 6 ? Delay(5) : undefined);
    await pollPastFence(g, h);
    for (let i = 0; i < 6; i++) {
      await makeDue(t, sid);
      await g.poll(h);
    }
    expect(await exceptionRows(t, sid, gid)).toEqual([]);
    expect((await deliveryLogRows(t, sid, gid)).map((r) => r.status)).toEqual(Array(6).fill("delayed"));
    expect((await cursor(t, sid, gid)).committed).toBe("1");
    await checkInvariants(t, sid);
  });

  it("C7: Delay(0) and Delay(-5) wait the 1 s floor; a fraction of a ms is rounded up", async () => {
    const { t, s, g, sid, gid } = await setup("c7.zero");
    await s.produceBatch([{ payload: { ms: 0 } }, { payload: { ms: -5 } }, { payload: { ms: 1.2 } }]);
    const h = (m: Message<{ ms: number }>) => (m.attempt === 0 ? Delay(m.payload.ms) : undefined);
    await pollPastFence(g, h as Handler);
    const rows = await exceptionRows(t, sid, gid);
    expect(rows.map((r) => [r.message_id, r.status, r.attempts, r.delays])).toEqual([
      ["1", "ready", 1, 1], ["2", "ready", 1, 1], ["3", "ready", 1, 1],
    ]);
    expectGap(rows[0], 1_000);
    expectGap(rows[1], 1_000);
    expect(rows.map((r) => r.last_error)).toEqual([
      "SQL0025 delayed: run again in 1000 ms", "SQL0025 delayed: run again in 1000 ms", "SQL0025 delayed: run again in 2 ms",
    ]);
    await sleep(5);
    expect(await g.poll(h as Handler)).toMatchObject({ started: 1, succeeded: 1 }); // only the 2 ms one is due
    await sleep(1_100);
    expect(await g.poll(h as Handler)).toMatchObject({ started: 2, succeeded: 2 }); // no makeDue
    expect(await exceptionRows(t, sid, gid)).toEqual([]);
    expect((await cursor(t, sid, gid)).committed).toBe("3");
    await checkInvariants(t, sid);
  });

  it("C7: a handler that always returns Delay(0) or Delay(-5) cannot spin in a drain", async () => {
    // A short timeout: a drain starts a message only when its timeout fits before the deadline.
    const { t, s, g, sid, gid } = await setup("c7.spin", { group: { message: { timeout: 500 } } });
    await s.produceBatch([{ payload: { ms: 0 } }, { payload: { ms: -5 } }]);
    const runs = new Map<string, number>();
    const h = (m: Message<{ ms: number }>) => {
      runs.set(m.id, (runs.get(m.id) ?? 0) + 1);
      return Delay(m.payload.ms);
    };
    const started = Date.now();
    const until = started + 4_000;
    const opts = () => ({ deadline: Math.max(until, Date.now() + 1_500), recordMargin: 500 });
    // The first drain that gets past the fence runs both; then drains for the rest of the 4 s.
    await pollPastFence(g, h as Handler, { drain: true, opts });
    while (Date.now() < until) {
      await g.drain(h as Handler, opts());
      await sleep(50);
    }
    const elapsed = Date.now() - started;
    // One run per message, then one per elapsed second at most (the 1 s floor), plus one of slack.
    const bound = 2 + Math.ceil(elapsed / 1_000);
    for (const id of ["1", "2"]) expect(runs.get(id) ?? 0, `runs of ${id} in ${elapsed} ms`).toBeLessThanOrEqual(bound);
    expect(runs.get("1")).toBeGreaterThanOrEqual(1);
    const log = await deliveryLogRows(t, sid, gid);
    expect(log.length).toBeLessThanOrEqual(2 * bound);
    expect((await exceptionRows(t, sid, gid)).map((r) => r.status)).toEqual(["ready", "ready"]);
    await checkInvariants(t, sid);
  });

  it("C7: a failure after a Delay uses the initial backoff; the docs/protocol/exception-lifecycle.md#attempts-and-budget delay timeline ends dead at attempts 4", async () => {
    const { t, s, g, sid, gid } = await setup("c7.timeline");
    await s.produce({});
    // attempt 0 fails, 1 delays 60 s, 2, 3 and 4 fail
    const h = (m: Message) => {
      if (m.attempt === 1) return Delay(60_000);
      throw new Error(`fail ${m.attempt}`);
    };
    await pollPastFence(g, h);
    const seen: [string, number, number, number][] = [];
    for (let i = 0; i < 10; i++) {
      const [e] = await exceptionRows(t, sid, gid);
      seen.push([e.status, e.attempts, e.delays, e.status === "dead" ? -1 : Math.round(e.gap_ms)]);
      if (e.status === "dead") break;
      await makeDue(t, sid);
      await g.poll(h);
    }
    const want: [string, number, number, number][] = [
      ["ready", 1, 0, 5_000], ["ready", 2, 1, 60_000], ["ready", 3, 1, 1_000], ["ready", 4, 1, 2_000], ["dead", 4, 1, -1],
    ];
    expect(seen.map((x) => x.slice(0, 3))).toEqual(want.map((x) => x.slice(0, 3)));
    seen.forEach((x, i) => expect(Math.abs(x[3] - want[i][3])).toBeLessThanOrEqual(GAP_TOLERANCE));
    expect(deliveryLog(await deliveryLogRows(t, sid, gid))).toEqual([["1", 0, "failure"], ["1", 1, "delayed"], ["1", 2, "failure"], ["1", 3, "failure"], ["1", 4, "failure"]]);
    await checkInvariants(t, sid);

    // And the C7 sentence itself: Delay first, then a failure ⇒ initial backoff.
    const x = await setup("c7.delay.then.fail");
    await x.s.produce({});
    const h2 = (m: Message) => {
      if (m.attempt === 0) return Delay(1);
      throw new Error("after delay");
    };
    await pollPastFence(x.g, h2);
    await makeDue(x.t, x.sid);
    await x.g.poll(h2);
    const [e] = await exceptionRows(x.t, x.sid, x.gid);
    expect([e.status, e.attempts, e.delays]).toEqual(["ready", 2, 1]);
    expectGap(e, 5_000);
  });
});

describe("failure forms and error texts (C8)", () => {
  it("C8: sync throw, rejection, thrown string and undefined are retryable; 42 is success; returned outcomes act as thrown", async () => {
    const { t, s, g, sid, gid } = await setup("c8.forms");
    const kinds = ["sync", "async", "string", "undefined", "value42", "returnDelay", "returnPermanent", "typeError", "withCause", "badDelay", "huge", "thrownDelay"];
    await s.produceBatch(kinds.map((k) => ({ payload: { k } })));
    const h = (m: Message<{ k: string }>): unknown => {
      switch (m.payload.k) {
        case "sync": throw new Error("sync failure");
        case "async": return (async () => { await sleep(1); throw new Error("async failure"); })();
        case "string": throw "just a string";
        case "undefined": throw undefined;
        case "value42": return 42;
        case "returnDelay": return Delay(1_500);
        case "returnPermanent": return Permanent(new Error("not fixable"));
        case "typeError": throw new TypeError("wrong type");
        case "withCause": throw new Error("outer", { cause: new RangeError("inner") });
        case "badDelay": return Delay(Number.NaN); // throws SQL0015 inside the handler: a failure of the run
        case "huge": throw new Error("x".repeat(20_000));
        case "thrownDelay": throw Delay(2_500);
      }
    };
    const r = await pollPastFence(g, h as Handler, { opts: { batchLimit: 20 } });
    expect(r).toMatchObject({ started: 12, succeeded: 1, delayed: 2, dead: 1, failed: 8 });
    const rows = new Map((await exceptionRows(t, sid, gid)).map((e) => [kinds[Number(e.message_id) - 1], e]));
    const err = (k: string) => rows.get(k)?.last_error ?? "";
    expect(rows.has("value42")).toBe(false);
    for (const k of ["sync", "async", "string", "undefined", "typeError", "withCause", "badDelay", "huge"]) {
      expect([rows.get(k)?.status, rows.get(k)?.attempts, rows.get(k)?.delays], k).toEqual(["ready", 1, 0]);
      expectGap(rows.get(k)!, 5_000);
    }
    expect(err("sync")).toMatch(/^Error: sync failure\n {4}at /);
    expect(err("async")).toMatch(/^Error: async failure\n {4}at /);
    expect(err("string")).toBe("non-error thrown: just a string");
    expect(err("undefined")).toBe("non-error thrown: undefined");
    expect(err("typeError")).toMatch(/^TypeError: wrong type\n/);
    expect(err("withCause")).toMatch(/^Error: outer\n/);
    expect(err("withCause").split("\n").filter((l) => /^\s+at /.test(l)).length).toBeLessThanOrEqual(10);
    expect(err("withCause")).toMatch(/\ncaused by: RangeError: inner$/);
    expect(err("badDelay")).toMatch(/SQL0015/);
    expect(err("huge")).toHaveLength(8_000);
    expect(err("huge").endsWith("…")).toBe(true);
    expect([rows.get("returnDelay")?.status, rows.get("returnDelay")?.attempts, rows.get("returnDelay")?.delays]).toEqual(["ready", 1, 1]);
    expectGap(rows.get("returnDelay")!, 1_500);
    expect([rows.get("thrownDelay")?.status, rows.get("thrownDelay")?.delays]).toEqual(["ready", 1]);
    expectGap(rows.get("thrownDelay")!, 2_500);
    expect([rows.get("returnPermanent")?.status, rows.get("returnPermanent")?.attempts]).toEqual(["dead", 0]);
    expect(err("returnPermanent")).toMatch(/^SQL0026 permanent: Error: not fixable\n/);
    // the delivery log mirrors the rows
    const log = await deliveryLogRows(t, sid, gid);
    expect(log).toHaveLength(11);
    for (const l of log) {
      const k = kinds[Number(l.message_id) - 1];
      expect(l.attempt).toBe(0);
      expect(l.status).toBe(k === "returnDelay" || k === "thrownDelay" ? "delayed" : "failure");
      expect(l.error).toBe(err(k));
    }
    expect((await cursor(t, sid, gid)).committed).toBe("0");
    await checkInvariants(t, sid);
  });
});

describe("non-Error throws are recorded readably (C8)", () => {
  it("C8: a thrown plain object is stored as JSON, a string as itself, cut to 8 000 characters, in the row and the delivery log", async () => {
    const { t, s, g, sid, gid } = await setup("c8.plain");
    const kinds = ["object", "array", "string", "hugeObject", "permanentObject"];
    await s.produceBatch(kinds.map((k) => ({ payload: { k } })));
    const h = (m: Message<{ k: string }>): unknown => {
      switch (m.payload.k) {
        case "object": throw { code: "E_RATE", detail: { retryIn: 5 } };
        case "array": throw ["a", 1];
        case "string": throw "plain words";
        case "hugeObject": throw { text: "q".repeat(20_000) };
        case "permanentObject": return Permanent({ reason: "gone" });
      }
    };
    await pollPastFence(g, h as Handler, { opts: { batchLimit: 10 } });
    const rows = new Map((await exceptionRows(t, sid, gid)).map((e) => [kinds[Number(e.message_id) - 1], e.last_error]));
    expect(rows.get("object")).toBe('non-error thrown: {"code":"E_RATE","detail":{"retryIn":5}}');
    expect(rows.get("array")).toBe('non-error thrown: ["a",1]');
    expect(rows.get("string")).toBe("non-error thrown: plain words");
    expect(rows.get("hugeObject")).toHaveLength(8_000);
    expect(rows.get("hugeObject")).toMatch(/^non-error thrown: \{"text":"q+…$/);
    expect(rows.get("permanentObject")).toBe('SQL0026 permanent: non-error thrown: {"reason":"gone"}');
    const log = await deliveryLogRows(t, sid, gid);
    expect(log).toHaveLength(kinds.length);
    for (const l of log) expect(l.error).toBe(rows.get(kinds[Number(l.message_id) - 1]));
    expect((await g.failures()).map((f) => f.lastError)).toEqual([rows.get("permanentObject")]);
    await checkInvariants(t, sid);
  });
});

describe("timeouts and abandoned handlers (C9)", () => {
  it("C9: at the timeout the signal aborts, the failure is recorded at once, and the late result writes nothing", async () => {
    const { t, s, g, sid, gid } = await setup("c9.timeout", { group: { message: { timeout: 100 } } });
    await s.produce({});
    let startedAt = 0;
    let abortedAt = 0;
    let finished = false;
    let signal: AbortSignal | undefined;
    const late = latch();
    const h = async (m: Message) => {
      startedAt = Date.now();
      signal = m.signal;
      m.signal.addEventListener("abort", () => (abortedAt = Date.now()));
      await sleep(1_000); // ignores the signal
      finished = true;
      late.open();
      return "late success";
    };
    const r = await pollPastFence(g, h);
    const returnedAt = Date.now();
    expect(finished).toBe(false);
    expect(returnedAt - startedAt).toBeLessThan(900);
    expect(signal?.aborted).toBe(true);
    expect(abortedAt - startedAt).toBeGreaterThanOrEqual(95);
    expect(abortedAt - startedAt).toBeLessThan(600);
    expect(r).toMatchObject({ started: 1, failed: 1, succeeded: 0 });
    const [e] = await exceptionRows(t, sid, gid);
    expect(row(e)).toEqual({ message_id: "1", status: "ready", attempts: 1, delays: 0, lease_token: null });
    expect(e.last_error).toBe("SQL0027 timeout: handler did not finish within 100 ms");
    expect(await deliveryLogRows(t, sid, gid)).toEqual([{ message_id: "1", attempt: 0, status: "failure", error: "SQL0027 timeout: handler did not finish within 100 ms" }]);
    const before = await tableSnapshot(t, sid);
    await late.promise;
    await sleep(50);
    expect(await tableSnapshot(t, sid)).toEqual(before);
    await checkInvariants(t, sid);
  });

  it("C9: a timeout of an exception-row run is a retryable failure with the retry backoff; a late rejection changes nothing", async () => {
    const { t, s, g, sid, gid } = await setup("c9.retry.timeout", { group: { message: { timeout: 100 } } });
    await s.produce({});
    const late = latch();
    const h = async (m: Message) => {
      if (m.attempt === 0) throw new Error("first");
      await sleep(400);
      late.open();
      throw new Error("late rejection");
    };
    await pollPastFence(g, h);
    await makeDue(t, sid);
    const r = await g.poll(h);
    expect(r).toMatchObject({ started: 1, failed: 1 });
    const [e] = await exceptionRows(t, sid, gid);
    expect(row(e)).toEqual({ message_id: "1", status: "ready", attempts: 2, delays: 0, lease_token: null });
    expectGap(e, 1_000);
    expect(e.last_error).toBe("SQL0027 timeout: handler did not finish within 100 ms");
    const before = await tableSnapshot(t, sid);
    await late.promise;
    await sleep(50);
    expect(await tableSnapshot(t, sid)).toEqual(before);
    expect(deliveryLog(await deliveryLogRows(t, sid, gid))).toEqual([["1", 0, "failure"], ["1", 1, "failure"]]);
    await checkInvariants(t, sid);
  });

  it("C9: a handler that first reads its signal after the timeout sees it aborted", async () => {
    const { s, g } = await setup("c9.late.signal", { group: { message: { timeout: 50 } } });
    await s.produce({});
    let lateSignal: boolean | undefined;
    const finished = latch();
    await pollPastFence(g, async (m) => {
      await sleep(200);
      lateSignal = m.signal.aborted;
      finished.open();
    });
    await finished.promise;
    expect(lateSignal).toBe(true);
  });

  it("C9: a handler that honours the signal still records the timeout text, and a produced timeout is clamped to the group's", async () => {
    const { t, s, g, sid, gid } = await setup("c9.honours", { group: { message: { timeout: 150 } } });
    await s.produce({}, { message: { timeout: 10_000 } }); // the ceiling is the group default
    const h = (m: Message) => new Promise((_, reject) => m.signal.addEventListener("abort", () => reject(m.signal.reason)));
    const t0 = performance.now();
    await pollPastFence(g, h);
    expect(performance.now() - t0).toBeLessThan(5_000);
    const [e] = await exceptionRows(t, sid, gid);
    expect(e.last_error).toBe("SQL0027 timeout: handler did not finish within 150 ms");
    expect(t.events.some((x) => x.code === "SQL0039" && x.stream === "c9.honours")).toBe(true);
  });
});

describe("exception rows of docs/protocol/exception-lifecycle.md#retries not covered above", () => {
  it("an expired run lease with budget left is charged (ready, attempts + 1, backoff); with the budget spent the kill backstop makes it dead", async () => {
    const { t, s, g, sid, gid } = await setup("expiry.rows");
    await s.produceBatch([{ payload: 1 }, { payload: 2 }]);
    await pollPastFence(g, () => {
      throw new Error("crashed");
    });
    // The state a crashed poll leaves: inflight under an expired run lease.
    await t.sql(
      `UPDATE ${SCHEMA}.exception_queue_${sid}
          SET status = 'inflight', attempts = 3, delays = CASE WHEN message_id = 1 THEN 1 ELSE 0 END,
              lease_token = gen_random_uuid(), lease_expires_at = now() - interval '1 millisecond'
        WHERE consumer_group_id = $1`,
      [gid],
    );
    let calls = 0;
    const r = await g.poll(() => void calls++);
    expect(calls).toBe(0);
    expect(r).toMatchObject({ leaseExpired: 1, killed: 1, dead: 1, idle: false });
    const [one, two] = await exceptionRows(t, sid, gid);
    expect(row(one)).toEqual({ message_id: "1", status: "ready", attempts: 4, delays: 1, lease_token: null });
    expectGap(one, 2_000); // used 2 ⇒ n 1 ⇒ 1 000 × 2
    expect(one.last_error).toMatch(/^Error: crashed\n/);
    expect(row(two)).toEqual({ message_id: "2", status: "dead", attempts: 3, delays: 0, lease_token: null });
    expect(two.last_error).toMatch(/^Error: crashed\n[\s\S]* \[killed: crash-loop hit max attempts\]$/);
    const log1 = await deliveryLogRows(t, sid, gid, "1");
    expect(log1.at(-1)).toEqual({ message_id: "1", attempt: 3, status: "expired", error: "lease expired before an outcome was recorded" });
    const log2 = await deliveryLogRows(t, sid, gid, "2");
    expect(log2.at(-1)).toEqual({ message_id: "2", attempt: 3, status: "killed", error: two.last_error });
    expect(t.events.some((x) => x.code === "SQL0038" && x.stream === "expiry.rows" && x.messageId === "2")).toBe(true);
    expect((await cursor(t, sid, gid)).committed).toBe("0");
    await checkInvariants(t, sid);
  });

  it("rows reserved but not started (abort) are released uncharged and log nothing", async () => {
    const { t, s, g, sid, gid } = await setup("reserved.abort");
    await s.produceBatch([{ payload: 1 }, { payload: 2 }, { payload: 3 }]);
    await pollPastFence(g, () => {
      throw new Error("first");
    });
    await makeDue(t, sid);
    const deliveryLogBefore = await deliveryLogRows(t, sid, gid);
    const ac = new AbortController();
    const seen: string[] = [];
    const r = await g.poll((m) => {
      seen.push(m.id);
      ac.abort();
    }, { signal: ac.signal, concurrency: 1 });
    expect(seen).toEqual(["1"]);
    expect(r).toMatchObject({ started: 1, succeeded: 1, notStarted: 2 });
    const rows = await exceptionRows(t, sid, gid);
    expect(rows.map(row)).toEqual([
      { message_id: "2", status: "ready", attempts: 1, delays: 0, lease_token: null },
      { message_id: "3", status: "ready", attempts: 1, delays: 0, lease_token: null },
    ]);
    expect(await deliveryLogRows(t, sid, gid)).toEqual(deliveryLogBefore);
    expect(t.events.some((x) => x.code === "SQL0040" && x.stream === "reserved.abort")).toBe(true);
    // cursor passes 1 (succeeded), stays below 2
    expect((await cursor(t, sid, gid)).committed).toBe("1");
    await checkInvariants(t, sid);
  });

  it("due rows are reserved in id order, then each is claimed (inflight) under its own run lease when it starts", async () => {
    const { t, s, g, sid, gid } = await setup("rows.leases", { group: { message: { timeout: 1_000 } } });
    await s.produceBatch([{ payload: 1 }, { payload: 2 }, { payload: 3 }]);
    await pollPastFence(g, () => {
      throw new Error("first");
    });
    await makeDue(t, sid);
    await t.sql(`UPDATE ${SCHEMA}.exception_queue_${sid} SET can_run_after = now() + interval '1 hour' WHERE message_id = 3`);
    const gate = latch();
    const running = latch();
    const seen: string[] = [];
    const p = g.poll(async (m) => {
      seen.push(m.id);
      if (m.id === "1") {
        running.open();
        await gate.promise;
      }
    }, { concurrency: 1, batchLimit: 10 });
    await running.promise;
    const leases = await t.sql<{ message_id: string; status: string; attempts: number; token: string | null; run_ms: number | null; left_ms: number | null }>(
      `SELECT message_id::text, status, attempts, lease_token::text AS token,
              (EXTRACT(EPOCH FROM (lease_expires_at - updated_at)) * 1000)::float8 AS run_ms,
              (EXTRACT(EPOCH FROM (lease_expires_at - now())) * 1000)::float8 AS left_ms
         FROM ${SCHEMA}.exception_queue_${sid} WHERE consumer_group_id = $1 ORDER BY message_id`,
      [gid],
    );
    expect(leases.map((x) => [x.message_id, x.status, x.attempts])).toEqual([["1", "inflight", 1], ["2", "ready", 1], ["3", "ready", 1]]);
    // run lease: timeout + recordMargin from the claim
    expect(Math.abs((leases[0].run_ms ?? 0) - 3_000)).toBeLessThanOrEqual(GAP_TOLERANCE);
    // reservation of 2 by the same poll: Tmax × ceil(n / c) + recordMargin = 1 000 × 2 + 2 000
    expect(leases[1].token).toBe(leases[0].token);
    expect(leases[1].left_ms).toBeGreaterThan(3_000);
    expect(leases[1].left_ms).toBeLessThanOrEqual(4_000);
    // 3 is not due: not reserved
    expect(leases[2].token).toBeNull();
    await checkInvariants(t, sid);
    gate.open();
    expect(await p).toMatchObject({ started: 2, succeeded: 2 });
    expect(seen).toEqual(["1", "2"]);
    expect((await exceptionRows(t, sid, gid)).map(row)).toEqual([{ message_id: "3", status: "ready", attempts: 1, delays: 0, lease_token: null }]);
    expect((await cursor(t, sid, gid)).committed).toBe("2");
    await checkInvariants(t, sid);
  });

  it("concurrent polls never run one exception row twice", async () => {
    const { t, s, g, sid, gid } = await setup("rows.concurrent");
    await s.produceBatch(Array.from({ length: 20 }, (_, i) => ({ payload: i })));
    await pollPastFence(g, () => {
      throw new Error("first");
    }, { opts: { batchLimit: 20 } });
    await makeDue(t, sid);
    const runs = new Map<string, number>();
    const h = async (m: Message) => {
      runs.set(m.id, (runs.get(m.id) ?? 0) + 1);
      await sleep(5);
    };
    await Promise.all([g.poll(h, { batchLimit: 20, concurrency: 4 }), g.poll(h, { batchLimit: 20, concurrency: 4 }), g.poll(h, { batchLimit: 20, concurrency: 4 })]);
    for (let i = 0; i < 5 && (await exceptionRows(t, sid, gid)).length > 0; i++) await g.poll(h, { batchLimit: 20 });
    expect(runs.size).toBe(20);
    expect([...runs.values()].every((n) => n === 1)).toBe(true);
    expect((await cursor(t, sid, gid)).committed).toBe("20");
    await checkInvariants(t, sid);
  });

  it("first-delivery outcomes are written only when the range commits", async () => {
    const { t, s, g, sid, gid } = await setup("rows.atcommit");
    await s.produceBatch([{ payload: 1 }, { payload: 2 }, { payload: 3 }]);
    const gate = latch();
    const running = latch();
    const p = pollPastFence(g, async (m: Message) => {
      if (m.id === "1") throw new Error("recorded later");
      if (m.id === "2") {
        running.open();
        await gate.promise;
      }
    });
    await running.promise;
    expect(await exceptionRows(t, sid, gid)).toEqual([]);
    expect(await deliveryLogRows(t, sid, gid)).toEqual([]);
    expect(await cursor(t, sid, gid)).toMatchObject({ claimed: "3", committed: "0" });
    await checkInvariants(t, sid);
    gate.open();
    expect(await p).toMatchObject({ failed: 1, succeeded: 2 });
    expect((await exceptionRows(t, sid, gid)).map((x) => [x.message_id, x.status])).toEqual([["1", "ready"]]);
    expect(deliveryLog(await deliveryLogRows(t, sid, gid))).toEqual([["1", 0, "failure"]]);
    await checkInvariants(t, sid);
  });

  it("first-delivery rows copy the key and store the resolved concurrency", async () => {
    const { t, s, g, sid, gid } = await setup("rows.resolved", { group: { concurrencyOverride: "exclusive" } });
    await s.produceBatch([{ payload: 1, key: "k1" }, { payload: 2 }]);
    await pollPastFence(g, () => {
      throw new Error("x");
    });
    const rows = await exceptionRows(t, sid, gid);
    expect(rows.map((r) => [r.message_id, r.message_key, r.concurrency])).toEqual([["1", "k1", "exclusive"], ["2", null, "parallel"]]);
    await checkInvariants(t, sid);
  });

  it("the committed cursor stays below the lowest unresolved row and passes dead ones", async () => {
    const { t, s, g, sid, gid } = await setup("cursor.rows");
    await s.produceBatch([1, 2, 3, 4, 5, 6].map((n) => ({ payload: { n } })));
    const h = (m: Message<{ n: number }>) => {
      if (m.payload.n === 2) throw Permanent("no");
      if (m.payload.n === 4 && m.attempt === 0) throw new Error("later");
    };
    await pollPastFence(g, h as Handler);
    expect(await cursor(t, sid, gid)).toMatchObject({ claimed: "6", committed: "3" });
    const p = await g.progress();
    expect(p).toMatchObject({ committed: "3", lag: "3", exceptions: { ready: 1, dead: 1, deferred: 0, inflight: 0, superseded: 0 } });
    expect(p.oldestUnresolvedAgeMs).not.toBeNull();
    await checkInvariants(t, sid);
    await makeDue(t, sid);
    await g.poll(h as Handler);
    expect(await cursor(t, sid, gid)).toMatchObject({ claimed: "6", committed: "6" });
    expect((await g.progress()).oldestUnresolvedAgeMs).toBeNull();
    await checkInvariants(t, sid);
  });
});
