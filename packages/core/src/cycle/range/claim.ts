// A fresh claim (docs/protocol/poll-cycle.md#the-fence): claim_N and the read of the range it leased, in
// one round trip and one transaction, answered as a ClaimAnswer (sql/claim.ts); asked again a few
// times while the fence holds it; found again after a lost reply instead of claiming twice.
import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import type { ClaimParams, RecordParams } from "../../sql/cycle.js";
import * as statements from "../../sql/cycle.js";
import { type ClaimAnswer, type ClaimedRange, type FenceHolder, decodeClaim } from "../../sql/claim.js";
import { type PollContext, aborted, leaseParams, rangeLeaseCap, rateLimited, timeoutParams } from "../context.js";
import { type MonotonicMs, now } from "../../clock.js";
import { fenceEvents } from "../fence-warning.js";

/** A range a claim leased, under its token, and when the claim was sent (monotonic ms). */
export interface Claimed {
  token: string;
  sentAt: MonotonicMs;
  range: ClaimedRange;
}

/** Pauses before asking the fence again while older write transactions are still open. */
const FENCE_WAITS_MS = [5, 10, 20, 40, 80, 160, 320, 400];

const NO_RECORD: RecordParams = { recordToken: null, recordExceptions: null, recordDeliveries: null, recordKeys: null };

/**
 * claim_N's parameters: after the load its head and observation, else null (up to the last proven
 * head). `own`: the range leases this poll still holds while it claims (a claim ahead).
 */
export function claimParams<T>(
  ctx: PollContext<T>, token: string, from: { head: string; obs: string } | null, rec: RecordParams | null, pastDue: boolean,
  own: string[] = [],
): ClaimParams {
  return {
    groupId: ctx.groupId, batchLimit: ctx.options.batchLimit, head: from?.head ?? null, observation: from?.obs ?? null, token,
    ...timeoutParams(ctx), ...leaseParams(ctx, rangeLeaseCap(ctx)), batchBytes: ctx.options.batchBytes, ...(rec ?? NO_RECORD), pastDue, own,
    rate: ctx.rate,
  };
}

/**
 * claim_N and the read of the range it leased, in one round trip and one transaction
 * (docs/protocol/poll-cycle.md#the-claims-answer). A repeat after a lost reply first looks for the lease the
 * lost attempt took (ownClaim).
 */
export async function sendClaim<T>(ctx: PollContext<T>, p: ClaimParams): Promise<{ answer: ClaimAnswer; retried: boolean }> {
  let read: statements.ClaimedMessageRow[] = [];
  const readParams = { groupId: ctx.groupId, token: p.token, batchLimit: p.batchLimit };
  const sent = await statements.claim.retryOrRecover(ctx.db, ctx.tables, p, () => ownClaim(ctx, p.token), (r) => decodeClaim(r.rows, read), {
    text: statements.claimRead.sql(ctx.tables),
    values: statements.claimRead.values(readParams),
    join: (claim, messages) => {
      read = messages.rows as statements.ClaimedMessageRow[];
      return claim;
    },
  });
  if (sent.answer.rateLimitedMs !== null) rateLimited(ctx, sent.answer.rateLimitedMs);
  return sent;
}

/** The claim after a load, asked again a few times while the fence holds it. */
export async function freshClaim<T>(ctx: PollContext<T>, load: { head: string; obs: string }): Promise<{ claim: Claimed | null; fenceBlocked: boolean }> {
  const token = randomUUID();
  let sentAt: MonotonicMs;
  let answer: ClaimAnswer;
  for (let wait = 0; ; wait++) {
    sentAt = now();
    ({ answer } = await sendClaim(ctx, claimParams(ctx, token, load, null, false)));
    // No range with a non-idle observation means the fence could not prove the head yet: a
    // transaction of this stream's producers is still open (docs/protocol/poll-cycle.md#the-fence). They
    // are usually milliseconds from committing, so ask again a few times before giving up.
    if (answer.range !== null || answer.rateLimitedMs !== null || wait >= FENCE_WAITS_MS.length || ctx.stop || aborted(ctx)) break;
    if (ctx.options.deadline !== undefined && ctx.options.deadline - now() < ctx.options.recordMargin + FENCE_WAITS_MS[wait]) break;
    await sleep(FENCE_WAITS_MS[wait]);
  }
  // A rate-limited claim that left nothing: the tokens, not the fence, held it back.
  if (answer.range === null && answer.rateLimitedMs !== null) return { claim: null, fenceBlocked: false };
  if (answer.range === null) {
    warnFenceHolders(ctx, answer.fenceHolders);
    return { claim: null, fenceBlocked: true };
  }
  return { claim: { token, sentAt, range: answer.range }, fenceBlocked: false };
}

/** The claim sent ahead without a record: it claims up to the stream's last proven head. */
export async function claimAhead<T>(ctx: PollContext<T>, own: string[]): Promise<Claimed | null> {
  const token = randomUUID();
  const sentAt = now();
  const { answer } = await sendClaim(ctx, claimParams(ctx, token, null, null, false, own));
  return answer.range === null ? null : { token, sentAt, range: answer.range };
}

/**
 * Before a claim is repeated after a lost reply: if the first attempt committed, its lease is
 * there under this poll's token; answer as the claim would have (the range's messages, with what
 * is left of the lease) instead of claiming a second range (docs/protocol/crash-recovery.md#unknown-commits).
 * A claim that also recorded the previous range committed that record with it.
 */
async function ownClaim<T>(ctx: PollContext<T>, token: string): Promise<ClaimAnswer | null> {
  // One attempt each: this runs inside the claim's own retries, which try it again after their
  // next pause (retrying here too would multiply the time a poll waits out an outage).
  const { db, tables: t } = ctx;
  const own = await statements.leaseByToken.query(db, db.pool, t, { groupId: ctx.groupId, token });
  if (own.rowCount === 0) return null;
  const { low, high, left_ms } = own.rows[0];
  const msgs = (await statements.readRange.query(db, db.pool, t, { low, high })).rows;
  return { record: null, range: { low, high, leaseMs: left_ms, msgs: msgs.map((m) => ({ ...m, payload: JSON.stringify(m.payload) })) }, fenceHolders: [], rateLimitedMs: null };
}

/** SQL0043: what to say about the holders a blocked claim reported is decided in fence-warning.ts. */
export function warnFenceHolders<T>(ctx: PollContext<T>, holders: readonly FenceHolder[]): void {
  for (const { event, collapse } of fenceEvents(holders, ctx.stream, ctx.group)) ctx.db.events.emit(event, collapse);
}
