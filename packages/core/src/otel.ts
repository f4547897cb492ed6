// OpenTelemetry traces, optional (docs/operations.md#traces): `@opentelemetry/api` is an optional
// peer dependency, loaded on first use. When it is not installed, or no SDK registered a tracer
// provider, every function here returns at once and nothing is stored with the messages.
import { createRequire } from "node:module";
import type * as Api from "@opentelemetry/api";
import { classify } from "./outcome.js";
import type { Handler, Message } from "./cycle/types.js";
import { LIBRARY_VERSION } from "./version.js";

type OtelApi = typeof Api;

const SYSTEM = "sqlstreams";
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

let loaded: { api: OtelApi; noop: unknown } | null | undefined;

function load(): { api: OtelApi; noop: unknown } | null {
  if (loaded === undefined) {
    try {
      const api = createRequire(import.meta.url)("@opentelemetry/api") as OtelApi;
      // The provider the API hands out while no SDK is registered: a proxy without a delegate
      // resolves to the API's no-op provider singleton.
      loaded = { api, noop: new api.ProxyTracerProvider().getDelegate() };
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

/**
 * The handler, run inside a `process <stream>` CONSUMER span per run: a child of the producer's
 * context (stored traceparent) unless a span is already active, and linked to it either way.
 * Returns the handler itself when tracing is off.
 */
export function tracedHandler<T>(handler: Handler<T>, stream: string, group: string): Handler<T> {
  const api = active();
  if (!api) return handler;
  const t = tracer(api);
  return (msg: Message<T>) => {
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
    let open = true;
    const finish = (value: unknown, threw: boolean) => {
      if (!open) return;
      open = false;
      const c = classify(value, threw);
      span.setAttribute("sqlstreams.outcome", c.kind === "delay" ? "delayed" : c.kind === "permanent" ? "dead" : c.kind === "failure" ? "failed" : "succeeded");
      if (c.kind === "delay") span.setAttribute("sqlstreams.delay_ms", c.ms);
      if (c.kind === "failure" || c.kind === "permanent") {
        if (value instanceof Error) span.recordException(value);
        span.setAttribute("error.type", value instanceof Error ? value.name : typeof value);
        span.setStatus({ code: api.SpanStatusCode.ERROR, message: c.error.slice(0, 500) });
      }
      span.end();
    };
    const run = () => handler(msg);
    let r: unknown;
    try {
      r = api.context.with(api.trace.setSpan(parent, span), run);
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
