// A consumer group handle: the public face of consuming (cycle/: poll and drain) and of the
// operator calls on the group (operator/). Every call is an edge: a connection failure leaves it
// coded (atEdge).
import type { Runtime } from "./runtime.js";
import { type BatchPollOptions, type ConsumerConfig, type PollOptions, validateBatchPollOptions, validatePollOptions } from "./config.js";
import { type BatchHandler, DEFAULT_MAX_BATCH, batched } from "./cycle/batch.js";
import { drainGroup } from "./cycle/drain.js";
import { pollOnce } from "./cycle/poll.js";
import type { CycleReport, Handler, Message } from "./cycle/types.js";
import { atEdge } from "./db.js";
import { type DestroyGroupResult, destroyGroup } from "./destroy.js";
import { SqlStreamsError } from "./errors.js";
import { type GroupRef, registerGroup } from "./operator/group.js";
import * as Reads from "./operator/reads.js";
import type {
  BatchOptions, BlockedKey, DeadSelector, FailureFilter, FailureRow, Progress, ProgressSample, RedriveSelector, SeekTarget,
} from "./operator/types.js";
import * as Writes from "./operator/writes.js";
import { tracedHandler, tracedPoll } from "./otel.js";
import { Permanent } from "./outcome.js";
import { type SchemaIssue, type StandardSchema, schemaMismatch } from "./typed.js";
import { releaseWake } from "./wake.js";
import { monotonicOptions } from "./clock.js";

export type {
  BatchOptions, BlockedKey, DeadSelector, ExceptionStatus, FailureFilter, FailureRow, Progress, ProgressSample, RedriveSelector, SeekTarget,
} from "./operator/types.js";

export class Consumer<T = unknown> {
  private readonly ref: GroupRef;

  constructor(
    private readonly client: Runtime,
    readonly stream: string,
    readonly name: string,
    private readonly schema?: StandardSchema<T>,
  ) {
    this.ref = { client, stream, group: name };
  }

  /** "drain() of orders/billing": names the call in a connection failure. */
  private call(method: string): string {
    return `${method}() of ${this.stream}/${this.name}`;
  }

  /**
   * With a typed stream's schema, the handler sees only payloads that pass it, as the schema's
   * output; a payload that fails is Permanent with SQL0068 (docs/guide/producing.md#typed-streams).
   */
  private checked(handler: Handler<T>): Handler<T> {
    const schema = this.schema;
    if (!schema) return handler;
    const stream = this.stream;
    const fail = (msg: Message<T>, issues: ReadonlyArray<SchemaIssue>) =>
      Permanent(schemaMismatch(schema as StandardSchema<unknown>, issues, { stream, id: msg.id }));
    return (msg) => {
      const r = schema["~standard"].validate(msg.payload);
      const go = (res: Awaited<typeof r>) => {
        if (res.issues !== undefined) return fail(msg, res.issues);
        msg.payload = res.value;
        return handler(msg);
      };
      return r instanceof Promise ? r.then(go) : go(r);
    };
  }

  /** The handler as the cycle runs it: checked against the schema, traced; SQL0015 when it is not a function. */
  private runnable(handler: Handler<T>): Handler<T> {
    if (typeof handler !== "function") throw new SqlStreamsError("SQL0015", "handler must be a function (msg) => …");
    return tracedHandler(this.checked(handler), this.stream, this.name);
  }

  /** Creates the group or replaces its config as a whole; the cursor is created once and never moved here. */
  register(config: ConsumerConfig = {}): Promise<void> {
    return atEdge(this.call("register"), () => registerGroup(this.ref, config));
  }

  /**
   * The group's poller is idle: releases its wake so the next produce wakes it again, and returns
   * true when a produce asked for another drain meanwhile (docs/guide/producing.md#wake-on-produce).
   * Pollers that can be woken call it after an idle drain, and drain again when it returns true.
   */
  releaseWake(): Promise<boolean> {
    return atEdge(this.call("releaseWake"), async () => {
      await this.client.ready();
      return releaseWake(this.client.db, this.stream, this.name);
    });
  }

  /** One bounded claim cycle (docs/protocol/poll-cycle.md). */
  poll(handler: Handler<T>, opts: PollOptions = {}): Promise<CycleReport> {
    return atEdge(this.call("poll"), async () => {
      const h = this.runnable(handler);
      const o = monotonicOptions(validatePollOptions(opts));
      return tracedPoll(this.stream, this.name, () => pollOnce(this.client, this.stream, this.name, h, o));
    });
  }

  /** Repeats poll() until the group is idle or paused, the signal aborts, or the deadline is near. */
  drain(handler: Handler<T>, opts: PollOptions = {}): Promise<CycleReport> {
    return atEdge(this.call("drain"), async () => {
      const h = this.runnable(handler);
      const o = monotonicOptions(validatePollOptions(opts));
      return drainGroup(this.client, this.stream, this.name, h, o, opts.batchLimit !== undefined);
    });
  }

  /**
   * poll() with a batch handler (docs/guide/consuming.md#batch-handlers): the messages the poll
   * starts together, up to `maxBatch` (default 100) a call; each keeps its own outcome.
   */
  pollBatch(handler: BatchHandler<T>, opts: BatchPollOptions = {}): Promise<CycleReport> {
    return atEdge(this.call("pollBatch"), async () => {
      const { h, options } = this.batchRunnable(handler, opts);
      const o = monotonicOptions(options);
      return tracedPoll(this.stream, this.name, () => pollOnce(this.client, this.stream, this.name, h, o));
    });
  }

  /** drain() with a batch handler (docs/guide/consuming.md#batch-handlers). */
  drainBatch(handler: BatchHandler<T>, opts: BatchPollOptions = {}): Promise<CycleReport> {
    return atEdge(this.call("drainBatch"), async () => {
      const { h, options, batchLimitGiven } = this.batchRunnable(handler, opts);
      const o = monotonicOptions(options);
      return drainGroup(this.client, this.stream, this.name, h, o, batchLimitGiven, o.batchLimit);
    });
  }

  /** The batch handler as the per-message handler the cycle runs, and the validated options. */
  private batchRunnable(handler: BatchHandler<T>, opts: BatchPollOptions) {
    if (typeof handler !== "function") throw new SqlStreamsError("SQL0015", "handler must be a function (messages) => …");
    const v = validateBatchPollOptions(opts, DEFAULT_MAX_BATCH);
    return { h: this.runnable(batched(handler, v.maxBatch)), options: v.options, batchLimitGiven: v.batchLimitGiven };
  }

  progress(): Promise<Progress> {
    return atEdge(this.call("progress"), () => Reads.progress(this.ref));
  }

  /**
   * The group's progress samples written by maintain() (docs/protocol/data-model.md#progress-history),
   * oldest first: the newest `limit` (default 288, one day of 5-minute runs) since `since`.
   */
  history(opts: { since?: Date | string | number; limit?: number } = {}): Promise<ProgressSample[]> {
    return atEdge(this.call("history"), () => Reads.history(this.ref, opts));
  }

  failures(opts: FailureFilter = {}): Promise<FailureRow<T>[]> {
    return atEdge(this.call("failures"), () => Reads.failures<T>(this.ref, opts));
  }

  /**
   * How many rows failures() with the same filter would page through; with `cap`, counting stops
   * at cap + 1 rows (an answer above cap means "more than cap"), so a large backlog costs no more.
   */
  countFailures(opts: Omit<FailureFilter, "limit" | "offset" | "after" | "beforeCursor"> = {}, cap?: number): Promise<number> {
    return atEdge(this.call("countFailures"), () => Reads.countFailures(this.ref, opts, cap));
  }

  /**
   * The keys whose next message waits behind an unresolved earlier one (a retry in backoff, a
   * Delay, a run in flight), oldest block first, at most `limit` (default 100)
   * (docs/guide/operations.md#blocked-keys).
   */
  blockedKeys(opts: { limit?: number } = {}): Promise<BlockedKey[]> {
    return atEdge(this.call("blockedKeys"), () => Reads.blockedKeys(this.ref, opts));
  }

  /** While paused, every poll returns at once with paused: true and writes nothing. */
  pause(): Promise<void> {
    return atEdge(this.call("pause"), () => Writes.setPaused(this.ref, true));
  }

  resume(): Promise<void> {
    return atEdge(this.call("resume"), () => Writes.setPaused(this.ref, false));
  }

  /**
   * Moves the group's position (docs/guide/operations.md#seek): the next delivered message is the first existing id
   * ≥ `to.id`, or the first created at or after `to.time`. Refused while leases are open unless forced.
   */
  seek(to: SeekTarget, opts: { force?: boolean } = {}): Promise<{ claimed: string; committed: string; previous: { claimed: string; committed: string }; deletedRows: number }> {
    return atEdge(this.call("seek"), () => Writes.seek(this.ref, to, opts));
  }

  /**
   * Puts dead rows back to work with a fresh budget (docs/guide/operations.md#redrive); with `rate`, in
   * small paced transactions that can be stopped and run again (redriven rows are no longer dead).
   */
  redrive(selector: RedriveSelector, opts: BatchOptions = {}): Promise<{ redriven: number; skipped: number; batches?: number }> {
    return atEdge(this.call("redrive"), () => Writes.redrive(this.ref, selector, opts));
  }

  /**
   * Throws dead rows away (docs/guide/operations.md#discarding-dead-messages): each row is deleted and a
   * `discarded: <reason>` row is written to the delivery log, whatever its mode, as the audit trail.
   * The message stays in the log (retention removes it); the group will not run it again.
   */
  discard(selector: DeadSelector, opts: BatchOptions = {}): Promise<{ discarded: number; skipped: number; batches?: number }> {
    return atEdge(this.call("discard"), () => Writes.discard(this.ref, selector, opts));
  }

  /** Deletes the group with its cursor and rows; refused while it has live work unless forced. */
  destroy(opts: { force?: boolean } = {}): Promise<DestroyGroupResult> {
    return atEdge(this.call("destroy"), () => destroyGroup(this.client, this.stream, this.name, opts));
  }
}
