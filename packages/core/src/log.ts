// Structured log events (docs/guide/operations.md#log-events). Repeats of one code for one group are collapsed within a
// minute, with the number suppressed reported on the next record that gets through.
export interface LogEvent {
  level: "info" | "warn" | "error";
  code: string;
  message: string;
  stream?: string;
  group?: string;
  suppressed?: number;
  [key: string]: unknown;
}
export type Logger = (event: LogEvent) => void;

export const consoleLogger: Logger = (event) => {
  const line = JSON.stringify({ time: new Date().toISOString(), ...event });
  if (event.level === "info") console.log(line);
  else console.warn(line);
};

const WINDOW_MS = 60_000;

export class EventLog {
  private readonly last = new Map<string, { at: number; suppressed: number }>();
  constructor(private readonly sink: Logger) {}

  /** `collapse` true collapses per (code, stream, group); a string also keys on it (e.g. a field name). */
  emit(event: LogEvent, collapse: boolean | string = true): void {
    if (collapse !== false) {
      const k = `${event.code}\u0000${event.stream ?? ""}\u0000${event.group ?? ""}${typeof collapse === "string" ? `\u0000${collapse}` : ""}`;
      const now = Date.now();
      const seen = this.last.get(k);
      if (seen && now - seen.at < WINDOW_MS) {
        seen.suppressed++;
        return;
      }
      if (seen && seen.suppressed > 0) event = { ...event, suppressed: seen.suppressed };
      this.last.set(k, { at: now, suppressed: 0 });
    }
    try {
      this.sink(event);
    } catch {
      // a failing logger never breaks the library
    }
  }
}
