// The Lambda waker (docs/guide/producing.md#wake-on-produce): starts a group's poll function with an
// asynchronous `Event` invocation, so a producer returns without waiting for the poll. The
// event is the schedule's `{ stream, group }`; the poller treats a wake like a tick.
import { InvokeCommand, LambdaClient, type LambdaClientConfig } from "@aws-sdk/client-lambda";
import { SqlStreamsError, type Waker, type WakeTarget } from "@sqlstreams/core";
import { WAKE_TIMEOUT_MS } from "@sqlstreams/core/internal";
import { groupKey } from "./declaration.js";

type Env = Record<string, string | undefined>;

/**
 * The default client's bounds: one attempt, 1 s to connect and 1 s for the answer, so a Lambda
 * endpoint that drops SYNs or accepts and never replies cannot hold a producer (the client bounds
 * every wake to WAKE_TIMEOUT_MS as well). `clientConfig` may override them.
 */
export const LAMBDA_WAKE_CLIENT_DEFAULTS = { maxAttempts: 1, requestHandler: { connectionTimeout: 1_000, requestTimeout: 1_000 } } as const;

export interface LambdaWakerOptions {
  /** `"stream/group"` → poll function name or ARN. */
  functions: Record<string, string>;
  /**
   * A client of your own (region, endpoint, credentials); default one from the environment. Give
   * it short timeouts and `maxAttempts: 1` as the default has (LAMBDA_WAKE_CLIENT_DEFAULTS).
   */
  client?: LambdaClient;
  /** Options of the default client, over LAMBDA_WAKE_CLIENT_DEFAULTS. */
  clientConfig?: LambdaClientConfig;
}

/** A Waker that invokes the group's poll function asynchronously (`InvocationType: "Event"`). */
export function createLambdaWaker(opts: LambdaWakerOptions): Waker {
  const functions = opts?.functions;
  if (typeof functions !== "object" || functions === null || Object.values(functions).some((v) => typeof v !== "string" || v.length === 0)) {
    throw new SqlStreamsError("SQL0065", "createLambdaWaker: functions must map \"stream/group\" to a function name", { functions: typeof functions });
  }
  let client = opts.client;
  return {
    async wake({ stream, group }: WakeTarget): Promise<void> {
      const name = functions[groupKey(stream, group)];
      // A group without a deployed poller (e.g. registered elsewhere): nothing to wake.
      if (!name) throw new SqlStreamsError("SQL0065", `no poll function for ${groupKey(stream, group)}`, { stream, group });
      client ??= new LambdaClient({ ...LAMBDA_WAKE_CLIENT_DEFAULTS, ...opts.clientConfig });
      const r = await client.send(
        new InvokeCommand({ FunctionName: name, InvocationType: "Event", Payload: new TextEncoder().encode(JSON.stringify({ stream, group, source: "wake" })) }),
        { abortSignal: AbortSignal.timeout(WAKE_TIMEOUT_MS) },
      );
      if (r.StatusCode !== 202) throw new Error(`Lambda answered ${String(r.StatusCode)} to the Event invocation of ${name}`);
    },
  };
}

/**
 * The waker the SqlStreams SST component configures for linked producers: SQLSTREAMS_WAKE=lambda
 * and SQLSTREAMS_WAKE_FUNCTIONS (JSON `"stream/group"` → function name); SQLSTREAMS_WAKE=notify
 * for a local `sqlstreams dev`. undefined when wake on produce is off.
 */
export function wakerFromEnv(env: Env = process.env, clientConfig?: LambdaClientConfig): Waker | "notify" | undefined {
  const kind = (env.SQLSTREAMS_WAKE ?? "").trim();
  // Local: `sqlstreams dev` listens for NOTIFY on the database.
  if (kind === "notify") return "notify";
  if (kind !== "lambda") return undefined;
  let functions: unknown;
  try {
    functions = JSON.parse(env.SQLSTREAMS_WAKE_FUNCTIONS ?? "");
  } catch {
    functions = undefined;
  }
  if (typeof functions !== "object" || functions === null || Array.isArray(functions)) {
    throw new SqlStreamsError("SQL0065", "SQLSTREAMS_WAKE=lambda needs SQLSTREAMS_WAKE_FUNCTIONS, a JSON object of \"stream/group\": function name", { variable: "SQLSTREAMS_WAKE_FUNCTIONS" });
  }
  return createLambdaWaker({ functions: functions as Record<string, string>, clientConfig });
}
