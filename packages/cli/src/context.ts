// What every command gets: where output goes, the parsed common options, and a database
// connection opened on demand (and always closed).
import pg from "pg";
import { SqlStreams, SqlStreamsError, type LogEvent } from "@sqlstreams/core";
import { colourEnabled, escapeControls, forTerminal } from "./format.js";

export interface Io {
  /** stdout, one call per chunk (include the newline). */
  out(text: string): void;
  /** stderr. */
  err(text: string): void;
  env: Record<string, string | undefined>;
  cwd: string;
  /** stdout is a terminal (live views redraw only then). */
  isTTY: boolean;
  /** Terminal width when known. */
  columns?: number;
  /** Reads all of stdin (for `produce` without a payload argument); absent when there is none. */
  readStdin?: () => Promise<string>;
  /** stdin is a terminal (then `produce` does not wait for it). */
  stdinIsTTY?: boolean;
}

/**
 * The process's stdout/stderr. The write functions are bound now, so output keeps reaching the
 * terminal while `dev` routes everyone else's process.stdout.write to its log file.
 */
export const processIo = (): Io => {
  const out = process.stdout.write.bind(process.stdout);
  const err = process.stderr.write.bind(process.stderr);
  return {
    out: (t) => void out(t),
    err: (t) => void err(t),
    env: process.env,
    cwd: process.cwd(),
    isTTY: process.stdout.isTTY === true,
    stdinIsTTY: process.stdin.isTTY === true,
    readStdin: async () => {
      const chunks: Buffer[] = [];
      for await (const c of process.stdin) chunks.push(c as Buffer);
      return Buffer.concat(chunks).toString("utf8");
    },
    get columns() {
      return process.stdout.columns;
    },
  };
};

/** Parsed options of a command. */
export type Values = Record<string, string | boolean | undefined>;

export interface Common {
  databaseUrl?: string;
  schema: string;
  json: boolean;
  verbose: boolean;
}

export class CommandContext {
  private pool: pg.Pool | undefined;
  private clientInstance: SqlStreams | undefined;

  constructor(
    readonly io: Io,
    readonly common: Common,
  ) {}

  get json(): boolean {
    return this.common.json;
  }

  /** Colours on stdout: only on a terminal, never with NO_COLOR or --json. */
  get colour(): boolean {
    return !this.common.json && colourEnabled(this.io.isTTY, this.io.env);
  }

  /** Writes a line for a human to stdout, control characters escaped (JSON goes through printJson, exact). */
  print(text: string): void {
    this.io.out(forTerminal(text.endsWith("\n") ? text : text + "\n"));
  }

  printJson(value: unknown): void {
    this.io.out(JSON.stringify(value, null, 2) + "\n");
  }

  /** The connection string; SQL0032 when there is none. */
  url(): string {
    const url = this.common.databaseUrl;
    if (!url) {
      throw new SqlStreamsError(
        "SQL0032",
        "no database given: set DATABASE_URL or pass --database-url URL",
      );
    }
    return url;
  }

  /** Library events: warnings to stderr, info only with --verbose; never on stdout. */
  readonly logger = (e: LogEvent): void => {
    if (e.level === "info" && !this.common.verbose) return;
    if (this.common.verbose) this.io.err(JSON.stringify({ time: new Date().toISOString(), ...e }) + "\n");
    else this.io.err(`${e.level} ${e.code}: ${escapeControls(e.message)}\n`);
  };

  /** The shared pool (created on first use). */
  db(): pg.Pool {
    if (!this.pool) {
      this.pool = new pg.Pool({
        connectionString: this.url(),
        max: 4,
        connectionTimeoutMillis: 10_000,
        application_name: "sqlstreams-cli",
      });
      this.pool.on("error", () => {});
    }
    return this.pool;
  }

  client(): SqlStreams {
    this.clientInstance ??= new SqlStreams({ pool: this.db(), schema: this.common.schema, logger: this.logger });
    return this.clientInstance;
  }

  async close(): Promise<void> {
    await this.clientInstance?.close().catch(() => {});
    const p = this.pool;
    this.pool = undefined;
    await p?.end().catch(() => {});
  }
}
