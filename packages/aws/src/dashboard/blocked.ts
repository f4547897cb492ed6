// The group page's blocked keys (docs/guide/operations.md#blocked-keys): the ordered keys waiting
// behind an unresolved earlier message, each linked to its blocking message.
import type { BlockedKey } from "@sqlstreams/core";
import { age, esc, table } from "./html.js";

/** How many keys the group page lists. */
export const BLOCKED_ON_PAGE = 20;

/** The section; `messageHref` links a message id to its page. */
export function blockedSection(keys: BlockedKey[], total: number, messageHref: (id: string) => string): string {
  const now = Date.now();
  const rows = keys.map((k) => [
    esc(k.key),
    `<a href="${esc(messageHref(k.blockingId))}">${esc(k.blockingId)}</a>`,
    `<span class="warn">${esc(k.status)}</span>`,
    String(k.attempts),
    esc(`${age(now - k.since.getTime())} ago`),
    k.runsAfter === null ? "running" : esc(k.runsAfter.getTime() > now ? `in ${age(k.runsAfter.getTime() - now)}` : "now"),
    String(k.waiting),
  ]);
  const shown = total > keys.length ? ` (the oldest ${keys.length} of ${total})` : "";
  return `<section aria-labelledby="blocked-h"><h2 id="blocked-h">Blocked keys</h2>
${table(`Keys waiting behind an unresolved earlier message${shown}`, ["Key", { text: "Blocked by", num: true }, "Status", { text: "Attempts", num: true }, "Since", "Runs again", { text: "Waiting", num: true }], rows)}</section>`;
}
