// Text as operators read it, shared by the CLI and the dashboard (docs/guide/operations.md#dashboard):
// durations, and strings from the database made safe for a terminal.

/** 850ms, 12s, 3m05s, 2h03m, 4d02h; "-" for none. */
export function formatAge(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return "-";
  if (ms < 1_000) return `${Math.max(0, Math.round(ms))}ms`;
  const s = Math.floor(ms / 1_000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${String(s % 60).padStart(2, "0")}s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h${String(m % 60).padStart(2, "0")}m`;
  return `${Math.floor(h / 24)}d${String(h % 24).padStart(2, "0")}h`;
}

// eslint-disable-next-line no-control-regex -- finding control characters is this regex's purpose
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
const SHORT: Record<string, string> = { "\n": "\\n", "\r": "\\r", "\t": "\\t", "\u001b": "\\e" };

/**
 * A string for a human's terminal: every C0 and C1 control character (ESC, BEL, CR, LF, DEL,
 * U+0080–U+009F) and every bidirectional mark or override is shown as an escape (`\e`, `\r`,
 * `\n`, `\t`, `\x07`, `\u202e`) instead of acting on the terminal. Cut a text after escaping
 * it, so a cut cannot leave an unterminated sequence. JSON output never goes through this.
 */
export function escapeControls(text: string): string {
  return text.replace(CONTROL, (c) => SHORT[c] ?? (c.charCodeAt(0) <= 0xff ? `\\x${c.charCodeAt(0).toString(16).padStart(2, "0")}` : `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`));
}

/** The deepest payload an operator display renders; a deeper one is described instead (JSON.stringify recurses). */
export const DISPLAY_DEPTH = 200;

/** How deep a parsed JSON value nests (a scalar is 0, `[]` is 1), measured without recursion. */
export function jsonDepth(value: unknown): number {
  let max = 0;
  const todo: [unknown, number][] = [[value, 0]];
  while (todo.length > 0) {
    const [v, d] = todo.pop() as [unknown, number];
    if (typeof v !== "object" || v === null) continue;
    if (d + 1 > max) max = d + 1;
    for (const child of Array.isArray(v) ? v : Object.values(v)) if (typeof child === "object" && child !== null) todo.push([child, d + 1]);
  }
  return max;
}

/**
 * Null when an operator display can render this payload; else the sentence to show instead: it
 * nests deeper than DISPLAY_DEPTH, and where to read it with SQL.
 */
export function undisplayablePayload(payload: unknown, where: { schema: string; stream: string; id: string }): string | null {
  const depth = jsonDepth(payload);
  if (depth <= DISPLAY_DEPTH) return null;
  return `payload not displayable: nested ${depth} levels (the display stops at ${DISPLAY_DEPTH}); fetch it with SQL: ` +
    `SELECT l.payload FROM ${where.schema}.message_log_<id> l WHERE l.id = ${where.id}, where <id> is SELECT id FROM ${where.schema}.stream_config WHERE name = '${where.stream.replace(/'/g, "''")}'`;
}
