// Lambda entry point: retention, partitions and sweeps for every stream (every 5 minutes).
import { createMaintainHandler } from "@sqlstreams/aws";

export const handler = createMaintainHandler();
