// Lambda entry point, invoked on every deploy before the group schedules are updated: migrate the
// control plane and register every stream and group of groups.ts (idempotent).
import { createMigrateHandler } from "@sqlstreams/aws";
import { groups, streams } from "./groups.js";

export const handler = createMigrateHandler({ groups, streams });
