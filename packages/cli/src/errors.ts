// Turning every failure into: a code (when there is one), what was wrong, and how to fix it.
import { SqlStreamsError, isSqlStreamsError } from "@sqlstreams/core";
import { escapeControls, scrub } from "./format.js";

/** A failure of the command itself (not of the library): message and a fix, no SQL code. */
export class CliError extends Error {
  override readonly name = "CliError";
  constructor(
    message: string,
    readonly fix?: string,
  ) {
    super(message);
  }
}

/** Usage mistakes are invalid call arguments (SQL0015), with a pointer to the command's help. */
export function usageError(message: string, command?: string): SqlStreamsError {
  return new SqlStreamsError("SQL0015", `${message}; see \`sqlstreams ${command ? command + " " : ""}--help\``, { command });
}

export interface PrintedError {
  code?: string;
  message: string;
  fix?: string;
  hint?: string;
  details?: Record<string, unknown>;
}

const AUTH = new Set(["28P01", "28000"]);
const UNREACHABLE = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "ETIMEDOUT", "ECONNRESET", "EHOSTUNREACH", "3D000", "57P01", "57P03", "53300"]);

/** The message of a SqlStreamsError without the "SQLnnnn " prefix and "(fix: …)" suffix it carries. */
function bareMessage(e: SqlStreamsError): string {
  let m = e.message;
  if (m.startsWith(`${e.code} `)) m = m.slice(e.code.length + 1);
  const suffix = ` (fix: ${e.fix})`;
  if (m.endsWith(suffix)) m = m.slice(0, -suffix.length);
  return m;
}

/** Classifies any thrown value; `secrets` are removed from every text shown. */
export function describeError(e: unknown, secrets: (string | undefined)[] = []): PrintedError {
  const clean = (s: string) => scrub(s, secrets);
  if (isSqlStreamsError(e)) {
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    const out: PrintedError = { code: e.code, message: clean(bareMessage(e)), fix: e.fix, details: safeDetails(e.details, clean) };
    if (e.code === "SQL0033" && cause?.code && UNREACHABLE.has(cause.code)) out.hint = "check that the database in DATABASE_URL / --database-url is running and reachable";
    return out;
  }
  if (e instanceof CliError) return { message: clean(e.message), fix: e.fix };
  const err = e as { code?: unknown; message?: unknown } | null;
  const code = typeof err?.code === "string" ? err.code : undefined;
  const message = clean(typeof err?.message === "string" && err.message ? err.message : String(e));
  if (code && AUTH.has(code)) {
    return {
      code: "SQL0032",
      message: `the database rejected the credentials: ${message}`,
      fix: new SqlStreamsError("SQL0032", "").fix,
      hint: "check the user and password in DATABASE_URL / --database-url",
    };
  }
  if ((code && UNREACHABLE.has(code)) || /connect|Connection terminated|timeout/i.test(message)) {
    return {
      code: "SQL0033",
      message: `database unavailable: ${message}${code && !message.includes(code) ? ` (${code})` : ""}`,
      fix: "check that the database in DATABASE_URL / --database-url is running, reachable and exists",
    };
  }
  return { message: code ? `${message} (${code})` : message };
}

function safeDetails(d: Record<string, unknown>, clean: (s: string) => string): Record<string, unknown> | undefined {
  if (!d || Object.keys(d).length === 0) return undefined;
  try {
    return JSON.parse(clean(JSON.stringify(d))) as Record<string, unknown>;
  } catch {
    return undefined;
  }
}

/** `error SQL0009: …` / `  fix: …` lines for a person. */
export function formatError(p: PrintedError): string {
  const lines = [`error${p.code ? " " + p.code : ""}: ${escapeControls(p.message)}`];
  if (p.fix) lines.push(`  fix: ${escapeControls(p.fix)}`);
  if (p.hint) lines.push(`  hint: ${escapeControls(p.hint)}`);
  return lines.join("\n");
}
