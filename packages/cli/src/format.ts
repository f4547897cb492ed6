// Human output: aligned tables, ages, masked URLs, control characters escaped. Pure.
import { escapeControls } from "@sqlstreams/core/internal";

/** Right-aligns a column when every non-empty cell looks like a number (ids, counts, "1/0"). */
const NUMERIC = /^-?[0-9][0-9,./]*$/;

/**
 * Renders rows as an aligned table, two spaces between columns. Columns whose cells are all
 * numbers are right-aligned; `maxWidth` truncates the last column (e.g. an error text).
 */
export function table(headers: string[], rows: string[][], opts: { maxLast?: number } = {}): string {
  const cells = rows.map((r) => r.map((c, i) => (i === headers.length - 1 && opts.maxLast ? truncate(c, opts.maxLast) : c)));
  const widths = headers.map((h, i) => Math.max(h.length, ...cells.map((r) => visible(r[i] ?? "").length)));
  const right = headers.map((_, i) => cells.length > 0 && cells.every((r) => visible(r[i] ?? "") === "" || visible(r[i]) === "-" || NUMERIC.test(visible(r[i] ?? ""))));
  const pad = (c: string, w: number, start: boolean) => {
    const fill = " ".repeat(Math.max(0, w - visible(c).length));
    return start ? fill + c : c + fill;
  };
  const line = (r: string[]) =>
    r
      .map((c, i) => (i === r.length - 1 && !right[i] ? c : pad(c, widths[i], right[i])))
      .join("  ")
      .trimEnd();
  return [line(headers), ...cells.map(line)].join("\n");
}

/** One line of at most `max` characters: whitespace runs collapsed, control characters escaped, then cut. */
export function truncate(s: string, max: number): string {
  const one = escapeControls(s.replace(/\s+/g, " "));
  return one.length <= max ? one : one.slice(0, Math.max(0, max - 1)) + "…";
}

/** Cuts a line to a width without touching its spacing (control characters escaped first). */
export function clip(s: string, max: number): string {
  const safe = escapeControls(s);
  return safe.length <= max ? safe : safe.slice(0, Math.max(0, max - 1)) + "…";
}

/** Shows control characters of a database string as escapes (one implementation, in @sqlstreams/core). */
export { escapeControls } from "@sqlstreams/core/internal";

/** 850ms, 12s, 3m05s, 2h03m, 4d02h; "-" for none (one implementation, in @sqlstreams/core). */
export { formatAge as age } from "@sqlstreams/core/internal";

/** A connection string with its password (and any password= parameter) replaced by ***. */
export function maskUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = "***";
    for (const k of [...u.searchParams.keys()]) if (/pass/i.test(k)) u.searchParams.set(k, "***");
    return u.toString().replace("%2A%2A%2A", "***");
  } catch {
    return url.replace(/\/\/([^:@/]*):[^@/]*@/, "//$1:***@").replace(/(pass\w*=)[^&\s]*/gi, "$1***");
  }
}

/** Removes a secret from a text (error messages may quote a connection string). */
export function scrub(text: string, secrets: (string | undefined)[]): string {
  let out = text;
  for (const s of secrets) if (s && s.length >= 3) out = out.split(s).join("***");
  return out.replace(/(postgres(?:ql)?:\/\/[^:@/\s]*):[^@/\s]*@/gi, "$1:***@");
}

/** `[########      ]` for a fraction 0…1. */
export function bar(fraction: number, width = 16): string {
  const f = Number.isFinite(fraction) ? Math.min(1, Math.max(0, fraction)) : 0;
  const n = Math.round(f * width);
  return "[" + "#".repeat(n) + " ".repeat(width - n) + "]";
}

const SPARKS = "▁▂▃▄▅▆▇█";

/** A one-line chart of the values, scaled from 0 (or the minimum when negative) to the maximum. */
export function sparkline(values: number[]): string {
  if (values.length === 0) return "-";
  const lo = Math.min(0, ...values);
  const hi = Math.max(...values);
  if (hi === lo) return SPARKS[0].repeat(values.length);
  return values.map((v) => SPARKS[Math.min(7, Math.max(0, Math.round(((v - lo) / (hi - lo)) * 7)))]).join("");
}

export function yesNo(b: boolean): string {
  return b ? "yes" : "no";
}

const ESC = String.fromCharCode(27);
const ANSI = new RegExp(`${ESC}\\[[0-9;]*m`, "g");

const SGR_OR_NEWLINE = new RegExp(`(${ESC}\\[[0-9;]*m|\n)`);

/**
 * Human output as it goes to the terminal: the colour codes paint() makes and line breaks kept,
 * every other control character escaped (a safety net under the escaping at each data site).
 */
export function forTerminal(text: string): string {
  return text.split(SGR_OR_NEWLINE).map((part, i) => (i % 2 === 1 ? part : escapeControls(part))).join("");
}

/** The text without colour codes (for widths). */
export function visible(s: string): string {
  return s.replace(ANSI, "");
}

const COLOURS = { red: 31, green: 32, yellow: 33, dim: 2, bold: 1 } as const;
export type Colour = keyof typeof COLOURS;

/** Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org). */
export function colourEnabled(isTTY: boolean, env: Record<string, string | undefined>): boolean {
  return isTTY && !(env.NO_COLOR !== undefined && env.NO_COLOR !== "") && env.TERM !== "dumb";
}

export function paint(enabled: boolean, colour: Colour, text: string): string {
  return enabled ? `${ESC}[${COLOURS[colour]}m${text}${ESC}[0m` : text;
}

/** "90s", "5m", "2h", "1d", "250ms" or plain milliseconds → ms; null when unreadable. */
export function parseDuration(s: string): number | null {
  const m = /^([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)?$/.exec(s.trim());
  if (!m) return null;
  const n = Number(m[1]);
  const unit = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 }[(m[2] ?? "ms") as "ms"];
  return Math.round(n * unit);
}
