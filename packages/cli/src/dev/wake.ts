// Wake on produce, locally (docs/guide/producing.md#wake-on-produce): a producer with waker "notify"
// (SQLSTREAMS_WAKE=notify) sends NOTIFY sqlstreams_wake with { schema, stream, group } after its
// claimed wake; the listener hands each one of this schema to `onWake`.
import pg from "pg";
import { WAKE_CHANNEL } from "@sqlstreams/core";

export interface WakeTarget {
  stream: string;
  group: string;
}

/** A connected LISTEN client; `end()` it to stop. */
export async function listenForWakes(url: string, schema: string, onWake: (t: WakeTarget) => void, onError: (e: unknown) => void): Promise<pg.Client> {
  const listener = new pg.Client({ connectionString: url, application_name: "sqlstreams-dev-wake" });
  listener.on("error", onError);
  listener.on("notification", (n) => {
    let t: { schema?: unknown; stream?: unknown; group?: unknown };
    try {
      t = JSON.parse(n.payload ?? "") as typeof t;
    } catch {
      return;
    }
    if (t.schema !== schema || typeof t.stream !== "string" || typeof t.group !== "string") return;
    onWake({ stream: t.stream, group: t.group });
  });
  await listener.connect();
  await listener.query(`LISTEN ${WAKE_CHANNEL}`);
  return listener;
}
