// Text for an operator's terminal: control characters shown as escapes (core's format.ts, shared by
// the CLI and the dashboard), ages, and the CLI's cuts, masks and parsers (cli's format.ts). No
// database. The same rules through real child processes: test/cli/terminal-escape.test.ts.
import { describe, expect, it } from "vitest";
import { escapeControls, formatAge } from "../../packages/core/src/format.js";
import {
  bar, clip, forTerminal, maskUrl, paint, parseDuration, scrub, sparkline, table, truncate, visible,
} from "../../packages/cli/src/format.js";

const ESC = "\u001b";

describe("escapeControls", () => {
  it("shows ESC, CR, LF and TAB as short escapes, other C0 controls and DEL as \\xNN", () => {
    expect(escapeControls(`a${ESC}]52;c;ZXZpbA==\u0007b`)).toBe("a\\e]52;c;ZXZpbA==\\x07b");
    expect(escapeControls("1\r2\n3\t4")).toBe("1\\r2\\n3\\t4");
    expect(escapeControls("\u0000\u0008\u001f\u007f")).toBe("\\x00\\x08\\x1f\\x7f");
  });

  it("escapes C1 controls (a single-byte CSI) and every bidi mark, embedding, override and isolate", () => {
    expect(escapeControls("x\u009b2Ky\u0080\u009f")).toBe("x\\x9b2Ky\\x80\\x9f");
    expect(escapeControls("\u061c\u200e\u200f\u202a\u202e\u2066\u2069")).toBe("\\u061c\\u200e\\u200f\\u202a\\u202e\\u2066\\u2069");
  });

  it("leaves printable text alone, accents, CJK and emoji included", () => {
    const text = "order 42 — café 東京 🚀 ~!@#$%^&*()";
    expect(escapeControls(text)).toBe(text);
    expect(escapeControls("")).toBe("");
    expect(escapeControls("\u00a0\u200d")).toBe("\u00a0\u200d"); // no-break space and ZWJ are not controls
  });
});

describe("formatAge", () => {
  it("850ms, 12s, 3m05s, 2h03m, 4d02h; - for none", () => {
    expect([null, undefined, Number.NaN, Number.POSITIVE_INFINITY].map(formatAge)).toEqual(["-", "-", "-", "-"]);
    expect(formatAge(849.6)).toBe("850ms");
    expect(formatAge(-5)).toBe("0ms");
    expect(formatAge(999)).toBe("999ms");
    expect(formatAge(12_999)).toBe("12s");
    expect(formatAge(185_000)).toBe("3m05s");
    expect(formatAge(2 * 3_600_000 + 3 * 60_000)).toBe("2h03m");
    expect(formatAge(47 * 3_600_000 + 59 * 60_000)).toBe("47h59m");
    expect(formatAge(98 * 3_600_000)).toBe("4d02h");
  });
});

describe("the CLI's cuts", () => {
  it("truncate: one line, whitespace collapsed, escaped before the cut so a cut never splits an escape's meaning", () => {
    expect(truncate("a\n\n  b\tc", 20)).toBe("a b c");
    expect(truncate("abcdef", 4)).toBe("abc…");
    expect(truncate("abcd", 4)).toBe("abcd");
    expect(truncate(`${ESC}[2K`, 3)).toBe("\\e…"); // the ESC is text before the cut
    expect(truncate("abc", 0)).toBe("…");
  });

  it("clip: keeps spacing, escapes, then cuts", () => {
    expect(clip("a  b", 10)).toBe("a  b");
    expect(clip("a\rb", 10)).toBe("a\\rb");
    expect(clip("a\rbcdef", 4)).toBe("a\\r…");
  });

  it("forTerminal keeps paint()'s colours and line breaks and escapes every other control", () => {
    const red = paint(true, "red", "dead");
    expect(forTerminal(`${red}\nkey ${ESC}]0;pwn\u0007`)).toBe(`${red}\nkey \\e]0;pwn\\x07`);
    expect(visible(red)).toBe("dead");
    expect(paint(false, "red", "dead")).toBe("dead");
  });

  it("table aligns numeric columns right (their header too), truncates the last column to maxLast", () => {
    const out = table(["id", "error"], [["1", "short"], ["200", "x".repeat(30)]], { maxLast: 10 });
    expect(out.split("\n")).toEqual([" id  error", "  1  short", "200  xxxxxxxxx…"]);
  });
});

describe("the CLI's masks and parsers", () => {
  it("maskUrl hides the password and password parameters, also in a string that is not a URL", () => {
    expect(maskUrl("postgres://u:secret@h:5432/db?sslpassword=x&a=1")).toBe("postgres://u:***@h:5432/db?sslpassword=***&a=1");
    expect(maskUrl("postgres://u@h/db")).toBe("postgres://u@h/db");
    expect(maskUrl("not a url //u:secret@h password=hunter2")).toBe("not a url //u:***@h password=***");
  });

  it("scrub removes given secrets and any connection string's password", () => {
    expect(scrub("failed for hunter2 at postgresql://app:pw@db/x", ["hunter2", undefined, "ab"])).toBe("failed for *** at postgresql://app:***@db/x");
  });

  it("parseDuration reads ms, s, m, h, d and plain milliseconds; null when unreadable", () => {
    expect(["250ms", "90s", "5m", "2h", "1d", "1500", " 1.5s "].map(parseDuration)).toEqual([250, 90_000, 300_000, 7_200_000, 86_400_000, 1_500, 1_500]);
    expect(["", "5 minutes", "-1s", "1w", "s"].map(parseDuration)).toEqual([null, null, null, null, null]);
  });

  it("bar and sparkline clamp and scale", () => {
    expect(bar(0.5, 4)).toBe("[##  ]");
    expect(bar(2, 4)).toBe("[####]");
    expect(bar(Number.NaN, 4)).toBe("[    ]");
    expect(sparkline([])).toBe("-");
    expect(sparkline([0, 0])).toBe("▁▁");
    expect(sparkline([3, 3])).toBe("██"); // scaled from 0, not from the minimum
    expect(sparkline([0, 7])).toBe("▁█");
  });
});
