// CloudWatch metrics in Embedded Metric Format (docs/guide/operations.md#metrics): one JSON document per
// poll invocation and one per maintained stream, written to stdout where the Lambda log agent
// turns it into metrics. Written directly (no powertools): a document is a plain object, the
// library only needs a few fixed metrics per invocation, and the adapter stays free of a
// dependency that pulls in its own logger and flushing model.
import type { CycleReport, MaintainReport, Progress } from "@sqlstreams/core";
import type { LineWriter } from "./log.js";

export const NAMESPACE = "SQLStreams";

/** The units CloudWatch accepts (EMF rejects any other string). */
export type EmfUnit =
  | "Seconds" | "Microseconds" | "Milliseconds" | "Bytes" | "Kilobytes" | "Megabytes" | "Gigabytes" | "Terabytes"
  | "Bits" | "Kilobits" | "Megabits" | "Gigabits" | "Terabits" | "Percent" | "Count" | "Bytes/Second"
  | "Kilobytes/Second" | "Megabytes/Second" | "Gigabytes/Second" | "Terabytes/Second" | "Bits/Second"
  | "Kilobits/Second" | "Megabits/Second" | "Gigabits/Second" | "Terabits/Second" | "Count/Second" | "None";

export interface EmfMetricDefinition {
  Name: string;
  Unit: EmfUnit;
}

/** A distribution: each value and how many times it was seen (at most 100 values, EMF's limit). */
export interface EmfValues {
  Values: number[];
  Counts: number[];
}

export interface EmfDocument {
  _aws: {
    Timestamp: number;
    CloudWatchMetrics: { Namespace: string; Dimensions: string[][]; Metrics: EmfMetricDefinition[] }[];
  };
  [member: string]: unknown;
}

/** The counts of a poll invocation that become metrics: CycleReport field → metric name. */
export const POLL_COUNTS = {
  succeeded: "Succeeded",
  failed: "Failed",
  dead: "Dead",
  delayed: "Delayed",
  deferred: "Deferred",
  superseded: "Superseded",
  notStarted: "NotStarted",
  leaseLost: "LeaseLost",
  started: "Started",
  expired: "Expired",
  leaseExpired: "LeaseExpired",
  killed: "Killed",
  rangesClaimed: "RangesClaimed",
  rangesReclaimed: "RangesReclaimed",
  rangesQuarantined: "RangesQuarantined",
  capped: "Capped",
  rateLimited: "RateLimited",
} as const satisfies Partial<Record<keyof CycleReport, string>>;

/** The deployment's stage dimension, from SQLSTREAMS_STAGE (sst.config.ts sets it). */
export function stageFromEnv(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const s = env.SQLSTREAMS_STAGE?.trim();
  return s ? s.slice(0, 1024) : undefined;
}

/**
 * Handler run durations of one invocation, kept as a histogram so a document stays within EMF's
 * 100 values per metric whatever the number of runs.
 */
export class DurationHistogram {
  private readonly counts = new Map<number, number>();

  add(ms: number): void {
    if (!Number.isFinite(ms) || ms < 0) return;
    const v = Math.round(ms);
    this.counts.set(v, (this.counts.get(v) ?? 0) + 1);
  }

  get size(): number {
    return this.counts.size;
  }

  /** Values and counts, coarsened to fewer significant digits until at most 100 values remain. */
  toValues(): EmfValues | undefined {
    if (this.counts.size === 0) return undefined;
    let map = this.counts;
    for (let digits = 3; map.size > 100 && digits >= 1; digits--) {
      const coarse = new Map<number, number>();
      for (const [v, n] of this.counts) {
        const r = v === 0 ? 0 : Number(v.toPrecision(digits));
        coarse.set(r, (coarse.get(r) ?? 0) + n);
      }
      map = coarse;
    }
    const values = [...map.keys()].sort((a, b) => a - b).slice(0, 100);
    return { Values: values, Counts: values.map((v) => map.get(v) as number) };
  }
}

function document(
  dimensions: Record<string, string>,
  metrics: [name: string, unit: EmfUnit, value: number | EmfValues][],
  timestamp: number,
): EmfDocument {
  const doc: EmfDocument = {
    _aws: {
      Timestamp: timestamp,
      CloudWatchMetrics: [{ Namespace: NAMESPACE, Dimensions: [Object.keys(dimensions)], Metrics: [] }],
    },
    ...dimensions,
  };
  for (const [name, unit, value] of metrics) {
    doc._aws.CloudWatchMetrics[0].Metrics.push({ Name: name, Unit: unit });
    doc[name] = value;
  }
  return doc;
}

function dims(stream: string, group: string | undefined, stage: string | undefined): Record<string, string> {
  return { Stream: stream, ...(group !== undefined ? { Group: group } : {}), ...(stage !== undefined ? { Stage: stage } : {}) };
}

/**
 * The document of one poll invocation: its counts, the gauges read at its end (when the
 * progress could be read), the handler durations, and the invocation's own duration.
 */
export function pollDocument(input: {
  stream: string;
  group: string;
  stage?: string;
  report?: CycleReport;
  progress?: Pick<Progress, "lag" | "oldestUnresolvedAgeMs" | "exceptions"> & Partial<Pick<Progress, "blockedKeys" | "rateLimit">> | null;
  durations?: DurationHistogram;
  durationMs: number;
  error?: boolean;
  timestamp?: number;
  /** Continuations this invocation started (groups with `scale`). */
  continued?: number;
}): EmfDocument {
  const metrics: [string, EmfUnit, number | EmfValues][] = [];
  if (input.report) {
    for (const [field, name] of Object.entries(POLL_COUNTS)) {
      metrics.push([name, "Count", input.report[field as keyof typeof POLL_COUNTS]]);
    }
  }
  if (input.progress) {
    // Lag is a bigint in text; a gauge past 2^53 loses precision, not meaning.
    metrics.push(["Lag", "Count", Number(input.progress.lag)]);
    metrics.push(["OldestUnresolvedAgeMs", "Milliseconds", input.progress.oldestUnresolvedAgeMs ?? 0]);
    metrics.push(["DeadTotal", "Count", input.progress.exceptions.dead]);
    if (input.progress.blockedKeys !== undefined) metrics.push(["BlockedKeys", "Count", input.progress.blockedKeys]);
    // The group's rate limit, when it has one (docs/guide/configuration.md#ratelimit).
    if (input.progress.rateLimit) metrics.push(["RateLimitPerSecond", "Count/Second", input.progress.rateLimit.perSecond]);
  }
  if (input.continued !== undefined) {
    metrics.push(["Continued", "Count", input.continued]);
  }
  const hist = input.durations?.toValues();
  if (hist) metrics.push(["HandlerDuration", "Milliseconds", hist]);
  metrics.push(["PollDuration", "Milliseconds", Math.max(0, Math.round(input.durationMs))]);
  metrics.push(["PollErrors", "Count", input.error ? 1 : 0]);
  return document(dims(input.stream, input.group, input.stage), metrics, input.timestamp ?? Date.now());
}

/** One document per maintained stream. */
export function maintainDocuments(reports: Record<string, MaintainReport>, stage?: string, timestamp = Date.now()): EmfDocument[] {
  return Object.values(reports).map((r) =>
    document(
      dims(r.stream, undefined, stage),
      [
        ["PartitionsCreated", "Count", r.partitionsCreated],
        ["PartitionsDropped", "Count", r.partitionsDropped],
        ["RowsSwept", "Count", r.rowsSwept],
        ["RetentionHeldMs", "Milliseconds", r.retentionHeldMs ?? 0],
        ["MaintainErrors", "Count", r.errors.length],
      ],
      timestamp,
    ),
  );
}

/**
 * Where EMF documents go: the writer given, none for `false`, else stdout when running in Lambda
 * (AWS_LAMBDA_FUNCTION_NAME set) and nowhere elsewhere (tests, `sqlstreams dev`).
 */
export function metricsWriter(opt: LineWriter | false | undefined, stdout: LineWriter, env: NodeJS.ProcessEnv = process.env): LineWriter | null {
  if (opt === false) return null;
  if (opt !== undefined) return opt;
  return env.AWS_LAMBDA_FUNCTION_NAME ? stdout : null;
}
