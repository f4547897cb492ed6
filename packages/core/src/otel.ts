// OpenTelemetry traces and metrics, optional (docs/guide/operations.md#traces): `@opentelemetry/api` is
// an optional peer dependency, loaded on first use. When it is not installed, or no SDK registered
// a tracer provider (traces) or meter provider (metrics), every function here returns at once,
// the handler is not wrapped and nothing is stored with the messages.
import { createRequire } from "node:module";
import type * as Api from "@opentelemetry/api";
import { classify } from "./outcome.js";
import type { Handler, Message } from "./cycle/types.js";
import { LIBRARY_VERSION } from "./version.js";

type OtelApi = typeof Api;

const SYSTEM = "sqlstreams";
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

let loaded: { api: OtelApi; noop: unknown; noopMeter: unknown } | null | undefined;

function load(): { api: OtelApi; noop: unknown; noopMeter: unknown } | null {
  if (loaded === undefined) {
    try {
      const api = createRequire(import.meta.url)("@opentelemetry/api") as OtelApi;
      // The provider the API hands out while no SDK is registered: a proxy without a delegate
      // resolves to the API's no-op provider singleton. Without a meter provider the API hands
      // out the no-op provider, whose meters are all the no-op meter singleton.
      loaded = { api, noop: new api.ProxyTracerProvider().getDelegate(), noopMeter: api.createNoopMeter() };
    } catch {
      loaded = null;
    }
  }
  return loaded;
}

/** The API when it is installed and an SDK registered a tracer provider; else null. */
function active(): OtelApi | null {
  const l = load();
  if (!l) return null;
  const p = l.api.trace.getTracerProvider() as Api.TracerProvider & { getDelegate?: () => Api.TracerProvider };
  const d = typeof p.getDelegate === "function" ? p.getDelegate() : p;
  return d === l.noop ? null : l.api;
}

/** The messaging instruments of the registered meter provider, or null when none is registered. */
interface Instruments {
  consumed: Api.Counter;
  duration: Api.Histogram;
}
let instruments: { provider: Api.MeterProvider; meter: Api.Meter; i: Instruments } | undefined;

function meters(): Instruments | null {
  const l = load();
  if (!l) return null;
  const provider = l.api.metrics.getMeterProvider();
  if (instruments?.provider === provider) return instruments.i;
  const meter = provider.getMeter("@sqlstreams/core", LIBRARY_VERSION);
  if (meter === l.noopMeter) return null;
  instruments = {
    provider,
    meter,
    i: {
      consumed: meter.createCounter("messaging.client.consumed.messages", { unit: "{message}", description: "Number of messages that were delivered to the application." }),
      duration: meter.createHistogram("messaging.process.duration", {
        unit: "s",
        description: "Duration of processing operation.",
        // The bucket boundaries the messaging semantic conventions recommend.
        advice: { explicitBucketBoundaries: [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10] },
      }),
    },
  };
  return instruments.i;
}

function tracer(api: OtelApi): Api.Tracer {
  return api.trace.getTracer("@sqlstreams/core", LIBRARY_VERSION);
}

/** A producer span and the W3C traceparent stored with the messages it sends. */
export interface ProduceTrace {
  traceparent: string;
  end(ids: string[] | null, error?: unknown): void;
}

/**
 * Starts the `send <stream>` PRODUCER span of a produce call (a child of the active span), or
 * returns null when tracing is off or the span is not sampled.
 */
export function startProduce(stream: string, operation: "produce" | "produceBatch" | "produceInTx" | "produceBatchInTx", count: number): ProduceTrace | null {
  const api = active();
  if (!api) return null;
  const attributes: Api.Attributes = {
    "messaging.system": SYSTEM,
    "messaging.destination.name": stream,
    "messaging.operation.name": "send",
    "messaging.operation.type": "send",
    "sqlstreams.operation": operation,
  };
  if (operation === "produceBatch" || operation === "produceBatchInTx") attributes["messaging.batch.message_count"] = count;
  const span = tracer(api).startSpan(`send ${stream}`, { kind: api.SpanKind.PRODUCER, attributes });
  const sc = span.spanContext();
  if (!span.isRecording() || !api.trace.isSpanContextValid(sc)) {
    span.end();
    return null;
  }
  const traceparent = `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 1) === 1 ? "01" : "00"}`;
  return {
    traceparent,
    end(ids, error) {
      if (ids && ids.length === 1) span.setAttribute("messaging.message.id", ids[0]);
      if (error !== undefined) {
        span.recordException(error instanceof Error ? error : String(error));
        span.setStatus({ code: api.SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
        span.setAttribute("error.type", (error as { code?: string })?.code ?? (error instanceof Error ? error.name : "Error"));
      }
      span.end();
    },
  };
}

/** The stored options text with the traceparent added (options are a JSON object or null). */
export function withTraceparent(options: string | null, traceparent: string): string {
  const member = `"traceparent":${JSON.stringify(traceparent)}`;
  return options === null || options === "{}" ? `{${member}}` : `${options.slice(0, -1)},${member}}`;
}

function remoteContext(api: OtelApi, traceparent: unknown): Api.SpanContext | null {
  if (typeof traceparent !== "string") return null;
  const m = TRACEPARENT.exec(traceparent);
  if (!m) return null;
  const sc: Api.SpanContext = { traceId: m[1], spanId: m[2], traceFlags: parseInt(m[3], 16), isRemote: true };
  return api.trace.isSpanContextValid(sc) ? sc : null;
}

/** The `process <stream>` CONSUMER span of one handler run, and the context it runs in. */
function startProcess<T>(api: OtelApi, t: Api.Tracer, msg: Message<T>, stream: string, group: string): { span: Api.Span; parent: Api.Context } {
  const producer = remoteContext(api, (msg as Message<T> & { traceparent?: string | null }).traceparent);
  let parent = api.context.active();
  if (producer && !api.trace.getSpan(parent)) parent = api.trace.setSpanContext(parent, producer);
  const span = t.startSpan(
    `process ${stream}`,
    {
      kind: api.SpanKind.CONSUMER,
      attributes: {
        "messaging.system": SYSTEM,
        "messaging.destination.name": stream,
        "messaging.consumer.group.name": group,
        "messaging.message.id": msg.id,
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "sqlstreams.attempt": msg.attempt,
        ...(msg.key !== null ? { "sqlstreams.message.key": msg.key } : {}),
      },
      links: producer ? [{ context: producer }] : [],
    },
    parent,
  );
  return { span, parent };
}

/**
 * The handler, run inside a `process <stream>` CONSUMER span per run: a child of the producer's
 * context (stored traceparent) unless a span is already active, and linked to it either way.
 * With a meter provider, each run also adds 1 to `messaging.client.consumed.messages` and records
 * its duration in `messaging.process.duration` (seconds, monotonic clock), with `error.type` when
 * it failed. Returns the handler itself when neither traces nor metrics are on.
 */
export function tracedHandler<T>(handler: Handler<T>, stream: string, group: string): Handler<T> {
  const api = active();
  const m = meters();
  if (!api && !m) return handler;
  const t = api ? tracer(api) : undefined;
  const metricAttributes: Api.Attributes = {
    "messaging.system": SYSTEM,
    "messaging.destination.name": stream,
    "messaging.consumer.group.name": group,
    "messaging.operation.name": "process",
    "messaging.operation.type": "process",
  };
  return (msg: Message<T>) => {
    const { span, parent } = api && t ? startProcess(api, t, msg, stream, group) : { span: undefined, parent: undefined };
    const started = m ? performance.now() : 0;
    let open = true;
    const finish = (value: unknown, threw: boolean) => {
      if (!open) return;
      open = false;
      const c = classify(value, threw);
      const failed = c.kind === "failure" || c.kind === "permanent";
      const errorType = failed ? (value instanceof Error ? value.name : typeof value) : undefined;
      if (m) {
        const attributes = errorType !== undefined ? { ...metricAttributes, "error.type": errorType } : metricAttributes;
        m.consumed.add(1, attributes);
        m.duration.record((performance.now() - started) / 1000, attributes);
      }
      if (!span || !api) return;
      span.setAttribute("sqlstreams.outcome", c.kind === "delay" ? "delayed" : c.kind === "permanent" ? "dead" : c.kind === "failure" ? "failed" : "succeeded");
      if (c.kind === "delay") span.setAttribute("sqlstreams.delay_ms", c.ms);
      if ((c.kind === "failure" || c.kind === "permanent") && errorType !== undefined) {
        if (value instanceof Error) span.recordException(value);
        span.setAttribute("error.type", errorType);
        span.setStatus({ code: api.SpanStatusCode.ERROR, message: c.error.slice(0, 500) });
      }
      span.end();
    };
    const run = () => handler(msg);
    let r: unknown;
    try {
      r = api && span && parent ? api.context.with(api.trace.setSpan(parent, span), run) : run();
    } catch (e) {
      finish(e, true);
      throw e;
    }
    if (r === null || (typeof r !== "object" && typeof r !== "function") || typeof (r as PromiseLike<unknown>).then !== "function") {
      finish(r, false);
      return r;
    }
    return Promise.resolve(r).then(
      (v) => {
        finish(v, false);
        return v;
      },
      (e: unknown) => {
        finish(e, true);
        throw e;
      },
    );
  };
}

/**
 * A `receive <stream>` CLIENT span around one poll (its claims and runs), with the number of
 * messages it started; just the poll when tracing is off.
 */
export async function tracedPoll<R extends { started: number }>(stream: string, group: string, poll: () => Promise<R>): Promise<R> {
  const api = active();
  if (!api) return poll();
  // Not made the active span: the process spans inside stay children of their producers' contexts.
  const span = tracer(api).startSpan(`receive ${stream}`, {
    kind: api.SpanKind.CLIENT,
    attributes: {
      "messaging.system": SYSTEM,
      "messaging.destination.name": stream,
      "messaging.consumer.group.name": group,
      "messaging.operation.name": "poll",
      "messaging.operation.type": "receive",
    },
  });
  try {
    const r = await poll();
    span.setAttribute("messaging.batch.message_count", r.started);
    return r;
  } catch (e) {
    span.recordException(e instanceof Error ? e : String(e));
    span.setStatus({ code: api.SpanStatusCode.ERROR });
    throw e;
  } finally {
    span.end();
  }
}
