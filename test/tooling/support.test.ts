// Proves the test fixture itself: fresh databases are real, distinct and droppable, and child
// processes can be SIGKILLed with the kill observed (and its effect on Postgres visible).
import { describe, expect, inject, it, vi } from "vitest";
import { freshDatabase, query, urlForDatabase, useFreshDatabase, withClient } from "../support/db.js";
import { spawnNode } from "../support/processes.js";

const dbUrl = useFreshDatabase();

describe("database fixture", () => {
  it("provides a reachable base server", async () => {
    expect(["embedded", "external"]).toContain(inject("databaseServer"));
    const rows = await query<{ one: number }>(inject("baseDatabaseUrl"), "SELECT 1 AS one");
    expect(rows).toEqual([{ one: 1 }]);
    if (inject("databaseServer") === "embedded") {
      // The embedded server is the npm package's Postgres 18, not the machine's.
      const [v] = await query<{ v: string }>(dbUrl(), "SELECT current_setting('server_version_num') AS v");
      expect(Number(v.v)).toBeGreaterThanOrEqual(180000);
    }
  });

  it("gives this file its own database", async () => {
    const [row] = await query<{ db: string }>(dbUrl(), "SELECT current_database() AS db");
    expect(row.db).toMatch(/^t_[0-9a-f]{16}$/);
    expect(dbUrl()).toBe(urlForDatabase(row.db));
  });

  it("creates distinct databases that can be queried and dropped", async () => {
    const a = await freshDatabase();
    const b = await freshDatabase();
    try {
      expect(a.name).not.toBe(b.name);
      expect(a.url).not.toBe(b.url);

      await query(a.url, "CREATE TABLE only_in_a (id int)");
      await query(a.url, "INSERT INTO only_in_a VALUES (1), (2)");
      expect(await query(a.url, "SELECT count(*)::int AS n FROM only_in_a")).toEqual([{ n: 2 }]);
      expect(await query(b.url, "SELECT to_regclass('only_in_a') AS t")).toEqual([{ t: null }]);

      // A connection left open must not prevent the drop.
      await withClient(a.url, async (lingering) => {
        await lingering.query("BEGIN");
        await lingering.query("LOCK TABLE only_in_a");
        await a.drop();
      });
      await b.drop();
      await b.drop(); // idempotent

      const left = await query<{ datname: string }>(
        inject("baseDatabaseUrl"),
        "SELECT datname FROM pg_database WHERE datname = ANY($1)",
        [[a.name, b.name]],
      );
      expect(left).toEqual([]);
      await expect(query(a.url, "SELECT 1")).rejects.toThrow(/does not exist/);
    } finally {
      await a.drop();
      await b.drop();
    }
  });
});

describe("child processes", () => {
  it("spawns an ESM child, reads JSON lines and observes its SIGKILL", async () => {
    const child = spawnNode({
      source: `
        console.log("not json");
        console.log(JSON.stringify({ event: "ready", pid: process.pid, marker: process.env.MARKER }));
        setInterval(() => console.log(JSON.stringify({ event: "tick" })), 20);
      `,
      env: { MARKER: "m-42" },
    });
    const ready = await child.waitFor({ event: "ready" });
    expect(ready).toMatchObject({ pid: child.pid, marker: "m-42" });
    await child.waitFor({ event: "tick" });
    expect(child.lines[0]).toBe("not json");

    const exit = await child.kill();
    expect(exit).toEqual({ code: null, signal: "SIGKILL" });
    expect(child.exitInfo()).toEqual(exit);
    await expect(child.waitFor({ event: "never" })).rejects.toThrow(/SIGKILL/);
  });

  it("talks to a child over stdin and waits for later messages with `from`", async () => {
    const child = spawnNode({
      name: "echo child",
      source: `
        import { createInterface } from "node:readline";
        console.log(JSON.stringify({ event: "ready" }));
        for await (const line of createInterface({ input: process.stdin })) {
          const msg = JSON.parse(line);
          if (msg.cmd === "exit") process.exit(0);
          console.log(JSON.stringify({ event: "echo", n: msg.n }));
        }
      `,
    });
    await child.waitFor({ event: "ready" });
    child.send({ n: 1 });
    await child.waitFor({ event: "echo", n: 1 });
    const mark = child.messages.length;
    child.send({ n: 1 });
    const second = await child.waitFor((m) => m.event === "echo", { from: mark });
    expect(child.messages.indexOf(second)).toBe(mark);
    await child.waitForLine(/"n":1/);
    child.send({ cmd: "exit" });
    expect(await child.waitForExit(10_000)).toEqual({ code: 0, signal: null });
  });

  it("reports a child that exits before the awaited line, with its stderr", async () => {
    const child = spawnNode({ source: `console.error("boom here"); process.exit(3);` });
    await expect(child.waitFor({ event: "ready" }, { timeoutMs: 10_000 })).rejects.toThrow(/code 3[\s\S]*boom here/);
    expect((await child.exited).code).toBe(3);
  });

  it("a SIGKILLed child holding a transaction releases its locks on the server", async () => {
    await query(dbUrl(), "CREATE TABLE crash_probe (id int PRIMARY KEY)");
    await query(dbUrl(), "INSERT INTO crash_probe VALUES (1)");
    // Bare imports resolve through the repository's node_modules.
    const child = spawnNode({
      source: `
        import pg from "pg";
        const c = new pg.Client({ connectionString: process.env.DATABASE_URL });
        await c.connect();
        await c.query("BEGIN");
        await c.query("SELECT * FROM crash_probe WHERE id = 1 FOR UPDATE");
        const { rows } = await c.query("SELECT pg_backend_pid() AS pid");
        console.log(JSON.stringify({ event: "locked", backend: rows[0].pid }));
        setInterval(() => {}, 1000);
      `,
      env: { DATABASE_URL: dbUrl() },
    });
    const { backend } = await child.waitFor({ event: "locked" });

    // While it lives, the row is locked.
    const probe = await query<{ got: boolean }>(
      dbUrl(),
      "SELECT count(*) = 0 AS got FROM (SELECT 1 FROM crash_probe WHERE id = 1 FOR UPDATE SKIP LOCKED) s",
    );
    expect(probe).toEqual([{ got: true }]);

    expect((await child.kill()).signal).toBe("SIGKILL");

    // The server notices the dead socket and rolls the transaction back.
    await vi.waitUntil(
      async () =>
        (await query(dbUrl(), "SELECT 1 FROM pg_stat_activity WHERE pid = $1", [backend])).length === 0,
      { timeout: 20_000, interval: 50 },
    );
    const after = await query(dbUrl(), "SELECT id FROM crash_probe WHERE id = 1 FOR UPDATE NOWAIT");
    expect(after).toEqual([{ id: 1 }]);
  });
});
