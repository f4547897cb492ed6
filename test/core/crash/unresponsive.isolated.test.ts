// Bounded statements (docs/guide/operations.md#timeouts): a database that stops answering — its serving
// backends frozen with SIGSTOP, or the connection silently dropped by a proxy — ends a poll by its
// deadline + recordMargin with SQL0050 (never a hang), loses nothing (leases expire, the next
// poll reclaims) and the next poll recovers on a new connection. Runs isolated: it freezes
// backends of the shared server and asserts a wall-clock bound (generous, but a bound).
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SqlStreams, type LogEvent, type Message } from "@sqlstreams/core";
import { useFreshDatabase } from "../../support/db.js";
import { startProxy, type TcpProxy } from "../../support/proxy.js";
import { type TestClient, codeOf, streamIdOf, table, testClient } from "../../support/streams.js";

const url = useFreshDatabase();
/** Slack on top of deadline + recordMargin for timers and a loaded 2-core machine. */
const SLACK_MS = 8_000;

let t: TestClient;
beforeAll(async () => {
  t = testClient(url());
  await t.client.migrate();
});

function withAppName(u: string, name: string): string {
  const x = new URL(u);
  x.searchParams.set("application_name", name);
  return x.toString();
}

async function backendPids(app: string): Promise<number[]> {
  const rows = await t.sql<{ pid: number }>(`SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()`, [app]);
  return rows.map((r) => r.pid);
}

async function produced(name: string, n: number) {
  const s = t.client.stream<{ i: number }>(name);
  await s.register();
  await s.consumer("g").register({ message: { timeout: 1_000 } });
  await s.produceBatch(Array.from({ length: n }, (_, i) => ({ payload: { i: i + 1 } })));
}

/** Drains with a fresh client until the group committed `n`; returns the ids the handler saw. */
async function recover(client: SqlStreams, name: string, n: number, seen: Set<string>): Promise<void> {
  const g = client.stream<{ i: number }>(name).consumer("g");
  const until = Date.now() + 45_000;
  for (;;) {
    await g.drain((m: Message<{ i: number }>) => void seen.add(m.id), { deadline: Date.now() + 10_000, recordMargin: 1_000 }).catch(() => undefined);
    const p = await t.client.stream(name).consumer("g").progress();
    if (p.committed === String(n)) return;
    if (Date.now() > until) throw new Error(`group did not recover: ${JSON.stringify(p)}`);
    await sleep(300);
  }
}

const clients: SqlStreams[] = [];
function client(connectionString: string, opts: { statementTimeout?: number } = {}): { c: SqlStreams; events: LogEvent[] } {
  const events: LogEvent[] = [];
  const c = new SqlStreams({ connectionString, maxConnections: 1, logger: (e) => events.push(e), ...opts });
  clients.push(c);
  return { c, events };
}
afterAll(async () => {
  await Promise.all(clients.map((c) => c.close().catch(() => {})));
});

describe("bounded statements", () => {
  it("a drain whose serving backend freezes (SIGSTOP) mid-poll ends with SQL0050 by deadline + recordMargin; nothing is lost; the next poll recovers", async () => {
    await produced("frozen", 5);
    const app = "sqlstreams-frozen";
    const { c } = client(withAppName(url(), app));
    const g = c.stream<{ i: number }>("frozen").consumer("g");
    const seen = new Set<string>();
    let frozen: number[] = [];
    try {
      // The deadline is epoch ms (the API); what is asserted is elapsed time, on the monotonic clock,
      // so a step of the machine's wall clock during the test cannot fail it.
      const deadline = Date.now() + 4_000;
      const margin = 1_000;
      const started = performance.now();
      const outcome = await g
        .drain(
          async (m) => {
            seen.add(m.id);
            if (frozen.length === 0) {
              frozen = await backendPids(app);
              expect(frozen.length).toBeGreaterThan(0);
              for (const pid of frozen) process.kill(pid, "SIGSTOP");
            }
          },
          { deadline, recordMargin: margin, batchLimit: 5 },
        )
        .then(() => "returned", (e: unknown) => e);
      const elapsed = performance.now() - started;
      expect(frozen.length).toBeGreaterThan(0);
      expect((outcome as { code?: string }).code).toBe("SQL0050");
      expect(elapsed).toBeLessThanOrEqual(4_000 + margin + SLACK_MS);
      // Recovery while the old backend is still frozen: a new connection, the expired range reclaimed.
      await recover(c, "frozen", 5, seen);
      expect([...seen].sort()).toEqual(["1", "2", "3", "4", "5"]);
    } finally {
      for (const pid of frozen) {
        try {
          process.kill(pid, "SIGCONT");
        } catch {
          // already gone
        }
      }
    }
  });

  it("a poll without a deadline on a frozen backend ends with SQL0050 after statementTimeout", async () => {
    await produced("frozen-idle", 1);
    const app = "sqlstreams-frozen-idle";
    const { c } = client(withAppName(url(), app), { statementTimeout: 1_500 });
    const g = c.stream("frozen-idle").consumer("g");
    await c.streamNames(); // warm the one pooled connection
    const frozen = await backendPids(app);
    expect(frozen.length).toBe(1);
    try {
      for (const pid of frozen) process.kill(pid, "SIGSTOP");
      const started = performance.now();
      expect(await codeOf(g.poll(() => {}))).toBe("SQL0050");
      expect(performance.now() - started).toBeLessThan(1_500 + SLACK_MS);
      // The frozen connection was discarded: the same client works again on a new one.
      expect((await g.poll(() => {})).succeeded).toBe(1);
    } finally {
      for (const pid of frozen) process.kill(pid, "SIGCONT");
    }
  });
});

describe("a connection silently dropped by a proxy", () => {
  let proxy: TcpProxy;
  beforeAll(async () => {
    proxy = await startProxy(url());
  });
  afterAll(async () => {
    await proxy.close();
  });

  it("a drain ends with SQL0050 by deadline + recordMargin; nothing is lost; the next drain recovers", async () => {
    await produced("dropped", 5);
    const { c } = client(proxy.url);
    const g = c.stream<{ i: number }>("dropped").consumer("g");
    const seen = new Set<string>();
    let dropped = false;
    const deadline = Date.now() + 4_000;
    const margin = 1_000;
    const started = performance.now();
    const outcome = await g
      .drain(
        (m) => {
          seen.add(m.id);
          if (!dropped) {
            dropped = true;
            proxy.dropExisting();
          }
        },
        { deadline, recordMargin: margin, batchLimit: 5 },
      )
      .then(() => "returned", (e: unknown) => e);
    expect(dropped).toBe(true);
    expect((outcome as { code?: string }).code).toBe("SQL0050");
    expect(performance.now() - started).toBeLessThanOrEqual(4_000 + margin + SLACK_MS);
    await recover(c, "dropped", 5, seen);
    expect([...seen].sort()).toEqual(["1", "2", "3", "4", "5"]);
  });

  it("a produce on a dropped connection reports an unknown outcome (SQL0024, cause SQL0050); a hanging connect fails with SQL0050 before sending", async () => {
    await t.client.stream("dropped-produce").register();
    const { c } = client(proxy.url, { statementTimeout: 1_500 });
    const s = c.stream("dropped-produce");
    await s.produce({ a: 1 }); // warm
    proxy.dropExisting();
    const e = await s.produce({ a: 2 }).then(() => null, (x: unknown) => x as { code: string; cause?: { code?: string } });
    expect(e?.code).toBe("SQL0024");
    expect(e?.cause?.code).toBe("SQL0050");
    proxy.hangNew = true;
    try {
      const started = performance.now();
      const e2 = await s.produce({ a: 3 }).then(() => null, (x: unknown) => x as { code: string; details: { sent?: boolean } });
      expect(e2?.code).toBe("SQL0050");
      expect(e2?.details.sent).toBe(false);
      expect(performance.now() - started).toBeLessThan(1_500 + SLACK_MS);
    } finally {
      proxy.hangNew = false;
    }
    await s.produce({ a: 4 });
    const log = table(await streamIdOf(t, "dropped-produce"), "message_log");
    const rows = await t.sql<{ a: number }>(`SELECT (payload->>'a')::int AS a FROM ${log} ORDER BY id`);
    // 2 may or may not exist (its outcome was unknown); 3 was never sent.
    expect(rows.map((r) => r.a).filter((a) => a !== 2)).toEqual([1, 4]);
  });
});

describe("statementTimeout option", () => {
  it("rejects bad values with SQL0051 before connecting", async () => {
    for (const v of [0, 99, 1.5, 3_600_001, "60s", Number.NaN]) {
      expect(await codeOf(() => new SqlStreams({ connectionString: url(), statementTimeout: v as number }))).toBe("SQL0051");
    }
  });
});
