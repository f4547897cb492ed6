// The public exports of @sqlstreams/core.
export { SqlStreams, type SqlStreamsOptions } from "./client.js";
export { Stream, type ProduceOptions, type ProduceResult, type BatchItem, type ScheduleOptions, type CancelledScheduled, type ScheduledMessage } from "./stream.js";
export { type TxExecutor, type Transactional, type PostgresJsTx, type PrismaTx, fromPostgresJs, fromPrisma } from "./executor.js";
export {
  Consumer, type Progress, type ProgressSample, type FailureRow, type RedriveSelector, type DeadSelector, type FailureFilter, type BatchOptions, type SeekTarget, type ExceptionStatus, type BlockedKey,
} from "./consumer.js";
export { type Message, type Handler, type CycleReport, mergeReports } from "./cycle/types.js";
export type { BatchHandler, BatchResult } from "./cycle/batch.js";
export type { InspectedMessage, InspectTarget, GroupView, MessagePosition, TimelineEntry } from "./operator/inspect.js";
export { Delay, Permanent, type Outcome } from "./outcome.js";
export { SqlStreamsError, ERROR_CODES, type ErrorCode, isSqlStreamsError } from "./errors.js";
export type {
  RetryPolicy, MessageOptions, ConsumerConfig, RateLimit, StreamOptions, PollOptions, BatchPollOptions, Concurrency, DeliveryLogMode,
} from "./config.js";
export type { Logger, LogEvent } from "./log.js";
export type { MaintainOptions, MaintainReport } from "./maintain/maintain.js";
export type { DestroyOptions, DestroyGroupResult, DestroyStreamResult } from "./destroy.js";
export { LIBRARY_VERSION, SYSTEM_VERSION, STREAM_VERSION } from "./version.js";
export { defineStream, type StreamDef, type StandardSchema, type SchemaIssue, type PayloadOf } from "./typed.js";
export { WAKE_CHANNEL, type Waker, type WakeTarget } from "./wake.js";
export { grantProduce, revokeProduce, setupRoles, type RoleSetup } from "./roles.js";
