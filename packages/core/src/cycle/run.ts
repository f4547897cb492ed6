// Running one handler: a fresh AbortSignal, the timeout, classification (SPEC §5.7).
import { type Classified, classify } from "../outcome.js";
import type { Handler, Message } from "./types.js";

/**
 * Runs the handler and settles at its outcome or at the timeout, whichever comes first. At the
 * timeout the signal is aborted and a retryable failure is returned; the handler is not awaited
 * and its late settlement changes nothing.
 */
export function runHandler<T>(handler: Handler<T>, msg: Omit<Message<T>, "signal">, timeoutMs: number): Promise<Classified> {
  const ac = new AbortController();
  return new Promise<Classified>((resolve) => {
    let settled = false;
    const timer = setTimeout(() => {
      if (settled) return;
      settled = true;
      ac.abort(new Error(`SQL0027 timeout after ${timeoutMs} ms`));
      resolve({ kind: "failure", error: `SQL0027 timeout: handler did not finish within ${timeoutMs} ms` });
    }, timeoutMs);
    const done = (c: Classified) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(c);
    };
    let result: unknown;
    try {
      result = handler({ ...msg, signal: ac.signal } as Message<T>);
    } catch (e) {
      done(classify(e, true));
      return;
    }
    if (result !== null && typeof result === "object" && typeof (result as PromiseLike<unknown>).then === "function") {
      (result as PromiseLike<unknown>).then(
        (v) => done(classify(v, false)),
        (e) => done(classify(e, true)),
      );
    } else {
      done(classify(result, false));
    }
  });
}
