// Statements of the control plane's registry (docs/guide/producing.md#registration): stream_config rows
// and the lookups of registered streams and groups. Group registration (upsertGroup, createCursor)
// is in sql/admin.ts beside the other group statements.

/** $1 name. The stream's row, locked for its registration. */
export function lockStreamByName(q: string): string {
  return `SELECT id::text, partition_size::text FROM ${q}.stream_config WHERE name = $1 FOR UPDATE`;
}

/** $1 id, $2 retention ms, $3 delivery-log mode, $4 idempotency-key TTL ms, $5 max payload bytes. */
export function updateStreamSettings(q: string): string {
  return `UPDATE ${q}.stream_config SET retention_ms = $2, delivery_log_mode = $3, idempotency_key_ttl_ms = $4,
                 max_payload_bytes = $5, updated_at = now() WHERE id = $1`;
}

/** $1 name, $2 partition size, then the settings of updateStreamSettings. Returns id. */
export function insertStream(q: string): string {
  return `INSERT INTO ${q}.stream_config (name, partition_size, retention_ms, delivery_log_mode, idempotency_key_ttl_ms, max_payload_bytes)
          VALUES ($1, $2, $3, $4, $5, $6) RETURNING id::text`;
}

/** $1 name. What a client caches about a stream. */
export function streamByName(q: string): string {
  return `SELECT id::text, partition_size::text, max_payload_bytes FROM ${q}.stream_config WHERE name = $1`;
}

/** $1 stream id. */
export function deliveryLogMode(q: string): string {
  return `SELECT delivery_log_mode AS mode FROM ${q}.stream_config WHERE id = $1`;
}

export function streamNames(q: string): string {
  return `SELECT name FROM ${q}.stream_config ORDER BY id`;
}

/** Every registered group as { stream, group }, by stream then group name. */
export function consumerGroups(q: string): string {
  return `SELECT s.name AS stream, g.name AS "group" FROM ${q}.stream_config s
            JOIN ${q}.consumer_group_config g ON g.stream_id = s.id ORDER BY s.name, g.name`;
}
