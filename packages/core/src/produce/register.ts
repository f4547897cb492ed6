// Registering a stream (docs/guide/producing.md#registration): its stream_config row and its table
// family, under the migration lock; on an existing stream its settings are replaced.
import type { Runtime } from "../runtime.js";
import { type StreamOptions, validateStreamOptions } from "../config.js";
import { transaction } from "../db.js";
import { SqlStreamsError } from "../errors.js";
import { asPermissionError, lockMigrations, migrateStream } from "../sql/migrate.js";
import { schemaNames } from "../sql/names.js";
import * as Registry from "../sql/register.js";

const DEFAULT_PARTITION_SIZE = 1_000_000;

/** Creates the stream_config row and the table family; on an existing stream replaces its settings. */
export async function registerStream(client: Runtime, name: string, opts: StreamOptions): Promise<void> {
  const o = validateStreamOptions(opts);
  const db = client.db;
  if ((await client.controlPlaneVersion()) === 0) await client.migrate();
  else await client.ready();
  const settings = { retentionMs: o.retentionMs, deliveryLog: o.deliveryLog, idempotencyKeyTtlMs: o.idempotencyKeyTtlMs, maxPayloadBytes: o.maxPayloadBytes };
  const names = schemaNames(db.q);
  try {
    await transaction(db, async (c) => {
      await lockMigrations(db, c);
      const found = await Registry.lockStreamByName.query(db, c, names, { name });
      let id: string;
      let size: string;
      if (found.rowCount) {
        id = found.rows[0].id;
        size = found.rows[0].partition_size;
        if (o.partitionSize !== undefined && String(o.partitionSize) !== size) {
          throw new SqlStreamsError("SQL0011", `stream ${name} has partitionSize ${size}; it cannot change to ${o.partitionSize}`, {
            stored: size,
            given: o.partitionSize,
          });
        }
        await Registry.updateStreamSettings.query(db, c, names, { id, ...settings });
      } else {
        size = String(o.partitionSize ?? DEFAULT_PARTITION_SIZE);
        const ins = await Registry.insertStream.query(db, c, names, { name, partitionSize: size, ...settings });
        id = ins.rows[0].id;
      }
      await migrateStream(db, c, id, size);
    });
  } catch (e) {
    throw asPermissionError(e);
  }
  client.forgetStream(name);
}
