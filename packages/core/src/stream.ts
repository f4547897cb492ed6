// A stream handle: the public face of producing (produce/), inspecting (operator/), maintaining
// and destroying one stream. Every call is an edge: a connection failure leaves it coded (atEdge).
import type { Runtime } from "./runtime.js";
import type { StreamOptions } from "./config.js";
import { Consumer } from "./consumer.js";
import { atEdge } from "./db.js";
import { type Transactional, toExecutor } from "./executor.js";
import { type InspectTarget, type InspectedMessage, inspectMessages } from "./operator/inspect.js";
import { type MaintainOptions, type MaintainReport, maintainStream } from "./maintain/maintain.js";
import { type DestroyStreamResult, destroyStream } from "./destroy.js";
import { PartitionUpkeep } from "./produce/partitions.js";
import { type BatchItem, type ProduceOptions, type ProduceResult, prepare, prepareBatch, typedItems, typedPayload } from "./produce/prepare.js";
import { type ProduceTarget, produceMany, produceManyInTx, produceOne, produceOneInTx } from "./produce/produce.js";
import { registerStream } from "./produce/register.js";
import { type CancelledScheduled, cancelScheduled } from "./produce/scheduled.js";
import type { StandardSchema } from "./typed.js";
import { validateGroupName } from "./validate.js";

export type { BatchItem, ProduceOptions, ProduceResult, ScheduleOptions } from "./produce/prepare.js";
export type { CancelledScheduled, ScheduledMessage } from "./produce/scheduled.js";

export class Stream<T = unknown> {
  private readonly target: ProduceTarget;

  constructor(
    private readonly client: Runtime,
    readonly name: string,
    /** A typed stream's schema (docs/guide/producing.md#typed-streams): payloads are checked on produce and on consume. */
    readonly schema?: StandardSchema<T>,
  ) {
    this.target = { client, name, partitions: new PartitionUpkeep(client.db) };
  }

  /** Creates the stream_config row and the table family; on an existing stream replaces its settings. */
  register(opts: StreamOptions = {}): Promise<void> {
    return atEdge(`register() of stream ${this.name}`, () => registerStream(this.client, this.name, opts));
  }

  consumer(group: string): Consumer<T> {
    return new Consumer<T>(this.client, this.name, validateGroupName(group), this.schema);
  }

  /** Appends one message in its own transaction. */
  produce(payload: T, opts: ProduceOptions = {}): Promise<ProduceResult> {
    return atEdge(`produce() of stream ${this.name}`, async () => {
      const p = prepare(this.schema ? await typedPayload(this.schema, this.name, payload) : payload, opts, true);
      return produceOne(this.target, p);
    });
  }

  /** Appends up to 1000 messages in one transaction, all or nothing; ids ascend in item order. */
  produceBatch(items: BatchItem<T>[]): Promise<ProduceResult[]> {
    return atEdge(`produceBatch() of stream ${this.name}`, async () => {
      const prepared = prepareBatch(this.schema ? await typedItems(this.schema, this.name, items) : items);
      return prepared.length === 0 ? [] : produceMany(this.target, prepared);
    });
  }

  /**
   * Appends one message inside the caller's open transaction: a pg client after BEGIN, a
   * postgres.js or Prisma transaction, or any TxExecutor (docs/guide/producing.md#producing-inside-your-transaction).
   * It becomes visible when the caller commits; a failed insert rolls back to a savepoint only.
   */
  produceInTx(tx: Transactional, payload: T, opts: ProduceOptions = {}): Promise<ProduceResult> {
    return atEdge(`produceInTx() of stream ${this.name}`, async () => {
      const ex = toExecutor(tx, "produceInTx");
      const p = prepare(this.schema ? await typedPayload(this.schema, this.name, payload) : payload, opts, true);
      return produceOneInTx(this.target, ex, p);
    });
  }

  /**
   * Appends up to 1000 messages inside the caller's open transaction, like produceInTx; all of
   * them commit or roll back with it. Ids ascend in item order.
   */
  produceBatchInTx(tx: Transactional, items: BatchItem<T>[]): Promise<ProduceResult[]> {
    return atEdge(`produceBatchInTx() of stream ${this.name}`, async () => {
      const ex = toExecutor(tx, "produceBatchInTx");
      const prepared = prepareBatch(this.schema ? await typedItems(this.schema, this.name, items) : items);
      return prepared.length === 0 ? [] : produceManyInTx(this.target, ex, prepared);
    });
  }

  /**
   * Cancels a message that waits for its due time (docs/guide/producing.md#scheduled-delivery), by the
   * scheduled id produce returned with `scheduled: true`: no group will see it. SQL0071 when none
   * with that id waits (delivered or cancelled already, or never issued).
   */
  cancelScheduled(id: string | number | bigint): Promise<CancelledScheduled> {
    return atEdge(`cancelScheduled() of stream ${this.name}`, () => cancelScheduled(this.client, this.name, id));
  }

  /** Runs maintenance for this stream. */
  maintain(opts: MaintainOptions = {}): Promise<MaintainReport> {
    return atEdge(`maintain() of stream ${this.name}`, async () => {
      await this.client.ready();
      return maintainStream(this.client, this.name, opts);
    });
  }

  /**
   * One message (by id) or a key's latest messages, each with where it stands in every consumer
   * group and its delivery-log timeline (docs/guide/operations.md#inspect). SQL0058 when there is none.
   */
  inspect(target: InspectTarget): Promise<InspectedMessage<T>[]> {
    return atEdge(`inspect() of stream ${this.name}`, () => inspectMessages<T>(this.client, this.name, target));
  }

  /** Drops the stream and its whole table family; refused while it holds messages or groups unless forced. */
  destroy(opts: { force?: boolean } = {}): Promise<DestroyStreamResult> {
    return atEdge(`destroy() of stream ${this.name}`, async () => {
      const r = await destroyStream(this.client, this.name, opts);
      this.client.forgetStream(this.name);
      return r;
    });
  }
}
