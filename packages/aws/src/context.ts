// The part of the Lambda context the handlers use, and a stand-in for running them locally.
import { randomUUID } from "node:crypto";

/** What the handlers read from the Lambda context (a subset of aws-lambda's Context). */
export interface LambdaContext {
  getRemainingTimeInMillis(): number;
  awsRequestId?: string;
  functionName?: string;
  /** This function's ARN: continuations invoke it (docs/guide/deployment.md#backlog-driven-scaling). */
  invokedFunctionArn?: string;
  /**
   * Outside Lambda (localContext's `onContinue`, as `sqlstreams dev` sets it): starts `n`
   * continuations locally instead of invoking the function.
   */
  onContinue?: (n: number) => void;
}

/** A context shaped like aws-lambda's Context, for invoking handlers outside Lambda. */
export interface LocalContext extends LambdaContext {
  callbackWaitsForEmptyEventLoop: boolean;
  functionName: string;
  functionVersion: string;
  invokedFunctionArn: string;
  memoryLimitInMB: string;
  awsRequestId: string;
  logGroupName: string;
  logStreamName: string;
  done(error?: Error, result?: unknown): void;
  fail(error: Error | string): void;
  succeed(messageOrObject: unknown): void;
}

/**
 * A fake Lambda context whose budget is `timeoutMs` from now (default 60 s), for `sqlstreams dev`,
 * tests and scripts: `await handler({ stream, group }, localContext(60_000))`.
 */
export function localContext(
  timeoutMs = 60_000, opts: { functionName?: string; memoryMB?: number; onContinue?: (n: number) => void } = {},
): LocalContext {
  if (typeof timeoutMs !== "number" || !Number.isFinite(timeoutMs) || timeoutMs < 0) {
    throw new TypeError(`localContext(timeoutMs): expected a non-negative number of milliseconds, got ${String(timeoutMs)}`);
  }
  const end = Date.now() + timeoutMs;
  const functionName = opts.functionName ?? "local";
  const unsupported = () => {
    throw new Error("localContext: callback-style completion is not supported; return a promise");
  };
  return {
    callbackWaitsForEmptyEventLoop: false,
    functionName,
    functionVersion: "$LATEST",
    invokedFunctionArn: `arn:aws:lambda:local:000000000000:function:${functionName}`,
    memoryLimitInMB: String(opts.memoryMB ?? 256),
    awsRequestId: randomUUID(),
    logGroupName: `/aws/lambda/${functionName}`,
    logStreamName: "local",
    getRemainingTimeInMillis: () => Math.max(0, end - Date.now()),
    done: unsupported,
    fail: unsupported,
    succeed: unsupported,
    ...(opts.onContinue ? { onContinue: opts.onContinue } : {}),
  };
}
