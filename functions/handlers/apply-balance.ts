// Consumer group `apply-balance` of stream `ledger.adjustments` (ordered per account key): applies
// each adjustment to the account's balance through the ledger service (LEDGER_URL), in order,
// with the adjustment id as idempotency key, so a redelivered message is applied once.
import { Delay, Permanent, type Message, type Outcome } from "@sqlstreams/core";
import { createPollHandler } from "@sqlstreams/aws";
import { groups } from "../groups.js";
import { ledgerAdjustments } from "../streams.js";

export interface BalanceAdjustment {
  adjustmentId: string;
  accountId: string;
  /** Signed amount in minor units. */
  amountCents: number;
  reason: string;
}

export function isAdjustment(p: unknown): p is BalanceAdjustment {
  const a = p as Partial<BalanceAdjustment> | null;
  return (
    typeof a === "object" && a !== null &&
    typeof a.adjustmentId === "string" && a.adjustmentId.length > 0 &&
    typeof a.accountId === "string" && a.accountId.length > 0 &&
    Number.isSafeInteger(a.amountCents) && a.amountCents !== 0 &&
    typeof a.reason === "string"
  );
}

/** The message handler: bad input is dead at once; a locked account waits; outages retry. */
export async function handle(msg: Message<BalanceAdjustment>): Promise<void | Outcome> {
  const adj = msg.payload;
  if (!isAdjustment(adj)) throw Permanent(new Error(`message ${msg.id} is not a BalanceAdjustment`));
  if (msg.key !== null && msg.key !== adj.accountId) {
    throw Permanent(new Error(`message ${msg.id}: key ${msg.key} is not the account ${adj.accountId}`));
  }
  const ledgerUrl = process.env.LEDGER_URL;
  if (ledgerUrl) {
    const res = await fetch(`${ledgerUrl.replace(/\/$/, "")}/accounts/${encodeURIComponent(adj.accountId)}/adjustments`, {
      method: "POST",
      headers: { "content-type": "application/json", "idempotency-key": adj.adjustmentId },
      body: JSON.stringify({ amountCents: adj.amountCents, reason: adj.reason }),
      signal: msg.signal,
    });
    // The account is locked (e.g. an audit): try again in 30 s without spending a retry.
    if (res.status === 423) return Delay(30_000);
    if (res.status === 409 || res.status === 422) {
      throw Permanent(new Error(`ledger refused adjustment ${adj.adjustmentId}: HTTP ${res.status}`));
    }
    if (!res.ok) throw new Error(`ledger unavailable: HTTP ${res.status}`);
  }
  console.log(JSON.stringify({ level: "info", event: "ledger.applied", messageId: msg.id, accountId: adj.accountId, adjustmentId: adj.adjustmentId, amountCents: adj.amountCents }));
}

export const handler = createPollHandler({ stream: ledgerAdjustments, group: "apply-balance", handle, groups });
