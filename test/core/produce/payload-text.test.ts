// Payloads are stored as json, the producer's JSON text exactly (docs/protocol/data-model.md#payloads):
// every produce path stores the text JSON.stringify made, and consumers get it back as it was.
// jsonb would have rewritten each of these texts (keys reordered shortest first, 1e+21 printed as
// 22 digits, 1e-7 as 0.0000001), so each assertion here fails against a jsonb column.
import { describe, expect, it } from "vitest";
import type { Message } from "@sqlstreams/core";
import { useFreshDatabase } from "../../support/db.js";
import { SCHEMA, codeOf, committed, makeDue, pollPastFence, setupGroup, testClient } from "../../support/streams.js";

const url = useFreshDatabase();

const PAYLOADS: unknown[] = [
  { zeta: 1, a: 2, mid: { yy: true, x: [3, "é", "\u0001", null] } },
  { big: 1e21, small: 1e-7, frac: 0.1, neg: -0.5 },
  'text "quoted" \\ and \u2028',
  [{ bb: 1, a: 2 }],
  null,
  42,
];

describe("payload text (docs/protocol/data-model.md#payloads)", () => {
  it("every produce path stores the payload's JSON text byte for byte; consumers get it back in its key order", async () => {
    const { t, s, g, sid } = await setupGroup(testClient(url()), "payload.text");
    const texts: string[] = [];
    const expect1 = (p: unknown) => texts.push(JSON.stringify(p));
    for (const p of PAYLOADS) {
      await s.produce(p); // one message
      expect1(p);
    }
    await s.produce(PAYLOADS[0], { idempotencyKey: "text-1" }); // with an idempotency key
    expect1(PAYLOADS[0]);
    await s.produceBatch(PAYLOADS.map((payload) => ({ payload }))); // payloads only
    PAYLOADS.forEach(expect1);
    await s.produceBatch(PAYLOADS.map((payload, i) => ({ payload, key: `k${i}`, message: { timeout: 5000 } }))); // with keys and options
    PAYLOADS.forEach(expect1);
    await s.produceBatch(PAYLOADS.map((payload, i) => ({ payload, key: `c${i}`, compaction: { rank: i } }))); // the compaction document
    PAYLOADS.forEach(expect1);
    // A batch with scheduled items (the mixed document) and one scheduled message; made due at once.
    await s.produceBatch(PAYLOADS.map((payload, i) => (i % 2 === 0 ? { payload, delay: 60_000 } : { payload })));
    const immediate = PAYLOADS.filter((_, i) => i % 2 === 1);
    const later = PAYLOADS.filter((_, i) => i % 2 === 0);
    immediate.forEach(expect1);
    await s.produce(PAYLOADS[1], { delay: 60_000 });
    const scheduledTexts = (await t.sql<{ p: string }>(`SELECT payload::text AS p FROM ${SCHEMA}.scheduled_message_${sid} ORDER BY id`)).map((r) => r.p);
    expect(scheduledTexts).toEqual([...later, PAYLOADS[1]].map((p) => JSON.stringify(p)));

    const stored = await t.sql<{ p: string }>(`SELECT payload::text AS p FROM ${SCHEMA}.message_log_${sid} ORDER BY id`);
    expect(stored.map((r) => r.p)).toEqual(texts);

    await t.sql(`UPDATE ${SCHEMA}.scheduled_message_${sid} SET due_at = now()`);
    [...later, PAYLOADS[1]].forEach(expect1); // moved to the log in due order (equal due times: scheduled id order)
    const seen: string[] = [];
    await pollPastFence(g, (m: Message<unknown>) => void seen.push(JSON.stringify(m.payload)), { drain: true, until: committed(String(texts.length)) });
    expect(seen).toEqual(texts);
    expect(Object.keys(PAYLOADS[0] as object)).toEqual(["zeta", "a", "mid"]);
  });

  it("a retried message comes back with its text; SQL reads it with ->> and ::jsonb containment", async () => {
    const { t, s, g, sid } = await setupGroup(testClient(url()), "payload.retry");
    await s.produce(PAYLOADS[0]);
    let attempts = 0;
    const got: string[] = [];
    const handler = (m: Message<unknown>) => {
      got.push(JSON.stringify(m.payload));
      if (attempts++ === 0) throw new Error("once");
    };
    await pollPastFence(g, handler);
    await makeDue(t, sid);
    await pollPastFence(g, handler, { until: committed("1") });
    expect(got).toEqual([JSON.stringify(PAYLOADS[0]), JSON.stringify(PAYLOADS[0])]);

    // Queried from SQL: ->> and -> work on json; containment and indexes need jsonb.
    const [row] = await t.sql<{ zeta: string; x1: string; contains: boolean; misses: boolean }>(
      `SELECT payload->>'zeta' AS zeta, payload->'mid'->'x'->>1 AS x1,
              payload::jsonb @> '{"mid": {"yy": true}}' AS contains, payload::jsonb @> '{"a": 3}' AS misses
         FROM ${SCHEMA}.message_log_${sid}`,
    );
    expect(row).toEqual({ zeta: "1", x1: "é", contains: true, misses: false });
  });

  it("the JSON text as SQL wrote it: duplicate keys reach the consumer as JSON.parse reads them, the last one", async () => {
    const { t, g, sid } = await setupGroup(testClient(url()), "payload.dup");
    // An insert by hand (no library): json keeps both keys; jsonb would keep only the last.
    await t.sql(`INSERT INTO ${SCHEMA}.message_log_${sid} (payload) VALUES ('{"b": 1, "a": 2, "b": 3}'::json)`);
    expect((await t.sql<{ p: string }>(`SELECT payload::text AS p FROM ${SCHEMA}.message_log_${sid}`))[0].p).toBe('{"b": 1, "a": 2, "b": 3}');
    const got: unknown[] = [];
    await pollPastFence(g, (m: Message<unknown>) => void got.push(m.payload));
    expect(got).toEqual([JSON.parse('{"b": 1, "a": 2, "b": 3}')]);
    expect(Object.keys(got[0] as object)).toEqual(["b", "a"]);
  });

  it("max_payload_bytes measures the stored text: the library's JSON text, SQL produce()'s jsonb text", async () => {
    const { t, s, sid } = await setupGroup(testClient(url()), "payload.size", { stream: { maxPayloadBytes: 1024 } });
    const exactly = { s: "x".repeat(1024 - '{"s":""}'.length) };
    await s.produce(exactly);
    expect((await t.sql<{ n: number }>(`SELECT octet_length(payload::text) AS n FROM ${SCHEMA}.message_log_${sid}`))[0].n).toBe(1024);
    expect(await codeOf(s.produce({ s: exactly.s + "x" }))).toBe("SQL0017");

    // SQL produce() takes jsonb: duplicate keys collapse and keys take jsonb's order before it is stored.
    await t.sql(`SELECT ${SCHEMA}.produce('payload.size', '{"zeta": 1, "a": 2, "a": 3}')`);
    expect((await t.sql<{ p: string }>(`SELECT payload::text AS p FROM ${SCHEMA}.message_log_${sid} ORDER BY id DESC LIMIT 1`))[0].p).toBe('{"a": 3, "zeta": 1}');
    // Exactly the limit as jsonb prints it ({"s": "…"}: 9 bytes around the string), then one more.
    const fill = "x".repeat(1024 - '{"s": ""}'.length);
    await t.sql(`SELECT ${SCHEMA}.produce('payload.size', jsonb_build_object('s', $1::text))`, [fill]);
    const e = await raised(t.sql(`SELECT ${SCHEMA}.produce('payload.size', jsonb_build_object('s', $1::text))`, [fill + "x"]));
    expect(e).toMatch(/^SQL0017 payload is 1025 bytes of JSON/);
  });
});

async function raised(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    return (e as Error).message;
  }
  throw new Error("expected the statement to raise");
}
