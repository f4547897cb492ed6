// The typed answers of the protocol functions (sql/results.ts): take_key_N and take_keys_N's key
// leases, exception_step_N's starts and records, and the deferral reason written for a blocked key.
// Rows are built by hand in the functions' encodings. No database.
import { describe, expect, it } from "vitest";
import type { ExceptionStepRow } from "../../packages/core/src/sql/cycle.js";
import {
  decodeExceptionStep, decodeKeyTake, decodeKeyTakes, decodeStart, deferredReason,
} from "../../packages/core/src/sql/results.js";

const stepRow = (over: Partial<ExceptionStepRow>): ExceptionStepRow => ({ step: "start", message_id: "1", kind: "started", reason: null, ref: null, ...over });

describe("key leases (take_key_N, take_keys_N)", () => {
  it("take_key_N: taken, busy, the unresolved predecessor, the head that supersedes (none when NULL)", () => {
    expect(decodeKeyTake({ kind: "taken", ref: null })).toEqual({ kind: "taken" });
    expect(decodeKeyTake({ kind: "busy", ref: "7" })).toEqual({ kind: "busy" });
    expect(decodeKeyTake({ kind: "pred", ref: "41" })).toEqual({ kind: "pred", id: "41" });
    expect(decodeKeyTake({ kind: "superseded", ref: "99" })).toEqual({ kind: "superseded", head: "99" });
    expect(decodeKeyTake({ kind: "superseded", ref: null })).toEqual({ kind: "superseded", head: "none" });
  });

  it("take_key_N: an answer of another kind is an error, never a silent take", () => {
    expect(() => decodeKeyTake({ kind: "maybe", ref: null })).toThrow(/unexpected key lease result/);
  });

  it("take_keys_N returns only refusals: every other key asked for is taken, one answer per key", () => {
    const out = decodeKeyTakes(["a", "b", "c", "d"], [
      { k: "b", kind: "busy", pred_id: null },
      { k: "d", kind: "pred", pred_id: "12" },
    ]);
    expect([...out.keys()]).toEqual(["a", "b", "c", "d"]);
    expect(out.get("a")).toEqual({ kind: "taken" });
    expect(out.get("b")).toEqual({ kind: "busy" });
    expect(out.get("c")).toEqual({ kind: "taken" });
    expect(out.get("d")).toEqual({ kind: "pred", id: "12" });
    expect(Object.isFrozen(out.get("a"))).toBe(true);
    expect(decodeKeyTakes([], []).size).toBe(0);
  });

  it("take_keys_N: a predecessor refusal without its id, or an unknown kind, is an error", () => {
    expect(() => decodeKeyTakes(["a"], [{ k: "a", kind: "pred", pred_id: null }])).toThrow(/unexpected key lease row/);
    expect(() => decodeKeyTakes(["a"], [{ k: "a", kind: "gone", pred_id: null }])).toThrow(/unexpected key lease row/);
  });

  it("the deferral reason names the blocking predecessor, or says the key is busy", () => {
    expect(deferredReason({ kind: "busy" })).toBe("deferred: key busy");
    expect(deferredReason({ kind: "pred", id: "41" })).toBe("deferred: ordered predecessor 41 unresolved");
  });
});

describe("exception steps (exception_step_N, reserve_exceptions_N)", () => {
  it("a start: started, lost, superseded by a head (none when NULL), deferred by a busy key or a predecessor", () => {
    expect(decodeStart({ kind: "started", reason: null, ref: null })).toEqual({ kind: "started" });
    expect(decodeStart({ kind: "lost", reason: null, ref: null })).toEqual({ kind: "lost" });
    expect(decodeStart({ kind: "superseded", reason: null, ref: "8" })).toEqual({ kind: "superseded", head: "8" });
    expect(decodeStart({ kind: "superseded", reason: null, ref: null })).toEqual({ kind: "superseded", head: "none" });
    expect(decodeStart({ kind: "deferred", reason: "busy", ref: null })).toEqual({ kind: "deferred", blocked: { kind: "busy" } });
    expect(decodeStart({ kind: "deferred", reason: "pred", ref: "3" })).toEqual({ kind: "deferred", blocked: { kind: "pred", id: "3" } });
  });

  it("a start deferred for no known reason, or a predecessor without its id, is an error", () => {
    expect(() => decodeStart({ kind: "deferred", reason: "pred", ref: null })).toThrow(/unexpected exception start/);
    expect(() => decodeStart({ kind: "deferred", reason: "other", ref: "3" })).toThrow(/unexpected exception start/);
    expect(() => decodeStart({ kind: "begun", reason: null, ref: null })).toThrow(/unexpected exception start/);
  });

  it("one step's rows split into starts and records by message id; a taken-over key lease is still recorded", () => {
    const step = decodeExceptionStep([
      stepRow({ step: "start", message_id: "10", kind: "started" }),
      stepRow({ step: "start", message_id: "11", kind: "deferred", reason: "busy" }),
      stepRow({ step: "record", message_id: "5", kind: "recorded" }),
      stepRow({ step: "record", message_id: "6", kind: "key_taken_over" }),
      stepRow({ step: "record", message_id: "7", kind: "lost" }),
    ]);
    expect([...step.starts]).toEqual([["10", { kind: "started" }], ["11", { kind: "deferred", blocked: { kind: "busy" } }]]);
    expect([...step.records]).toEqual([
      ["5", { kind: "recorded", keyTakenOver: false }],
      ["6", { kind: "recorded", keyTakenOver: true }],
      ["7", { kind: "lost" }],
    ]);
    expect(decodeExceptionStep([])).toEqual({ starts: new Map(), records: new Map() });
  });

  it("an unknown step or record kind is an error", () => {
    expect(() => decodeExceptionStep([stepRow({ step: "finish" })])).toThrow(/unexpected exception step/);
    expect(() => decodeExceptionStep([stepRow({ step: "record", kind: "started" })])).toThrow(/unexpected exception record/);
  });
});
