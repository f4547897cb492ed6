// Lambda entry point: the operator dashboard behind a Function URL with IAM auth, declared when
// sst.config.ts is deployed with SQLSTREAMS_DASHBOARD set (docs/operations.md#dashboard).
// Read-only unless SQLSTREAMS_DASHBOARD_READ_ONLY is explicitly 0/false/no.
import { createDashboardHandler } from "@sqlstreams/aws";

const flag = (process.env.SQLSTREAMS_DASHBOARD_READ_ONLY ?? "").trim().toLowerCase();
export const handler = createDashboardHandler({ readOnly: !["0", "false", "no"].includes(flag) });
