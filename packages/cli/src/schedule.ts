// EventBridge Scheduler expressions of functions/groups.ts, for `sqlstreams dev`:
//   rate(N minute|minutes|hour|hours|day|days)
//   cron(minutes hours day-of-month month day-of-week year), UTC, with * ? , - / and names
//   (JAN…DEC, SUN…SAT; day-of-week 1 = SUN … 7 = SAT), and L in day-of-month.
// W, # and L in day-of-week are not supported here (the deployed schedule still accepts them).
// Pure: no clock.
import { SqlStreamsError } from "@sqlstreams/core";

export interface CronFields {
  minutes: Set<number> | null;
  hours: Set<number> | null;
  /** Days of month; null = any. */
  dom: Set<number> | null;
  /** Last day of the month (L). */
  lastDom: boolean;
  months: Set<number> | null;
  /** 1 = Sunday … 7 = Saturday; null = any. */
  dow: Set<number> | null;
  years: Set<number> | null;
}

export type Schedule =
  | { kind: "rate"; expression: string; periodMs: number }
  | { kind: "cron"; expression: string; fields: CronFields };

const UNITS: Record<string, number> = { minute: 60_000, hour: 3_600_000, day: 86_400_000 };
const MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];
const DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

function fail(expression: string, why: string): never {
  throw new SqlStreamsError("SQL0015", `schedule ${JSON.stringify(expression)}: ${why}`, { schedule: expression });
}

/** Parses a schedule expression; SQL0015 with the reason when it is not understood. */
export function parseSchedule(expression: string): Schedule {
  if (typeof expression !== "string") fail(String(expression), "must be a string like rate(1 minute) or cron(0/5 * * * ? *)");
  const e = expression.trim();
  let m = /^rate\(\s*([0-9]+)\s+([a-z]+)\s*\)$/i.exec(e);
  if (m) {
    const n = Number(m[1]);
    const unit = m[2].toLowerCase().replace(/s$/, "");
    if (!(unit in UNITS)) fail(expression, `unknown unit ${JSON.stringify(m[2])}; use minute(s), hour(s) or day(s)`);
    if (n < 1) fail(expression, "the rate must be a positive integer");
    return { kind: "rate", expression: e, periodMs: n * UNITS[unit] };
  }
  m = /^cron\((.*)\)$/i.exec(e);
  if (m) return { kind: "cron", expression: e, fields: parseCron(m[1], expression) };
  return fail(expression, "expected rate(N unit) or cron(minutes hours day-of-month month day-of-week year)");
}

function parseCron(body: string, expression: string): CronFields {
  const parts = body.trim().split(/\s+/);
  if (parts.length !== 6) fail(expression, `cron needs 6 fields (minutes hours day-of-month month day-of-week year), got ${parts.length}`);
  const [mi, h, dom, mon, dow, yr] = parts;
  const lastDom = dom.toUpperCase() === "L";
  const fields: CronFields = {
    minutes: field(mi, 0, 59, expression, "minutes"),
    hours: field(h, 0, 23, expression, "hours"),
    dom: lastDom ? null : field(dom, 1, 31, expression, "day-of-month", { question: true }),
    lastDom,
    months: field(mon, 1, 12, expression, "month", { names: MONTHS }),
    dow: field(dow, 1, 7, expression, "day-of-week", { names: DAYS, question: true }),
    years: field(yr, 1970, 2199, expression, "year"),
  };
  const domAny = fields.dom === null && !lastDom;
  if (!domAny && fields.dow !== null) fail(expression, "one of day-of-month and day-of-week must be ? (or *)");
  return fields;
}

function field(
  text: string,
  min: number,
  max: number,
  expression: string,
  name: string,
  opts: { names?: string[]; question?: boolean } = {},
): Set<number> | null {
  const t = text.toUpperCase();
  if (t === "*" || (t === "?" && opts.question)) return null;
  if (/[LW#]/.test(t.replace(/JUL|WED/g, ""))) fail(expression, `${name} ${JSON.stringify(text)}: L, W and # are not supported by sqlstreams dev`);
  const value = (s: string): number => {
    const i = opts.names?.indexOf(s) ?? -1;
    const n = i >= 0 ? i + 1 : /^[0-9]+$/.test(s) ? Number(s) : NaN;
    if (!Number.isInteger(n) || n < min || n > max) fail(expression, `${name} ${JSON.stringify(text)}: ${JSON.stringify(s)} is not in ${min}-${max}`);
    return n;
  };
  const out = new Set<number>();
  for (const item of t.split(",")) {
    const [range, stepText] = item.split("/");
    const step = stepText === undefined ? 1 : Number(stepText);
    if (!Number.isInteger(step) || step < 1) fail(expression, `${name} ${JSON.stringify(text)}: bad step ${JSON.stringify(stepText)}`);
    let lo: number;
    let hi: number;
    if (range === "*") {
      lo = min;
      hi = max;
    } else if (range.includes("-")) {
      const [a, b] = range.split("-");
      lo = value(a);
      hi = value(b);
      if (lo > hi) fail(expression, `${name} ${JSON.stringify(text)}: range ${range} runs backwards`);
    } else {
      lo = value(range);
      hi = stepText === undefined ? lo : max;
    }
    for (let v = lo; v <= hi; v += step) out.add(v);
  }
  return out;
}

function daysInMonth(y: number, m0: number): number {
  return new Date(Date.UTC(y, m0 + 1, 0)).getUTCDate();
}

function dayMatches(f: CronFields, d: Date): boolean {
  if (f.lastDom) return d.getUTCDate() === daysInMonth(d.getUTCFullYear(), d.getUTCMonth());
  if (f.dom && !f.dom.has(d.getUTCDate())) return false;
  if (f.dow && !f.dow.has(d.getUTCDay() + 1)) return false;
  return true;
}

/** The first fire time strictly after `afterMs` (UTC, minute resolution), or null within 10 years. */
export function nextCronTime(f: CronFields, afterMs: number): number | null {
  const d = new Date(Math.floor(afterMs / 60_000) * 60_000 + 60_000);
  const limit = afterMs + 10 * 366 * 86_400_000;
  while (d.getTime() <= limit) {
    if (f.years && !f.years.has(d.getUTCFullYear())) {
      d.setUTCFullYear(d.getUTCFullYear() + 1, 0, 1);
      d.setUTCHours(0, 0, 0, 0);
      continue;
    }
    if (f.months && !f.months.has(d.getUTCMonth() + 1)) {
      d.setUTCMonth(d.getUTCMonth() + 1, 1);
      d.setUTCHours(0, 0, 0, 0);
      continue;
    }
    if (!dayMatches(f, d)) {
      d.setUTCDate(d.getUTCDate() + 1);
      d.setUTCHours(0, 0, 0, 0);
      continue;
    }
    if (f.hours && !f.hours.has(d.getUTCHours())) {
      d.setUTCHours(d.getUTCHours() + 1, 0, 0, 0);
      continue;
    }
    if (f.minutes && !f.minutes.has(d.getUTCMinutes())) {
      d.setUTCMinutes(d.getUTCMinutes() + 1, 0, 0);
      continue;
    }
    return d.getTime();
  }
  return null;
}

/** The next fire time of a schedule strictly after `afterMs` (rate: anchored at `anchorMs`). */
export function nextFire(s: Schedule, afterMs: number, anchorMs: number): number | null {
  if (s.kind === "rate") {
    const n = Math.floor((afterMs - anchorMs) / s.periodMs) + 1;
    return anchorMs + Math.max(1, n) * s.periodMs;
  }
  return nextCronTime(s.fields, afterMs);
}
