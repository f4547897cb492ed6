// Statements of wake on produce (docs/guide/producing.md#wake-on-produce). Times from the DB clock.
import type { SchemaNames } from "./names.js";
import { defineStatement } from "./statement.js";

/**
 * For every unpaused group of stream `stream`: claim a wake when none is in flight (no row, or its
 * woken_at is older than `windowMs`, or -infinity after a release), else mark it pending. Returns
 * the groups whose wake this statement claimed.
 */
export const claimWakes = defineStatement<{ stream: string; windowMs: number }, { name: string }, SchemaNames>(
  ["stream", "windowMs"], (t, p) => {
    const window = `now() - make_interval(secs => ${p.windowMs}::int / 1000.0)`;
    return `WITH g AS (
  SELECT c.id, c.name FROM ${t.schema}.consumer_group_config c
  JOIN ${t.schema}.stream_config s ON s.id = c.stream_id
  WHERE s.name = ${p.stream} AND NOT c.paused
), w AS (
  INSERT INTO ${t.schema}.wake_throttle AS t (group_id, woken_at)
  SELECT id, now() FROM g
  ON CONFLICT (group_id) DO UPDATE SET
    woken_at = CASE WHEN t.woken_at <= ${window} THEN now() ELSE t.woken_at END,
    pending = t.woken_at > ${window},
    wakes = t.wakes + CASE WHEN t.woken_at <= ${window} THEN 1 ELSE 0 END
  RETURNING t.group_id, t.woken_at = now() AS claimed
)
SELECT g.name FROM g JOIN w ON w.group_id = g.id WHERE w.claimed ORDER BY g.name`;
  });

/**
 * The poller of group `group` of stream `stream` is idle: release its wake (the next produce wakes
 * it again) and report whether a produce marked it pending meanwhile (then it drains again).
 */
export const releaseWake = defineStatement<{ stream: string; group: string }, { pending: boolean }, SchemaNames>(
  ["stream", "group"], (t, p) =>
    `WITH g AS (
  SELECT c.id FROM ${t.schema}.consumer_group_config c
  JOIN ${t.schema}.stream_config s ON s.id = c.stream_id
  WHERE s.name = ${p.stream} AND c.name = ${p.group}
), old AS (
  SELECT t.group_id, t.pending FROM ${t.schema}.wake_throttle t JOIN g ON g.id = t.group_id FOR UPDATE OF t
)
UPDATE ${t.schema}.wake_throttle t SET woken_at = '-infinity', pending = false
FROM old WHERE t.group_id = old.group_id
RETURNING old.pending`);

/** Sends the built-in waker's NOTIFY: `payload` on `channel`, from the client's own connection. */
export const notifyWake = defineStatement<{ channel: string; payload: string }, { pg_notify: string }, SchemaNames>(
  ["channel", "payload"], (_t, p) => `SELECT pg_notify(${p.channel}, ${p.payload})`);
