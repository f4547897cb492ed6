// @sqlstreams/cli as a library: run the command line programmatically, and the schedule parser
// that `sqlstreams dev` uses for the expressions of functions/groups.ts.
export { main, COMMANDS } from "./cli.js";
export type { Io } from "./context.js";
export { parseSchedule, nextCronTime, type Schedule, type CronFields } from "./schedule.js";
export { maskUrl } from "./format.js";
