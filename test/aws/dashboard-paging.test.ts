// The failure list at scale: 100,000 dead rows written set-based straight into the tables. The
// group page counts no further than 10,000 ("10,000+") and its bulk labels say how many one press
// acts on; keyset pages (failures({ after / beforeCursor }) and the page's Next/Previous links) are
// disjoint and in order, and the page query reads the exception_queue_N_page index (EXPLAIN,
// structural: no sort of the group's rows). "Discard all N matching" discards exactly N.
import { beforeAll, describe, expect, it } from "vitest";
import { createDashboard, type FetchHandler } from "@sqlstreams/aws";
import { useFreshDatabase } from "../support/db.js";
import { groupIdOf, streamIdOf, testClient, type TestClient } from "../support/streams.js";

const url = useFreshDatabase();
const ROWS = 100_000;

/** The message ids a group page lists, in page order. */
function idsOf(html: string): string[] {
  return [...html.matchAll(/href="\/message\?stream=big&amp;id=([0-9]+)"/g)].map((m) => m[1]);
}

function linkOf(html: string, label: string): string | null {
  const m = new RegExp(`<a href="([^"]+)">${label}</a>`).exec(html);
  return m === null ? null : m[1].replace(/&amp;/g, "&");
}

describe("the failure list with 100,000 dead rows", () => {
  let t: TestClient;
  let app: FetchHandler;
  let n: string;
  let gid: string;
  /** Every dead row's id in the list's order (newest update first, ties by id descending). */
  let order: string[];

  beforeAll(async () => {
    t = testClient(url());
    await t.client.migrate();
    const s = t.client.stream("big");
    await s.register({ partitionSize: 1_000_000 });
    await s.consumer("g").register();
    n = await streamIdOf(t, "big");
    gid = await groupIdOf(t, "g", "big");
    await t.sql(`INSERT INTO sqlstreams.message_log_${n} (payload) SELECT jsonb_build_object('i', i) FROM generate_series(1, ${ROWS}) i`);
    // Updated times repeat every 1,000 ids, so the order needs the id to break ties; 50 rows carry a rare error.
    await t.sql(
      `INSERT INTO sqlstreams.exception_queue_${n} (consumer_group_id, message_id, status, concurrency, attempts, last_error, updated_at)
       SELECT $1, m.id, 'dead', 'parallel', 1, CASE WHEN m.id % 2000 = 0 THEN 'rare failure' ELSE 'boom' END,
              now() - (m.id % 1000) * interval '1 second'
         FROM sqlstreams.message_log_${n} m`,
      [gid],
    );
    await t.sql(`ANALYZE sqlstreams.exception_queue_${n}`);
    await t.sql(`ANALYZE sqlstreams.message_log_${n}`);
    order = (await t.sql<{ id: string }>(
      `SELECT message_id::text AS id FROM sqlstreams.exception_queue_${n} WHERE consumer_group_id = $1 ORDER BY updated_at DESC, message_id DESC LIMIT 200`,
      [gid],
    )).map((r) => r.id);
    app = createDashboard({ client: t.client });
  }, 120_000);

  it("the group page says 10,000+ and its bulk labels say how many a press acts on", async () => {
    const r = await app(new Request("http://127.0.0.1/group?stream=big&group=g"));
    const html = await r.text();
    expect(r.status, html.slice(0, 300)).toBe(200);
    expect(html).toContain("of 10,000+ matching");
    expect(html).toContain("Discard 10,000 of the 10,000+ matching");
    expect(html).toContain("Redrive 10,000 of the 10,000+ matching");
    expect(await t.client.stream("big").consumer("g").countFailures({}, 10_000)).toBe(10_001);
    expect(await t.client.stream("big").consumer("g").countFailures({})).toBe(ROWS);
  });

  it("keyset pages of failures() are disjoint and in order, forward and back", async () => {
    const g = t.client.stream("big").consumer("g");
    const p1 = await g.failures({ limit: 50 });
    const p2 = await g.failures({ limit: 50, after: p1[49].cursor });
    const p3 = await g.failures({ limit: 50, after: p2[49].cursor });
    expect([...p1, ...p2, ...p3].map((r) => r.messageId)).toEqual(order.slice(0, 150));
    const back = await g.failures({ limit: 50, beforeCursor: p3[0].cursor });
    expect(back.map((r) => r.messageId)).toEqual(p2.map((r) => r.messageId));
    await expect(g.failures({ after: "12" })).rejects.toMatchObject({ code: "SQL0015" });
    await expect(g.failures({ after: p1[0].cursor, offset: 5 })).rejects.toMatchObject({ code: "SQL0015" });
  });

  it("the page's Next and Previous links walk the same order", async () => {
    const get = async (path: string) => {
      const r = await app(new Request(`http://127.0.0.1${path}`));
      expect(r.status).toBe(200);
      return r.text();
    };
    const first = await get("/group?stream=big&group=g");
    expect(idsOf(first)).toEqual(order.slice(0, 50));
    expect(linkOf(first, "Previous page")).toBeNull();
    const second = await get(linkOf(first, "Next page") as string);
    expect(idsOf(second)).toEqual(order.slice(50, 100));
    const third = await get(linkOf(second, "Next page") as string);
    expect(idsOf(third)).toEqual(order.slice(100, 150));
    const back = await get(linkOf(third, "Previous page") as string);
    expect(idsOf(back)).toEqual(order.slice(50, 100));
    const front = await get(linkOf(back, "Previous page") as string);
    expect(idsOf(front)).toEqual(order.slice(0, 50));
  });

  it("the page query reads the exception_queue_N_page index, with no sort of the group's rows", async () => {
    const g = t.client.stream("big").consumer("g");
    const [row] = await g.failures({ limit: 1 });
    t.statements.length = 0;
    await g.failures({ limit: 51, after: row.cursor });
    const text = t.statements.find((s) => s.includes("AS cursor"));
    expect(text).toBeDefined();
    const [updatedAt, id] = row.cursor.split("~");
    // failureRows.after's parameters: the filter (group, status, error, key, since, before, payload), limit, offset, the cursor.
    const plan = (await t.sql<{ "QUERY PLAN": string }>(`EXPLAIN ${text as string}`, [gid, "dead", null, null, null, null, null, 51, 0, updatedAt, id]))
      .map((r) => r["QUERY PLAN"]).join("\n");
    expect(plan).toContain(`exception_queue_${n}_page`);
    expect(plan).not.toMatch(/\bSort\b/);
    // The seek is an index condition: the scan starts at the cursor instead of counting rows up to it.
    expect(plan).toMatch(/Index Cond: .*ROW\(updated_at, message_id\) < /);
    t.statements.length = 0;
    await g.failures({ limit: 51 });
    const firstText = t.statements.find((s) => s.includes("AS cursor")) as string;
    const first = (await t.sql<{ "QUERY PLAN": string }>(`EXPLAIN ${firstText}`, [gid, "dead", null, null, null, null, null, 51, 0]))
      .map((r) => r["QUERY PLAN"]).join("\n");
    expect(first).toContain(`exception_queue_${n}_page`);
    expect(first).not.toMatch(/\bSort\b/);
  });

  it("Discard all N matching discards exactly N", async () => {
    const page = await app(new Request("http://127.0.0.1/group?stream=big&group=g&error=rare"));
    const html = await page.text();
    expect(html).toContain("Discard all 50 matching");
    const csrf = /sqlstreams_csrf=([A-Za-z0-9_-]+)/.exec(page.headers.get("set-cookie") ?? "")?.[1] as string;
    const body = new URLSearchParams({ csrf, stream: "big", group: "g", error: "rare", key: "", since: "", payload: "", all: "1" });
    const r = await app(new Request("http://127.0.0.1/action/discard", { method: "POST", body, headers: { cookie: `sqlstreams_csrf=${csrf}`, "content-type": "application/x-www-form-urlencoded" } }));
    expect(r.status).toBe(303);
    const [left] = await t.sql<{ rare: number; all: number }>(
      `SELECT count(*) FILTER (WHERE last_error = 'rare failure')::int AS rare, count(*)::int AS all FROM sqlstreams.exception_queue_${n} WHERE consumer_group_id = $1`,
      [gid],
    );
    expect(left).toEqual({ rare: 0, all: ROWS - 50 });
  });
});
