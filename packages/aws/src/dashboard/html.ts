// HTML building blocks of the dashboard: escaping, the page frame, tables and forms. Every value
// that reaches a page goes through esc() (docs/guide/operations.md#dashboard).
import { createHash } from "node:crypto";

export function esc(v: unknown): string {
  return String(v ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c] as string);
}

/** 850ms, 12s, 3m05s, 2h03m, 4d02h; "-" for none (one implementation, in @sqlstreams/core). */
export { formatAge as age } from "@sqlstreams/core/internal";

const STYLE = `
:root { color-scheme: light; --fg: #1a1a1a; --muted: #555; --line: #d0d0d0; --bg: #fff; --accent: #0b57d0; --bad: #a50e0e; --warn: #7a4b00; --ok: #146c2e; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg); margin: 0; }
header { background: #202124; color: #fff; padding: .6rem 1.2rem; display: flex; gap: 1.5rem; align-items: baseline; }
header a { color: #fff; font-weight: 600; text-decoration: none; }
header .mode { color: #fbbc04; font-size: .9rem; }
main { padding: 1rem 1.2rem 3rem; max-width: 1400px; }
a { color: var(--accent); }
a:focus, button:focus, input:focus, select:focus, summary:focus { outline: 3px solid #fbbc04; outline-offset: 2px; }
.skip { position: absolute; left: -999px; } .skip:focus { left: 1rem; top: .5rem; background: #fff; color: #000; padding: .3rem; z-index: 2; }
table { border-collapse: collapse; width: 100%; margin: .5rem 0 1.5rem; }
caption { text-align: left; font-weight: 600; padding: .3rem 0; }
th, td { border-bottom: 1px solid var(--line); padding: .35rem .5rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.bad { color: var(--bad); font-weight: 600; } .warn { color: var(--warn); font-weight: 600; } .ok { color: var(--ok); }
.muted { color: var(--muted); }
pre { min-width: 12rem; background: #f6f8fa; padding: .5rem; overflow: auto; max-height: 20rem; white-space: pre-wrap; word-break: break-word; margin: 0; }
form.inline { display: inline; }
fieldset { border: 1px solid var(--line); padding: .6rem .8rem; margin: 0 0 1rem; }
label { margin-right: .8rem; } input, select { font: inherit; padding: .15rem .3rem; }
button { font: inherit; padding: .2rem .7rem; border: 1px solid #444; background: #f8f8f8; border-radius: 3px; cursor: pointer; }
button.danger { border-color: var(--bad); color: var(--bad); }
.flash { background: #e6f4ea; border: 1px solid #9fd3ad; padding: .5rem .8rem; margin-bottom: 1rem; }
.error { background: #fce8e6; border: 1px solid #f1a8a2; padding: .5rem .8rem; margin-bottom: 1rem; }
.err { max-width: 36rem; }
`;

// The only script: optional auto-refresh of read-only views, remembered per browser.
const SCRIPT = `
(function () {
  var box = document.getElementById("autorefresh");
  if (!box) return;
  box.checked = localStorage.getItem("sqlstreams.autorefresh") === "1";
  var timer = null;
  function arm() { clearTimeout(timer); if (box.checked) timer = setTimeout(function () { location.reload(); }, 5000); }
  box.addEventListener("change", function () { localStorage.setItem("sqlstreams.autorefresh", box.checked ? "1" : "0"); arm(); });
  arm();
})();
`;

/** The CSP source of SCRIPT: the one script the pages run, and no other (no inline handlers). */
export const SCRIPT_HASH = `sha256-${createHash("sha256").update(SCRIPT).digest("base64")}`;

export interface PageOptions {
  title: string;
  base: string;
  readOnly: boolean;
  flash?: string | null;
  error?: string | null;
  refresh?: boolean;
}

export function page(o: PageOptions, body: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(o.title)} · SQLStreams</title><style>${STYLE}</style></head>
<body><a class="skip" href="#main">Skip to content</a>
<header><a href="${esc(o.base)}/">SQLStreams</a><span>${esc(o.title)}</span>${o.readOnly ? '<span class="mode" role="status">read-only</span>' : ""}
${o.refresh ? '<label style="margin-left:auto"><input type="checkbox" id="autorefresh"> refresh every 5 s</label>' : ""}</header>
<main id="main">
${o.flash ? `<p class="flash" role="status">${esc(o.flash)}</p>` : ""}${o.error ? `<p class="error" role="alert">${esc(o.error)}</p>` : ""}
${body}
</main><script>${SCRIPT}</script></body></html>`;
}

export function table(caption: string, headers: (string | { text: string; num?: boolean })[], rows: string[][], numeric: boolean[] = []): string {
  const th = headers
    .map((h, i) => {
      const text = typeof h === "string" ? h : h.text;
      const num = (typeof h !== "string" && h.num) || numeric[i];
      return `<th scope="col"${num ? ' class="num"' : ""}>${esc(text)}</th>`;
    })
    .join("");
  const body = rows.length === 0
    ? `<tr><td colspan="${headers.length}" class="muted">none</td></tr>`
    : rows.map((r) => `<tr>${r.map((c, i) => `<td${(typeof headers[i] !== "string" && (headers[i] as { num?: boolean }).num) || numeric[i] ? ' class="num"' : ""}>${c}</td>`).join("")}</tr>`).join("\n");
  return `<table><caption>${esc(caption)}</caption><thead><tr>${th}</tr></thead><tbody>${body}</tbody></table>`;
}

/** A POST form with the CSRF token and hidden fields; `label` is the button's text. */
export function postForm(action: string, csrf: string, fields: Record<string, string | undefined>, label: string, opts: { danger?: boolean; ariaLabel?: string } = {}): string {
  const hidden = Object.entries(fields)
    .filter(([, v]) => v !== undefined && v !== "")
    .map(([k, v]) => `<input type="hidden" name="${esc(k)}" value="${esc(v)}">`)
    .join("");
  return `<form class="inline" method="post" action="${esc(action)}"><input type="hidden" name="csrf" value="${esc(csrf)}">${hidden}<button type="submit"${opts.danger ? ' class="danger"' : ""}${opts.ariaLabel ? ` aria-label="${esc(opts.ariaLabel)}"` : ""}>${esc(label)}</button></form>`;
}
