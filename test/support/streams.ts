// Shared helpers for scenario tests: a client whose events are captured, and table readers.
import pg from "pg";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, expect } from "vitest";
import {
  SqlStreams, SqlStreamsError, type ConsumerConfig, type Consumer, type CycleReport, type Handler, type LogEvent, type PollOptions, type Progress, type StreamOptions,
} from "@sqlstreams/core";

export interface TestClient {
  client: SqlStreams;
  events: LogEvent[];
  statements: string[];
  /**
   * Round trips sent on the pool's connections (each call of a connection's `query`, whatever it
   * carries: one statement, or a claim with the read of its range behind it).
   */
  roundTrips: number;
  pool: pg.Pool;
  sql<R extends pg.QueryResultRow = Record<string, unknown>>(text: string, values?: unknown[]): Promise<R[]>;
}

/** A client on its own pool, capturing log events and statement texts; closed after the file. */
export function testClient(url: string, opts: { schema?: string } = {}): TestClient {
  const events: LogEvent[] = [];
  const statements: string[] = [];
  const pool = new pg.Pool({ connectionString: url, max: 8 });
  pool.on("connect", (c) => {
    const send = c.query.bind(c) as (...a: unknown[]) => unknown;
    (c as unknown as { query: (...a: unknown[]) => unknown }).query = (...a: unknown[]) => {
      t.roundTrips++;
      return send(...a);
    };
  });
  const client = new SqlStreams({
    pool,
    schema: opts.schema,
    logger: (e) => events.push(e),
    onQuery: (text) => statements.push(text),
  });
  const t: TestClient = {
    client,
    events,
    statements,
    roundTrips: 0,
    pool,
    async sql(text, values) {
      return (await pool.query(text, values)).rows;
    },
  };
  afterAll(async () => {
    await client.close();
    await pool.end();
  });
  return t;
}

/** The schema the test clients use (the library's default). */
export const SCHEMA = "sqlstreams";

/**
 * Runs body while another transaction holds what `lock` takes (rows FOR UPDATE, a table it
 * reads), as a slow reader or a concurrent writer would; rolls that transaction back afterwards.
 */
export async function whileHeld<T>(t: TestClient, lock: string, body: () => Promise<T>): Promise<T> {
  const c = await t.pool.connect();
  try {
    await c.query("BEGIN");
    await c.query(lock);
    return await body();
  } finally {
    await c.query("ROLLBACK");
    c.release();
  }
}

/** Cursor row of a group, as strings. */
export async function cursor(t: TestClient, n: number | string, groupId: number | string) {
  const r = await t.sql<{ claimed: string; committed: string; settled_head: string; pending_head: string; pending_xid: string | null }>(
    `SELECT claimed::text, committed::text, settled_head::text, pending_head::text, pending_xid::text FROM ${SCHEMA}.consumer_group_cursor_${n} WHERE consumer_group_id = $1`,
    [groupId],
  );
  return r[0];
}

/** A group's id; pass the stream name when several streams have a group of that name. */
export async function groupIdOf(t: TestClient, name: string, stream?: string): Promise<string> {
  const r = await t.sql<{ id: string }>(
    `SELECT g.id::text FROM ${SCHEMA}.consumer_group_config g JOIN ${SCHEMA}.stream_config s ON s.id = g.stream_id
      WHERE g.name = $1 AND ($2::text IS NULL OR s.name = $2) ORDER BY g.id`,
    [name, stream ?? null],
  );
  if (r.length !== 1) throw new Error(`groupIdOf(${name}${stream ? `, ${stream}` : ""}) matched ${r.length} groups: pass the stream name`);
  return r[0].id;
}

export async function streamIdOf(t: TestClient, name: string): Promise<string> {
  const r = await t.sql<{ id: string }>(`SELECT id::text FROM ${SCHEMA}.stream_config WHERE name = $1`, [name]);
  return r[0].id;
}

/** The tables a stream owns; each is named by the stream's id (docs/protocol/data-model.md#the-stream-family). */
export type StreamTable = "message_log" | "exception_queue" | "delivery_log" | "claim_lease" | "message_key_lease" | "consumer_group_cursor";

/** A stream's table, schema-qualified, by the stream's id: table("3", "exception_queue") is sqlstreams.exception_queue_3. */
export const table = (n: number | string, name: StreamTable): string => `${SCHEMA}.${name}_${n}`;

export async function count(t: TestClient, table: string, where = "TRUE", values: unknown[] = []): Promise<number> {
  const r = await t.sql<{ n: number }>(`SELECT count(*)::int AS n FROM ${SCHEMA}.${table} WHERE ${where}`, values);
  return r[0].n;
}

/** Exception rows of a group keyed by message id. */
export async function exceptionRows(t: TestClient, n: number | string, groupId: string) {
  return t.sql<{
    message_id: string; status: string; message_key: string | null; concurrency: string; attempts: number; delays: number;
    last_error: string | null; lease_token: string | null; gap_ms: number; can_run_after: Date; updated_at: Date;
  }>(
    `SELECT message_id::text, status, message_key, concurrency, attempts, delays, last_error, lease_token::text,
            (EXTRACT(EPOCH FROM (can_run_after - updated_at)) * 1000)::float8 AS gap_ms, can_run_after, updated_at
       FROM ${SCHEMA}.exception_queue_${n} e WHERE consumer_group_id = $1 ORDER BY e.message_id`,
    [groupId],
  );
}

export async function deliveryLogRows(t: TestClient, n: number | string, groupId: string, messageId?: string) {
  return t.sql<{ message_id: string; attempt: number; status: string; error: string }>(
    `SELECT message_id::text, attempt, status, error FROM ${SCHEMA}.delivery_log_${n}
      WHERE consumer_group_id = $1 AND ($2::bigint IS NULL OR message_id = $2::bigint) ORDER BY ${SCHEMA}.delivery_log_${n}.id`,
    [groupId, messageId ?? null],
  );
}

/** Makes every due-later exception row due now (instead of waiting for backoff). */
export async function makeDue(t: TestClient, n: number | string): Promise<void> {
  await t.sql(`UPDATE ${SCHEMA}.exception_queue_${n} SET can_run_after = now() - interval '1 millisecond' WHERE status = 'ready'`);
}

/** Expires every lease of a stream (range, row and key leases). */
export async function expireLeases(t: TestClient, n: number | string): Promise<void> {
  await t.sql(`UPDATE ${SCHEMA}.claim_lease_${n} SET expires_at = now() - interval '1 millisecond'`);
  await t.sql(`UPDATE ${SCHEMA}.exception_queue_${n} SET lease_expires_at = now() - interval '1 millisecond' WHERE lease_token IS NOT NULL`);
  await t.sql(`UPDATE ${SCHEMA}.message_key_lease_${n} SET expires_at = now() - interval '1 millisecond'`);
}

/** The partition numbers of a stream's message_log_N, ascending. */
export async function partitions(t: TestClient, n: string): Promise<number[]> {
  const r = await t.sql<{ name: string }>(
    `SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
      WHERE i.inhparent = to_regclass($1)`,
    [`${SCHEMA}.message_log_${n}`],
  );
  return r.map((x) => Number(x.name.slice(`message_log_${n}_`.length))).sort((a, b) => a - b);
}

/**
 * Creates partitions 0..last up front, so that batches never hit a missing partition (a failed
 * insert burns sequence values and the ids the test expects would shift).
 */
export async function precreate(t: TestClient, n: string, size: number, last: number): Promise<void> {
  for (let k = 0; k <= last; k++) {
    await t.sql(
      `CREATE TABLE IF NOT EXISTS ${SCHEMA}.message_log_${n}_${k} PARTITION OF ${SCHEMA}.message_log_${n} FOR VALUES FROM (${k * size}) TO (${(k + 1) * size})`,
    );
  }
}

/** The integers a..b inclusive. */
export const range = (a: number, b: number) => Array.from({ length: b - a + 1 }, (_, i) => a + i);

export interface SetupOptions {
  stream?: StreamOptions;
  group?: ConsumerConfig;
  /** The group's name; "g" unless given. */
  groupName?: string;
}

/** Migrates, registers the stream and one group, and looks up their ids. */
export async function setupGroup(t: TestClient, stream: string, opts: SetupOptions = {}) {
  await t.client.migrate();
  const s = t.client.stream(stream);
  await s.register(opts.stream);
  const name = opts.groupName ?? "g";
  const g = s.consumer(name);
  await g.register(opts.group);
  const sid = await streamIdOf(t, stream);
  const gid = await groupIdOf(t, name, stream);
  return { t, s, g, sid, gid };
}

/** A stream with one group "g" registered with `config`, and messages { i: 1..k } produced one at a time. */
export async function setupProduced(t: TestClient, name: string, config: Record<string, unknown>, k: number) {
  const s = t.client.stream<{ i: number }>(name);
  await s.register();
  const g = s.consumer("g");
  await g.register(config);
  for (let i = 1; i <= k; i++) await s.produce({ i });
  return { s, g, n: await streamIdOf(t, name), gid: await groupIdOf(t, "g", name) };
}

/** What pollPastFence() waits for, asked after every call with that call's report. */
export type Until = (report: CycleReport, g: Pick<Consumer, "progress">) => boolean | Promise<boolean>;

/** The call took a range (claimed, reclaimed, resumed or quarantined one). */
export const tookRange: Until = (r) => r.rangesClaimed + r.rangesReclaimed + r.rangesResumed + r.rangesQuarantined > 0;

/** The call was not idle (it took a range or ran exception work). */
export const didWork: Until = (r) => !r.idle;

/** The group's progress() satisfies `holds`. */
export const progressIs = (holds: (p: Progress) => boolean): Until => async (_r, g) => holds(await g.progress());

/** The group's committed id is `c`. */
export const committed = (c: string): Until => progressIs((p) => p.committed === c);

export interface PastFence {
  /** What must hold after a call; tookRange unless given. */
  until?: Until;
  /** The options of every call; a function when they depend on when the call starts (a deadline). */
  opts?: PollOptions | (() => PollOptions);
  /** drain() instead of poll(). */
  drain?: boolean;
}

/**
 * The one "poll until past the fence" of the tests: calls g.poll(handler) (g.drain with `drain`)
 * until `until` holds after a call, pausing 10 ms between calls, and returns the report of the
 * call after which it held; throws after 30 s. tookRange by default: "the first delivery".
 *
 * Why tests need it: the snapshot fence (docs/protocol/poll-cycle.md#the-fence) proves a fresh head only once
 * every older write transaction of the server has ended, and the server is shared with other test
 * files, so the poll right after a produce may legitimately claim nothing (drain() then returns
 * early too). Such a call delivers nothing; it stores at most the pending pair that the next call
 * proves, so repeating it does not change what a scenario asserts about its tables. With a
 * progress predicate (committed(), progressIs()) it also waits out retries that come due later.
 */
export async function pollPastFence<T>(g: Consumer<T>, handler: Handler<T>, how: PastFence = {}): Promise<CycleReport> {
  const until = how.until ?? tookRange;
  const opts = typeof how.opts === "function" ? how.opts : () => (how.opts ?? {}) as PollOptions;
  const end = Date.now() + 30_000;
  for (;;) {
    const r = how.drain ? await g.drain(handler, opts()) : await g.poll(handler, opts());
    if (await until(r, g)) return r;
    if (Date.now() > end) throw new Error(`group ${g.name}: not past the fence within 30 s; last report ${JSON.stringify(r)}`);
    await sleep(10);
  }
}

/**
 * The SqlStreamsError that a call or promise throws; fails the test when it throws nothing or
 * something else, or when the message lacks its code or its fix. Tests of the sources (not dist)
 * pass the sources' class as `type`.
 */
export async function codedError(p: Promise<unknown> | (() => unknown), type: new (...args: never[]) => SqlStreamsError = SqlStreamsError): Promise<SqlStreamsError> {
  try {
    await (typeof p === "function" ? p() : p);
  } catch (e) {
    expect(e).toBeInstanceOf(type);
    const err = e as SqlStreamsError;
    expect(err.code, err.message).toMatch(/^SQL[0-9]{4}$/);
    expect(err.message).toContain(err.code);
    expect(err.message).toContain("fix:");
    return err;
  }
  throw new Error("expected a SqlStreamsError");
}

/** The code of codedError(p). */
export const codeOf = async (p: Promise<unknown> | (() => unknown)): Promise<string> => (await codedError(p)).code;

/** A promise that a test opens: a handler awaits it to stay running while the test looks. */
export interface Latch {
  promise: Promise<void>;
  open(): void;
}

export function latch(): Latch {
  let open!: () => void;
  const promise = new Promise<void>((r) => (open = r));
  return { promise, open };
}
