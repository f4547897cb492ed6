// defineStatement: named parameters become positional placeholders in the order they are listed,
// values follow the same order, and every statement of the poll path uses each parameter it names.
import { describe, expect, it } from "vitest";
import * as cycle from "../../packages/core/src/sql/cycle.js";
import { tables } from "../../packages/core/src/sql/names.js";
import { type Statement, defineStatement } from "../../packages/core/src/sql/statement.js";

const t = tables('"s"', "7");

describe("defineStatement", () => {
  it("names become $1, $2, … in list order; values come out in the same order", () => {
    const s = defineStatement<{ a: number; b: string; c: boolean }, { x: number }>(["b", "a", "c"], (tt, p) =>
      `SELECT ${tt.fn("f")}(${p.a}, ${p.b}, ${p.c}) AS x`);
    expect(s.sql(t)).toBe('SELECT "s".f_7($2, $1, $3) AS x');
    expect(s.values({ a: 1, b: "two", c: true })).toEqual(["two", 1, true]);
  });

  it("builds the text once per stream's tables", () => {
    let built = 0;
    const s = defineStatement<{ a: number }>(["a"], (tt, p) => {
      built++;
      return `SELECT ${p.a} FROM ${tt.messageLog}`;
    });
    expect(s.sql(t)).toBe(s.sql(t));
    expect(built).toBe(1);
    expect(s.sql(tables('"s"', "8"))).toBe('SELECT $1 FROM "s".message_log_8');
    expect(built).toBe(2);
  });

  it("a named parameter the text never uses is an error, and $1 is not taken for $10", () => {
    const unused = defineStatement<{ a: number; b: number }>(["a", "b"], (_t, p) => `SELECT ${p.a}`);
    expect(() => unused.sql(t)).toThrow(/parameter b \(\$2\) is not used/);
    const names = Array.from({ length: 10 }, (_, i) => `p${i}`) as (keyof Record<string, number>)[];
    const tenth = defineStatement<Record<string, number>>(names, (_t, p) => `SELECT ${names.slice(1).map((n) => p[n]).join(", ")}`);
    expect(() => tenth.sql(t)).toThrow(/parameter p0 \(\$1\) is not used/);
  });

  it("every statement of the poll path uses each parameter it names", () => {
    const statements = Object.entries(cycle).filter(([, v]) => typeof v === "object" && v !== null && "params" in v);
    expect(statements.length).toBeGreaterThan(20);
    for (const [name, s] of statements as [string, Statement<unknown, Record<string, unknown>>][]) {
      expect(() => s.sql(t), name).not.toThrow();
      expect(s.sql(t).match(/\$[0-9]+/g)?.map((m) => Number(m.slice(1))).every((n) => n >= 1 && n <= s.params.length), name).toBe(true);
    }
  });

  it("the claim sends its 19 parameters in claim_N's order", () => {
    const p: cycle.ClaimParams = {
      groupId: "1", batchLimit: 10, head: "5", observation: "9", token: "tok", timeoutDefault: 30_000, timeoutMin: null,
      timeoutMax: 60_000, concurrency: 2, recordMargin: 2_000, leaseCapMs: null, batchBytes: 1024, recordToken: null,
      recordExceptions: null, recordDeliveries: null, recordKeys: null, pastDue: false, own: ["a"], rate: null,
    };
    expect(cycle.claim.values(p)).toEqual(["1", 10, "5", "9", "tok", 30_000, null, 60_000, 2, 2_000, null, 1024, null, null, null, null, false, ["a"], null]);
    expect(cycle.claim.sql(t)).toContain('FROM "s".claim_7($1, $2, $3, $4::xid8, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14::jsonb, $15::jsonb, $16::jsonb, $17, $18::uuid[], $19::jsonb)');
  });
});
