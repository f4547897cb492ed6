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
