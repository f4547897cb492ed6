// Consumer configuration validation and resolution (docs/guide/configuration.md#the-stored-document,
// docs/guide/configuration.md#resolving-a-messages-options) and the poll and stream options
// (docs/protocol/poll-cycle.md#options), as pure units of config.ts. No database.
import { describe, expect, it } from "vitest";
import {
  DEFAULT_MESSAGE, type ConsumerConfig, groupResolution, rateLimitOf, resolveMessage, validateConsumerConfig, validatePollOptions,
  validateStreamOptions,
} from "../../packages/core/src/config.js";
import { SqlStreamsError as SourceError } from "../../packages/core/src/errors.js";
import { codedError } from "../support/streams.js";

/** The coded error that fn, a function of the sources, throws (codedError with the sources' class). */
const srcError = (fn: () => unknown) => codedError(fn, SourceError);

describe("validateConsumerConfig (docs/guide/configuration.md#the-stored-document)", () => {
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

  it("rateLimit (docs/guide/configuration.md#ratelimit): perSecond > 0 and finite, burst an integer >= 1, else SQL0013", async () => {
    const cases: [unknown, string][] = [
      [0, "rateLimit"], [null, "rateLimit"], [{}, "rateLimit.perSecond"], [{ perSecond: 0 }, "rateLimit.perSecond"],
      [{ perSecond: -1 }, "rateLimit.perSecond"], [{ perSecond: Infinity }, "rateLimit.perSecond"], [{ perSecond: NaN }, "rateLimit.perSecond"],
      [{ perSecond: "5" }, "rateLimit.perSecond"], [{ perSecond: 2_000_000 }, "rateLimit.perSecond"],
      [{ perSecond: 5, burst: 0 }, "rateLimit.burst"], [{ perSecond: 5, burst: 1.5 }, "rateLimit.burst"],
      [{ perSecond: 5, burst: "2" }, "rateLimit.burst"], [{ perSecond: 5, every: 1 }, "rateLimit.every"],
    ];
    for (const [rateLimit, path] of cases) {
      const e = await srcError(() => validateConsumerConfig({ rateLimit }));
      expect([e.code, e.details.path], JSON.stringify(rateLimit)).toEqual(["SQL0013", path]);
    }
    expect(validateConsumerConfig({ rateLimit: { perSecond: 0.5 } })).toEqual({ rateLimit: { perSecond: 0.5 } });
    expect(validateConsumerConfig({ rateLimit: { perSecond: 20, burst: 5 } })).toEqual({ rateLimit: { perSecond: 20, burst: 5 } });
    // burst defaults to perSecond rounded up, at least 1.
    expect(rateLimitOf({ rateLimit: { perSecond: 0.5 } })).toEqual({ perSecond: 0.5, burst: 1 });
    expect(rateLimitOf({ rateLimit: { perSecond: 7.2 } })).toEqual({ perSecond: 7.2, burst: 8 });
    expect(rateLimitOf({ rateLimit: { perSecond: 20, burst: 3 } })).toEqual({ perSecond: 20, burst: 3 });
    expect(rateLimitOf({})).toBeUndefined();
    expect(rateLimitOf(null)).toBeUndefined();
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

describe("resolveMessage (docs/guide/configuration.md#resolving-a-messages-options)", () => {
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
  it("poll options: defaults, and SQL0015 outside the ranges of docs/protocol/poll-cycle.md#options", async () => {
    expect(validatePollOptions(undefined)).toEqual({ batchBytes: 16 * 1024 * 1024, batchLimit: 10, concurrency: 1, deadline: undefined, recordMargin: 2_000, signal: undefined });
    const ac = new AbortController();
    expect(validatePollOptions({ batchLimit: 10_000, concurrency: 64, recordMargin: 100, deadline: 5, signal: ac.signal })).toMatchObject({ batchLimit: 10_000, concurrency: 64, recordMargin: 100, deadline: 5 });
    const e = await srcError(() => validatePollOptions({ batchLimit: 10_001 }));
    expect(e.code).toBe("SQL0015");
    expect(e.message).toContain("batchLimit = 10001: must be between 1 and 10000");
    expect(e.details).toMatchObject({ path: "batchLimit", value: 10_001 });
    const bad: unknown[] = [
      null, { batchLimit: 0 }, { batchLimit: 10_001 }, { batchLimit: 1.5 }, { concurrency: 0 }, { concurrency: 65 },
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
