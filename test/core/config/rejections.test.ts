// register()/produce()/poll() rejections of bad configuration against a real Postgres: each is a
// coded error and leaves every table unchanged. The rules themselves are unit-tested in
// test/unit/config.test.ts.
import { describe, expect, it } from "vitest";
import type { ConsumerConfig } from "@sqlstreams/core";
import { useFreshDatabase } from "../../support/db.js";
import { tableSnapshot } from "../../support/invariants.js";
import { SCHEMA, streamIdOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();

describe("rejections against a real database write nothing", () => {
  it("register() rejects invalid retry and timeout configurations with coded errors and keeps the stored config", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream("config.reject");
    await s.register();
    const g = s.consumer("g");
    const valid = { message: { timeout: 30_000, retry: { maxRetries: 5, baseDelay: 2000 } }, concurrencyOverride: "ordered" as const };
    await g.register(valid);
    const sid = await streamIdOf(t, "config.reject");
    const [stored] = await t.sql<{ config: unknown }>(`SELECT config FROM ${SCHEMA}.consumer_group_config WHERE stream_id = $1 AND name = 'g'`, [sid]);
    expect(stored.config).toEqual(valid); // sparse, exactly as given (docs/guide/configuration.md#the-stored-document)
    const before = await tableSnapshot(t, sid);
    const bad: [unknown, string][] = [
      [{ message: { retry: { baseDelay: 5000, maxDelay: 1000 } } }, "SQL0014"],
      [{ message: { retry: { maxRetries: -1 } } }, "SQL0013"],
      [{ message: { retry: { maxRetries: 2.5 } } }, "SQL0013"],
      [{ message: { retry: { exponent: 0.5 } } }, "SQL0013"],
      [{ message: { timeout: 86_400_001 } }, "SQL0013"],
      [{ message: { timeout: "30s" } }, "SQL0013"],
      [{ messageMin: { timeout: 60_000 } }, "SQL0014"],
      [{ messageMax: { concurrency: "ordered" } }, "SQL0014"],
      [{ unknown: true }, "SQL0013"],
      [null, "SQL0013"],
    ];
    for (const [cfg, code] of bad) {
      await expect(g.register(cfg as ConsumerConfig), JSON.stringify(cfg)).rejects.toMatchObject({ code });
    }
    // A group that does not exist yet is not created by a rejected registration.
    await expect(s.consumer("never").register({ message: { timeout: 0 } })).rejects.toMatchObject({ code: "SQL0013" });
    expect(await tableSnapshot(t, sid)).toEqual(before);
    // Redeclaring replaces the whole document: omitted fields fall back to defaults.
    await g.register({ message: { timeout: 1_000 } });
    const [now] = await t.sql<{ config: unknown }>(`SELECT config FROM ${SCHEMA}.consumer_group_config WHERE stream_id = $1 AND name = 'g'`, [sid]);
    expect(now.config).toEqual({ message: { timeout: 1_000 } });
  });

  it("produce() rejects invalid message options before writing; poll() rejects bad options before any statement", async () => {
    const t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream("config.produce");
    await s.register();
    const g = s.consumer("g");
    await g.register();
    const sid = await streamIdOf(t, "config.produce");
    const before = await tableSnapshot(t, sid);
    const bad: [unknown, string][] = [
      [{ message: { timeout: 0 } }, "SQL0013"],
      [{ message: { retry: { maxRetries: 1_001 } } }, "SQL0013"],
      [{ message: { retry: { bogus: 1 } } }, "SQL0013"],
      [{ message: { retry: { baseDelay: 5_000, maxDelay: 1_000 } } }, "SQL0014"],
      [{ message: { concurrency: "exclusive" } }, "SQL0019"],
    ];
    for (const [opts, code] of bad) {
      await expect(s.produce({ x: 1 }, opts as never), JSON.stringify(opts)).rejects.toMatchObject({ code });
    }
    expect(await tableSnapshot(t, sid)).toEqual(before);
    const mark = t.statements.length;
    await expect(g.poll(() => {}, { batchLimit: 0 })).rejects.toMatchObject({ code: "SQL0015" });
    await expect(g.drain(() => {}, { concurrency: 65 })).rejects.toMatchObject({ code: "SQL0015" });
    await expect(g.poll("nope" as never)).rejects.toMatchObject({ code: "SQL0015" });
    expect(t.statements.length).toBe(mark);
  });
});
