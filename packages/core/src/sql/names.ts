// Table names. The only place a per-stream name is formed: from the quoted, validated schema and
// the numeric stream id, never from a user string.
/** Every table of a stream's family (each named <table>_N; message_log_N has partitions). */
export const FAMILY_TABLES = [
  "message_log",
  "exception_queue",
  "delivery_log",
  "consumer_group_cursor",
  "claim_lease",
  "message_key_lease",
  "compaction_head",
  "idempotency_key",
  "progress_history",
  "scheduled_message",
] as const;
export type FamilyTable = (typeof FAMILY_TABLES)[number];

/** The quoted schema, the names a control-plane statement builds its text from. */
export interface SchemaNames {
  /** The quoted schema. */
  schema: string;
}

const schemas = new Map<string, SchemaNames>();

/** The names of the control plane of quoted schema `q`, one object per schema. */
export function schemaNames(q: string): SchemaNames {
  let s = schemas.get(q);
  if (!s) {
    s = { schema: q };
    schemas.set(q, s);
  }
  return s;
}

/** The quoted names of one stream's tables and functions (docs/protocol/data-model.md#names), built once per (schema, stream id). */
export interface Tables extends SchemaNames {
  /** message_log_N (partitioned by id). */
  messageLog: string;
  exceptionQueue: string;
  deliveryLog: string;
  groupCursor: string;
  claimLease: string;
  keyLease: string;
  compactionHead: string;
  /** scheduled_message_N: messages waiting for their due time (docs/protocol/data-model.md#scheduled-messages). */
  scheduledMessage: string;
  progressHistory: string;
  idempotencyKey: string;
  fn: (name: string) => string;
}

const cache = new Map<string, Tables>();

/** The table names of one stream, built once per (schema, stream id). */
export function tables(q: string, n: string): Tables {
  const k = `${q}.${n}`;
  let t = cache.get(k);
  if (!t) {
    t = {
      schema: q,
      messageLog: table(q, n, "message_log"),
      exceptionQueue: table(q, n, "exception_queue"),
      deliveryLog: table(q, n, "delivery_log"),
      groupCursor: table(q, n, "consumer_group_cursor"),
      claimLease: table(q, n, "claim_lease"),
      keyLease: table(q, n, "message_key_lease"),
      compactionHead: table(q, n, "compaction_head"),
      scheduledMessage: table(q, n, "scheduled_message"),
      progressHistory: table(q, n, "progress_history"),
      idempotencyKey: table(q, n, "idempotency_key"),
      fn: (name) => table(q, n, name),
    };
    cache.set(k, t);
  }
  return t;
}

export function streamIdText(id: string | number | bigint): string {
  const s = String(id);
  if (!/^[1-9][0-9]{0,18}$/.test(s)) throw new Error(`invalid stream id ${s}`);
  return s;
}

/** "schema".table_N */
export function table(q: string, streamId: string, t: FamilyTable | string): string {
  return `${q}.${t}_${streamIdText(streamId)}`;
}

export function partitionName(q: string, streamId: string, k: bigint | number): string {
  const ks = String(k);
  if (!/^[0-9]{1,19}$/.test(ks)) throw new Error(`invalid partition index ${ks}`);
  return `${table(q, streamId, "message_log")}_${ks}`;
}

export function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}
