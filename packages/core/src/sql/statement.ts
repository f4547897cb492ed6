// One statement, defined once: its parameters by name, its row type beside its SQL. The SQL text
// names each parameter (`${p.groupId}`), which becomes its positional placeholder ($1, $2, …) in
// the order the parameter list gives; the text is built once per names object: a stream's table
// names (Tables), or the schema's alone (SchemaNames) for a statement of the control plane.
import type pg from "pg";
import { type Db, type Queryable, type RetryState, type Then, query, queryRetry } from "../db.js";
import type { SchemaNames, Tables } from "./names.js";

/** A bare pg pool or client. */
export type PlainQueryable = Pick<pg.Pool, "query"> | Pick<pg.ClientBase, "query">;

/** The placeholders of a statement's parameters, by name: `${p.token}` in the SQL reads "$5". */
export type Placeholders<P> = { readonly [K in keyof P]-?: string };

export interface Statement<P, R extends pg.QueryResultRow, N extends SchemaNames = Tables> {
  /** The parameter names in placeholder order ($1 first). */
  readonly params: readonly (keyof P & string)[];
  /** The statement's text for one stream's tables, or the schema's names (built once per names object). */
  sql(t: N): string;
  /** The positional values of named parameters. */
  values(p: P): unknown[];
  /** Sends it on `on` (a transaction's connection, or the pool). */
  query(db: Db, on: Queryable, t: N, p: P): Promise<pg.QueryResult<R>>;
  /** Sends it on a bare pg pool or client, outside a Db (the CLI's diagnostics before a client exists): no events, no retry. */
  queryPlain(on: PlainQueryable, t: N, p: P): Promise<pg.QueryResult<R>>;
  /**
   * Sends it on the pool, repeating transient failures (queryRetry). A `state.recover` that
   * changes `p` changes what the repeat sends.
   */
  retry(db: Db, t: N, p: P, state?: RetryState, then?: Then): Promise<pg.QueryResult<R>>;
  /**
   * Like retry, with a recovery that answers in the caller's terms: before a repeat, `recover`
   * may find the work of an attempt whose reply was lost and return the answer to use instead
   * (null: repeat). Otherwise the statement's result is decoded by `decode`.
   */
  retryOrRecover<A>(
    db: Db, t: N, p: P, recover: () => Promise<A | null>, decode: (r: pg.QueryResult<R>) => A, then?: Then,
  ): Promise<{ answer: A; retried: boolean }>;
}

/** What a recovery hands queryRetry so it stops repeating; the answer itself travels beside it. */
const RECOVERED: pg.QueryResult = Object.freeze({ command: "SELECT", rowCount: 0, oid: 0, fields: [], rows: [] });

/**
 * Defines a statement with named parameters `params` (in placeholder order) and rows of type R.
 * Every name must appear in `params`; the text is checked to use each placeholder it was given.
 */
export function defineStatement<P, R extends pg.QueryResultRow = Record<string, never>, N extends SchemaNames = Tables>(
  params: readonly (keyof P & string)[],
  text: (t: N, p: Placeholders<P>) => string,
): Statement<P, R, N> {
  const placeholders = Object.fromEntries(params.map((name, i) => [name, `$${i + 1}`])) as Placeholders<P>;
  const built = new WeakMap<N, string>();
  const sql = (t: N): string => {
    let s = built.get(t);
    if (s === undefined) {
      s = text(t, placeholders);
      checkPlaceholders(s, params);
      built.set(t, s);
    }
    return s;
  };
  const values = (p: P): unknown[] => params.map((name) => p[name]);
  const retry = async (db: Db, t: N, p: P, state?: RetryState, then?: Then): Promise<pg.QueryResult<R>> => {
    const sent = values(p);
    const recover = state?.recover;
    if (state === undefined || recover === undefined) return queryRetry<R>(db, sql(t), sent, state, then);
    // The repeat sends the parameters as the recovery left them.
    const inner: RetryState = {
      retried: false,
      recover: async () => {
        const found = await recover();
        sent.splice(0, sent.length, ...values(p));
        return found;
      },
    };
    try {
      return await queryRetry<R>(db, sql(t), sent, inner, then);
    } finally {
      state.retried ||= inner.retried;
    }
  };
  return {
    params,
    sql,
    values,
    query: (db, on, t, p) => query<R>(db, on, sql(t), values(p)),
    queryPlain: (on, t, p) => on.query<R>(sql(t), values(p)),
    retry,
    async retryOrRecover(db, t, p, recover, decode, then) {
      let found: Awaited<ReturnType<typeof recover>> = null;
      const state: RetryState = {
        retried: false,
        recover: async () => {
          found = await recover();
          return found === null ? null : RECOVERED;
        },
      };
      const r = await retry(db, t, p, state, then);
      return { answer: found ?? decode(r), retried: state.retried };
    },
  };
}

/** A parameter the text never uses is a mistake in its definition: thrown when the text is first built. */
function checkPlaceholders(text: string, params: readonly string[]): void {
  params.forEach((name, i) => {
    if (!new RegExp(`\\$${i + 1}(?![0-9])`).test(text)) throw new Error(`statement parameter ${name} ($${i + 1}) is not used by its text`);
  });
}

/** The row type of a statement. */
export type RowOf<S> = S extends Statement<unknown, infer R, never> ? R : never;
/** The parameters of a statement. */
export type ParamsOf<S> = S extends Statement<infer P, pg.QueryResultRow, never> ? P : never;
