// Statements of a group's concurrency slots (docs/guide/configuration.md#maxconcurrency). Times from the
// database clock; a slot is a lease (token, expires_at) in the control plane's group_slot.
import { defineStatement } from "./statement.js";

/** Takes the lowest free slot of 1..max for `token` (null: every slot is held, the poll is capped). */
export const takeSlot = defineStatement<{ groupId: string; max: number; token: string; leaseMs: number }, { slot: number | null }>(
  ["groupId", "max", "token", "leaseMs"], (t, p) =>
    `SELECT ${t.schema}.take_slot(${p.groupId}, ${p.max}, ${p.token}, ${p.leaseMs}) AS slot`);

/** Extends a held slot's lease; no row when the slot is no longer this token's (it expired and was taken). */
export const renewSlot = defineStatement<{ groupId: string; slot: number; token: string; leaseMs: number }, { slot: number }>(
  ["groupId", "slot", "token", "leaseMs"], (t, p) =>
    `UPDATE ${t.schema}.group_slot SET expires_at = clock_timestamp() + ${p.leaseMs} * interval '1 millisecond'
      WHERE group_id = ${p.groupId} AND slot = ${p.slot} AND token = ${p.token} RETURNING slot`);

/** Frees a held slot (nothing when it is no longer this token's). */
export const releaseSlot = defineStatement<{ groupId: string; slot: number; token: string }>(
  ["groupId", "slot", "token"], (t, p) =>
    `UPDATE ${t.schema}.group_slot SET token = NULL, taken_at = NULL, expires_at = '-infinity'
      WHERE group_id = ${p.groupId} AND slot = ${p.slot} AND token = ${p.token}`);
