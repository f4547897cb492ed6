// The demo workload of `sqlstreams dev`: a few hundred messages per stream of groups.ts, shaped
// for the example handlers of functions/handlers, with a few that are meant to go wrong so the
// exception counts show something:
//   { demo: { failOnce: true } }   the downstream service (a local stub) answers 503 once, so the
//                                  handler throws, the message is retried after its backoff, and
//                                  then succeeds
//   { demo: { permanent: true } }  an invalid payload the handler rejects with Permanent(): dead
// The stubs stand in for FRAUD_REVIEW_URL and LEDGER_URL (the services the example handlers call)
// unless those are set already.
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { BatchItem } from "@sqlstreams/core";

export interface DemoMessage {
  payload: unknown;
  key?: string;
}

const COUNTRIES = ["DE", "FR", "NL", "US", "GB", "SE"];

/** Every `failEvery`-th message fails once downstream; every `deadEvery`-th is invalid (Permanent). */
const FAIL_EVERY = 29;
const DEAD_EVERY = 37;

function order(i: number): DemoMessage {
  if (i % DEAD_EVERY === 0) {
    return { payload: { orderId: `demo-${i}`, demo: { permanent: true, why: "not an OrderPlaced (no amount, currency or items)" } } };
  }
  const failOnce = i % FAIL_EVERY === 0;
  const billing = COUNTRIES[i % COUNTRIES.length];
  const shipping = i % 7 === 0 ? COUNTRIES[(i + 1) % COUNTRIES.length] : billing;
  const payload: Record<string, unknown> = {
    orderId: failOnce ? `demo-${i}-fail-once` : `demo-${i}`,
    customerId: `cust-${(i * 7) % 53}`,
    // fail-once orders are large, so the handler asks the review service (which fails once).
    amountCents: failOnce ? 650_000 : 1_000 + ((i * 7_919) % 180_000),
    currency: "EUR",
    billingCountry: billing,
    shippingCountry: shipping,
    items: 1 + (i % 5),
    previousOrders: i % 4,
  };
  if (failOnce) payload.demo = { failOnce: true };
  return { payload };
}

/** Ledger messages are ordered per account: a retrying one holds back the later ones of its
 * account (they show as deferred), so the few fail-once adjustments sit near the end. */
function ledgerFailsOnce(i: number, n: number): boolean {
  return n >= 60 && [26, 31, 40].includes(n - i);
}

function adjustment(i: number, n: number): DemoMessage {
  const accountId = `acct-${i % 12}`;
  if (i % DEAD_EVERY === 0) {
    return { key: accountId, payload: { adjustmentId: `adj-${i}`, accountId, amountCents: 0, reason: "demo", demo: { permanent: true, why: "amountCents 0 is not an adjustment" } } };
  }
  const failOnce = ledgerFailsOnce(i, n);
  const payload: Record<string, unknown> = {
    adjustmentId: failOnce ? `adj-${i}-fail-once` : `adj-${i}`,
    accountId,
    amountCents: (i % 3 === 0 ? -1 : 1) * (100 + ((i * 31) % 5_000)),
    reason: i % 3 === 0 ? "refund" : "top-up",
  };
  if (failOnce) payload.demo = { failOnce: true };
  return { key: accountId, payload };
}

function generic(i: number): DemoMessage {
  if (i % DEAD_EVERY === 0) return { key: `k${i % 8}`, payload: { n: i, demo: { permanent: true } } };
  return { key: `k${i % 8}`, payload: i % FAIL_EVERY === 0 ? { n: i, demo: { failOnce: true } } : { n: i } };
}

/** The i-th (1-based) of n demo messages of a stream. */
export function demoMessage(stream: string, i: number, n: number): DemoMessage {
  if (stream === "orders.placed") return order(i);
  if (stream === "ledger.adjustments") return adjustment(i, n);
  return generic(i);
}

export function demoBatch(stream: string, from: number, count: number, n: number): BatchItem<unknown>[] {
  const out: BatchItem<unknown>[] = [];
  for (let i = from; i < from + count; i++) {
    const m = demoMessage(stream, i, n);
    out.push(m.key === undefined ? { payload: m.payload } : { payload: m.payload, key: m.key });
  }
  return out;
}

/** How many of n demo messages of a stream are meant to end dead / to fail once. */
export function demoExpectations(stream: string, n: number): { permanent: number; failOnce: number } {
  let permanent = 0;
  let failOnce = 0;
  for (let i = 1; i <= n; i++) {
    const d = (demoMessage(stream, i, n).payload as { demo?: { permanent?: boolean; failOnce?: boolean } }).demo;
    if (d?.permanent) permanent++;
    else if (d?.failOnce) failOnce++;
  }
  return { permanent, failOnce };
}

export interface DemoServices {
  url: string;
  /** Environment variables set for the handlers (names only are shown). */
  env: string[];
  requests: number;
  failures: number;
  close(): Promise<void>;
}

function body(req: IncomingMessage): Promise<string> {
  return new Promise((res) => {
    let s = "";
    req.setEncoding("utf8");
    req.on("data", (c: string) => (s += c.length + s.length > 65_536 ? "" : c));
    req.on("end", () => res(s));
    req.on("error", () => res(s));
  });
}

/**
 * Local stand-ins for the review and ledger services: 200 for everything, except a request about
 * a "fail-once" order or adjustment, which gets 503 the first time.
 */
export async function startDemoServices(env: Record<string, string | undefined>): Promise<DemoServices> {
  const failed = new Set<string>();
  const stats = { requests: 0, failures: 0 };
  const server: Server = createServer((req, res) => {
    void (async () => {
      stats.requests++;
      const text = await body(req);
      let marker = req.headers["idempotency-key"]?.toString() ?? "";
      try {
        const j = JSON.parse(text) as { orderId?: unknown };
        if (typeof j.orderId === "string") marker += " " + j.orderId;
      } catch {
        // not JSON: only the header counts
      }
      const key = `${req.url} ${marker}`;
      if (marker.includes("fail-once") && !failed.has(key)) {
        failed.add(key);
        stats.failures++;
        res.writeHead(503, { "content-type": "application/json" }).end('{"error":"demo: temporarily unavailable (fails once)"}');
        return;
      }
      res.writeHead(200, { "content-type": "application/json" }).end('{"ok":true}');
    })();
  });
  server.keepAliveTimeout = 1_000;
  await new Promise<void>((res) => server.listen(0, "127.0.0.1", () => res()));
  const a = server.address();
  const url = `http://127.0.0.1:${typeof a === "object" && a ? a.port : 0}`;
  const set: string[] = [];
  if (!env.FRAUD_REVIEW_URL) {
    env.FRAUD_REVIEW_URL = `${url}/review`;
    set.push("FRAUD_REVIEW_URL");
  }
  if (!env.LEDGER_URL) {
    env.LEDGER_URL = `${url}/ledger`;
    set.push("LEDGER_URL");
  }
  return {
    url,
    env: set,
    get requests() {
      return stats.requests;
    },
    get failures() {
      return stats.failures;
    },
    close: () =>
      new Promise<void>((res) => {
        server.closeAllConnections();
        server.close(() => res());
      }),
  };
}
