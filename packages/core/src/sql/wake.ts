// Statements of wake on produce (docs/guide/producing.md#wake-on-produce). Times from the DB clock.

/**
 * For every unpaused group of stream $1: claim a wake when none is in flight (no row, or its
 * woken_at is older than $2 ms, or -infinity after a release), else mark it pending. Returns the
 * groups whose wake this statement claimed.
 */
export function claimWakes(q: string): string {
  return `WITH g AS (
  SELECT c.id, c.name FROM ${q}.consumer_group_config c
  JOIN ${q}.stream_config s ON s.id = c.stream_id
  WHERE s.name = $1 AND NOT c.paused
), w AS (
  INSERT INTO ${q}.wake_throttle AS t (group_id, woken_at)
  SELECT id, now() FROM g
  ON CONFLICT (group_id) DO UPDATE SET
    woken_at = CASE WHEN t.woken_at <= now() - make_interval(secs => $2::int / 1000.0) THEN now() ELSE t.woken_at END,
    pending = t.woken_at > now() - make_interval(secs => $2::int / 1000.0),
    wakes = t.wakes + CASE WHEN t.woken_at <= now() - make_interval(secs => $2::int / 1000.0) THEN 1 ELSE 0 END
  RETURNING t.group_id, t.woken_at = now() AS claimed
)
SELECT g.name FROM g JOIN w ON w.group_id = g.id WHERE w.claimed ORDER BY g.name`;
}

/**
 * The poller of group $2 of stream $1 is idle: release its wake (the next produce wakes it again)
 * and report whether a produce marked it pending meanwhile (then it drains again).
 */
export function releaseWake(q: string): string {
  return `WITH g AS (
  SELECT c.id FROM ${q}.consumer_group_config c
  JOIN ${q}.stream_config s ON s.id = c.stream_id
  WHERE s.name = $1 AND c.name = $2
), old AS (
  SELECT t.group_id, t.pending FROM ${q}.wake_throttle t JOIN g ON g.id = t.group_id FOR UPDATE OF t
)
UPDATE ${q}.wake_throttle t SET woken_at = '-infinity', pending = false
FROM old WHERE t.group_id = old.group_id
RETURNING old.pending`;
}
