// Backlog-driven scaling of a group's poll function (docs/guide/deployment.md#backlog-driven-scaling):
// an invocation that ends at its budget with lag above `continueAboveLag` starts continuations of
// its group (Event invocations of its own function, as wake does) while the group's drains are
// below the cap; an invocation that ends idle, paused, capped or rate-limited starts none, so a group
// that has caught up (or is held to its rateLimit, which more drains cannot raise) stops continuing
// and falls back to its schedule.
import { InvokeCommand, LambdaClient, type LambdaClientConfig } from "@aws-sdk/client-lambda";
import type { CycleReport, Progress } from "@sqlstreams/core";
import { WAKE_TIMEOUT_MS } from "@sqlstreams/core/internal";
import type { GroupScale } from "./declaration.js";
import { LAMBDA_WAKE_CLIENT_DEFAULTS } from "./wake.js";

/** The most continuations one invocation starts: the group's drains at most double per round. */
export const CONTINUATIONS_PER_INVOCATION = 2;

/**
 * How many continuations an invocation starts: none unless it ended at its budget (not idle,
 * paused, capped or rate-limited) with lag above the threshold; else up to CONTINUATIONS_PER_INVOCATION, and no
 * more than the free drain slots (`running` counts the other drains: this one has released its slot).
 */
export function continuationsOf(scale: GroupScale, report: CycleReport, progress: Progress | null): number {
  if (progress === null || report.idle || report.paused || report.capped > 0 || report.rateLimited > 0) return 0;
  if (BigInt(progress.lag) <= BigInt(scale.continueAboveLag)) return 0;
  const cap = Math.min(scale.max, progress.concurrency.max ?? scale.max);
  return Math.max(0, Math.min(CONTINUATIONS_PER_INVOCATION, cap - progress.concurrency.running));
}

/** Starts continuations with Event invocations of `functionName`; a failure is left to the schedule. */
export class Continuer {
  private client: LambdaClient | undefined;

  constructor(private readonly opts: { client?: LambdaClient; clientConfig?: LambdaClientConfig } = {}) {
    this.client = opts.client;
  }

  /** Starts `n` continuations; resolves with how many Lambda accepted. */
  async start(functionName: string, stream: string, group: string, n: number): Promise<number> {
    this.client ??= new LambdaClient({ ...LAMBDA_WAKE_CLIENT_DEFAULTS, ...this.opts.clientConfig });
    const client = this.client;
    const payload = new TextEncoder().encode(JSON.stringify({ stream, group, source: "continue" }));
    const sent = await Promise.allSettled(Array.from({ length: n }, () =>
      client.send(new InvokeCommand({ FunctionName: functionName, InvocationType: "Event", Payload: payload }), { abortSignal: AbortSignal.timeout(WAKE_TIMEOUT_MS) })));
    return sent.filter((r) => r.status === "fulfilled" && r.value.StatusCode === 202).length;
  }
}
