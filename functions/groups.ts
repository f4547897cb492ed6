// The one declaration of this deployment: every stream, consumer group, handler and schedule.
// Plain data, no handler code imported: sst.config.ts, the migrate function, the poll functions
// and `sqlstreams dev` all read this file.
import type { GroupDeclaration, StreamDeclarations } from "@sqlstreams/aws";

export const groups = [
  {
    stream: "orders.placed",
    group: "fraud-scoring",
    function: "functions/handlers/fraud-scoring.handler",
    schedule: "rate(1 minute)",
    config: { message: { timeout: 30_000, retry: { maxRetries: 5, baseDelay: 2_000 } } },
    mode: "drain",
    parallelism: 1,
    timeout: 60_000,
    memory: 256,
    batchLimit: 100,
    concurrency: 8,
    // CloudWatch alarms (docs/guide/operations.md#alarms): page when a message waits over 10 minutes.
    // Add `email: ["oncall@example.com"]` or `topicArn` to be notified.
    alarms: { oldestUnresolvedMs: 10 * 60_000 },
  },
  {
    stream: "ledger.adjustments",
    group: "apply-balance",
    function: "functions/handlers/apply-balance.handler",
    schedule: "rate(1 minute)",
    // Adjustments of one account apply in id order, one at a time (the message key is the account).
    config: { concurrencyOverride: "ordered", message: { timeout: 5_000, retry: { maxRetries: 8, baseDelay: 1_000 } } },
    mode: "continuous",
    parallelism: 1,
    timeout: 60_000,
    memory: 256,
    batchLimit: 100,
    concurrency: 4,
  },
] satisfies GroupDeclaration[];

/** Stream options, registered on deploy with the groups. */
export const streams: StreamDeclarations = {
  "orders.placed": { retention: 7 * 24 * 3_600_000 },
  "ledger.adjustments": { retention: 0 },
};
