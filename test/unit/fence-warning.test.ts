// What a poll held back by the fence says about its holders (docs/protocol/poll-cycle.md#the-fence):
// SQL0043 at warn names only holders whose transaction age is known and over the bound; holders
// of unknown age are counted in one info-level note and never called long-running. The decision
// alone, without a database; test/isolated/fence.test.ts stages real holders.
import { describe, expect, it } from "vitest";
import { FENCE_WARN_MS, type FenceHolder, fenceEvents } from "../../packages/core/src/cycle/fence-warning.js";

const holder = (pid: number | null, age_ms: number | null, app = "producer"): FenceHolder => ({ pid, age_ms, app, statement: "INSERT" });

describe("fence warnings", () => {
  it("names a holder older than the bound, with its age; a young one is not named", () => {
    const events = fenceEvents([holder(41, 3_460), holder(42, 900)], "orders", "g");
    expect(events).toHaveLength(1);
    expect(events[0].collapse).toBe("41");
    expect(events[0].event).toMatchObject({ level: "warn", code: "SQL0043", stream: "orders", group: "g", pid: 41, xactAgeMs: 3_460, applicationName: "producer" });
    expect(events[0].event.message).toContain("backend pid 41 has a transaction open for 3.5 s");
    expect(fenceEvents([holder(42, FENCE_WARN_MS - 1)], "orders", "g")).toEqual([]);
    expect(fenceEvents([holder(42, FENCE_WARN_MS)], "orders", "g")).toHaveLength(1);
  });

  it("a holder of unknown age (the false alarm after a restart) is never a warning: one info note counts it", () => {
    const events = fenceEvents([holder(7, null)], "orders", "g");
    expect(events.filter((e) => e.event.level === "warn")).toEqual([]);
    expect(events).toHaveLength(1);
    expect(events[0].event).toMatchObject({ level: "info", code: "SQL0043", pids: [7], prepared: false });
    expect(events[0].event.message).toContain("of unknown age that wrote to stream orders, not named as long-running: backend pid 7");
    expect(events[0].event.message).not.toContain("unknown s");
    expect(events[0].collapse).toBe("unaged");
  });

  it("aged and unaged holders together: the old one named, the rest counted (prepared transactions too)", () => {
    const events = fenceEvents([holder(1, 5_000), holder(2, null), holder(null, null), holder(3, 10), holder(null, null)], "s", "g");
    expect(events.map((e) => e.event.level)).toEqual(["warn", "info"]);
    expect(events[0].event.pid).toBe(1);
    expect(events[1].event).toMatchObject({ pids: [2], prepared: true });
    expect(events[1].event.message).toContain("backend pid 2");
    expect(events[1].event.message).toContain("prepared transactions (see pg_prepared_xacts)");
  });

  it("a backend reported once per partition it wrote to is named once", () => {
    const events = fenceEvents([holder(5, 3_000), holder(5, 3_000), holder(6, null), holder(6, null)], "s", "g");
    expect(events.map((e) => [e.event.level, e.event.pid ?? e.event.pids])).toEqual([["warn", 5], ["info", [6]]]);
  });

  it("an aged prepared transaction is named as such; a non-finite age counts as unknown", () => {
    const [named] = fenceEvents([holder(null, 60_000)], "s", "g");
    expect(named.event).toMatchObject({ level: "warn", pid: null });
    expect(named.event.message).toContain("a prepared transaction has a transaction open for 60 s");
    const odd = fenceEvents([holder(9, Number.NaN)], "s", "g");
    expect(odd.map((e) => e.event.level)).toEqual(["info"]);
  });

  it("nothing to say when nothing holds the fence", () => {
    expect(fenceEvents([], "s", "g")).toEqual([]);
  });
});
