// SQL0043 names only fence holders it can age (docs/protocol/poll-cycle.md#the-fence). A holder
// whose transaction age the poll cannot read is staged for real with a prepared transaction that
// wrote to the stream (it holds the fence with no backend, so no pg_stat_activity row): the poll
// is held back and says so in an info-level note counting it, never a warning with age
// "unknown". A live producer transaction older than 2 s is still named (test/isolated/fence.test.ts).
//
// Prepared transactions need max_prepared_transactions > 0, so this file runs its own server.
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LogEvent, SqlStreams } from "@sqlstreams/core";
import { type PrivatePostgres, startPrivatePostgres } from "../../support/private-postgres.js";

let server: PrivatePostgres | undefined;

beforeAll(async () => {
  server = await startPrivatePostgres(["-c", "max_prepared_transactions=2"], "sqlstreams-fence-");
}, 60_000);

afterAll(async () => {
  await server?.stop();
}, 60_000);

describe("fence holders of unknown age", () => {
  it("a prepared transaction holding the fence is counted in an info note, not named as long-running", async () => {
    const url = server!.url("postgres");
    const events: LogEvent[] = [];
    const client = new SqlStreams({ connectionString: url, logger: (e) => void events.push(e) });
    const holder = new pg.Client({ connectionString: url });
    await holder.connect();
    let prepared = false;
    try {
      await client.migrate();
      const s = client.stream("fence.prepared");
      await s.register();
      const g = s.consumer("g");
      await g.register();
      await holder.query("BEGIN");
      await s.produceInTx(holder as unknown as pg.PoolClient, { held: true });
      await holder.query("PREPARE TRANSACTION 'sqlstreams_fence_test'");
      prepared = true;
      await s.produce({ later: true });

      const r = await g.poll(() => {});
      expect(r.succeeded).toBe(0); // the prepared transaction holds the fence
      const fence = events.filter((e) => e.code === "SQL0043");
      expect(fence.filter((e) => e.level === "warn")).toEqual([]);
      expect(fence).toHaveLength(1);
      expect(fence[0]).toMatchObject({ level: "info", stream: "fence.prepared", group: "g", pids: [], prepared: true });
      expect(fence[0].message).toContain("prepared transactions (see pg_prepared_xacts)");

      // Once it commits, both messages are delivered.
      await holder.query("COMMIT PREPARED 'sqlstreams_fence_test'");
      prepared = false;
      const seen: unknown[] = [];
      await g.drain((m) => void seen.push(m.payload));
      expect(seen).toEqual([{ held: true }, { later: true }]);
    } finally {
      if (prepared) await holder.query("ROLLBACK PREPARED 'sqlstreams_fence_test'").catch(() => {});
      await holder.end().catch(() => {});
      await client.close();
    }
  });
});
