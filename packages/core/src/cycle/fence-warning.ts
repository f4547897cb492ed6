// What a poll held back by the fence says about the producer transactions holding it
// (docs/protocol/poll-cycle.md#the-fence): SQL0043 names each holder whose transaction is known
// to be old; a holder whose age cannot be read is never called long-running, only counted in a
// note at info level. Its age is unknown when the poll's transaction has no activity row for it:
// pg_stat_activity is read once per transaction and pg_locks live, so a transaction that began
// (or a backend that connected) after that read has a lock but no start time — common right after
// a server restart, when producers reconnect together — and a prepared transaction has no backend.
import type { LogEvent } from "../log.js";
import type { FenceHolder } from "../sql/claim.js";

export type { FenceHolder };

/** A producer transaction of this stream open longer than this is named when it holds a claim. */
export const FENCE_WARN_MS = 2_000;

/** The events to emit, each with its collapse key (one per backend; one note per group). */
export interface FenceEvent {
  event: LogEvent;
  collapse: string;
}

function aged(h: FenceHolder): h is FenceHolder & { age_ms: number } {
  return typeof h.age_ms === "number" && Number.isFinite(h.age_ms);
}

/**
 * SQL0043 (warn) for each holder whose transaction is at least `warnMs` old; one SQL0043 at info
 * level listing the holders whose age is unknown (none when every holder could be aged). A
 * transaction holds one lock per partition it wrote to, so a backend may be reported more than
 * once, and prepared transactions cannot be told apart: each backend is named once.
 */
export function fenceEvents(holders: readonly FenceHolder[], stream: string, group: string, warnMs = FENCE_WARN_MS): FenceEvent[] {
  const out: FenceEvent[] = [];
  const named = new Set<number | null>();
  for (const h of holders) {
    if (!aged(h) || h.age_ms < warnMs || named.has(h.pid)) continue;
    named.add(h.pid);
    const who = h.pid === null ? "a prepared transaction" : `backend pid ${h.pid}`;
    out.push({
      event: {
        level: "warn", code: "SQL0043",
        message: `claims held by the fence: ${who} has a transaction open for ${Math.round(h.age_ms / 100) / 10} s that wrote to stream ${stream} ` +
          `(application_name ${JSON.stringify(h.app ?? "")}, last statement ${h.statement ?? "unknown"})`,
        stream, group, pid: h.pid, xactAgeMs: Math.round(h.age_ms), applicationName: h.app, lastStatement: h.statement,
      },
      collapse: String(h.pid),
    });
  }
  const unknown = holders.filter((h) => !aged(h) && !named.has(h.pid));
  if (unknown.length > 0) {
    const pids = [...new Set(unknown.map((h) => h.pid).filter((p): p is number => p !== null))];
    const prepared = unknown.some((h) => h.pid === null);
    const what = [
      ...(pids.length > 0 ? [`backend pid ${pids.join(", ")} (began after this poll read pg_stat_activity; a later poll reads its age)`] : []),
      ...(prepared ? ["prepared transactions (see pg_prepared_xacts)"] : []),
    ].join("; ");
    out.push({
      event: {
        level: "info", code: "SQL0043",
        message: `claims held by the fence: transactions of unknown age that wrote to stream ${stream}, not named as long-running: ${what}`,
        stream, group, pids, prepared,
      },
      collapse: "unaged",
    });
  }
  return out;
}
