// `sqlstreams dev --demo`: produce the demo workload (demo.ts) into every declared stream, in
// small batches, and start the stub services the example handlers call. Without --demo nothing
// here runs: dev never writes into a stream on its own.
import { setTimeout as sleep } from "node:timers/promises";
import type { SqlStreams } from "@sqlstreams/core";
import { type DemoServices, demoBatch, demoExpectations, startDemoServices } from "./demo.js";
import type { DevOptions } from "./options.js";

const BATCH = 20;
const BATCH_PAUSE_MS = 100;
/** The streams of the example deployment whose handlers call the stub services. */
const SERVICE_STREAMS = ["orders.placed", "ledger.adjustments"];

export class DemoProducer {
  /** Messages produced per stream during this session. */
  readonly produced = new Map<string, number>();
  producing = false;
  /** When producing last ended (a progress read that began before it proves nothing). */
  producedAt = Date.now();
  error: string | undefined;
  private run: Promise<void> = Promise.resolve();
  private services: DemoServices | undefined;

  constructor(
    private readonly o: DevOptions,
    private readonly streams: string[],
    private readonly say: (line: string) => void,
    private readonly describe: (e: unknown) => string,
  ) {
    for (const s of streams) this.produced.set(s, 0);
  }

  /** The stub services (when a stream of the example deployment is declared) and what will be produced. */
  async prepare(): Promise<void> {
    const { o, streams } = this;
    this.producedAt = Date.now();
    if (!o.demo) {
      const first = streams[0] ?? "<stream>";
      this.say(`no demo workload: dev produces nothing. Produce from your app, or: sqlstreams produce ${first} '{"hello":1}'   (--demo generates a workload)`);
      return;
    }
    if (streams.some((n) => SERVICE_STREAMS.includes(n))) {
      this.services = await startDemoServices(process.env);
      if (this.services.env.length > 0) this.say(`demo services (fail once per "fail-once" message) at ${this.services.url}: ${this.services.env.join(", ")}`);
    }
    for (const st of streams) {
      const x = demoExpectations(st, o.messages);
      this.say(`demo: ${o.messages} messages to ${st}: ${x.failOnce} fail once and are retried, ${x.permanent} are invalid and end dead (Permanent)`);
    }
  }

  start(client: SqlStreams, stopping: () => boolean): void {
    const { o } = this;
    if (!o.demo || o.messages === 0) return;
    this.producing = true;
    this.run = (async () => {
      try {
        for (let from = 1; from <= o.messages && !stopping(); from += BATCH) {
          const n = Math.min(BATCH, o.messages - from + 1);
          for (const s of this.streams) {
            await client.stream(s).produceBatch(demoBatch(s, from, n, o.messages));
            this.produced.set(s, (this.produced.get(s) ?? 0) + n);
          }
          await sleep(BATCH_PAUSE_MS);
        }
      } catch (e) {
        this.error = this.describe(e);
        this.say(`demo producer failed: ${this.error}`);
      } finally {
        this.producing = false;
        this.producedAt = Date.now();
      }
    })();
  }

  /** Resolves once the producer stopped (it checks `stopping` between batches). */
  finished(): Promise<void> {
    return this.run;
  }

  async close(): Promise<void> {
    await this.services?.close().catch(() => {});
    this.services = undefined;
  }
}
