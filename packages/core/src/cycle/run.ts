// Running one handler: a lazily created AbortSignal, the timeout, classification (docs/protocol/exception-lifecycle.md#running-a-handler).
import { type Classified, classify } from "../outcome.js";
import type { Handler, Message } from "./types.js";

/**
 * The message handed to a handler. Its AbortSignal is created on first access: most handlers
 * never read it, and an AbortController per message is a measurable share of the hot path.
 */
export class RunMessage<T> implements Message<T> {
  private ac: AbortController | undefined;
  private abortedWith: Error | undefined;
  /** @internal Told when the message is aborted, without creating its signal (batch.ts). */
  onAbort: ((reason: Error) => void) | undefined;
  /**
   * When the message was produced (the database clock). A plain property, not a lazy getter:
   * handlers spread and log messages, and `{ ...msg }` must keep it.
   */
  readonly createdAt: Date;

  constructor(
    readonly id: string,
    readonly payload: T,
    readonly key: string | null,
    readonly attempt: number,
    readonly delays: number,
    readonly stream: string,
    readonly group: string,
    createdAt: Date | number,
    /** @internal The producer's W3C trace context, when it was traced (docs/guide/operations.md#traces). */
    readonly traceparent: string | null = null,
  ) {
    this.createdAt = typeof createdAt === "number" ? new Date(createdAt) : createdAt;
  }

  get signal(): AbortSignal {
    if (!this.ac) {
      this.ac = new AbortController();
      if (this.abortedWith) this.ac.abort(this.abortedWith);
    }
    return this.ac.signal;
  }

  /** @internal */
  abort(reason: Error): void {
    if (this.abortedWith) return;
    this.abortedWith = reason;
    this.ac?.abort(reason);
    this.onAbort?.(reason);
  }

  toJSON(): Omit<Message<T>, "signal"> {
    const { id, payload, key, attempt, delays, stream, group, createdAt } = this;
    return { id, payload, key, attempt, delays, stream, group, createdAt };
  }
}

function isThenable(v: unknown): v is PromiseLike<unknown> {
  return v !== null && (typeof v === "object" || typeof v === "function") && typeof (v as PromiseLike<unknown>).then === "function";
}

/**
 * Runs the handler and settles at its outcome or at the timeout, whichever comes first. At the
 * timeout the signal is aborted and a retryable failure is returned; the handler is not awaited
 * and its late settlement changes no outcome, but `onAbandon` gets a promise of it, so the caller
 * can keep the run's key until then (docs/protocol/ordering.md#key-leases). A handler that returns synchronously needs no timer.
 */
export function runHandler<T>(
  handler: Handler<T>, msg: RunMessage<T>, timeoutMs: number, onAbandon?: (settled: Promise<void>) => void,
): Classified | Promise<Classified> {
  let result: unknown;
  try {
    result = handler(msg);
  } catch (e) {
    return classify(e, true);
  }
  if (!isThenable(result)) return classify(result, false);
  const pending = result;
  return new Promise<Classified>((resolve) => {
    let settled = false;
    const timer = setTimeout(() => {
      if (settled) return;
      settled = true;
      msg.abort(new Error(`SQL0027 timeout after ${timeoutMs} ms`));
      // The handler keeps running: whoever holds its key learns when it finally settles.
      onAbandon?.(Promise.resolve(pending).then(() => {}, () => {}));
      resolve({ kind: "failure", error: `SQL0027 timeout: handler did not finish within ${timeoutMs} ms` });
    }, timeoutMs);
    const fail = (e: unknown) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(classify(e, true));
    };
    try {
      pending.then((v) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(classify(v, false));
      }, fail);
    } catch (e) {
      fail(e); // a thenable whose then() throws is a failure of the run, not of the poll
    }
  });
}
