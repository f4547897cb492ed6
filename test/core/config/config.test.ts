// Configuration validation and resolution (docs/configuration.md#the-stored-document, docs/poll-cycle.md#options), the backoff curve (docs/exception-lifecycle.md#attempts-and-budget),
// classification and error texts (docs/exception-lifecycle.md#running-a-handler) and the outcome table (docs/exception-lifecycle.md) as pure unit tests of
// config.ts, outcome.ts and cycle/plan.ts; then register()/produce()/poll() rejections against a
// real Postgres, which must leave every table unchanged.
import { describe, expect, it } from "vitest";
import {
  DEFAULT_MESSAGE, type ConsumerConfig, groupResolution, resolveMessage, validateConsumerConfig, validatePollOptions,
  validateStreamOptions,
} from "../../../packages/core/src/config.js";
import { SqlStreamsError as SourceError } from "../../../packages/core/src/errors.js";
import { Delay, Permanent, backoffMs, classify, errorText } from "../../../packages/core/src/outcome.js";
import { plan, planExpired } from "../../../packages/core/src/cycle/plan.js";
import { useFreshDatabase } from "../../support/db.js";
import { tableSnapshot } from "../../support/invariants.js";
import { S, codedError, streamIdOf, testClient } from "../../support/streams.js";

/** The coded error that fn, a function of the sources, throws (codedError with the sources' class). */
const srcError = (fn: () => unknown) => codedError(fn, SourceError);

describe("validateConsumerConfig (docs/configuration.md#the-stored-document)", () => {
  it("stores the document sparse and exactly as given", () => {
    const doc = { message: { timeout: 30_000, retry: { maxRetries: 5, baseDelay: 2000 } }, concurrencyOverride: "ordered" as const };
    expect(validateConsumerConfig(doc)).toEqual(doc);
    expect(validateConsumerConfig({})).toEqual({});
    expect(validateConsumerConfig(undefined)).toEqual({});
    const full: ConsumerConfig = {
      message: { timeout: 1_000, concurrency: "exclusive", retry: { maxRetries: 2, maxDelays: 4, baseDelay: 10, maxDelay: 20, exponent: 1.5 } },
      messageMin: { timeout: 500, retry: { maxRetries: 1 } },
      messageMax: { timeout: 2_000, retry: { maxDelays: 8 } },
      start: "head",
      exceptionInitialBackoff: 0,
      maxRangeReclaims: 100,
    };
    expect(validateConsumerConfig(full)).toEqual(full);
  });

  // [path, min, max, integer]; other fields set so that the filled defaults stay consistent.
  const ranges: [string, number, number, boolean][] = [
    ["message.timeout", 1, 86_400_000, true],
    ["message.retry.maxRetries", 0, 1_000, true],
    ["message.retry.maxDelays", 0, 1_000_000, true],
    ["message.retry.baseDelay", 1, 86_400_000, true],
    ["message.retry.maxDelay", 1, 604_800_000, true],
    ["message.retry.exponent", 1, 10, false],
    ["exceptionInitialBackoff", 0, 604_800_000, true],
    ["maxRangeReclaims", 1, 100, true],
  ];
  function doc(path: string, v: unknown): unknown {
    const base: Record<string, unknown> = {};
    const parts = path.split(".");
    let o = base;
    for (const p of parts.slice(0, -1)) o = (o[p] ??= {}) as Record<string, unknown>;
    o[parts.at(-1) as string] = v;
    // keep maxDelay >= baseDelay in the filled defaults, which is a separate rule (SQL0014)
    const retry = (base.message as { retry?: Record<string, unknown> } | undefined)?.retry;
    if (retry && path.endsWith("baseDelay")) retry.maxDelay = 604_800_000;
    if (retry && path.endsWith("maxDelay")) retry.baseDelay = 1;
    return base;
  }

  it.each(ranges)("%s accepts %d … %d and rejects anything else with SQL0013", async (path, min, max, integer) => {
    expect(() => validateConsumerConfig(doc(path, min))).not.toThrow();
    expect(() => validateConsumerConfig(doc(path, max))).not.toThrow();
    for (const bad of [min - 1, max + 1, "5", null, true, Number.NaN, Number.POSITIVE_INFINITY, 10n, {}]) {
      const e = await srcError(() => validateConsumerConfig(doc(path, bad)));
      expect(e.code, `${path} = ${String(bad)}`).toBe("SQL0013");
      expect(e.details.path).toBe(path);
      expect(e.message).toContain(path);
    }
    if (integer) expect((await srcError(() => validateConsumerConfig(doc(path, min + 0.5)))).code).toBe("SQL0013");
    else expect(() => validateConsumerConfig(doc(path, 1.5))).not.toThrow();
  });

  it("the message states the field path, the value and the rule", async () => {
    const e = await srcError(() => validateConsumerConfig({ message: { retry: { maxRetries: 1001 } } }));
    expect(e.code).toBe("SQL0013");
    expect(e.message).toContain("message.retry.maxRetries = 1001: must be between 0 and 1000");
    expect(e.details).toMatchObject({ path: "message.retry.maxRetries", value: 1001 });
  });

  it("messageMin and messageMax use the same ranges", async () => {
    expect((await srcError(() => validateConsumerConfig({ messageMin: { timeout: 0 } }))).code).toBe("SQL0013");
    expect((await srcError(() => validateConsumerConfig({ messageMax: { retry: { maxRetries: 1001 } } }))).code).toBe("SQL0013");
    expect((await srcError(() => validateConsumerConfig({ messageMax: { retry: { exponent: 11 } } }))).code).toBe("SQL0013");
  });

  it("unknown keys anywhere and wrong shapes are SQL0013", async () => {
    const cases: [unknown, string][] = [
      [{ bogus: 1 }, "bogus"],
      [{ message: { bogus: 1 } }, "message.bogus"],
      [{ message: { retry: { maxRetry: 1 } } }, "message.retry.maxRetry"],
      [{ messageMin: { retry: { bogus: 1 } } }, "messageMin.retry.bogus"],
      [{ messageMax: { bogus: 1 } }, "messageMax.bogus"],
      [{ message: null }, "message"],
      [{ message: [] }, "message"],
      [{ message: { retry: 3 } }, "message.retry"],
      [{ message: { concurrency: "serial" } }, "message.concurrency"],
      [{ concurrencyOverride: "any" }, "concurrencyOverride"],
      [{ start: "end" }, "start"],
    ];
    for (const [d, path] of cases) {
      const e = await srcError(() => validateConsumerConfig(d));
      expect([e.code, e.details.path], JSON.stringify(d)).toEqual(["SQL0013", path]);
    }
    expect((await srcError(() => validateConsumerConfig(null))).code).toBe("SQL0013");
    expect((await srcError(() => validateConsumerConfig("x"))).code).toBe("SQL0013");
  });

  it("inconsistent bounds are SQL0014", async () => {
    const cases: unknown[] = [
      { message: { retry: { baseDelay: 5000, maxDelay: 1000 } } }, // C29
      { message: { retry: { baseDelay: 400_000 } } }, // filled default maxDelay 300 000 < 400 000
      { message: { retry: { maxDelay: 500 } } }, // < default baseDelay 1 000
      { messageMin: { retry: { baseDelay: 5000, maxDelay: 1000 } } },
      { messageMax: { retry: { baseDelay: 500_000, maxDelay: 400_000 } } },
      { messageMin: { timeout: 60_000 } },
      { messageMax: { timeout: 10_000 } },
      { message: { timeout: 5_000 }, messageMax: { timeout: 4_000 } },
      { messageMax: { retry: { maxRetries: 2 } } },
      { messageMin: { retry: { exponent: 3 } } },
      { messageMin: { retry: { baseDelay: 2000 } } },
      { messageMax: { retry: { maxDelay: 200_000 } } },
      { messageMax: { retry: { maxDelays: 5 } } }, // default 0 = infinity
      { message: { retry: { maxDelays: 10 } }, messageMin: { retry: { maxDelays: 0 } } }, // a floor of infinity
      { message: { retry: { maxDelays: 10 } }, messageMax: { retry: { maxDelays: 9 } } },
      { messageMin: { concurrency: "ordered" } },
      { messageMax: { concurrency: "parallel" } },
    ];
    for (const d of cases) expect((await srcError(() => validateConsumerConfig(d))).code, JSON.stringify(d)).toBe("SQL0014");
  });

  it("consistent bounds are accepted, with 0 as infinity for maxDelays", () => {
    const ok: ConsumerConfig[] = [
      { message: { timeout: 30_000 }, messageMin: { timeout: 1_000 }, messageMax: { timeout: 60_000 } },
      { messageMin: { timeout: 30_000 }, messageMax: { timeout: 30_000 } },
      { message: { retry: { maxDelays: 10 } }, messageMax: { retry: { maxDelays: 0 } } },
      { messageMin: { retry: { maxDelays: 5 } } },
      { messageMin: { retry: { maxDelays: 0 } } },
      { message: { retry: { baseDelay: 400_000, maxDelay: 400_000 } } },
    ];
    for (const d of ok) expect(validateConsumerConfig(d), JSON.stringify(d)).toEqual(d);
  });
});

describe("resolveMessage (docs/configuration.md#resolving-a-messages-options)", () => {
  const seed = groupResolution(validateConsumerConfig({ message: { timeout: 30_000, retry: { maxRetries: 5, baseDelay: 2000 } } }));

  it("the worked example: the ceiling is the group default, there is no floor, and unset fields are filled", () => {
    const a = resolveMessage(seed, { timeout: 60_000 }, false, false);
    expect(a.resolved.timeout).toBe(30_000);
    expect(a.clamped).toEqual(["timeout"]);
    const b = resolveMessage(seed, { retry: { maxRetries: 2 } }, false, false);
    expect(b.resolved.maxRetries).toBe(2);
    expect(b.clamped).toEqual([]);
    expect(resolveMessage(seed, null, false, false)).toEqual({
      resolved: { timeout: 30_000, concurrency: "parallel", maxRetries: 5, maxDelays: 0, baseDelay: 2000, maxDelay: 300_000, exponent: 2 },
      clamped: [],
    });
  });

  it("unset group fields resolve to the library defaults when read", () => {
    expect(resolveMessage(groupResolution({}), null, false, false).resolved).toEqual(DEFAULT_MESSAGE);
    expect(DEFAULT_MESSAGE).toEqual({ timeout: 30_000, concurrency: "parallel", maxRetries: 3, maxDelays: 0, baseDelay: 1_000, maxDelay: 300_000, exponent: 2 });
    const g = groupResolution({});
    expect([g.exceptionInitialBackoff, g.maxRangeReclaims]).toEqual([5_000, 3]);
  });

  it("messageMax raises the ceiling, messageMin sets a floor; clamps are reported", () => {
    const g = groupResolution(validateConsumerConfig({
      message: { timeout: 10_000, retry: { maxRetries: 3 } },
      messageMin: { timeout: 1_000, retry: { maxRetries: 2 } },
      messageMax: { timeout: 60_000, retry: { maxRetries: 10, exponent: 4 } },
    }));
    expect(resolveMessage(g, { timeout: 45_000 }, false, false)).toMatchObject({ resolved: { timeout: 45_000 }, clamped: [] });
    expect(resolveMessage(g, { timeout: 90_000 }, false, false)).toMatchObject({ resolved: { timeout: 60_000 }, clamped: ["timeout"] });
    expect(resolveMessage(g, { timeout: 10 }, false, false)).toMatchObject({ resolved: { timeout: 1_000 }, clamped: ["timeout"] });
    expect(resolveMessage(g, { retry: { maxRetries: 0, exponent: 3 } }, false, false)).toMatchObject({
      resolved: { maxRetries: 2, exponent: 3 }, clamped: ["maxRetries"],
    });
    expect(resolveMessage(g, { retry: { maxRetries: 50 } }, false, false).resolved.maxRetries).toBe(10);
    // baseDelay has no messageMax: its ceiling is the group default
    expect(resolveMessage(g, { retry: { baseDelay: 5_000 } }, false, false)).toMatchObject({ resolved: { baseDelay: 1_000 }, clamped: ["baseDelay"] });
  });

  it("maxDelays treats 0 as infinity in the clamp", () => {
    const unlimited = groupResolution({});
    expect(resolveMessage(unlimited, { retry: { maxDelays: 5 } }, false, false).resolved.maxDelays).toBe(5);
    const ten = groupResolution(validateConsumerConfig({ message: { retry: { maxDelays: 10 } } }));
    expect(resolveMessage(ten, { retry: { maxDelays: 0 } }, false, false)).toMatchObject({ resolved: { maxDelays: 10 }, clamped: ["maxDelays"] });
    expect(resolveMessage(ten, { retry: { maxDelays: 20 } }, false, false).resolved.maxDelays).toBe(10);
    expect(resolveMessage(ten, { retry: { maxDelays: 3 } }, false, false).resolved.maxDelays).toBe(3);
    const floor = groupResolution(validateConsumerConfig({ messageMin: { retry: { maxDelays: 4 } }, messageMax: { retry: { maxDelays: 0 } } }));
    expect(resolveMessage(floor, { retry: { maxDelays: 2 } }, false, false).resolved.maxDelays).toBe(4);
    expect(resolveMessage(floor, { retry: { maxDelays: 0 } }, false, false).resolved.maxDelays).toBe(0);
  });

  it("a resolved maxDelay below baseDelay becomes baseDelay", () => {
    const r = resolveMessage(seed, { retry: { maxDelay: 1_500 } }, false, false).resolved;
    expect([r.baseDelay, r.maxDelay]).toEqual([2_000, 2_000]);
  });

  it("concurrency: override, then the message, then the group; no key is parallel; compacted ordered is exclusive", () => {
    const plain = groupResolution({});
    const groupOrdered = groupResolution(validateConsumerConfig({ message: { concurrency: "ordered" } }));
    const override = groupResolution(validateConsumerConfig({ concurrencyOverride: "exclusive", message: { concurrency: "ordered" } }));
    const c = (g: typeof plain, o: { concurrency?: "parallel" | "exclusive" | "ordered" } | null, key: boolean, compacted: boolean) =>
      resolveMessage(g, o, key, compacted).resolved.concurrency;
    expect(c(plain, null, true, false)).toBe("parallel");
    expect(c(plain, { concurrency: "ordered" }, true, false)).toBe("ordered");
    expect(c(groupOrdered, null, true, false)).toBe("ordered");
    expect(c(groupOrdered, { concurrency: "parallel" }, true, false)).toBe("parallel");
    expect(c(override, { concurrency: "parallel" }, true, false)).toBe("exclusive");
    expect(c(override, { concurrency: "ordered" }, false, false)).toBe("parallel");
    expect(c(groupOrdered, null, true, true)).toBe("exclusive");
    expect(c(plain, { concurrency: "exclusive" }, true, true)).toBe("exclusive");
  });
});

describe("poll and stream options", () => {
  it("poll options: defaults, and SQL0015 outside the ranges of docs/poll-cycle.md#options", async () => {
    expect(validatePollOptions(undefined)).toEqual({ batchBytes: 16 * 1024 * 1024, batchLimit: 10, concurrency: 1, deadline: undefined, recordMargin: 2_000, signal: undefined });
    const ac = new AbortController();
    expect(validatePollOptions({ batchLimit: 1_000, concurrency: 64, recordMargin: 100, deadline: 5, signal: ac.signal })).toMatchObject({ batchLimit: 1_000, concurrency: 64, recordMargin: 100, deadline: 5 });
    const bad: unknown[] = [
      null, { batchLimit: 0 }, { batchLimit: 1_001 }, { batchLimit: 1.5 }, { concurrency: 0 }, { concurrency: 65 },
      { recordMargin: 99 }, { recordMargin: 60_001 }, { deadline: Number.NaN }, { deadline: "soon" }, { signal: {} }, { bogus: 1 },
    ];
    for (const b of bad) expect((await srcError(() => validatePollOptions(b))).code, JSON.stringify(b)).toBe("SQL0015");
  });

  it("stream options: deliveryLog defaults to failures; anything else than failures, all, off is SQL0012", async () => {
    expect(validateStreamOptions(undefined).deliveryLog).toBe("failures");
    for (const m of ["failures", "all", "off"] as const) expect(validateStreamOptions({ deliveryLog: m }).deliveryLog).toBe(m);
    expect((await srcError(() => validateStreamOptions({ deliveryLog: "some" }))).code).toBe("SQL0012");
  });
});

describe("backoff (docs/exception-lifecycle.md#attempts-and-budget)", () => {
  const defaults = { exceptionInitialBackoff: 5_000, baseDelay: 1_000, exponent: 2, maxDelay: 300_000 };

  it("defaults: 5 s initial, then 1 s, 2 s, 4 s …", () => {
    expect([0, 1, 2, 3].map((a) => backoffMs(a, 0, defaults))).toEqual([5_000, 1_000, 2_000, 4_000]);
  });

  it("the seed curve (maxRetries 5, baseDelay 2000): 5 s, 2 s, 4 s, 8 s, 16 s", () => {
    expect([0, 1, 2, 3, 4].map((a) => backoffMs(a, 0, { ...defaults, baseDelay: 2_000 }))).toEqual([5_000, 2_000, 4_000, 8_000, 16_000]);
  });

  it("delays do not count: a − d decides the step", () => {
    expect(backoffMs(1, 1, defaults)).toBe(5_000); // Delay then failure: initial backoff
    expect(backoffMs(2, 1, defaults)).toBe(1_000);
    expect(backoffMs(3, 1, defaults)).toBe(2_000);
  });

  it("capped at maxDelay, rounded down, maxDelay when not finite", () => {
    expect(backoffMs(20, 0, defaults)).toBe(300_000);
    expect(backoffMs(2, 0, { ...defaults, baseDelay: 3, exponent: 1.5 })).toBe(4); // 4.5 ⇒ 4
    expect(backoffMs(1_000, 0, { ...defaults, exponent: 10, maxDelay: 604_800_000 })).toBe(604_800_000);
    expect(backoffMs(0, 0, { ...defaults, exceptionInitialBackoff: 0 })).toBe(0);
  });
});

describe("outcome plans (docs/exception-lifecycle.md#first-delivery, docs/exception-lifecycle.md#retries)", () => {
  const m = { ...DEFAULT_MESSAGE };

  /** Runs an always-failing message from its first delivery to the end, as the poll records it. */
  function timeline(res: typeof m, outcomes: ("fail" | { delay: number })[]) {
    let a = 0;
    let d = 0;
    const rows: [string, number, number, number | null][] = [];
    for (const o of outcomes) {
      const p = plan(o === "fail" ? { kind: "failure", error: "x" } : { kind: "delay", ms: o.delay, error: "d" }, a, d, res, 5_000, "failures");
      rows.push([p.row.status, p.row.attempts, p.row.delays, p.row.runAfterMs]);
      if (p.row.status === "dead") break;
      a = p.row.attempts;
      d = p.row.delays;
    }
    return rows;
  }

  it("the docs/exception-lifecycle.md#attempts-and-budget default timeline", () => {
    expect(timeline(m, ["fail", "fail", "fail", "fail", "fail"])).toEqual([
      ["ready", 1, 0, 5_000], ["ready", 2, 0, 1_000], ["ready", 3, 0, 2_000], ["dead", 3, 0, null],
    ]);
  });

  it("the docs/exception-lifecycle.md#attempts-and-budget seed timeline", () => {
    expect(timeline({ ...m, maxRetries: 5, baseDelay: 2_000 }, Array(8).fill("fail"))).toEqual([
      ["ready", 1, 0, 5_000], ["ready", 2, 0, 2_000], ["ready", 3, 0, 4_000], ["ready", 4, 0, 8_000], ["ready", 5, 0, 16_000], ["dead", 5, 0, null],
    ]);
  });

  it("the docs/exception-lifecycle.md#attempts-and-budget timeline with a delay in between: four failures, one delay, dead at attempts 4", () => {
    expect(timeline(m, ["fail", { delay: 60_000 }, "fail", "fail", "fail", "fail"])).toEqual([
      ["ready", 1, 0, 5_000], ["ready", 2, 1, 60_000], ["ready", 3, 1, 1_000], ["ready", 4, 1, 2_000], ["dead", 4, 1, null],
    ]);
  });

  it("every outcome row", () => {
    const err = { kind: "failure" as const, error: "E" };
    // success
    expect(plan({ kind: "success" }, 2, 1, m, 5_000, "failures")).toEqual({
      row: { status: "delete", attempts: 2, delays: 1, runAfterMs: null, lastError: null }, log: null, counter: "succeeded",
    });
    expect(plan({ kind: "success" }, 2, 1, m, 5_000, "all").log).toEqual({ attempt: 2, status: "success", error: "" });
    // failure, maxRetries 0 at first delivery and at a row after a delay
    expect(plan(err, 0, 0, { ...m, maxRetries: 0 }, 5_000, "failures")).toMatchObject({ row: { status: "dead", attempts: 0 }, log: { attempt: 0, status: "failure", error: "E" }, counter: "dead" });
    expect(plan(err, 1, 1, { ...m, maxRetries: 0 }, 5_000, "failures")).toMatchObject({ row: { status: "dead", attempts: 1, delays: 1 } });
    expect(plan(err, 2, 0, m, 5_000, "failures")).toMatchObject({ row: { status: "ready", attempts: 3, runAfterMs: 2_000, lastError: "E" }, counter: "failed" });
    // permanent
    expect(plan({ kind: "permanent", error: "P" }, 0, 0, m, 5_000, "failures")).toMatchObject({ row: { status: "dead", attempts: 0, lastError: "P" }, log: { status: "failure", error: "P" } });
    expect(plan({ kind: "permanent", error: "P" }, 2, 0, m, 5_000, "off")).toMatchObject({ row: { status: "dead", attempts: 2 }, log: null });
    // delay, and the delay limit
    expect(plan({ kind: "delay", ms: 700, error: "D" }, 0, 0, m, 5_000, "failures")).toMatchObject({ row: { status: "ready", attempts: 1, delays: 1, runAfterMs: 700, lastError: "D" }, log: { status: "delayed", error: "D" }, counter: "delayed" });
    expect(plan({ kind: "delay", ms: 700, error: "D" }, 5, 5, { ...m, maxDelays: 6 }, 5_000, "failures").row).toMatchObject({ status: "ready", attempts: 6, delays: 6 });
    const limit = plan({ kind: "delay", ms: 700, error: "D" }, 6, 6, { ...m, maxDelays: 6 }, 5_000, "failures");
    expect(limit).toMatchObject({
      row: { status: "dead", attempts: 6, delays: 6, lastError: "SQL0025 delay limit reached: 6 delays" },
      log: { attempt: 6, status: "failure", error: "SQL0025 delay limit reached: 6 delays" }, counter: "dead",
    });
    // deferred and superseded never advance attempts
    expect(plan({ kind: "deferred", reason: "deferred: key busy" }, 3, 1, m, 5_000, "failures")).toEqual({
      row: { status: "deferred", attempts: 3, delays: 1, runAfterMs: 0, lastError: null }, log: { attempt: 3, status: "deferred", error: "deferred: key busy" }, counter: "deferred",
    });
    expect(plan({ kind: "superseded", head: "9" }, 1, 0, m, 5_000, "failures")).toMatchObject({
      row: { status: "superseded", attempts: 1 }, log: { attempt: 1, status: "superseded", error: "superseded by 9" },
    });
  });

  it("expired run leases: charged with the backoff while budget remains, killed when it is spent", () => {
    expect(planExpired(1, 0, "E", m, 5_000)).toEqual({
      status: "ready", attempts: 2, runAfterMs: 1_000, lastError: "E", log: { attempt: 1, status: "expired", error: "lease expired before an outcome was recorded" },
    });
    expect(planExpired(0, 0, null, m, 5_000).runAfterMs).toBe(5_000);
    expect(planExpired(3, 1, "E", m, 5_000)).toMatchObject({ status: "ready", attempts: 4, runAfterMs: 2_000 });
    expect(planExpired(3, 0, "E", m, 5_000)).toEqual({
      status: "dead", attempts: 3, runAfterMs: null, lastError: "E [killed: crash-loop hit max attempts]",
      log: { attempt: 3, status: "killed", error: "E [killed: crash-loop hit max attempts]" },
    });
    expect(planExpired(0, 0, null, { ...m, maxRetries: 0 }, 5_000).lastError).toBe(" [killed: crash-loop hit max attempts]");
  });
});

describe("classification and error texts (docs/exception-lifecycle.md#running-a-handler)", () => {
  it("returning anything but an outcome is success; any throw is a failure", () => {
    for (const v of [undefined, null, 42, "ok", {}, [], false]) expect(classify(v, false)).toEqual({ kind: "success" });
    expect(classify(new Error("x"), true)).toMatchObject({ kind: "failure", error: expect.stringMatching(/^Error: x/) });
    expect(classify(undefined, true)).toEqual({ kind: "failure", error: "non-error thrown: undefined" });
    expect(classify("s", true)).toEqual({ kind: "failure", error: "non-error thrown: s" });
  });

  it("Delay and Permanent classify the same returned or thrown", () => {
    for (const threw of [false, true]) {
      expect(classify(Delay(1_500), threw)).toEqual({ kind: "delay", ms: 1_500, error: "SQL0025 delayed: run again in 1500 ms" });
      expect(classify(Delay(-5), threw)).toEqual({ kind: "delay", ms: 1_000, error: "SQL0025 delayed: run again in 1000 ms" });
      expect(classify(Delay(0), threw)).toEqual({ kind: "delay", ms: 1_000, error: "SQL0025 delayed: run again in 1000 ms" });
      expect(classify(Delay(0.2), threw)).toMatchObject({ ms: 1 });
      expect(classify(Permanent(new TypeError("bad")), threw)).toMatchObject({ kind: "permanent", error: expect.stringMatching(/^SQL0026 permanent: TypeError: bad\n {4}at /) });
      expect(classify(Permanent("no"), threw)).toEqual({ kind: "permanent", error: "SQL0026 permanent: non-error thrown: no" });
    }
    expect(Delay(5)).toBeInstanceOf(Error);
    expect(Permanent("x")).toBeInstanceOf(Error);
  });

  it("Delay rejects a non-finite or over-long argument with SQL0015", async () => {
    for (const bad of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, 31_536_000_001, "5" as unknown as number]) {
      expect((await srcError(() => Delay(bad))).code).toBe("SQL0015");
    }
    expect(() => Delay(31_536_000_000)).not.toThrow();
  });

  it("error text: name: message, at most 10 frames, the cause chain, cut at 8 000 characters", () => {
    const deep = (n: number): Error => (n === 0 ? new Error("deep") : deep(n - 1));
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 50;
    let e: Error;
    try {
      e = deep(20);
    } finally {
      Error.stackTraceLimit = limit;
    }
    expect((e.stack ?? "").split("\n").length).toBeGreaterThan(20);
    const text = errorText(e);
    const lines = text.split("\n");
    expect(lines[0]).toBe("Error: deep");
    expect(lines.slice(1).every((l) => /^\s+at /.test(l))).toBe(true);
    expect(lines.length).toBe(11);
    const chained = errorText(new Error("outer", { cause: new RangeError("middle", { cause: "root" }) }));
    expect(chained).toMatch(/^Error: outer\n/);
    expect(chained).toMatch(/\ncaused by: RangeError: middle\ncaused by: root$/);
    const named = new Error("m");
    named.name = "PaymentError";
    expect(errorText(named)).toMatch(/^PaymentError: m\n/);
    expect(errorText(42)).toBe("non-error thrown: 42");
    expect(errorText({ a: 1 })).toBe('non-error thrown: {"a":1}');
    expect(errorText({ code: "E_RATE", detail: { retryIn: 5n, ids: [1, 2] } })).toBe('non-error thrown: {"code":"E_RATE","detail":{"retryIn":"5","ids":[1,2]}}');
    expect(errorText(["a", 1])).toBe('non-error thrown: ["a",1]');
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(errorText(cyclic)).toBe("non-error thrown: [object Object]");
    const hostile = { get boom() { throw new Error("no"); }, toString() { throw new Error("no"); } };
    expect(errorText(hostile)).toBe("non-error thrown: [object Object]");
    expect(errorText({ big: "w".repeat(10_000) })).toHaveLength(8_000);
    const long = errorText(new Error("y".repeat(10_000)));
    expect(long).toHaveLength(8_000);
    expect(long.endsWith("…")).toBe(true);
    expect(errorText("z".repeat(7_982))).toHaveLength(8_000); // "non-error thrown: " is 18: exactly 8 000, not cut
    expect(errorText("z".repeat(7_982)).endsWith("z")).toBe(true);
    expect(errorText("z".repeat(7_983)).endsWith("…")).toBe(true);
  });
});

const url = useFreshDatabase();

describe("rejections against a real database write nothing", () => {
  it("register() rejects invalid retry and timeout configurations with coded errors and keeps the stored config", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream("config.reject");
    await s.register();
    const g = s.consumer("g");
    const valid = { message: { timeout: 30_000, retry: { maxRetries: 5, baseDelay: 2000 } }, concurrencyOverride: "ordered" as const };
    await g.register(valid);
    const sid = await streamIdOf(t, "config.reject");
    const [stored] = await t.sql<{ config: unknown }>(`SELECT config FROM ${S}.consumer_group_config WHERE stream_id = $1 AND name = 'g'`, [sid]);
    expect(stored.config).toEqual(valid); // sparse, exactly as given (docs/configuration.md#the-stored-document)
    const before = await tableSnapshot(t, sid);
    const bad: [unknown, string][] = [
      [{ message: { retry: { baseDelay: 5000, maxDelay: 1000 } } }, "SQL0014"],
      [{ message: { retry: { maxRetries: -1 } } }, "SQL0013"],
      [{ message: { retry: { maxRetries: 2.5 } } }, "SQL0013"],
      [{ message: { retry: { exponent: 0.5 } } }, "SQL0013"],
      [{ message: { timeout: 86_400_001 } }, "SQL0013"],
      [{ message: { timeout: "30s" } }, "SQL0013"],
      [{ messageMin: { timeout: 60_000 } }, "SQL0014"],
      [{ messageMax: { concurrency: "ordered" } }, "SQL0014"],
      [{ unknown: true }, "SQL0013"],
      [null, "SQL0013"],
    ];
    for (const [cfg, code] of bad) {
      await expect(g.register(cfg as ConsumerConfig), JSON.stringify(cfg)).rejects.toMatchObject({ code });
    }
    // A group that does not exist yet is not created by a rejected registration.
    await expect(s.consumer("never").register({ message: { timeout: 0 } })).rejects.toMatchObject({ code: "SQL0013" });
    expect(await tableSnapshot(t, sid)).toEqual(before);
    // Redeclaring replaces the whole document: omitted fields fall back to defaults.
    await g.register({ message: { timeout: 1_000 } });
    const [now] = await t.sql<{ config: unknown }>(`SELECT config FROM ${S}.consumer_group_config WHERE stream_id = $1 AND name = 'g'`, [sid]);
    expect(now.config).toEqual({ message: { timeout: 1_000 } });
  });

  it("produce() rejects invalid message options before writing; poll() rejects bad options before any statement", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream("config.produce");
    await s.register();
    const g = s.consumer("g");
    await g.register();
    const sid = await streamIdOf(t, "config.produce");
    const before = await tableSnapshot(t, sid);
    const bad: [unknown, string][] = [
      [{ message: { timeout: 0 } }, "SQL0013"],
      [{ message: { retry: { maxRetries: 1_001 } } }, "SQL0013"],
      [{ message: { retry: { bogus: 1 } } }, "SQL0013"],
      [{ message: { retry: { baseDelay: 5_000, maxDelay: 1_000 } } }, "SQL0014"],
      [{ message: { concurrency: "exclusive" } }, "SQL0019"],
    ];
    for (const [opts, code] of bad) {
      await expect(s.produce({ x: 1 }, opts as never), JSON.stringify(opts)).rejects.toMatchObject({ code });
    }
    expect(await tableSnapshot(t, sid)).toEqual(before);
    const mark = t.statements.length;
    await expect(g.poll(() => {}, { batchLimit: 0 })).rejects.toMatchObject({ code: "SQL0015" });
    await expect(g.drain(() => {}, { concurrency: 65 })).rejects.toMatchObject({ code: "SQL0015" });
    await expect(g.poll("nope" as never)).rejects.toMatchObject({ code: "SQL0015" });
    expect(t.statements.length).toBe(mark);
  });
});
