// Lambda entry point: the operator dashboard behind a Function URL with IAM auth, declared when
// sst.config.ts is deployed with SQLSTREAMS_DASHBOARD set (docs/guide/operations.md#dashboard).
// Read-only unless SQLSTREAMS_DASHBOARD_READ_WRITE is exactly 1/true/yes (an unreadable value
// fails the cold start with SQL0091).
import { createDashboardHandler } from "@sqlstreams/aws";

export const handler = createDashboardHandler();
