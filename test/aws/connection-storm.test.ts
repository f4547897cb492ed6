// A connection storm (docs/guide/deployment.md#idle-connections): more poll containers than the
// server has connections for. 14 real processes, each invoking the real poll handler on a
// schedule with one pool kept across invocations, against a private Postgres with
// max_connections 12 of which 3 are reserved for superusers, so 9 for the pollers' role. A
// producer (superuser, on a reserved slot) feeds the group throughout. With the idle bound every
// container releases its connection between invocations, so every one of them is served within a
// bound, every message is delivered, and a refused connection fails its invocation with SQL0033
// caused by 53300. Without it (SQLSTREAMS_DB_IDLE_TIMEOUT_MS=0) the first 9 keep their connections
// and the other 5 are refused for the whole run (STORM_IDLE_TIMEOUT_MS=0 runs it so).
//
// The server is this file's own embedded Postgres, whatever the test run uses otherwise.
import { setTimeout as sleep } from "node:timers/promises";
import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SqlStreams } from "@sqlstreams/core";
import type { ChildMessage, NodeChild } from "../support/processes.js";
import { spawnLambdaPoller } from "../support/lambda-poller.js";
import { type PrivatePostgres, startPrivatePostgres } from "../support/private-postgres.js";

const POLLERS = 14;
const USABLE = 9; // max_connections 12 − superuser_reserved_connections 3
/** How long every container may wait for its first invocation that handles work. */
const SERVED_WITHIN_MS = 30_000;
const IDLE_TIMEOUT_MS = process.env.STORM_IDLE_TIMEOUT_MS ?? "150";

let server: PrivatePostgres | undefined;
let superUrl = "";
let appUrl = "";

beforeAll(async () => {
  server = await startPrivatePostgres(["-c", "max_connections=12", "-c", "superuser_reserved_connections=3"], "sqlstreams-storm-");
  superUrl = server.url("storm");
  const admin = new pg.Client({ connectionString: server.url("postgres") });
  await admin.connect();
  const appPassword = randomBytes(12).toString("hex");
  await admin.query(`CREATE ROLE app LOGIN PASSWORD '${appPassword}'`);
  await admin.query("CREATE DATABASE storm OWNER app");
  await admin.end();
  appUrl = `postgres://app:${appPassword}@127.0.0.1:${server.port}/storm`;
}, 60_000);

afterAll(async () => {
  await server?.stop();
}, 60_000);

const of = (c: NodeChild, event: string): ChildMessage[] => c.messages.filter((m) => m.event === event);

describe("connection storm", () => {
  it(`${POLLERS} poll containers on ${USABLE} connections: every one is served within a bound, nothing is lost, refusals are SQL0033 (53300)`, async () => {
    // The app's role owns the control plane, as a deployment's migrate function would create it.
    const setup = new SqlStreams({ connectionString: appUrl, maxConnections: 1, logger: () => {} });
    await setup.migrate();
    await setup.stream("storm.s").register();
    await setup.stream("storm.s").consumer("g").register();
    await setup.close();

    const started = Date.now();
    const pollers = Array.from({ length: POLLERS }, (_, i) =>
      spawnLambdaPoller(appUrl, { stream: "storm.s", group: "g", pauseMs: 300, jitterMs: 200, handlerMs: 2 }, `storm-${i}`, {
        SQLSTREAMS_DB_IDLE_TIMEOUT_MS: IDLE_TIMEOUT_MS,
      }),
    );
    // The producer is a superuser: it takes a reserved slot and never competes with the pollers.
    const producer = new SqlStreams({ connectionString: superUrl, maxConnections: 1, logger: () => {} });
    const produced: string[] = [];
    let slowestFirstServed: number | undefined;
    const served = (c: NodeChild) => of(c, "invocation").find((m) => m.ok === true && Number(m.started) > 0);
    try {
      // Messages keep arriving until every container was served (or the bound passed), and a while after.
      let until = Number.POSITIVE_INFINITY;
      for (let batch = 0; Date.now() < until && Date.now() - started < SERVED_WITHIN_MS + 30_000; batch++) {
        const rs = await producer.stream("storm.s").produceBatch(Array.from({ length: 5 }, (_, j) => ({ payload: { batch, j } })));
        produced.push(...rs.map((r) => r.id));
        if (until === Number.POSITIVE_INFINITY && pollers.every(served)) until = Date.now() + 2_000;
        await sleep(100);
      }
      const unserved = pollers.filter((c) => !served(c)).map((c) => c.name);
      // From each container's first invocation (starting 14 processes on a small machine takes a while).
      const firstServed = pollers.map((c) => Number(served(c)?.doneAt ?? Number.NaN) - Number(of(c, "invocation")[0]?.at ?? Number.NaN));
      expect(unserved, `containers with no invocation that handled work (first served after ms: ${firstServed.join(", ")})`).toEqual([]);
      slowestFirstServed = Math.max(...firstServed);
      expect(slowestFirstServed).toBeLessThanOrEqual(SERVED_WITHIN_MS);

      // Every message is delivered.
      const handled = () => new Set(pollers.flatMap((c) => of(c, "handled").map((m) => String(m.id))));
      const deadline = Date.now() + 60_000;
      while (produced.some((id) => !handled().has(id)) && Date.now() < deadline) await sleep(200);
      expect(produced.filter((id) => !handled().has(id))).toEqual([]);
    } finally {
      for (const c of pollers) c.send("stop");
      await Promise.all(pollers.map((c) => c.waitForExit(30_000).catch(() => c.kill())));
      await producer.close();
    }

    // Every failed invocation is coded: the server refused the connection (too many clients).
    const failures = pollers.flatMap((c) => of(c, "invocation").filter((m) => m.ok !== true));
    expect(failures.filter((m) => m.code !== "SQL0033" || m.cause !== "53300")).toEqual([]);
    // Nothing ended in a state other than delivered.
    const check = new pg.Client({ connectionString: superUrl });
    await check.connect();
    try {
      const tables = await check.query<{ t: string }>("SELECT tablename AS t FROM pg_tables WHERE schemaname = 'sqlstreams' AND tablename LIKE 'exception\\_queue\\_%'");
      expect(tables.rows.length).toBeGreaterThan(0);
      for (const { t } of tables.rows) {
        const { rows } = await check.query<{ n: string }>(`SELECT count(*)::text AS n FROM sqlstreams.${t}`);
        expect(rows[0].n, t).toBe("0");
      }
    } finally {
      await check.end();
    }
    const invocations = pollers.map((c) => of(c, "invocation").length);
    console.log(`storm: ${produced.length} messages, ${invocations.reduce((a, b) => a + b, 0)} invocations, ${failures.length} refused; every container served within ${slowestFirstServed} ms of its first invocation`);
  }, 150_000);
});
