// The consumer group an operator call acts on: its lookups and its registration.
import { type ConsumerConfig, validateConsumerConfig } from "../config.js";
import { transaction } from "../db.js";
import { groupNotRegistered } from "../errors.js";
import type { Runtime } from "../runtime.js";
import * as Admin from "../sql/admin.js";
import { type Tables, tables } from "../sql/cycle.js";

export interface GroupRef {
  client: Runtime;
  stream: string;
  group: string;
}

/** The stream's id and table names (SQL0009 when it is not registered). */
export async function streamTables(ref: GroupRef): Promise<{ id: string; t: Tables }> {
  const info = await ref.client.streamInfo(ref.stream);
  return { id: info.id, t: tables(ref.client.db.q, info.id) };
}

/** The group's id and stored config (SQL0010 when it is not registered). */
export async function lookupGroup(ref: GroupRef): Promise<{ streamId: string; t: Tables; groupId: string; config: ConsumerConfig }> {
  const { id, t } = await streamTables(ref);
  const r = await Admin.groupId.query(ref.client.db, ref.client.db.pool, t, { streamId: id, group: ref.group });
  if (r.rowCount === 0) throw groupNotRegistered(ref.stream, ref.group);
  return { streamId: id, t, groupId: r.rows[0].id, config: r.rows[0].config };
}

/** Creates the group or replaces its config as a whole; the cursor is created once and never moved here. */
export async function registerGroup(ref: GroupRef, config: ConsumerConfig): Promise<void> {
  const cfg = validateConsumerConfig(config);
  const db = ref.client.db;
  const { id, t } = await streamTables(ref);
  await transaction(db, async (c) => {
    const g = await Admin.upsertGroup.query(db, c, t, { streamId: id, group: ref.group, config: JSON.stringify(cfg) });
    await Admin.createCursor.query(db, c, t, { groupId: g.rows[0].id, atHead: cfg.start === "head" });
  });
}
