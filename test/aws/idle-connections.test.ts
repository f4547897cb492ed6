// The Lambda adapter's idle bound (docs/guide/deployment.md#idle-connections): a connection no
// invocation has used for the bound goes back to the server, by timer in a running process, or as
// the invocation ends when the wait before it already outlasted the bound (a frozen container runs
// no timer); never in the middle of an invocation. Plus the setting's checks and a refused
// connection coded SQL0033. The storm across real processes is test/aws/connection-storm.test.ts.
import { setTimeout as sleep } from "node:timers/promises";
import { createServer } from "node:net";
import { beforeAll, describe, expect, it } from "vitest";
import { SqlStreamsError } from "@sqlstreams/core";
import { DatabaseProvider } from "@sqlstreams/aws";
import { useFreshDatabase } from "../support/db.js";
import { testClient } from "../support/streams.js";

const url = useFreshDatabase();
beforeAll(async () => {
  await testClient(url()).client.migrate();
});

async function openFor(app: string): Promise<number> {
  const t = testClient(url());
  const rows = await t.sql<{ n: string }>("SELECT count(*)::text AS n FROM pg_stat_activity WHERE application_name = $1", [app]);
  return Number(rows[0].n);
}

function provider(app: string, env: Record<string, string> = {}, idleTimeout?: number): DatabaseProvider {
  return new DatabaseProvider({
    env: { DATABASE_URL: url(), AWS_LAMBDA_FUNCTION_NAME: app, ...env },
    logger: () => {},
    waker: false,
    ...(idleTimeout !== undefined ? { idleTimeout } : {}),
  });
}

describe("the Lambda pool's idle bound", () => {
  it("closes the connection once idle for the bound, keeps the client, and reconnects for the next invocation", async () => {
    const app = `idle-timer-${process.pid}`;
    const db = provider(app, { SQLSTREAMS_DB_IDLE_TIMEOUT_MS: "600" });
    try {
      expect(db.idleTimeout()).toBe(600);
      const first = await db.use(async (c) => c);
      expect(await openFor(app)).toBe(1); // kept for a warm invocation that comes soon
      const deadline = Date.now() + 10_000;
      while ((await openFor(app)) > 0 && Date.now() < deadline) await sleep(50);
      expect(await openFor(app)).toBe(0);
      // The same client (and its caches) on a new connection; the credentials are not loaded again.
      const second = await db.use(async (c) => {
        await c.streamNames();
        return c;
      });
      expect(second).toBe(first);
      expect(db.credentialLoads).toBe(1);
    } finally {
      await db.close();
    }
  });

  it("an invocation longer than the bound keeps its connection throughout", async () => {
    const app = `idle-long-${process.pid}`;
    const db = provider(app, {}, 200);
    try {
      const t = testClient(url());
      const backends = async () => (await t.sql<{ pid: number }>("SELECT pid FROM pg_stat_activity WHERE application_name = $1", [app])).map((r) => r.pid);
      const seen = await db.use(async (c) => {
        await c.streamNames();
        const before = await backends();
        await sleep(600); // a slow handler between statements
        await c.streamNames();
        return [before, await backends()];
      });
      expect(seen[0]).toHaveLength(1);
      expect(seen[1]).toEqual(seen[0]);
    } finally {
      await db.close();
    }
  });

  it("after a wait longer than the bound, the invocation closes its connection as it ends (a frozen container runs no timer)", async () => {
    const app = `idle-end-${process.pid}`;
    const db = provider(app, {}, 1_500);
    try {
      await db.use((c) => c.streamNames());
      await sleep(1_800); // the schedule's gap, longer than the bound
      await db.use((c) => c.streamNames());
      // At once, not a bound later (the server drops the backend a moment after the client's goodbye).
      const until = Date.now() + 1_000;
      while ((await openFor(app)) > 0 && Date.now() < until) await sleep(20);
      expect(await openFor(app)).toBe(0);
      // Invocations in quick succession (a burst of wakes) keep the connection.
      await db.use((c) => c.streamNames());
      expect(await openFor(app)).toBe(1);
    } finally {
      await db.close();
    }
  });

  it("0 keeps the connection as long as the container lives", async () => {
    const app = `idle-zero-${process.pid}`;
    const db = provider(app, { SQLSTREAMS_DB_IDLE_TIMEOUT_MS: "0" });
    try {
      await db.use((c) => c.streamNames());
      await sleep(300);
      await db.use((c) => c.streamNames());
      await sleep(300);
      expect(await openFor(app)).toBe(1);
    } finally {
      await db.close();
    }
  });

  it("an invalid bound is SQL0015 naming the option or the variable; an unreachable server is SQL0033", async () => {
    for (const bad of [-1, 1.5, Number.NaN, 2 ** 31]) {
      expect(() => provider("x", {}, bad)).toThrow(expect.objectContaining({ code: "SQL0015", message: expect.stringContaining("DatabaseOptions.idleTimeout") }));
    }
    const envBad = provider("x", { SQLSTREAMS_DB_IDLE_TIMEOUT_MS: "30s" });
    const err = await envBad.use((c) => c.streamNames()).then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(SqlStreamsError);
    expect((err as SqlStreamsError).code).toBe("SQL0015");
    expect((err as SqlStreamsError).message).toContain("SQLSTREAMS_DB_IDLE_TIMEOUT_MS");
    expect(() => envBad.idleTimeout()).toThrow(expect.objectContaining({ code: "SQL0015" }));

    // A port nobody listens on: refused after the connect retries, coded like a failing poll.
    const port = await new Promise<number>((resolve) => {
      const srv = createServer().listen(0, "127.0.0.1", () => {
        const a = srv.address();
        srv.close(() => resolve(typeof a === "object" && a ? a.port : 0));
      });
    });
    const down = new DatabaseProvider({ env: { DATABASE_URL: `postgres://u:p@127.0.0.1:${port}/db` }, logger: () => {}, waker: false });
    const refused = await down.use((c) => c.streamNames()).then(() => undefined, (e: unknown) => e);
    expect(refused).toBeInstanceOf(SqlStreamsError);
    expect((refused as SqlStreamsError).code).toBe("SQL0033");
    expect(((refused as Error).cause as { code?: string }).code).toBe("ECONNREFUSED");
    await down.close();
  });
});
