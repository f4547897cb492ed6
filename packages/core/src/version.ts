/** npm version of @sqlstreams/core, written to migration_log.library_version. */
export const LIBRARY_VERSION = "0.1.0";
/** Schema versions this library creates and understands. */
export const SYSTEM_VERSION = 3;
export const STREAM_VERSION = 18;
