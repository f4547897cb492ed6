// What the rest of the library needs from a client: the database, the schema-version check, and
// the stream lookup with its cache. `SqlStreams` implements it; streams, consumers, the poll
// cycle, maintenance and destroy receive it instead of the client, so none of them imports
// client.ts and the client stays the only module that knows how the pieces are assembled.
import type { Db } from "./db.js";

/** What a client caches about a stream (docs/guide/producing.md#registration: id and partition size for the client's life). */
export interface StreamInfo {
  id: string;
  name: string;
  partitionSize: bigint;
  maxPayloadBytes: number;
  maxPayloadFetchedAt: number;
}

export interface Runtime {
  readonly db: Db;
  /** Checks the schema version once per client, before its first database action. */
  ready(): Promise<void>;
  /** Whether the control plane exists (0 when it does not). */
  controlPlaneVersion(): Promise<number>;
  /** Creates or upgrades the control plane and every stream family. */
  migrate(): Promise<void>;
  /** Looks a stream up by name, cached for the client's life (payload limit for 60 s). */
  streamInfo(name: string, fresh?: boolean): Promise<StreamInfo>;
  /** After a produce committed: wake the stream's groups when the client has a waker; never throws. */
  afterProduce(stream: string): Promise<void>;
  /** Drops a stream from the cache (after destroy, or when its registration changed). */
  forgetStream(name: string): void;
}
