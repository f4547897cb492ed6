// The schedule expressions `sqlstreams dev` reads from functions/groups.ts (EventBridge Scheduler
// syntax), and the masking of connection strings. Pure: no database.
import { describe, expect, it } from "vitest";
import { maskUrl, nextCronTime, parseSchedule } from "@sqlstreams/cli";

const at = (iso: string) => Date.parse(iso);
const next = (expr: string, after: string) => {
  const s = parseSchedule(expr);
  if (s.kind !== "cron") throw new Error("not cron");
  const t = nextCronTime(s.fields, at(after));
  return t === null ? null : new Date(t).toISOString();
};

describe("parseSchedule", () => {
  it("rate(N unit)", () => {
    expect(parseSchedule("rate(1 minute)")).toMatchObject({ kind: "rate", periodMs: 60_000 });
    expect(parseSchedule(" rate(5 minutes) ")).toMatchObject({ kind: "rate", periodMs: 300_000 });
    expect(parseSchedule("rate(2 hours)")).toMatchObject({ kind: "rate", periodMs: 7_200_000 });
    expect(parseSchedule("rate(1 day)")).toMatchObject({ kind: "rate", periodMs: 86_400_000 });
  });

  it("rejects what it does not understand with SQL0015 and the reason", () => {
    for (const bad of ["rate(0 minutes)", "rate(5 fortnights)", "rate(x minutes)", "every 5 minutes", "cron(* * * *)", "cron(61 * * * ? *)", "cron(0 12 1 * MON *)", "cron(0 12 ? * 6#3 *)"]) {
      expect(() => parseSchedule(bad), bad).toThrowError(expect.objectContaining({ code: "SQL0015" }));
    }
  });

  it("cron: minutes and hours, steps, ranges, lists, names, UTC", () => {
    expect(next("cron(0/5 * * * ? *)", "2024-05-01T10:03:30Z")).toBe("2024-05-01T10:05:00.000Z");
    expect(next("cron(0/5 * * * ? *)", "2024-05-01T10:05:00Z")).toBe("2024-05-01T10:10:00.000Z");
    expect(next("cron(15 10 * * ? *)", "2024-05-01T10:15:00Z")).toBe("2024-05-02T10:15:00.000Z");
    expect(next("cron(0 8-10 * * ? *)", "2024-05-01T10:30:00Z")).toBe("2024-05-02T08:00:00.000Z");
    expect(next("cron(0 9 ? * MON-FRI *)", "2024-05-03T12:00:00Z")).toBe("2024-05-06T09:00:00.000Z"); // Fri → Mon
    expect(next("cron(0 0 ? * 1 *)", "2024-05-01T00:00:00Z")).toBe("2024-05-05T00:00:00.000Z"); // 1 = Sunday
    expect(next("cron(30 6 1,15 * ? *)", "2024-05-02T00:00:00Z")).toBe("2024-05-15T06:30:00.000Z");
    expect(next("cron(0 0 L * ? *)", "2024-02-10T00:00:00Z")).toBe("2024-02-29T00:00:00.000Z");
    expect(next("cron(0 12 1 JAN,JUL ? 2025)", "2024-05-01T00:00:00Z")).toBe("2025-01-01T12:00:00.000Z");
    expect(next("cron(0 12 1 1 ? 2020)", "2024-05-01T00:00:00Z")).toBe(null);
  });
});

describe("maskUrl", () => {
  it("hides passwords, keeps the rest", () => {
    expect(maskUrl("postgres://app:hunter2@db.example:5432/app")).toBe("postgres://app:***@db.example:5432/app");
    expect(maskUrl("postgres://app@db/app")).toBe("postgres://app@db/app");
    expect(maskUrl("postgres://db/app?password=hunter2&sslmode=require")).not.toContain("hunter2");
  });
});
