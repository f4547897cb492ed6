// While `sqlstreams dev` runs, the handlers' and the library's output (console.* and direct
// process.stdout/stderr writes: one JSON line per message and per invocation) goes to a log file
// instead of the terminal, where the live view is; the last few lines are kept for the view.
// `dev` writes its own output through functions bound before install() (see processIo).
import { createWriteStream, mkdirSync, type WriteStream } from "node:fs";
import { dirname } from "node:path";
import { format } from "node:util";
import { scrub } from "../format.js";

const METHODS = ["log", "info", "warn", "error", "debug", "trace"] as const;

export class LogCapture {
  private stream: WriteStream;
  private readonly originals = new Map<string, (...a: unknown[]) => void>();
  readonly recent: string[] = [];
  lines = 0;
  errors = 0;

  constructor(
    readonly file: string,
    private readonly secrets: () => (string | undefined)[],
    /** Also echo each line here (non-TTY --verbose). */
    private readonly echo?: (line: string) => void,
  ) {
    mkdirSync(dirname(file), { recursive: true });
    this.stream = createWriteStream(file, { flags: "w" });
    this.stream.on("error", () => {});
  }

  write(line: string, level = "info"): void {
    const text = scrub(line, this.secrets());
    this.lines++;
    if (level === "error" || /"level":"error"/.test(text)) this.errors++;
    this.stream.write(text.endsWith("\n") ? text : text + "\n");
    for (const l of text.split("\n")) {
      if (!l.trim()) continue;
      this.recent.push(l);
      if (this.recent.length > 5) this.recent.shift();
    }
    this.echo?.(text);
  }

  private streams: { s: NodeJS.WriteStream; write: NodeJS.WriteStream["write"] }[] = [];

  /** Routes console.* and process.stdout/stderr writes to the file until restore(). */
  install(): void {
    const c = console as unknown as Record<string, (...a: unknown[]) => void>;
    for (const m of METHODS) {
      this.originals.set(m, c[m]);
      c[m] = (...args: unknown[]) => this.write(format(...args), m === "warn" || m === "error" ? m : "info");
    }
    for (const s of [process.stdout, process.stderr]) {
      const level = s === process.stderr ? "warn" : "info";
      this.streams.push({ s, write: s.write });
      s.write = ((chunk: unknown, a?: unknown, b?: unknown) => {
        this.write(typeof chunk === "string" ? chunk : Buffer.from(chunk as Uint8Array).toString("utf8"), level);
        const cb = typeof a === "function" ? a : typeof b === "function" ? b : undefined;
        if (cb) process.nextTick(cb as () => void);
        return true;
      }) as NodeJS.WriteStream["write"];
    }
  }

  restore(): void {
    const c = console as unknown as Record<string, (...a: unknown[]) => void>;
    for (const [m, f] of this.originals) c[m] = f;
    this.originals.clear();
    for (const { s, write } of this.streams) s.write = write;
    this.streams = [];
  }

  private closing: Promise<void> | undefined;

  close(): Promise<void> {
    this.restore();
    this.closing ??= new Promise((res) => this.stream.end(() => res()));
    return this.closing;
  }
}
