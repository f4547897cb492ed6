// What the other @sqlstreams packages share with core but is not the library's public API:
// `@sqlstreams/core/internal`, for @sqlstreams/aws and @sqlstreams/cli only (no stability promise).
export { DISPLAY_DEPTH, escapeControls, formatAge, jsonDepth, undisplayablePayload } from "./format.js";
export { connectionFailure, isTransient } from "./db.js";
export { POLL_OPTION_RANGES } from "./config.js";
export {
  type FenceHolder, type GroupLeaseHealth, type PartitionState, type StreamFamily,
  connectionUse, controlPlanePresent, fenceHolders, leaseHealth, migrationState, partitionState, registeredGroups, staleFunctions,
} from "./operator/diagnostics.js";
export { WAKE_TIMEOUT_MS } from "./wake.js";
export { FAMILY_TABLES, type FamilyTable } from "./sql/names.js";
