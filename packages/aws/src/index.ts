// @sqlstreams/aws: the Lambda adapter. Public exports only.
export { createPollHandler } from "./poll.js";
export { mergeReports } from "@sqlstreams/core";
export type { PollEvent, PollHandler, PollHandlerOptions } from "./poll.js";
export { createMaintainHandler } from "./maintain.js";
export type { MaintainHandler, MaintainHandlerOptions } from "./maintain.js";
export { createMigrateHandler } from "./migrate.js";
export type { MigrateHandler, MigrateHandlerOptions, MigrateResult } from "./migrate.js";
export { localContext } from "./context.js";
export type { LambdaContext, LocalContext } from "./context.js";
export { DatabaseProvider, defaultDatabase, closeDefaultDatabase } from "./database.js";
export type { DatabaseOptions } from "./database.js";
export {
  loadConnectionSettings, parseRdsSecret, isAuthFailure, readSecretFromSecretsManager, sslSettings, rdsCaBundle, iamConnectionSettings, signIamTokenWithRdsSigner,
} from "./credentials.js";
export type { ConnectionSettings, CredentialSource, SecretReader, IamTokenRequest, IamTokenSigner } from "./credentials.js";
export { validateGroups, findGroup, groupKey, resolvedDeclaration, DEFAULTS as GROUP_DEFAULTS } from "./declaration.js";
export type { GroupAlarms, GroupDeclaration, PollMode, StreamDeclarations } from "./declaration.js";
export type { LineWriter, LogLine } from "./log.js";
export { NAMESPACE as METRICS_NAMESPACE, DurationHistogram, pollDocument, maintainDocuments, stageFromEnv } from "./metrics.js";
export type { EmfDocument, EmfUnit, EmfValues, EmfMetricDefinition } from "./metrics.js";
export { createDashboard } from "./dashboard/app.js";
export type { DashboardOptions, FetchHandler } from "./dashboard/app.js";
export { createDashboardHandler } from "./dashboard/lambda.js";
export type { DashboardHandlerOptions, FunctionUrlEvent, FunctionUrlResult } from "./dashboard/lambda.js";
export { createLambdaWaker, wakerFromEnv } from "./wake.js";
export type { LambdaWakerOptions } from "./wake.js";
export { groupAlarms, ALARM_DEFAULTS } from "./alarms.js";
export type { AlarmDefinition } from "./alarms.js";
