// Per-group CloudWatch alarms (docs/guide/operations.md#alarms), as plain definitions: the SqlStreams
// SST component (packages/aws/src/sst) turns each into an aws.cloudwatch.MetricAlarm, and tests read
// them without SST. Pure: no AWS SDK, no SST globals.
import type { GroupDeclaration } from "./declaration.js";
import { NAMESPACE } from "./metrics.js";

export const ALARM_DEFAULTS = { oldestUnresolvedMs: 15 * 60_000, periodSeconds: 300 };

/** One alarm, in the shape of aws.cloudwatch.MetricAlarm's arguments. */
export interface AlarmDefinition {
  /** Suffix of the resource name: DeadLetters, OldestUnresolved, Errors, Throttles. */
  key: "DeadLetters" | "OldestUnresolved" | "Errors" | "Throttles";
  description: string;
  namespace: string;
  metricName: string;
  dimensions: Record<string, string>;
  statistic: "Sum" | "Maximum";
  period: number;
  evaluationPeriods: number;
  threshold: number;
  comparisonOperator: "GreaterThanThreshold";
  treatMissingData: "notBreaching";
}

/**
 * The alarms of one group: dead letters appeared, the oldest unresolved message is older than the
 * declared threshold (metrics of packages/aws/src/metrics.ts, dimensions Stream, Group, Stage), and
 * the poll function's errors and throttles (AWS/Lambda). Empty when the group sets `alarms: false`.
 */
export function groupAlarms(group: GroupDeclaration, poller: { functionName: string; stage: string }): AlarmDefinition[] {
  if (group.alarms === false) return [];
  const oldest = group.alarms?.oldestUnresolvedMs ?? ALARM_DEFAULTS.oldestUnresolvedMs;
  const period = ALARM_DEFAULTS.periodSeconds;
  const who = `${group.stream}/${group.group}`;
  const ours = { Stream: group.stream, Group: group.group, Stage: poller.stage };
  const lambda = { FunctionName: poller.functionName };
  const base = { period, evaluationPeriods: 1, threshold: 0, comparisonOperator: "GreaterThanThreshold" as const, treatMissingData: "notBreaching" as const };
  return [
    { ...base, key: "DeadLetters", description: `SQLStreams ${who}: messages became dead (inspect with sqlstreams failures, redrive after the fix)`, namespace: NAMESPACE, metricName: "Dead", dimensions: ours, statistic: "Sum" },
    { ...base, key: "OldestUnresolved", description: `SQLStreams ${who}: the oldest unresolved message is older than ${Math.round(oldest / 1000)} s`, namespace: NAMESPACE, metricName: "OldestUnresolvedAgeMs", dimensions: ours, statistic: "Maximum", threshold: oldest },
    { ...base, key: "Errors", description: `SQLStreams ${who}: the poll function failed`, namespace: "AWS/Lambda", metricName: "Errors", dimensions: lambda, statistic: "Sum" },
    { ...base, key: "Throttles", description: `SQLStreams ${who}: the poll function was throttled`, namespace: "AWS/Lambda", metricName: "Throttles", dimensions: lambda, statistic: "Sum" },
  ];
}
