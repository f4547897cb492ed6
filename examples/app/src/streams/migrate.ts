// Lambda entry point the component invokes on every deploy: migrates SQLStreams' control plane and
// registers every stream and group of groups.ts (idempotent).
import { createMigrateHandler } from "@sqlstreams/aws";
import { groups, streams } from "./groups.js";

export const handler = createMigrateHandler({ groups, streams });
