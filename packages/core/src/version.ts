/** npm version of @sqlstreams/core, written to migration_log.library_version. */
export const LIBRARY_VERSION = "0.1.0";
/**
 * The numbered table migrations this library creates and understands: the control plane's
 * (migrations/system/NNNN_*.sql) and a stream family's (migrations/stream/NNNN_*.sql). 1 is the
 * baseline. Functions are versioned apart, by the hash of their files (docs/protocol/data-model.md#upgrades).
 */
export const SYSTEM_VERSION = 1;
export const STREAM_VERSION = 1;
