// Batch handlers (docs/guide/consuming.md#batch-handlers): a micro-batcher that turns a handler of
// many messages into the per-message handler the poll cycle runs. The dispatcher starts up to
// `concurrency` messages at once and already keeps an ordered key's next message from starting
// before the earlier one resolved, and an exclusive key to one run at a time; every message it
// starts in one turn of the event loop lands in one batch, so the per-key rules hold for batches.
import { SqlStreamsError } from "../errors.js";
import { type Outcome, isOutcome } from "../outcome.js";
import { RunMessage } from "./run.js";
import type { Handler, Message } from "./types.js";

/** One entry per message: undefined (success), an Outcome (Delay, Permanent) or an Error (a retryable failure). */
export type BatchResult = Array<undefined | Outcome | Error>;

/** A handler of many messages: void when all succeeded, else a BatchResult aligned with `messages`. */
export type BatchHandler<T = unknown> = (messages: Message<T>[]) => Promise<void | BatchResult> | void | BatchResult;

/** Messages per call of a batch handler unless maxBatch says otherwise. */
export const DEFAULT_MAX_BATCH = 100;
/** The most maxBatch (and a batch drain's concurrency) may be (batchLimit, ids per range, goes to 10 000). */
export const MAX_BATCH = 1_000;

interface Queued<T> {
  msg: Message<T>;
  resolve: (v: unknown) => void;
  reject: (e: unknown) => void;
}

/**
 * The per-message handler of a batch handler. Each call queues its message and returns a promise
 * of that message's entry; the queue is handed to `handler` when it holds `maxBatch` messages, or
 * on the next macrotask (setImmediate): by then the dispatcher has started every message it can
 * start now (its workers start them synchronously or after microtasks), and a message that must
 * wait for a batch member to resolve (an ordered or exclusive key's next one) is not queued yet, so
 * no batch ever waits for one of its own members.
 */
export function batched<T>(handler: BatchHandler<T>, maxBatch: number): Handler<T> {
  let queue: Queued<T>[] = [];
  let scheduled = false;
  const flush = () => {
    scheduled = false;
    if (queue.length === 0) return;
    const batch = queue;
    queue = [];
    runBatch(handler, batch);
  };
  return (msg: Message<T>) =>
    new Promise((resolve, reject) => {
      queue.push({ msg, resolve, reject });
      if (queue.length >= maxBatch) flush();
      else if (!scheduled) {
        scheduled = true;
        setImmediate(flush);
      }
    });
}

/**
 * One call of the batch handler and the entries it answers. When any member's signal aborts (its
 * timeout, the earliest among the batch's), every member's signal aborts and the whole batch fails
 * once the handler settles, whatever it returns; each member still settles at its own timeout at
 * the latest, and the cycle keeps a timed-out member's key until the handler settles
 * (docs/protocol/ordering.md#key-leases), so no key of a batch still running is started again.
 */
function runBatch<T>(handler: BatchHandler<T>, batch: Queued<T>[]): void {
  let timedOut: Error | null = null;
  const onAbort = (reason: unknown) => {
    if (timedOut) return;
    timedOut = new Error(
      `SQL0027 timeout: the batch did not finish within the smallest timeout of its ${batch.length} messages (${reason instanceof Error ? reason.message : String(reason)})`,
    );
    for (const q of batch) if (q.msg instanceof RunMessage) q.msg.abort(timedOut);
  };
  for (const q of batch) {
    // A message of the cycle says so without an AbortSignal of its own (most handlers never read it).
    if (q.msg instanceof RunMessage) q.msg.onAbort = onAbort;
    else if (q.msg.signal.aborted) onAbort(q.msg.signal.reason);
    else q.msg.signal.addEventListener("abort", () => onAbort(q.msg.signal.reason), { once: true });
  }
  const failAll = (e: unknown) => {
    for (const q of batch) q.reject(e);
  };
  const answer = (v: unknown) => {
    if (timedOut) return failAll(timedOut);
    if (v === undefined || v === null) {
      for (const q of batch) q.resolve(undefined);
      return;
    }
    if (!Array.isArray(v) || v.length !== batch.length) {
      const shape = Array.isArray(v) ? `an array of ${v.length} entries` : `a ${typeof v}`;
      return failAll(new SqlStreamsError(
        "SQL0080",
        `the batch handler returned ${shape} for ${batch.length} messages; return nothing, or one entry per message (undefined, an Outcome or an Error)`,
        { messages: batch.length },
      ));
    }
    batch.forEach((q, i) => settleEntry(q, v[i] as unknown));
  };
  let result: unknown;
  try {
    result = handler(batch.map((q) => q.msg));
  } catch (e) {
    return failAll(e);
  }
  if (result !== null && typeof result === "object" && typeof (result as PromiseLike<unknown>).then === "function") {
    Promise.resolve(result as PromiseLike<unknown>).then(answer, (e: unknown) => failAll(timedOut ?? e));
  } else {
    answer(result);
  }
}

/** One member's entry: undefined succeeds, an Outcome is that outcome, an Error fails it (retryable); anything else is SQL0080. */
function settleEntry<T>(q: Queued<T>, entry: unknown): void {
  if (entry === undefined) return q.resolve(undefined);
  if (isOutcome(entry)) return q.resolve(entry);
  if (entry instanceof Error) return q.reject(entry);
  q.reject(new SqlStreamsError(
    "SQL0080",
    `the batch handler's entry for message ${q.msg.id} is ${entry === null ? "null" : `a ${typeof entry}`}; use undefined, an Outcome (Delay, Permanent) or an Error`,
    { id: q.msg.id },
  ));
}
