// The per-group alarm definitions (docs/guide/operations.md#alarms) and the declaration's `alarms` key;
// the deployed alarms are asserted through SST in test/aws/sst-components.test.ts.
import { describe, expect, it } from "vitest";
import type { CycleReport } from "@sqlstreams/core";
import { groupAlarms, pollDocument, validateGroups, type GroupDeclaration } from "@sqlstreams/aws";

const g: GroupDeclaration = { stream: "orders.placed", group: "fraud-scoring", function: "functions/handlers/f.handler", schedule: "rate(1 minute)" };

describe("groupAlarms", () => {
  it("dead letters, oldest unresolved (default 15 min, or declared), errors and throttles", () => {
    const a = groupAlarms(g, { functionName: "fn-1", stage: "prod" });
    expect(a.map((x) => x.key)).toEqual(["DeadLetters", "OldestUnresolved", "Errors", "Throttles"]);
    expect(a[1]).toMatchObject({ metricName: "OldestUnresolvedAgeMs", statistic: "Maximum", threshold: 900_000 });
    expect(a[2].dimensions).toEqual({ FunctionName: "fn-1" });
    expect(groupAlarms({ ...g, alarms: { oldestUnresolvedMs: 120_000 } }, { functionName: "f", stage: "s" })[1].threshold).toBe(120_000);
    expect(groupAlarms({ ...g, alarms: false }, { functionName: "f", stage: "s" })).toEqual([]);
  });

  it("selects exactly the metrics and dimensions a poll invocation writes", () => {
    const counters = ["succeeded", "failed", "dead", "delayed", "deferred", "superseded", "notStarted", "leaseLost", "started", "expired", "leaseExpired", "killed", "rangesClaimed", "rangesReclaimed", "rangesQuarantined"];
    const report = Object.fromEntries(counters.map((k) => [k, 0])) as unknown as CycleReport;
    const doc = pollDocument({ stream: g.stream, group: g.group, stage: "prod", durationMs: 1, report, progress: { lag: "0", oldestUnresolvedAgeMs: 5, exceptions: { ready: 0, deferred: 0, inflight: 0, dead: 0, superseded: 0, expired: 0 } } });
    const directive = doc._aws.CloudWatchMetrics[0];
    for (const a of groupAlarms(g, { functionName: "f", stage: "prod" }).filter((x) => x.namespace === "SQLStreams")) {
      expect(directive.Namespace).toBe(a.namespace);
      expect(directive.Metrics.map((m) => m.Name)).toContain(a.metricName);
      expect(directive.Dimensions).toContainEqual(Object.keys(a.dimensions));
      for (const [k, v] of Object.entries(a.dimensions)) expect(doc[k]).toBe(v);
    }
  });

  it("the declaration's alarms are checked before anything is deployed", () => {
    expect(() => validateGroups([{ ...g, alarms: { oldestUnresolvedMs: 300_000, email: ["ops@example.com"], topicArn: "arn:aws:sns:us-east-1:123456789012:pager" } }])).not.toThrow();
    for (const alarms of [{ oldestUnresolvedMs: 10 }, { email: ["not-an-email"] }, { topicArn: "arn:aws:sqs:x" }, { nope: 1 }, "yes"]) {
      expect(() => validateGroups([{ ...g, alarms } as unknown as GroupDeclaration]), JSON.stringify(alarms)).toThrow(/SQL0015/);
    }
  });
});
