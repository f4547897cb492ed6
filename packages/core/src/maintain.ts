// Maintenance (SPEC §10): partitions ahead, retention drops and sweeps, TTLs, expired leases,
// empty compaction heads. Placeholder until issue 7 lands.
import type { SqlStreams } from "./client.js";

export interface MaintainOptions {
  deadline?: number;
}
export interface MaintainReport {
  stream: string;
  partitionsCreated: number;
  partitionsDropped: number;
  rowsSwept: number;
  idempotencyKeysDeleted: number;
  keyLeasesDeleted: number;
  emptyHeadsDeleted: number;
  errors: { step: string; code: string; message: string }[];
}

export async function maintainStreams(
  client: SqlStreams,
  opts: MaintainOptions & { streams?: string[] },
): Promise<Record<string, MaintainReport>> {
  const names = opts.streams ?? (await client.streamNames());
  const out: Record<string, MaintainReport> = {};
  for (const name of names) {
    out[name] = {
      stream: name, partitionsCreated: 0, partitionsDropped: 0, rowsSwept: 0,
      idempotencyKeysDeleted: 0, keyLeasesDeleted: 0, emptyHeadsDeleted: 0, errors: [],
    };
  }
  return out;
}

export async function maintainStream(client: SqlStreams, stream: string, opts: MaintainOptions): Promise<MaintainReport> {
  return (await maintainStreams(client, { ...opts, streams: [stream] }))[stream];
}
