// The range phase's pure pieces: when a drain's chain may record a range with the next claim or
// claim ahead, how it feeds the sizer, how a range splits into chains, and the key leases a record
// releases. No database: a poll context with only the options these read.
import { describe, expect, it } from "vitest";
import { resolveMessage, groupResolution } from "../../packages/core/src/config.js";
import type { PollContext, RangeMessage } from "../../packages/core/src/cycle/context.js";
import { Chain } from "../../packages/core/src/cycle/range/chain.js";
import { keyLeaseJson, releaseJson } from "../../packages/core/src/cycle/range/keys.js";
import { chains } from "../../packages/core/src/cycle/range/run.js";
import { type DrainSizing, RangeSizer, emptySample } from "../../packages/core/src/cycle/sizer.js";
import { type MonotonicMs, after, now } from "../../packages/core/src/clock.js";

function context(deadline?: MonotonicMs): PollContext<unknown> {
  return { options: { batchLimit: 10, batchBytes: 1 << 20, concurrency: 1, deadline, recordMargin: 2_000, signal: undefined }, stop: false } as unknown as PollContext<unknown>;
}

function drain(): DrainSizing {
  return { sizer: new RangeSizer(1_000, 10), sample: emptySample() };
}

describe("the chain", () => {
  it("goes on only in a drain, after a full range", () => {
    const ctx = context();
    expect(new Chain(ctx, undefined, after(now(), 1_000)).mayChain()).toBe(false);
    const d = drain();
    const chain = new Chain(ctx, d, after(now(), 1_000));
    expect(chain.mayChain()).toBe(false);
    (chain.sample as NonNullable<typeof chain.sample>).full = true;
    expect(chain.mayChain()).toBe(true);
  });

  it("stops at its time limit, at end(), at a stop, and near the deadline", () => {
    const full = () => ({ ...drain(), sample: { ...emptySample(), full: true } });
    expect(new Chain(context(), full(), after(now(), -1)).mayChain()).toBe(false);
    const ended = new Chain(context(), full(), after(now(), 1_000));
    ended.end();
    expect(ended.mayChain()).toBe(false);
    const stopped = context();
    stopped.stop = true;
    expect(new Chain(stopped, full(), after(now(), 1_000)).mayChain()).toBe(false);
    expect(new Chain(context(after(now(), 3_000)), full(), after(now(), 1_000)).mayChain()).toBe(false); // < 2 × recordMargin left
    expect(new Chain(context(after(now(), 5_000)), full(), after(now(), 1_000)).mayChain()).toBe(true);
  });

  it("claims ahead only after a quick last range: slowest ≤ a quarter of its timeout, run within a quarter of the lease", () => {
    const d = { ...drain(), sample: { ...emptySample(), full: true } };
    const chain = new Chain(context(), d, after(now(), 1_000));
    const run = { range: { leaseMs: 4_000 } } as never;
    expect(chain.mayClaimAhead(run)).toBe(false); // no last range yet
    d.lastRun = { ms: 1_000, slowest: 0.25 };
    expect(chain.mayClaimAhead(run)).toBe(true);
    d.lastRun = { ms: 1_001, slowest: 0.25 };
    expect(chain.mayClaimAhead(run)).toBe(false);
    d.lastRun = { ms: 10, slowest: 0.26 };
    expect(chain.mayClaimAhead(run)).toBe(false);
  });

  it("feeds the sizer each range's sample before the next claim, and sizes the next range from it", () => {
    const ctx = context();
    const d = drain();
    const chain = new Chain(ctx, d, after(now(), 1_000));
    Object.assign(chain.sample as object, { full: true, ran: 10, slowest: 0.01 });
    chain.ran(5);
    expect(d.lastRun).toEqual({ ms: 5, slowest: 0.01 });
    chain.nextRangeSize();
    expect(ctx.options.batchLimit).toBe(20);
    expect(chain.sample).toEqual(emptySample());
    expect(d.sample).toBe(chain.sample);
  });

  it("headroom for first key leases only where leases pass on", () => {
    const chain = new Chain(context(), drain(), after(now(), 1_000));
    expect(chain.headroom(false)).toBe(0);
    expect(chain.headroom(true)).toBe(2_000);
  });
});

describe("a range's chains", () => {
  const g = groupResolution({});
  const m = (id: string, key: string | null, concurrency?: "parallel" | "exclusive" | "ordered"): RangeMessage => ({
    id, message_key: key, compaction_rank: null, payload: null, options: null, created_at: 0, expiry: null,
    resolved: resolveMessage(g, concurrency ? { concurrency } : null, key !== null, false).resolved,
  });

  it("same-key exclusive and ordered messages form one chain in id order; parallel and keyless ones run alone", () => {
    const units = chains([m("1", "a", "ordered"), m("2", null), m("3", "a", "ordered"), m("4", "b", "parallel"), m("5", "b", "exclusive"), m("6", "b", "exclusive")]);
    expect(units.map((u) => u.map((x) => x.id))).toEqual([["1", "3"], ["2"], ["4"], ["5", "6"]]);
  });

  it("with keyConcurrency n, an exclusive key's members are dealt round-robin to n chains; a key with an ordered member keeps one", () => {
    const msgs = [m("1", "a", "exclusive"), m("2", "a", "exclusive"), m("3", null), m("4", "a", "exclusive"), m("5", "a", "exclusive"),
      m("6", "b", "ordered"), m("7", "b", "exclusive"), m("8", "a", "exclusive"), m("9", "b", "exclusive")];
    const ids = (n: number) => chains(msgs, n).map((u) => u.map((x) => x.id));
    expect(ids(1)).toEqual([["1", "2", "4", "5", "8"], ["3"], ["6", "7", "9"]]);
    expect(ids(2)).toEqual([["1", "4", "8"], ["2", "5"], ["3"], ["6", "7", "9"]]);
    expect(ids(3)).toEqual([["1", "5"], ["2", "8"], ["3"], ["4"], ["6", "7", "9"]]);
  });
});

describe("the key leases a record releases", () => {
  it("as record_range_N and claim_N take them: none without a token or keys, else [{k, t}]", () => {
    expect(keyLeaseJson({ token: null, keys: [], all: true })).toBeNull();
    expect(keyLeaseJson({ token: "t", keys: [], all: true })).toBeNull();
    expect(JSON.parse(keyLeaseJson({ token: "t", keys: ["a", "b"], all: false }) as string)).toEqual([{ k: "a", t: "t" }, { k: "b", t: "t" }]);
  });

  it("as record_take_keys_N takes them: every lease under the token unless an abandoned run keeps one", () => {
    expect(releaseJson({ token: "t", keys: [], all: true })).toBeNull();
    expect(releaseJson({ token: "t", keys: ["a"], all: true })).toBe('"all"');
    expect(releaseJson({ token: "t", keys: ["a", "b"], all: false })).toBe('["a","b"]');
  });
});
