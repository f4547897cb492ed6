// Typed streams (docs/guide/producing.md#typed-streams): a stream's name and payload type declared once,
// optionally with a runtime schema from any validator implementing Standard Schema v1 (zod,
// valibot, arktype, ...). Producers check payloads against it before anything is written
// (SQL0067); consumers check each delivered payload before the handler runs and record a
// mismatch as Permanent (SQL0068), so the handler sees only payloads of the declared type.
import { SqlStreamsError } from "./errors.js";
import { validateStreamName } from "./validate.js";

/** One problem a validator found. */
export interface SchemaIssue {
  readonly message: string;
  readonly path?: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }> | undefined;
}

type SchemaResult<O> = { readonly value: O; readonly issues?: undefined } | { readonly issues: ReadonlyArray<SchemaIssue> };

/** The part of the Standard Schema v1 interface this library uses (its `~standard` property). */
export interface StandardSchema<Output = unknown> {
  readonly "~standard": {
    readonly version: 1;
    readonly vendor: string;
    readonly validate: (value: unknown) => SchemaResult<Output> | Promise<SchemaResult<Output>>;
  };
}

/** A stream declared once: its name, its payload type, and optionally a runtime schema. */
export interface StreamDef<T = unknown> {
  readonly name: string;
  readonly schema?: StandardSchema<T>;
  /** Carries T for type inference only; never set. */
  readonly payloadType?: T;
}

/** The payload type of a StreamDef. */
export type PayloadOf<D> = D extends StreamDef<infer T> ? T : never;

/**
 * Declares a stream for producers and handlers to share:
 * `defineStream<OrderPlaced>("orders.placed")`, or with a schema whose output type becomes the
 * payload type: `defineStream("orders.placed", { schema: z.object({ ... }) })`.
 */
export function defineStream<T>(name: string, opts: { schema?: StandardSchema<T> } = {}): StreamDef<T> {
  validateStreamName(name);
  const schema = opts.schema;
  if (schema !== undefined && typeof schema?.["~standard"]?.validate !== "function") {
    throw new SqlStreamsError("SQL0015", `defineStream(${JSON.stringify(name)}): schema must implement Standard Schema v1 (a "~standard".validate function)`, {
      path: "schema",
    });
  }
  return Object.freeze(schema ? { name, schema } : { name });
}

function pathText(issue: SchemaIssue): string {
  if (!issue.path || issue.path.length === 0) return "payload";
  let out = "payload";
  for (const seg of issue.path) {
    const k = typeof seg === "object" && seg !== null ? seg.key : seg;
    out += typeof k === "number" ? `[${k}]` : `.${String(k)}`;
  }
  return out;
}

/** The issues as one line: "payload.total: Expected number; payload.id: Required". */
function describeIssues(issues: ReadonlyArray<SchemaIssue>): string {
  const shown = issues.slice(0, 5).map((i) => `${pathText(i)}: ${i.message}`);
  if (issues.length > 5) shown.push(`and ${issues.length - 5} more`);
  return shown.join("; ");
}

/** The coded error for a payload the schema refused: SQL0067 when produced, SQL0068 when consumed. */
export function schemaMismatch(
  schema: StandardSchema<unknown>,
  issues: ReadonlyArray<SchemaIssue>,
  what: { stream: string; id?: string; item?: number },
): SqlStreamsError {
  const code = what.id !== undefined ? "SQL0068" : "SQL0067";
  const where = what.id !== undefined ? `message ${what.id} of ${what.stream}` : what.item !== undefined ? `items[${what.item}] for ${what.stream}` : `payload for ${what.stream}`;
  return new SqlStreamsError(code, `${where} does not match the stream's schema (${schema["~standard"].vendor}): ${describeIssues(issues)}`, {
    stream: what.stream,
    issues: issues.map((i) => ({ path: pathText(i), message: i.message })),
  });
}

/** Checks a payload before it is produced; returns the schema's output, which is what is stored. */
export async function checkProduced<T>(schema: StandardSchema<T>, value: unknown, what: { stream: string; item?: number }): Promise<T> {
  let r = schema["~standard"].validate(value);
  if (r instanceof Promise) r = await r;
  if (r.issues !== undefined) throw schemaMismatch(schema as StandardSchema<unknown>, r.issues, what);
  return r.value;
}
