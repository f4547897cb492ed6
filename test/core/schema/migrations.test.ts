// Migrations (docs/protocol/data-model.md#migrations): the numbered baseline once, and functions re-created
// when their file's hash differs from function_version's, every old overload of the name dropped.
import { describe, expect, it } from "vitest";
import { STREAM_VERSION, SYSTEM_VERSION } from "@sqlstreams/core";
import { staleFunctions } from "@sqlstreams/core/internal";
import { streamFunctions, streamMigrations, systemFunctions, systemMigrations } from "../../../packages/core/src/generated/migrations.js";
import { useFreshDatabase } from "../../support/db.js";
import { SCHEMA, streamIdOf, testClient } from "../../support/streams.js";

const url = useFreshDatabase();

/** The signatures of every function of the schema named `name`. */
async function overloads(t: ReturnType<typeof testClient>, name: string): Promise<string[]> {
  const r = await t.sql<{ sig: string }>(
    `SELECT p.oid::regprocedure::text AS sig FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
      WHERE n.nspname = $1 AND p.proname = $2 ORDER BY 1`,
    [SCHEMA, name],
  );
  return r.map((x) => x.sig);
}

describe("migrations", () => {
  it("a fresh schema is the baselines and every function file, each recorded with its hash", async () => {
    const t = testClient(url());
    await t.client.migrate();
    await t.client.stream("mig.a").register();
    const n = await streamIdOf(t, "mig.a");
    expect(SYSTEM_VERSION).toBe(systemMigrations.length);
    expect(STREAM_VERSION).toBe(streamMigrations.length);
    const log = await t.sql<{ scope: string; version: number }>(`SELECT scope, version FROM ${SCHEMA}.migration_log ORDER BY scope, version`);
    expect(log).toEqual([
      ...streamMigrations.map((m) => ({ scope: "stream", version: m.version })),
      ...systemMigrations.map((m) => ({ scope: "system", version: m.version })),
    ]);
    const fv = await t.sql<{ stream_id: string | null; name: string; hash: string }>(
      `SELECT stream_id::text, name, hash FROM ${SCHEMA}.function_version ORDER BY stream_id NULLS FIRST, name`,
    );
    const byName = (a: { name: string }, b: { name: string }) => a.name.localeCompare(b.name);
    expect(fv).toEqual([
      ...[...systemFunctions].sort(byName).map((f) => ({ stream_id: null, name: f.name, hash: f.hash })),
      ...[...streamFunctions].sort(byName).map((f) => ({ stream_id: String(n), name: f.name, hash: f.hash })),
    ]);
    for (const f of streamFunctions) expect(await overloads(t, `${f.name}_${n}`)).toHaveLength(1);
    for (const f of systemFunctions) expect(await overloads(t, f.name)).toHaveLength(1);
    expect(await staleFunctions(t.pool, SCHEMA)).toEqual([]);
  });

  it("re-creates exactly the functions whose hash differs, drops their other overloads and the functions no file defines", async () => {
    const t = testClient(url());
    await t.client.migrate();
    await t.client.stream("mig.b").register();
    const n = await streamIdOf(t, "mig.b");
    const oid = async (name: string) => (await t.sql<{ oid: string }>(`SELECT p.oid::text AS oid FROM pg_proc p WHERE p.oid = to_regproc($1)`, [`${SCHEMA}.${name}`]))[0]?.oid;
    const advanceBefore = await oid(`advance_${n}`);
    const claimBefore = await overloads(t, `claim_${n}`);
    // An older claim_N signature left behind, claim's recorded hash another file's; a retired function.
    await t.sql(`CREATE FUNCTION ${SCHEMA}.claim_${n}(p_group BIGINT) RETURNS BIGINT LANGUAGE sql AS 'SELECT 1::bigint'`);
    await t.sql(`UPDATE ${SCHEMA}.function_version SET hash = 'an older file' WHERE stream_id = $1 AND name = 'claim'`, [n]);
    await t.sql(`CREATE FUNCTION ${SCHEMA}.retired_${n}() RETURNS INTEGER LANGUAGE sql AS 'SELECT 1'`);
    await t.sql(`INSERT INTO ${SCHEMA}.function_version (stream_id, name, hash, library_version) VALUES ($1, 'retired', 'x', '0.0.0')`, [n]);
    await t.sql(`UPDATE ${SCHEMA}.function_version SET hash = 'an older file' WHERE stream_id IS NULL AND name = 'produce'`);
    expect(await staleFunctions(t.pool, SCHEMA)).toEqual([{ streamId: null, name: "produce" }, { streamId: String(n), name: "claim" }]);

    await t.client.migrate();
    expect(await overloads(t, `claim_${n}`)).toEqual(claimBefore);
    expect(await overloads(t, `retired_${n}`)).toEqual([]);
    expect(await t.sql(`SELECT name FROM ${SCHEMA}.function_version WHERE name = 'retired'`)).toEqual([]);
    expect(await t.sql(`SELECT hash FROM ${SCHEMA}.function_version WHERE stream_id = $1 AND name = 'claim'`, [n])).toEqual([
      { hash: streamFunctions.find((f) => f.name === "claim")?.hash },
    ]);
    // A function whose file did not change is left alone (same pg_proc row).
    expect(await oid(`advance_${n}`)).toBe(advanceBefore);
    expect(await staleFunctions(t.pool, SCHEMA)).toEqual([]);
    // And the stream still works end to end.
    const s = t.client.stream("mig.b");
    const g = s.consumer("g");
    await g.register();
    await s.produce({ ok: true });
    const seen: unknown[] = [];
    for (let i = 0; i < 50 && seen.length === 0; i++) await g.drain((m) => void seen.push(m.payload));
    expect(seen).toEqual([{ ok: true }]);
  });

  it("registering a stream writes only its own functions' catalog rows, and PUBLIC cannot execute them", async () => {
    const t = testClient(url());
    await t.client.migrate();
    await t.client.stream("mig.d1").register();
    // xmin changes whenever a pg_proc row is rewritten (a GRANT or REVOKE rewrites it even when
    // the ACL stays the same): a registration that touched every function would cost more per stream
    // the more streams there are.
    const procs = async () =>
      t.sql<{ proname: string; xmin: string; public_exec: boolean }>(
        `SELECT p.proname, p.xmin::text AS xmin, has_function_privilege('public', p.oid, 'EXECUTE') AS public_exec
           FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 ORDER BY 1`,
        [SCHEMA],
      );
    const before = await procs();
    await t.client.stream("mig.d2").register();
    const n2 = await streamIdOf(t, "mig.d2");
    const after = await procs();
    const isNew = (x: { proname: string }) => x.proname.endsWith(`_${n2}`);
    expect(after.filter((x) => !isNew(x))).toEqual(before);
    expect(after.filter(isNew)).toHaveLength(streamFunctions.length);
    expect(after.filter((x) => x.public_exec)).toEqual([]);
  });

  it("every function sets search_path, except the inlined predicates and the per-row helpers (the ordered path, expires_in)", async () => {
    const t = testClient(url());
    await t.client.migrate();
    await t.client.stream("mig.c").register();
    const r = await t.sql<{ proname: string; config: string[] | null }>(
      `SELECT p.proname, p.proconfig AS config FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 ORDER BY 1`,
      [SCHEMA],
    );
    const unset = r.filter((x) => !(x.config ?? []).includes("search_path=pg_catalog, pg_temp")).map((x) => x.proname.replace(/_[0-9]+$/, ""));
    expect([...new Set(unset)]).toEqual(["deliverable", "expires_in", "group_flags", "keyed", "lease_expired", "lease_ms", "message_timeout", "ordered_pred", "ordered_preds", "row_due", "row_waiting", "run_expired", "unresolved"]);
  });
});
