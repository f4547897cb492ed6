// The `sqlstreams` command: argument parsing (node:util parseArgs), help, dispatch, and the one
// place where errors become "error SQLnnnn: … / fix: …" and exit code 1.
import { parseArgs, type ParseArgsConfig } from "node:util";
import { LIBRARY_VERSION } from "@sqlstreams/core";
import * as Commands from "./commands.js";
import * as Operate from "./operate.js";
import * as RoleCommands from "./roles.js";
import { CommandContext, type Common, type Io, processIo } from "./context.js";
import { describeError, formatError, usageError } from "./errors.js";

type Options = NonNullable<ParseArgsConfig["options"]>;

interface Command {
  summary: string;
  usage: string;
  help: string;
  options: Options;
  /** How many positional arguments it takes (default none). */
  positionals?: number;
  /** Returns the exit code (default 0). */
  run(ctx: CommandContext, values: Commands.Values, positionals: string[]): Promise<number | void>;
}

const COMMON: Options = {
  "database-url": { type: "string" },
  schema: { type: "string" },
  json: { type: "boolean" },
  verbose: { type: "boolean" },
  help: { type: "boolean", short: "h" },
};

const COMMON_HELP = `Common options:
  --database-url URL   Postgres connection string (default: env DATABASE_URL)
  --schema NAME        schema of the SQLStreams tables (default: env SQLSTREAMS_SCHEMA, else sqlstreams)
  --json               machine-readable output (one JSON document on stdout)
  --verbose            also print the library's info events (JSON lines on stderr)
  -h, --help           show this help`;

const STREAM = { stream: { type: "string" as const } };
const GROUP = { group: { type: "string" as const } };

export const COMMANDS: Record<string, Command> = {
  migrate: {
    summary: "create or upgrade the control plane (idempotent, safe to race)",
    usage: "sqlstreams migrate",
    help: "Creates the schema's control plane tables, or upgrades them, and every stream's table family.",
    options: {},
    run: (ctx) => Commands.migrate(ctx),
  },
  status: {
    summary: "progress of consumer groups: head, committed, lag, leases, exceptions",
    usage: "sqlstreams status [--stream S] [--group G] [--watch [--interval 2s]] [--check] [--max-age 5m] | --history [--since 1d] [--samples 48]",
    help: `Shows every consumer group (or those of --stream / named --group): head, committed cursor, lag
(in ids), open/expired claim leases, exception rows by status (ready, deferred, inflight, dead,
superseded, expired: messages not started before their expiresAt/ttl), the age of the oldest unresolved message, and whether the group is paused.
Lag 0 with dead rows is not success: dead messages do not hold the cursor.
  --watch              refresh the table every --interval (default 2s) until Ctrl-C; with --json one
                       JSON line per refresh
  --iterations N       with --watch, stop after N refreshes
  --check              for alerting: exit code 2 when any group has dead messages
  --max-age DURATION   for alerting: exit code 2 when any group has dead messages or its oldest
                       unresolved message is older than DURATION (90s, 5m, 2h, 1d); implies --check
  --history            lag, throughput and dead rows over time as sparklines, from the samples
                       maintain() writes (kept 7 days); --since DURATION limits them to that
                       window, --samples N to the newest N (default 48)
Exit codes: 0 fine, 1 the command failed, 2 an alert (only with --check / --max-age).`,
    options: {
      ...STREAM, ...GROUP, watch: { type: "boolean" }, interval: { type: "string" }, iterations: { type: "string" },
      check: { type: "boolean" }, "max-age": { type: "string" },
      history: { type: "boolean" }, since: { type: "string" }, samples: { type: "string" },
    },
    run: (ctx, v) => Commands.status(ctx, v),
  },
  failures: {
    summary: "list a group's dead (or expired/ready/deferred/inflight) exception rows",
    usage: "sqlstreams failures --stream S --group G [--status dead|expired|ready|deferred|inflight] [filters] [--limit N] [--offset N]",
    help: `Lists the group's exception rows of one status (default dead), newest first, with payload and last error.
${Operate.FILTER_HELP}
  --limit N            1 … 1000 rows per page (default 100)
  --offset N           skip the first N matching rows (the next page; the footer prints it)`,
    options: { ...STREAM, ...GROUP, status: { type: "string" }, limit: { type: "string" }, offset: { type: "string" }, ...Operate.FILTER_OPTIONS },
    run: (ctx, v) => Commands.failures(ctx, v),
  },
  blocked: {
    summary: "list the ordered keys waiting behind an unresolved earlier message",
    usage: "sqlstreams blocked --stream S --group G [--limit N]",
    help: `Lists the keys whose next message waits behind an unresolved earlier one of the same key (a
retry in backoff, a Delay, a run in flight), oldest block first: the blocking message, its status,
since when, when it may run again, and how many messages wait behind it (docs/guide/operations.md#blocked-keys).
  --limit N            1 … 1000 keys (default 100)`,
    options: { ...STREAM, ...GROUP, limit: { type: "string" } },
    run: (ctx, v) => Commands.blocked(ctx, v),
  },
  redrive: {
    summary: "put dead rows back to work with a fresh retry budget",
    usage: "sqlstreams redrive --stream S --group G (--ids 1,2 | filters | --all) [--expired] [--reason R] [--rate N]",
    help: `Selects dead rows by id, or by a filter, and makes them ready again (attempts and delays reset).
An expired row (a message not started before its expiresAt/ttl) redriven runs all the same.
  --ids 1,2,3          these message ids (1 … 10000; dead or expired rows)
  --expired            the filter (or --all) selects expired rows instead of dead ones
${Operate.FILTER_HELP}
  --dead-since TIME    same as --since;  --dead-before TIME  same as --before
  --all                every dead row (up to --limit)
  --limit N            filter cap, 1 … 10000 (default 1000; no cap with --rate)
  --rate N             N rows per second in small transactions (each commits on its own; stop it
                       any time and run the same command again to continue)
  --reason R           recorded in the delivery log`,
    options: {
      ...STREAM, ...GROUP, ids: { type: "string" }, ...Operate.FILTER_OPTIONS, "dead-since": { type: "string" },
      "dead-before": { type: "string" }, all: { type: "boolean" }, limit: { type: "string" }, reason: { type: "string" }, rate: { type: "string" },
      expired: { type: "boolean" },
    },
    run: (ctx, v) => Commands.redrive(ctx, v),
  },
  discard: {
    summary: "throw dead messages away, leaving an audit row in the delivery log",
    usage: "sqlstreams discard --stream S --group G (--ids 1,2 | filters | --all) [--reason R] [--rate N]",
    help: `Deletes dead exception rows (the group will not run those messages again) and writes a
'discarded: <reason>' row to the delivery log for each, whatever the stream's delivery log mode.
Only dead (or, with --expired, expired) rows are touched; the messages stay in the log until retention removes them.
  --ids 1,2,3          these message ids (1 … 10000; dead or expired rows)
  --expired            the filter (or --all) selects expired rows instead of dead ones
${Operate.FILTER_HELP}
  --all                every dead row (up to --limit)
  --limit N            filter cap, 1 … 10000 (default 1000; no cap with --rate)
  --rate N             N rows per second in small transactions (resumable, as for redrive)
  --reason R           recorded in the audit row`,
    options: {
      ...STREAM, ...GROUP, ids: { type: "string" }, ...Operate.FILTER_OPTIONS, all: { type: "boolean" }, limit: { type: "string" },
      reason: { type: "string" }, rate: { type: "string" }, expired: { type: "boolean" },
    },
    run: (ctx, v) => Operate.discard(ctx, v),
  },
  inspect: {
    summary: "one message and, for every group, where it stands and its delivery timeline",
    usage: "sqlstreams inspect <stream> (--id N | --key K [--limit N])",
    help: `Shows the message (payload, key, options, created_at) and, for every consumer group: not reached
yet, claimed, resolved, or its exception row (status, attempts, delays, next run, last error), with
the group's delivery_log rows for it. With --key, the key's latest messages (--limit, default 10).
SQL0058 when the stream has no such message (never produced, or removed by retention).`,
    options: { id: { type: "string" }, key: { type: "string" }, limit: { type: "string" }, ...STREAM },
    positionals: 1,
    run: (ctx, v, p) => Operate.inspect(ctx, v, p),
  },
  produce: {
    summary: "produce one message to a stream (payload as an argument, from a file, or stdin)",
    usage: "sqlstreams produce <stream> ['<json payload>' | --file PATH | < payload.json] [--key K] [--idempotency-key K] [--message '<json>'] [--rank N] [--delay D | --deliver-at TIME]",
    help: `Produces one JSON payload. Without an argument or --file, reads it from stdin (--file - too).
  --key K              the message key
  --idempotency-key K  a repeat with the same key writes nothing and returns the first id
  --message JSON       message options, e.g. '{"concurrency":"ordered","maxAttempts":3}'
  --rank N             compaction rank (compacts by key; --compaction for an automatic rank)
  --delay D            deliver no earlier than D from now (e.g. 90s, 15m, 2d): it waits, scheduled
  --deliver-at TIME    deliver no earlier than TIME (ISO 8601 or epoch ms); prints the scheduled id
SQL0062 when the payload or --message is not valid JSON.`,
    options: {
      file: { type: "string" }, key: { type: "string" }, "idempotency-key": { type: "string" }, message: { type: "string" },
      rank: { type: "string" }, compaction: { type: "boolean" }, delay: { type: "string" }, "deliver-at": { type: "string" }, ...STREAM,
    },
    positionals: 2,
    run: (ctx, v, p) => Operate.produce(ctx, v, p),
  },
  "grant-produce": {
    summary: "let a database role produce to a stream through SQL (and write nothing else)",
    usage: "sqlstreams grant-produce <role> <stream>",
    help: `Records the grant and gives the role EXECUTE on the schema's produce() and produce_batch(), which run
as the schema's owner: the role needs, and should have, no privilege on any table. Idempotent.
Run as the schema's owner (SQL0095 otherwise); the role must exist (SQL0096).`,
    options: {},
    positionals: 2,
    run: (ctx, _v, p) => RoleCommands.grant(ctx, p, false),
  },
  "revoke-produce": {
    summary: "withdraw grant-produce",
    usage: "sqlstreams revoke-produce <role> <stream>",
    help: "Withdraws the grant; when the role keeps no stream, its EXECUTE on produce() goes too. Idempotent.",
    options: {},
    positionals: 2,
    run: (ctx, _v, p) => RoleCommands.grant(ctx, p, true),
  },
  "setup-roles": {
    summary: "create and grant the worker (pollers) and reader (dashboard) database roles",
    usage: "sqlstreams setup-roles [--worker ROLE] [--reader ROLE]",
    help: `Creates each role that does not exist (LOGIN, no password: set one, or use IAM authentication) and grants
  --worker ROLE        DML on the schema's tables, EXECUTE on its functions, no DDL (run maintain as the owner)
  --reader ROLE        SELECT only, with default_transaction_read_only = on
with default privileges that cover streams registered later. Idempotent. Run as the schema's owner.`,
    options: { worker: { type: "string" }, reader: { type: "string" } },
    run: (ctx, v) => RoleCommands.roles(ctx, v),
  },
  seek: {
    summary: "move a group's position to a message id or a time",
    usage: "sqlstreams seek --stream S --group G (--id N | --time ISO) [--force]",
    help: `The next delivered message becomes the first id >= N, or the first message created at or after TIME.
Back replays history for this group; forward skips messages. Refused while the group holds leases
(SQL0028): pause it, wait for the leases to end, seek, resume — or pass --force.`,
    options: { ...STREAM, ...GROUP, id: { type: "string" }, time: { type: "string" }, force: { type: "boolean" } },
    run: (ctx, v) => Commands.seek(ctx, v),
  },
  pause: {
    summary: "pause a group (polls return at once and claim nothing)",
    usage: "sqlstreams pause --stream S --group G",
    help: "While paused, every poll returns at once; leases already taken run out. Idempotent.",
    options: { ...STREAM, ...GROUP },
    run: (ctx, v) => Commands.setPaused(ctx, v, true),
  },
  resume: {
    summary: "resume a paused group",
    usage: "sqlstreams resume --stream S --group G",
    help: "Clears the pause. Idempotent.",
    options: { ...STREAM, ...GROUP },
    run: (ctx, v) => Commands.setPaused(ctx, v, false),
  },
  destroy: {
    summary: "delete a consumer group, or a stream with its whole table family",
    usage: "sqlstreams destroy --stream S [--group G] [--force]",
    help: "Without --group, drops the stream and all its tables. Refused while there is live work unless --force.",
    options: { ...STREAM, ...GROUP, force: { type: "boolean" } },
    run: (ctx, v) => Commands.destroy(ctx, v),
  },
  maintain: {
    summary: "run maintenance now: partitions, retention, sweeps",
    usage: "sqlstreams maintain [--stream S]",
    help: "Runs the maintenance steps for every stream (or one). Exit code 1 when a step failed.",
    options: { ...STREAM },
    run: (ctx, v) => Commands.maintain(ctx, v),
  },
  dashboard: {
    summary: "serve the operator dashboard (overview, groups, messages; redrive, discard, pause, seek)",
    usage: "sqlstreams dashboard [--port N] [--host H] [--read-only] [--token-file PATH] [--allow-host NAMES]",
    help: `Serves the web dashboard on 127.0.0.1:5480 (--port 0 picks a free port) and prints the URL to
open: it carries a random token made for this start (/?token=…), which the page trades for a cookie.
The server answers only its own Host names (127.0.0.1, localhost, [::1] and --host on its port).
  --host H             address to listen on (default 127.0.0.1): an IP address, or a name checked by
                       what it resolves to. Beyond loopback it needs a configured token (SQL0060) and
                       TLS in front of it (a reverse proxy): the token travels with every request
  --token-file PATH    the token (32+ characters) in a file; default env SQLSTREAMS_DASHBOARD_TOKEN.
                       Never on the command line (SQL0091). A configured token is not printed
  --allow-host NAMES   further Host names to answer, comma-separated (a proxy's or DNS name)
  --read-only          pages only: every action is refused (SQL0061)`,
    options: { port: { type: "string" }, host: { type: "string" }, "read-only": { type: "boolean" }, token: { type: "string" }, "token-file": { type: "string" }, "allow-host": { type: "string" } },
    run: async (ctx, v) => (await import("./dashboard.js")).dashboard(ctx, v),
  },
  doctor: {
    summary: "find why a group is stuck: migrations, fence holders, leases, declaration, connections, partitions",
    usage: "sqlstreams doctor [--groups FILE] [--hold-threshold 5s] [--recent 24h] [--pool-size N] [--quiet]",
    help: `Checks, each finding with a fix; exit code 1 when any finding is an error:
  migrations     the control plane and every stream family at this library's versions
  fence          open transactions holding a stream's fence (pid, age, application_name, query)
  leases         expired range and row leases; quarantines and kill-backstop deaths (--recent)
  declaration    groups declared in your app but not registered, and the reverse; a declared
                 group whose handler file does not exist
  connections    max_connections against pollers × parallelism × pool size of the declaration
  partitions     the partition of the next id and the one after it exist

Run it in your app's root (where sst.config.ts is), e.g.
  sqlstreams doctor --groups src/streams/groups.ts

  --groups FILE        your app's declaration: a .ts, .mts, .js or .mjs module that exports
                       \`groups\` (GroupDeclaration[]); TypeScript is loaded directly, no build
                       step. Default: functions/groups.ts (or .mts/.js/.mjs) when present,
                       else the declaration check is skipped. Handler paths (\`function\`) are
                       resolved from the current directory
  --hold-threshold D   a fence holder at least this old is an error (default 5s)
  --recent D           window for quarantines and kills (default 24h)
  --pool-size N        connections per poller (default 1, as @sqlstreams/aws)
  --quiet              print only warnings and errors`,
    options: {
      groups: { type: "string" }, "hold-threshold": { type: "string" }, recent: { type: "string" },
      "pool-size": { type: "string" }, quiet: { type: "boolean" },
    },
    run: async (ctx, v) => (await import("./doctor.js")).doctor(ctx, v),
  },
  dev: {
    summary: "run your app's groups locally: migrate, register, invoke each handler on its schedule",
    usage: "sqlstreams dev [--groups FILE] [--once] [--tick MS | --speed N] [--demo [--messages N]]",
    help: `The local stand-in for EventBridge. Run it in your app's root (where sst.config.ts is), e.g.
  sqlstreams dev --groups src/streams/groups.ts            keep running until Ctrl-C
  sqlstreams dev --groups src/streams/groups.ts --once     run until every group is idle, then exit

Loads your declaration and the handlers it names (TypeScript or JavaScript, no build step),
migrates, registers its streams and groups as the deployed migrate function does, and invokes
each group's handler with { stream, group } and a fake Lambda context on its schedule (and
maintenance on its own), with a live progress view. It produces nothing: send messages from
your app or \`sqlstreams produce\`, or pass --demo for a generated workload. Ctrl-C stops
scheduling, lets running invocations finish, stops the embedded Postgres and exits 0.
Without DATABASE_URL it runs an embedded Postgres kept in --data-dir (reused across runs).

  --groups FILE        your app's declaration: a .ts, .mts, .js or .mjs module that exports
                       \`groups\` (GroupDeclaration[]), optionally \`streams\` and
                       \`maintainSchedule\`. Default: functions/groups.ts (or .mts/.js/.mjs).
                       A group's \`function\` "src/handlers/orders.handler" is the file
                       src/handlers/orders.ts (or .mts/.tsx/.js/.mjs/…) under the current
                       directory and its export \`handler\`
  --once               exit 0 once every group has run, has lag 0 and no ready/deferred/
                       inflight rows (dead rows are fine); exit 1 after --timeout
  --timeout S          --once gives up after S seconds (default 120)
  --tick MS            invoke every group every MS milliseconds (default 2000)
  --speed N            follow the declared schedules (rate and cron) on a clock N times faster;
                       --speed 1 is the deployed timing
  --budget MS          invocation budget of the fake context (default: the group's timeout)
  --demo               produce a demo workload into every declared stream (writes messages!),
                       some meant to fail once or end dead; off by default
  --messages N         demo messages per stream (default 300; with --demo)
  --data-dir DIR       embedded Postgres data directory (default .sqlstreams/dev-pg)
  --port N             embedded Postgres port (default 54329, or a free one)
  --log-file PATH      handler and library log lines (default .sqlstreams/dev.log)
  --dashboard-port N   the operator dashboard's port (default 5480, or a free one when taken; it
                       listens on 127.0.0.1 and its URL is printed)
  --no-dashboard       do not start the dashboard`,
    options: {
      groups: { type: "string" }, once: { type: "boolean" }, timeout: { type: "string" }, tick: { type: "string" },
      speed: { type: "string" }, budget: { type: "string" }, demo: { type: "boolean" }, messages: { type: "string" },
      "data-dir": { type: "string" }, port: { type: "string" }, "log-file": { type: "string" },
      "dashboard-port": { type: "string" }, "no-dashboard": { type: "boolean" },
    },
    run: async (ctx, v) => (await import("./dev/dev.js")).dev(ctx, v),
  },
};

function topHelp(): string {
  const width = Math.max(...Object.keys(COMMANDS).map((k) => k.length));
  return `sqlstreams ${LIBRARY_VERSION} — durable message streams on Postgres

Usage: sqlstreams <command> [options]

Commands:
${Object.entries(COMMANDS)
  .map(([k, c]) => `  ${k.padEnd(width)}  ${c.summary}`)
  .join("\n")}

Run \`sqlstreams <command> --help\` for a command's options.

${COMMON_HELP}
`;
}

function commandHelp(name: string): string {
  const c = COMMANDS[name];
  return `${c.usage}\n\n${c.summary}.\n\n${c.help}\n\n${COMMON_HELP}\n`;
}

/** Runs the command line; resolves with the process exit code. Never throws. */
export async function main(argv: string[], io: Io = processIo()): Promise<number> {
  const [first, ...rest] = argv;
  let json = argv.includes("--json");
  let ctx: CommandContext | undefined;
  const secrets = [passwordOf(io.env.DATABASE_URL), passwordOf(optionValue(argv, "--database-url"))];
  try {
    if (first === undefined || first === "--help" || first === "-h" || first === "help") {
      const which = first === "help" ? rest[0] : undefined;
      if (which && !COMMANDS[which]) throw usageError(`unknown command ${JSON.stringify(which)}`);
      io.out(which ? commandHelp(which) : topHelp());
      return 0;
    }
    if (first === "--version" || first === "-v" || first === "version") {
      io.out(`${LIBRARY_VERSION}\n`);
      return 0;
    }
    const command = COMMANDS[first];
    if (!command) throw usageError(first.startsWith("-") ? `expected a command before ${first}` : `unknown command ${JSON.stringify(first)}`);
    let values: Commands.Values;
    let positionals: string[];
    try {
      const parsed = parseArgs({ args: rest, options: { ...COMMON, ...command.options }, strict: true, allowPositionals: (command.positionals ?? 0) > 0 });
      values = parsed.values as Commands.Values;
      positionals = parsed.positionals;
    } catch (e) {
      throw usageError((e as Error).message.replace(/\. To specify a positional argument.*$/s, ""), first);
    }
    json = values.json === true;
    if (positionals.length > (command.positionals ?? 0)) throw usageError(`unexpected argument ${JSON.stringify(positionals[command.positionals ?? 0])}`, first);
    if (values.help) {
      io.out(commandHelp(first));
      return 0;
    }
    const common: Common = {
      databaseUrl: (values["database-url"] as string | undefined) || io.env.DATABASE_URL || undefined,
      schema: (values.schema as string | undefined) || io.env.SQLSTREAMS_SCHEMA || "sqlstreams",
      json,
      verbose: values.verbose === true,
    };
    ctx = new CommandContext(io, common);
    const code = await command.run(ctx, values, positionals);
    return typeof code === "number" ? code : 0;
  } catch (e) {
    const p = describeError(e, secrets);
    if (json) io.out(JSON.stringify({ error: p }, null, 2) + "\n");
    else io.err(formatError(p) + "\n");
    return 1;
  } finally {
    await ctx?.close();
  }
}

function optionValue(argv: string[], name: string): string | undefined {
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === name) return argv[i + 1];
    if (argv[i].startsWith(name + "=")) return argv[i].slice(name.length + 1);
  }
  return undefined;
}

function passwordOf(url: string | undefined): string | undefined {
  if (!url) return undefined;
  try {
    const p = new URL(url).password;
    return p ? decodeURIComponent(p) : undefined;
  } catch {
    return undefined;
  }
}
