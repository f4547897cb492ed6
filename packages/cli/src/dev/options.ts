// The options of `sqlstreams dev`, parsed and checked (SQL0015 with a pointer to the help).
import type { Values } from "../context.js";
import { usageError } from "../errors.js";

export interface DevOptions {
  once: boolean;
  timeoutMs: number;
  tickMs: number | undefined;
  speed: number | undefined;
  budgetMs: number | undefined;
  /** The declaration file as given (--groups), or undefined for the default files. */
  groups: string | undefined;
  /** --demo: produce a demo workload into the declared streams. Off by default: nothing is produced. */
  demo: boolean;
  messages: number;
  dataDir: string;
  port: number | undefined;
  logFile: string;
  dashboard: boolean;
  dashboardPort: number | undefined;
}

/** How often the view reads every group's progress (and --once checks convergence). */
export const REFRESH_MS = 500;
/** With --tick, maintain runs every this many ticks (rate(5 minutes) against rate(1 minute)). */
export const MAINTAIN_TICKS = 5;

function num(v: Values, name: string, min: number, max: number, integer = true): number | undefined {
  const x = v[name];
  if (typeof x !== "string") return undefined;
  const n = Number(x);
  if (x.trim() === "" || !Number.isFinite(n) || (integer && !Number.isInteger(n)) || n < min || n > max) {
    throw usageError(`--${name} must be ${integer ? "an integer" : "a number"} between ${min} and ${max}, got ${JSON.stringify(x)}`, "dev");
  }
  return n;
}

export function devOptions(v: Values): DevOptions {
  const tickMs = num(v, "tick", 100, 3_600_000);
  const speed = num(v, "speed", 0.001, 1_000_000, false);
  if (tickMs !== undefined && speed !== undefined) throw usageError("pass --tick or --speed, not both", "dev");
  const demo = v.demo === true;
  const messages = num(v, "messages", 0, 100_000);
  if (messages !== undefined && !demo) throw usageError("--messages sizes the demo workload: pass it with --demo", "dev");
  return {
    once: v.once === true,
    timeoutMs: (num(v, "timeout", 1, 86_400) ?? 120) * 1_000,
    tickMs: speed === undefined ? (tickMs ?? 2_000) : undefined,
    speed,
    budgetMs: num(v, "budget", 1_000, 900_000),
    groups: typeof v.groups === "string" ? v.groups : undefined,
    demo,
    messages: messages ?? 300,
    dataDir: typeof v["data-dir"] === "string" ? v["data-dir"] : ".sqlstreams/dev-pg",
    port: num(v, "port", 1, 65_535),
    logFile: typeof v["log-file"] === "string" ? v["log-file"] : ".sqlstreams/dev.log",
    dashboard: v["no-dashboard"] !== true,
    dashboardPort: num(v, "dashboard-port", 0, 65_535),
  };
}
