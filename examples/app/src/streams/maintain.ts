// Lambda entry point the component schedules every 5 minutes: retention, partitions and sweeps.
import { createMaintainHandler } from "@sqlstreams/aws";

export const handler = createMaintainHandler();
