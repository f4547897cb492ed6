// The backoff curve (docs/protocol/exception-lifecycle.md#attempts-and-budget), classification and error
// texts (docs/protocol/exception-lifecycle.md#running-a-handler) as pure units of outcome.ts. No database.
import { describe, expect, it } from "vitest";
import { SqlStreamsError as SourceError } from "../../packages/core/src/errors.js";
import { Delay, Permanent, backoffMs, classify, errorText } from "../../packages/core/src/outcome.js";
import { codedError } from "../support/streams.js";

/** The coded error that fn, a function of the sources, throws (codedError with the sources' class). */
const srcError = (fn: () => unknown) => codedError(fn, SourceError);

describe("backoff (docs/protocol/exception-lifecycle.md#attempts-and-budget)", () => {
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

describe("classification and error texts (docs/protocol/exception-lifecycle.md#running-a-handler)", () => {
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
