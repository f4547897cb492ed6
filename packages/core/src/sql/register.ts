// Statements of the control plane's registry (docs/guide/producing.md#registration): stream_config rows
// and the lookups of registered streams and groups. Group registration (upsertGroup, createCursor)
// is in sql/admin.ts beside the other group statements.
import type { DeliveryLogMode } from "../config.js";
import type { SchemaNames } from "./names.js";
import { defineStatement } from "./statement.js";

/** The stored settings of a stream that register() may change. */
export interface StreamSettings {
  retentionMs: number;
  deliveryLog: DeliveryLogMode;
  idempotencyKeyTtlMs: number;
  maxPayloadBytes: number;
}

const SETTINGS = ["retentionMs", "deliveryLog", "idempotencyKeyTtlMs", "maxPayloadBytes"] as const;

/** The stream's row, locked for its registration. */
export const lockStreamByName = defineStatement<{ name: string }, { id: string; partition_size: string }, SchemaNames>(["name"], (t, p) =>
  `SELECT id::text, partition_size::text FROM ${t.schema}.stream_config WHERE name = ${p.name} FOR UPDATE`);

export const updateStreamSettings = defineStatement<StreamSettings & { id: string }, Record<string, unknown>, SchemaNames>(["id", ...SETTINGS], (t, p) =>
  `UPDATE ${t.schema}.stream_config SET retention_ms = ${p.retentionMs}, delivery_log_mode = ${p.deliveryLog}, idempotency_key_ttl_ms = ${p.idempotencyKeyTtlMs},
                 max_payload_bytes = ${p.maxPayloadBytes}, updated_at = now() WHERE id = ${p.id}`);

/** A new stream's row. Returns its id. */
export const insertStream = defineStatement<StreamSettings & { name: string; partitionSize: string }, { id: string }, SchemaNames>(
  ["name", "partitionSize", ...SETTINGS], (t, p) =>
    `INSERT INTO ${t.schema}.stream_config (name, partition_size, retention_ms, delivery_log_mode, idempotency_key_ttl_ms, max_payload_bytes)
          VALUES (${p.name}, ${p.partitionSize}, ${p.retentionMs}, ${p.deliveryLog}, ${p.idempotencyKeyTtlMs}, ${p.maxPayloadBytes}) RETURNING id::text`);

/** What a client caches about a stream. */
export const streamByName = defineStatement<{ name: string }, { id: string; partition_size: string; max_payload_bytes: number }, SchemaNames>(
  ["name"], (t, p) => `SELECT id::text, partition_size::text, max_payload_bytes FROM ${t.schema}.stream_config WHERE name = ${p.name}`);

export const deliveryLogMode = defineStatement<{ streamId: string }, { mode: DeliveryLogMode }, SchemaNames>(["streamId"], (t, p) =>
  `SELECT delivery_log_mode AS mode FROM ${t.schema}.stream_config WHERE id = ${p.streamId}`);

export const streamNames = defineStatement<Record<string, never>, { name: string }, SchemaNames>([], (t) =>
  `SELECT name FROM ${t.schema}.stream_config ORDER BY id`);

/** Every registered group as { stream, group }, by stream then group name. */
export const consumerGroups = defineStatement<Record<string, never>, { stream: string; group: string }, SchemaNames>([], (t) =>
  `SELECT s.name AS stream, g.name AS "group" FROM ${t.schema}.stream_config s
            JOIN ${t.schema}.consumer_group_config g ON g.stream_id = s.id ORDER BY s.name, g.name`);
