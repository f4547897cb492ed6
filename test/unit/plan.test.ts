// The outcome table (docs/protocol/exception-lifecycle.md#first-delivery, docs/protocol/exception-lifecycle.md#retries)
// as a pure unit of cycle/plan.ts: what a first delivery, a retry and an expired run record. No
// database.
import { describe, expect, it } from "vitest";
import { DEFAULT_MESSAGE } from "../../packages/core/src/config.js";
import { plan, planExpired } from "../../packages/core/src/cycle/plan.js";

describe("outcome plans (docs/protocol/exception-lifecycle.md#first-delivery, docs/protocol/exception-lifecycle.md#retries)", () => {
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

  it("an expired message (docs/guide/producing.md#expiry): an expired row with its attempts kept, no audit row in any mode, counted as expired", () => {
    for (const mode of ["failures", "all", "off"] as const) {
      expect(plan({ kind: "expired" }, 2, 1, m, 5_000, mode)).toEqual({
        row: { status: "expired", attempts: 2, delays: 1, runAfterMs: null, lastError: "expired: not started by this group before its expiry" },
        log: null, counter: "expired",
      });
    }
  });

  it("the docs/protocol/exception-lifecycle.md#attempts-and-budget default timeline", () => {
    expect(timeline(m, ["fail", "fail", "fail", "fail", "fail"])).toEqual([
      ["ready", 1, 0, 5_000], ["ready", 2, 0, 1_000], ["ready", 3, 0, 2_000], ["dead", 3, 0, null],
    ]);
  });

  it("the docs/protocol/exception-lifecycle.md#attempts-and-budget seed timeline", () => {
    expect(timeline({ ...m, maxRetries: 5, baseDelay: 2_000 }, Array(8).fill("fail"))).toEqual([
      ["ready", 1, 0, 5_000], ["ready", 2, 0, 2_000], ["ready", 3, 0, 4_000], ["ready", 4, 0, 8_000], ["ready", 5, 0, 16_000], ["dead", 5, 0, null],
    ]);
  });

  it("the docs/protocol/exception-lifecycle.md#attempts-and-budget timeline with a delay in between: four failures, one delay, dead at attempts 4", () => {
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

  it("maxDelays 0 puts no limit on delays", () => {
    const delay = { kind: "delay" as const, ms: 700, error: "D" };
    expect(plan(delay, 500, 500, { ...m, maxDelays: 0 }, 5_000, "failures")).toMatchObject({ row: { status: "ready", attempts: 501, delays: 501 }, counter: "delayed" });
  });

  it("the delivery log: all keeps every outcome, failures all but success, off none", () => {
    const outcomes = [
      { kind: "success" as const }, { kind: "failure" as const, error: "E" }, { kind: "permanent" as const, error: "P" },
      { kind: "delay" as const, ms: 700, error: "D" }, { kind: "deferred" as const, reason: "deferred: key busy" }, { kind: "superseded" as const, head: "9" },
    ];
    const logged = (mode: "all" | "failures" | "off") => outcomes.map((o) => plan(o, 1, 0, m, 5_000, mode).log?.status ?? null);
    expect(logged("all")).toEqual(["success", "failure", "failure", "delayed", "deferred", "superseded"]);
    expect(logged("failures")).toEqual([null, "failure", "failure", "delayed", "deferred", "superseded"]);
    expect(logged("off")).toEqual([null, null, null, null, null, null]);
    // The row is the same whatever the log mode.
    for (const o of outcomes) expect(plan(o, 1, 0, m, 5_000, "off").row).toEqual(plan(o, 1, 0, m, 5_000, "all").row);
  });
});
