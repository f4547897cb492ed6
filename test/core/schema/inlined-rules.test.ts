// The rule functions that set no search_path (docs/protocol/data-model.md#migrations) are inlined
// by the planner into the statements that call them: a plan of each of the library's statements
// that uses one names none of them. A rule function that stops being inlinable (a SET clause, a
// second statement, STRICT, VOLATILE) shows here as a function call in the plan, and on the hot
// path as a call per row.
import type { QueryResultRow } from "pg";
import { describe, expect, it } from "vitest";
import * as Admin from "../../../packages/core/src/sql/admin.js";
import * as Cycle from "../../../packages/core/src/sql/cycle.js";
import * as Maintain from "../../../packages/core/src/sql/maintain.js";
import { streamFunctions } from "../../../packages/core/src/generated/migrations.js";
import { type Tables, tables } from "../../../packages/core/src/sql/names.js";
import type { Statement } from "../../../packages/core/src/sql/statement.js";
import { useFreshDatabase } from "../../support/db.js";
import { SCHEMA, groupIdOf, streamIdOf, testClient, type TestClient } from "../../support/streams.js";

const url = useFreshDatabase();

/** The stream functions whose file says why they set no search_path, but the per-row helper plpgsql caches. */
const INLINED = streamFunctions
  .filter((f) => /^-- search_path:/m.test(f.sql) && /LANGUAGE sql/i.test(f.sql))
  .map((f) => f.name);

/** A literal for a parameter value, so the plan is the one the values would get. */
function literal(v: unknown): string {
  if (v === null) return "NULL";
  if (Array.isArray(v)) return `'{${v.map((x) => `"${String(x)}"`).join(",")}}'`;
  return `'${String(v).replace(/'/g, "''")}'`;
}

async function plan<P>(t: TestClient, s: Statement<P, QueryResultRow>, names: Tables, p: P): Promise<string> {
  let text = s.sql(names);
  const values = s.values(p);
  for (let i = values.length; i >= 1; i--) text = text.replaceAll(`$${i}`, literal(values[i - 1]));
  const r = await t.sql<{ "QUERY PLAN": string }>(`EXPLAIN (VERBOSE, COSTS OFF) ${text}`);
  return r.map((x) => x["QUERY PLAN"]).join("\n");
}

describe("inlined rule functions", () => {
  it("the library's statements that call a rule function plan it as its expression, not as a call", async () => {
    expect(INLINED).toEqual(expect.arrayContaining(["deliverable", "group_flags", "lease_expired", "row_due", "unresolved"]));
    const t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream("inline.a");
    await s.register();
    await s.consumer("g").register();
    await s.produce({ n: 1 });
    const n = await streamIdOf(t, "inline.a");
    const groupId = await groupIdOf(t, "g", "inline.a");
    const names = tables(`"${SCHEMA}"`, n);
    const token = "00000000-0000-0000-0000-000000000001";
    const plans = [
      await plan(t, Cycle.load, names, { streamId: n, group: "g" }),
      await plan(t, Cycle.claimRead, names, { groupId, token, batchLimit: 100 }),
      await plan(t, Cycle.readRange, names, { low: "0", high: "100" }),
      await plan(t, Cycle.lockExpiredRange, names, { groupId }),
      await plan(t, Cycle.lockExpiredRuns, names, { groupId }),
      await plan(t, Admin.progress, names, { streamId: n, group: "g" }),
      await plan(t, Admin.seekCursor, names, { groupId, position: "0" }),
      await plan(t, Maintain.floor, names, { streamId: n }),
    ];
    const call = new RegExp(`\\b(${INLINED.join("|")})_${n}\\b`);
    for (const p of plans) expect(p).not.toMatch(call);
    // The claim's read reads the lease's bounds as init plans and the log by its id index.
    expect(plans[1]).toMatch(/InitPlan/);
    // (PostgreSQL 15 prints an init plan's value as $0, 18 as (InitPlan 1).col1.)
    const initValue = String.raw`(?:\$\d|\(InitPlan \d\)\.col1)`;
    expect(plans[1]).toMatch(new RegExp(String.raw`Index Cond: \(\(m\.id > ${initValue}\) AND \(m\.id <= ${initValue}\)\)`));
  });
});
