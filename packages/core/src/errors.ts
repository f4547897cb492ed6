/** Every error the library raises carries one of these codes (docs/guide/errors.md#error-codes). */
export const ERROR_CODES = {
  SQL0001: { kind: "error", meaning: "invalid client configuration, or a malformed connection string", fix: "pass exactly one of connectionString (a postgres:// URL) and pool; schema must match ^[a-z_][a-z0-9_]{0,62}$" },
  SQL0002: { kind: "error", meaning: "the client was closed", fix: "create a new client" },
  SQL0003: { kind: "error", meaning: "control plane missing or older than this library needs", fix: "run client.migrate() or `sqlstreams migrate`" },
  SQL0004: { kind: "error", meaning: "database schema is newer than this library understands", fix: "upgrade @sqlstreams/*" },
  SQL0005: { kind: "error", meaning: "the role lacks a privilege needed to create or drop tables", fix: "run migrate/register as the owner, or grant CREATE" },
  SQL0006: { kind: "error", meaning: "stream name does not match ^[a-z0-9][a-z0-9._-]{0,199}$", fix: "use lower-case letters, digits, '.', '_', '-'" },
  SQL0007: { kind: "error", meaning: "name starts with the reserved prefix __system.", fix: "choose another name" },
  SQL0008: { kind: "error", meaning: "group name does not match ^[a-z0-9][a-z0-9._-]{0,199}$", fix: "use lower-case letters, digits, '.', '_', '-'" },
  SQL0009: { kind: "error", meaning: "stream is not registered", fix: "call stream.register() first" },
  SQL0010: { kind: "error", meaning: "consumer group is not registered", fix: "call consumer.register() first" },
  SQL0011: { kind: "error", meaning: "partitionSize differs from the existing stream", fix: "omit it or use the stored value" },
  SQL0012: { kind: "error", meaning: "invalid stream option", fix: "use the documented ranges of the stream options" },
  SQL0013: { kind: "error", meaning: "invalid option value or unknown key in message options or group config", fix: "use the documented ranges of the group configuration" },
  SQL0014: { kind: "error", meaning: "inconsistent bounds", fix: "make messageMin <= message <= messageMax, maxDelay >= baseDelay, and keep concurrency out of messageMin/messageMax" },
  SQL0015: { kind: "error", meaning: "invalid call argument", fix: "correct the argument as the message says" },
  SQL0016: { kind: "error", meaning: "payload cannot be stored as JSON losslessly (BigInt, cycle, non-finite number, U+0000, lone surrogate, Map/Set/typed array, nesting deeper than 1000)", fix: "convert the value at the named path to plain JSON" },
  SQL0017: { kind: "error", meaning: "payload larger than the stream's maxPayloadBytes", fix: "store large data elsewhere and send a reference, or raise maxPayloadBytes" },
  SQL0018: { kind: "error", meaning: "invalid key or idempotencyKey", fix: "pass a non-empty, well-formed string (no U+0000, no lone UTF-16 surrogate) of at most 1024 UTF-8 bytes" },
  SQL0019: { kind: "error", meaning: "exclusive or ordered requested without a key", fix: "add a key or use parallel" },
  SQL0020: { kind: "error", meaning: "compaction without a key, or a rank that is not a safe integer", fix: "add a key; use an integer rank" },
  SQL0021: { kind: "error", meaning: "ordered requested together with compaction", fix: "use exclusive, or drop compaction" },
  SQL0022: { kind: "error", meaning: "the partition for the next id is missing and could not be created now", fix: "retry; run maintain(); check DDL rights" },
  SQL0023: { kind: "error", meaning: "partition creation cannot keep up with the id sequence after retries", fix: "run maintain(); check locks on the stream" },
  SQL0024: { kind: "error", meaning: "connection lost during COMMIT; the produce may or may not have committed", fix: "retry with an idempotencyKey" },
  SQL0025: { kind: "outcome", meaning: "Delay: run the message again later (also the delay-limit text)", fix: "none; raise maxDelays if the limit was hit" },
  SQL0026: { kind: "outcome", meaning: "Permanent: the message cannot succeed; recorded dead", fix: "fix the cause, then redrive()" },
  SQL0027: { kind: "recorded", meaning: "handler exceeded its timeout", fix: "raise timeout or make the handler honour msg.signal" },
  SQL0028: { kind: "error", meaning: "seek() refused: the group has open leases", fix: "pause and wait for leases to end, or pass force" },
  SQL0029: { kind: "error", meaning: "seek() target below 0 or above the visible head", fix: "choose a position inside the log" },
  SQL0030: { kind: "error", meaning: "invalid redrive() selector", fix: "pass ids, or a filter with a criterion or all: true" },
  SQL0031: { kind: "error", meaning: "invocation event names a stream/group not declared for the deployment", fix: "fix the schedule payload or the group declaration" },
  SQL0032: { kind: "error", meaning: "database credentials unavailable, or rejected by the database", fix: "set SQLSTREAMS_DB_SECRET_ARN or DATABASE_URL (or the client's connectionString) to a user and password the database accepts; check the secret JSON" },
  SQL0033: { kind: "error", meaning: "database unavailable: unreachable, missing, refusing new connections, or failing during a call, a poll or maintenance after retries", fix: "nothing is lost; check that the database is running, reachable and exists; the next invocation resumes" },
  SQL0034: { kind: "event", meaning: "a lease was lost (another poll took the range, row or key over); outcomes discarded", fix: "keep handlers inside their timeout; lower batchLimit" },
  SQL0035: { kind: "event", meaning: "an expired range was reclaimed after a crash", fix: "look for crashes or timeouts of the function" },
  SQL0036: { kind: "event", meaning: "a range was quarantined into exception rows", fix: "find the message that crashes the process" },
  SQL0037: { kind: "event", meaning: "a message became dead", fix: "inspect with failures(); redrive() after the fix" },
  SQL0038: { kind: "event", meaning: "kill backstop: a crash-looping row was made dead", fix: "find the message that crashes the process" },
  SQL0039: { kind: "event", meaning: "produced options were clamped to the group's bounds", fix: "align producer requests with messageMin/messageMax" },
  SQL0040: { kind: "event", meaning: "messages not started because of the deadline or an abort", fix: "lower the timeout or lengthen the function timeout" },
  SQL0041: { kind: "event", meaning: "partition upkeep: create-ahead failed, a missing partition was recovered, or a drop was skipped on a lock timeout or deadlock (retried on the next run)", fix: "check DDL rights and long transactions" },
  SQL0042: { kind: "error", meaning: "destroy refused: the group or stream still has live work", fix: "pause and let the work finish, or pass force" },
  SQL0043: { kind: "event", meaning: "a producer transaction of this stream has held the fence for seconds: claims wait for it to end", fix: "commit or roll back the named backend's transaction; keep produceInTx transactions short" },
  SQL0044: { kind: "event", meaning: "a reply to a COMMIT was lost and the library cannot tell whether that write committed", fix: "none needed: if it did not commit, the work runs again (at-least-once); look for network faults between the function and the database" },
  SQL0045: { kind: "error", meaning: "invalid batchBytes", fix: "pass an integer number of bytes between 1024 and 1073741824 (default 16777216)" },
  SQL0047: { kind: "event", meaning: "a handler ignored msg.signal past its timeout and was abandoned; its key stays held (in this process, and by a renewed key lease) until it settles", fix: "make the handler honour msg.signal, or raise the timeout" },
  SQL0048: { kind: "event", meaning: "an abandoned run is still unsettled at 10 × its timeout (or its key lease was lost): the key lease is no longer renewed, so another process may start the key once it expires", fix: "make the handler honour msg.signal; find the call that hangs" },
  SQL0050: { kind: "error", meaning: "the database did not answer within the statement's time bound (the poll's deadline or statementTimeout); the connection was discarded", fix: "nothing is lost (leases expire and the next poll resumes); check the database, pooler and network; a produce's outcome is unknown (SQL0024)" },
  SQL0051: { kind: "error", meaning: "invalid statementTimeout", fix: "pass an integer number of ms between 100 and 3600000" },
  SQL0058: { kind: "error", meaning: "no message with that id or key in the stream (never produced, or already removed by retention)", fix: "check the id or key with `sqlstreams failures` or the producer's result" },
  SQL0059: { kind: "error", meaning: "invalid discard() selector", fix: "pass ids, or a filter with a criterion or all: true" },
  SQL0060: { kind: "error", meaning: "the dashboard would listen beyond loopback without a token", fix: "set SQLSTREAMS_DASHBOARD_TOKEN or --token-file (at least 32 characters) and put TLS in front, or bind to 127.0.0.1" },
  SQL0061: { kind: "error", meaning: "dashboard action refused: read-only mode, or the request failed the cross-site check", fix: "start the dashboard without --read-only; submit actions from the dashboard's own pages" },
  SQL0090: { kind: "error", meaning: "the dashboard refused a request: a Host header that is not one of its names (DNS rebinding guard), a method other than GET/HEAD/POST, or a parameter it cannot take (U+0000, an id beyond bigint, a value Postgres rejects)", fix: "open the dashboard by the URL it printed (behind a proxy or another name, list that name with --allow-host); correct the parameter the message names" },
  SQL0091: { kind: "error", meaning: "invalid dashboard option: a token shorter than 32 characters or given on the command line, a --host that is neither an IP literal nor a resolvable name, or a flag with an unreadable value", fix: "put a token of at least 32 random characters in SQLSTREAMS_DASHBOARD_TOKEN or a file (--token-file); read-write takes exactly 1/true/yes or 0/false/no" },
  SQL0062: { kind: "error", meaning: "the payload or options given to `sqlstreams produce` are not valid JSON", fix: "pass one JSON document as the argument, with --file PATH, or on stdin" },
  SQL0067: { kind: "error", meaning: "a produced payload does not match the stream's schema (defineStream)", fix: "produce a payload the schema accepts; the message names each issue's path" },
  SQL0068: { kind: "recorded", meaning: "a consumed payload does not match the stream's schema; recorded dead (Permanent) without running the handler", fix: "fix the producer or the schema, then redrive()" },
  SQL0080: { kind: "recorded", meaning: "a batch handler returned a result that is not one entry per message (wrong length, not an array, or an entry that is not undefined, an Outcome or an Error); the messages it covers fail (retryable)", fix: "return nothing when all succeeded, or an array as long as the batch with undefined, Delay(ms), Permanent(reason) or an Error per message" },
  SQL0063: { kind: "error", meaning: "invalid wake-on-produce option (waker, wakeWindow), or wake() called on a client without a waker", fix: "pass a waker object with a wake({ stream, group }) function and a wakeWindow in ms between 100 and 600000" },
  SQL0064: { kind: "warning", meaning: "a wake after a produce failed (claiming it in Postgres, or the waker threw); the produce itself committed", fix: "nothing is lost: the group's schedule picks the message up; check the waker's permissions and network path (e.g. lambda:InvokeFunction)" },
  SQL0065: { kind: "error", meaning: "the Lambda waker has no function for a group, or SQLSTREAMS_WAKE_FUNCTIONS is not a JSON object of \"stream/group\": function name", fix: "link the producer to the SqlStreams component (link: [streams]) or pass functions to createLambdaWaker" },
  SQL0071: { kind: "error", meaning: "cancelScheduled(id): no scheduled message with that id is waiting: it was delivered (moved to the log at its due time) or cancelled already, or the id was never issued by this stream", fix: "pass the scheduled id that produce returned with scheduled: true; once delivered, a message is handled like any other (discard() its failures)" },
  SQL0070: { kind: "error", meaning: "`sqlstreams dev` or `doctor` cannot load the app's group declaration (--groups) or a handler it names", fix: "pass --groups with the .ts, .mts, .js or .mjs file that exports your `groups` array, and run the command in the app's root: each group's `function` (e.g. src/handlers/orders.handler) is a file path from there plus the handler's export name" },
  SQL0095: { kind: "error", meaning: "the database role may not do this: produce to a stream it was not granted (SQL produce), or grant, revoke or set up roles without being the schema's owner", fix: "the schema owner runs SELECT sqlstreams.grant_produce(role, stream) (or `sqlstreams grant-produce ROLE STREAM`); grant, revoke and set up roles as the owner" },
  SQL0096: { kind: "error", meaning: "a role named for a grant or the role setup does not exist or cannot take that part, or the role setup (SQLSTREAMS_DB_ROLES) is invalid", fix: "create it first (CREATE ROLE name LOGIN), pass the exact, case-sensitive name, and keep the worker and reader apart from the schema owner" },
} as const;

export type ErrorCode = keyof typeof ERROR_CODES;

/** The one error type of the library: a stable code, what was wrong, and how to fix it. */
export class SqlStreamsError extends Error {
  override readonly name = "SqlStreamsError";
  readonly code: ErrorCode;
  readonly fix: string;
  readonly details: Record<string, unknown>;

  constructor(code: ErrorCode, message: string, details: Record<string, unknown> = {}, cause?: unknown) {
    const fix = ERROR_CODES[code].fix;
    super(`${code} ${message} (fix: ${fix})`, cause === undefined ? undefined : { cause });
    this.code = code;
    this.fix = fix;
    this.details = details;
  }
}

export function isSqlStreamsError(e: unknown, code?: ErrorCode): e is SqlStreamsError {
  return e instanceof SqlStreamsError && (code === undefined || e.code === code);
}

/** SQL0010 for a group that is not registered on its stream. */
export function groupNotRegistered(stream: string, group: string): SqlStreamsError {
  return new SqlStreamsError("SQL0010", `consumer group ${JSON.stringify(group)} is not registered on stream ${stream}`, { stream, group });
}
