// One structured JSON line per invocation (CloudWatch Logs Insights can query its fields).
export type LogLine = Record<string, unknown>;
export type LineWriter = (line: LogLine) => void;

/** Writes straight to stdout (no Lambda text prefix), so CloudWatch Logs Insights sees the JSON fields. */
export const stdoutWriter: LineWriter = (line) => {
  process.stdout.write(JSON.stringify({ time: new Date().toISOString(), ...line }) + "\n");
};

/** Writes a line and never lets a failing writer break the invocation. */
export function writeLine(writer: LineWriter, line: LogLine): void {
  try {
    writer(line);
  } catch {
    // logging is best effort
  }
}

/** code and message of an error, for a log line; never the cause chain (it may hold a query). */
export function errorFields(e: unknown): LogLine {
  const err = e as { code?: unknown; message?: unknown; name?: unknown } | null;
  return {
    error: {
      name: typeof err?.name === "string" ? err.name : "Error",
      code: typeof err?.code === "string" ? err.code : undefined,
      message: typeof err?.message === "string" ? err.message : String(e),
    },
  };
}
