// The app's declaration of its streams and consumer groups: which handler runs each group, on
// which schedule, with which options. Plain data, no handler code imported: sst.config.ts, the
// migrate function, the poll handlers and `sqlstreams dev --groups` all read this file.
import type { GroupDeclaration, StreamDeclarations } from "@sqlstreams/aws";

export const groups = [
  {
    stream: "shop.orders",
    group: "confirmation-emails",
    function: "src/handlers/confirmation-emails.handler",
    schedule: "rate(1 minute)",
    config: { message: { timeout: 10_000, retry: { maxRetries: 5, baseDelay: 2_000 } } },
    mode: "drain",
    batchLimit: 50,
    concurrency: 4,
    alarms: { oldestUnresolvedMs: 10 * 60_000 },
  },
  {
    stream: "shop.orders",
    group: "loyalty-points",
    function: "src/handlers/loyalty-points.handler",
    schedule: "rate(5 minutes)",
    // A customer's points are credited in order, one order at a time (the key is the customer).
    config: { concurrencyOverride: "ordered", message: { timeout: 5_000, retry: { maxRetries: 8, baseDelay: 1_000 } } },
    mode: "drain",
    batchLimit: 100,
  },
] satisfies GroupDeclaration[];

/** Stream options, registered on deploy together with the groups. */
export const streams: StreamDeclarations = {
  "shop.orders": { retention: 7 * 24 * 3_600_000 },
};
