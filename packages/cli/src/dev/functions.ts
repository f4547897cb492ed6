// Loading the deployment the way Lambda would run it: the esbuild bundles that `npm run build`
// (scripts/bundle.mjs) writes to .build/functions, one per entry point of functions/:
//   .build/functions/groups.mjs               export groups (GroupDeclaration[]), streams?, maintainSchedule?
//   .build/functions/handlers/<name>.mjs      the poll handler named by a group's `function`
//   .build/functions/maintain.mjs             export handler (maintenance)
//   .build/functions/migrate.mjs              export handler (migrate + register groups.ts)
// A group's `function` "functions/handlers/fraud-scoring.handler" is the file
// functions/handlers/fraud-scoring (under the build directory, .mjs) and its export `handler`.
import { existsSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import type { CycleReport, MaintainReport, StreamOptions } from "@sqlstreams/core";
import type { GroupDeclaration, LambdaContext } from "@sqlstreams/aws";
import { CliError } from "../errors.js";

export type PollFn = (event: { stream: string; group: string }, context: LambdaContext) => Promise<CycleReport>;
export type MaintainFn = (event: unknown, context: LambdaContext) => Promise<Record<string, MaintainReport>>;
export type MigrateFn = (event: unknown, context?: LambdaContext) => Promise<unknown>;

export interface LoadedGroup {
  declaration: GroupDeclaration;
  /** The bundle file, relative to the working directory (for display). */
  file: string;
  exportName: string;
  handler: PollFn;
}

export interface Deployment {
  buildDir: string;
  groups: LoadedGroup[];
  streams: Record<string, StreamOptions>;
  /** The maintain function's schedule: groups.mjs `maintainSchedule`, else rate(5 minutes) as deployed. */
  maintainSchedule: string;
  maintain?: MaintainFn;
  migrate?: MigrateFn;
}

export const DEFAULT_MAINTAIN_SCHEDULE = "rate(5 minutes)";
const BUILD_FIX = "run `npm run build` (scripts/bundle.mjs bundles functions/ into .build/functions), or pass --build DIR";

async function importFile(file: string): Promise<Record<string, unknown>> {
  return (await import(pathToFileURL(file).href)) as Record<string, unknown>;
}

/** `functions/handlers/x.handler` → { file: <build>/functions/handlers/x.mjs, exportName: "handler" }. */
export function bundleOf(buildDir: string, fn: string): { file: string; exportName: string } {
  const dot = fn.lastIndexOf(".");
  if (dot <= 0 || dot === fn.length - 1) throw new CliError(`function ${JSON.stringify(fn)} is not <path>.<export>`, "write it like functions/handlers/fraud-scoring.handler");
  return { file: join(buildDir, `${fn.slice(0, dot)}.mjs`), exportName: fn.slice(dot + 1) };
}

export async function loadDeployment(buildDirOption: string, cwd: string): Promise<Deployment> {
  const buildDir = resolve(cwd, buildDirOption);
  const groupsFile = join(buildDir, "functions", "groups.mjs");
  if (!existsSync(groupsFile)) throw new CliError(`no bundled groups declaration at ${relative(cwd, groupsFile) || groupsFile}`, BUILD_FIX);
  const mod = await importFile(groupsFile);
  const declared = mod.groups;
  const { validateGroups } = await import("@sqlstreams/aws");
  validateGroups(declared as GroupDeclaration[]);
  const groups: LoadedGroup[] = [];
  for (const d of declared as GroupDeclaration[]) {
    const { file, exportName } = bundleOf(buildDir, d.function);
    if (!existsSync(file)) throw new CliError(`${d.stream}/${d.group}: no bundle ${relative(cwd, file)} for function ${d.function}`, BUILD_FIX);
    const handler = (await importFile(file))[exportName];
    if (typeof handler !== "function") {
      throw new CliError(`${d.stream}/${d.group}: ${relative(cwd, file)} has no exported function ${JSON.stringify(exportName)}`, `export const ${exportName} = createPollHandler({ … }) in the handler file`);
    }
    groups.push({ declaration: d, file: relative(cwd, file), exportName, handler: handler as PollFn });
  }
  const optional = async (name: string) => {
    const f = join(buildDir, "functions", `${name}.mjs`);
    if (!existsSync(f)) return undefined;
    const h = (await importFile(f)).handler;
    return typeof h === "function" ? h : undefined;
  };
  const streams = (mod.streams ?? {}) as Record<string, StreamOptions>;
  const maintainSchedule = typeof mod.maintainSchedule === "string" ? mod.maintainSchedule : DEFAULT_MAINTAIN_SCHEDULE;
  return {
    buildDir,
    groups,
    streams,
    maintainSchedule,
    maintain: (await optional("maintain")) as MaintainFn | undefined,
    migrate: (await optional("migrate")) as MigrateFn | undefined,
  };
}
