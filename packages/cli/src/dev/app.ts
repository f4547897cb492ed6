// The app's deployment as `sqlstreams dev` and `doctor` read it: the declaration file (--groups,
// TypeScript or JavaScript) and the handlers its groups name.
//
//   --groups FILE   a .ts/.mts/.cts/.js/.mjs/.cjs module exporting `groups` (GroupDeclaration[]),
//                   and optionally `streams` (StreamDeclarations) and `maintainSchedule`; without
//                   it, the first of functions/groups.{ts,mts,js,mjs} in the current directory
//   handlers        a group's `function` "src/handlers/orders.handler" is the file
//                   src/handlers/orders.{ts,mts,tsx,cts,js,mjs,cjs} under the app's root (the
//                   current directory, where sst.config.ts is: SST resolves `handler` paths from
//                   there too) and its export `handler`
//
// TypeScript is loaded with tsx's namespaced loader: no global hook, one module graph for the
// declaration and the handlers (a handler importing the declaration sees the same module), and
// the app's own tsconfig.json (paths, decorators) where it has one.
import { existsSync, statSync } from "node:fs";
import { extname, relative, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { SqlStreamsError, type CycleReport, type StreamOptions } from "@sqlstreams/core";
import type { GroupDeclaration, LambdaContext } from "@sqlstreams/aws";

export type PollFn = (event: { stream: string; group: string }, context: LambdaContext) => Promise<CycleReport>;

export interface LoadedGroup {
  declaration: GroupDeclaration;
  /** The handler's file, relative to the app's root (for display). */
  file: string;
  exportName: string;
  handler: PollFn;
}

export interface Declaration {
  /** The declaration file, absolute, and as the user would name it (relative to the root). */
  file: string;
  shown: string;
  root: string;
  groups: GroupDeclaration[];
  streams: Record<string, StreamOptions>;
  /** The maintain function's schedule: the declaration's `maintainSchedule`, else rate(5 minutes) as deployed. */
  maintainSchedule: string;
}

export interface Deployment extends Declaration {
  loaded: LoadedGroup[];
}

export const DEFAULT_MAINTAIN_SCHEDULE = "rate(5 minutes)";
export const DEFAULT_GROUPS_FILES = ["functions/groups.ts", "functions/groups.mts", "functions/groups.js", "functions/groups.mjs"];
const DECLARATION_EXTENSIONS = [".ts", ".mts", ".cts", ".js", ".mjs", ".cjs"];
const HANDLER_EXTENSIONS = [".ts", ".mts", ".tsx", ".cts", ".js", ".mjs", ".cjs"];

function loadError(message: string, details: Record<string, unknown> = {}, cause?: unknown): SqlStreamsError {
  return new SqlStreamsError("SQL0070", message, details, cause);
}

let loader: ((specifier: string, parent: string) => Promise<unknown>) | undefined;

/** Imports a module of the app (TypeScript or JavaScript) through tsx's scoped loader. */
async function importModule(file: string, shown: string): Promise<Record<string, unknown>> {
  if (!loader) {
    const { register } = await import("tsx/esm/api");
    loader = register({ namespace: "sqlstreams-app" }).import;
  }
  try {
    return (await loader(pathToFileURL(file).href, import.meta.url)) as Record<string, unknown>;
  } catch (e) {
    // The first lines say what failed (esbuild's "Transform failed" names file, line and error next).
    const lines = (e instanceof Error ? e.message : String(e)).split("\n").map((l) => l.trim()).filter((l) => l !== "");
    const why = lines.slice(0, 3).join(" ").slice(0, 500);
    throw loadError(`${shown} failed to load: ${why}`, { file: shown }, e);
  }
}

/**
 * The declaration file: `option` (--groups) resolved from `cwd`, or the first default file that
 * exists. Coded SQL0070 when there is none, it is missing, or its extension is not a module's.
 */
export function findDeclaration(option: string | undefined, cwd: string, command: string): string {
  if (option === undefined) {
    const found = DEFAULT_GROUPS_FILES.map((f) => resolve(cwd, f)).find((f) => existsSync(f));
    if (found) return found;
    throw loadError(
      `no group declaration: none of ${DEFAULT_GROUPS_FILES.join(", ")} exists in ${cwd}; pass \`sqlstreams ${command} --groups PATH\` with the file that exports your \`groups\` array, from the app's root`,
      { cwd },
    );
  }
  const file = resolve(cwd, option);
  const ext = extname(file);
  if (!DECLARATION_EXTENSIONS.includes(ext)) {
    throw loadError(`--groups ${option}: ${ext ? `"${ext}" is not a module extension` : "the file has no extension"}; pass a ${DECLARATION_EXTENSIONS.join(", ")} file that exports \`groups\``, { file: option });
  }
  if (!existsSync(file) || !statSync(file).isFile()) throw loadError(`--groups ${option}: no such file (looked at ${file})`, { file: option });
  return file;
}

/** Loads and validates the declaration (validateGroups: SQL0015 and the other declaration codes). */
export async function loadDeclaration(file: string, root: string): Promise<Declaration> {
  const shown = relative(root, file) || file;
  const mod = await importModule(file, shown);
  if (!Array.isArray(mod.groups)) {
    const has = Object.keys(mod).filter((k) => k !== "__esModule");
    throw loadError(
      `${shown} has no \`groups\` export (an array of GroupDeclaration)${has.length ? `; it exports ${has.slice(0, 8).join(", ")}` : ""}: add \`export const groups = [ … ] satisfies GroupDeclaration[]\``,
      { file: shown, exports: has },
    );
  }
  const { validateGroups } = await import("@sqlstreams/aws");
  const groups = validateGroups(mod.groups as GroupDeclaration[]);
  const streams = (mod.streams ?? {}) as Record<string, StreamOptions>;
  const maintainSchedule = typeof mod.maintainSchedule === "string" ? mod.maintainSchedule : DEFAULT_MAINTAIN_SCHEDULE;
  return { file, shown, root, groups: [...groups], streams, maintainSchedule };
}

/** `src/handlers/x.handler` → the existing file src/handlers/x.<ext> under `root`, and "handler". */
export function handlerFile(root: string, d: GroupDeclaration): { file: string; exportName: string } {
  const fn = d.function;
  const dot = fn.lastIndexOf(".");
  const base = resolve(root, fn.slice(0, dot));
  const exportName = fn.slice(dot + 1);
  const file = HANDLER_EXTENSIONS.map((e) => base + e).find((f) => existsSync(f));
  if (!file) {
    const shownBase = relative(root, base);
    throw loadError(
      `${d.stream}/${d.group}: function ${JSON.stringify(fn)} names ${shownBase}.{${HANDLER_EXTENSIONS.map((e) => e.slice(1)).join(",")}}, and none exists under ${root}; run the command in the app's root, or correct \`function\` (<path from the app's root, no extension>.<export>)`,
      { stream: d.stream, group: d.group, function: fn, root },
    );
  }
  return { file, exportName };
}

/** The declaration and every group's handler, imported. */
export async function loadDeployment(option: string | undefined, cwd: string, command: string): Promise<Deployment> {
  const decl = await loadDeclaration(findDeclaration(option, cwd, command), cwd);
  const loaded: LoadedGroup[] = [];
  for (const d of decl.groups) {
    const { file, exportName } = handlerFile(cwd, d);
    const shown = relative(cwd, file);
    const handler = (await importModule(file, shown))[exportName];
    if (typeof handler !== "function") {
      throw loadError(
        `${d.stream}/${d.group}: ${shown} has no exported function ${JSON.stringify(exportName)} (named by function ${JSON.stringify(d.function)}); export it: export const ${exportName} = createPollHandler({ … })`,
        { stream: d.stream, group: d.group, function: d.function, file: shown },
      );
    }
    loaded.push({ declaration: d, file: shown, exportName, handler: handler as PollFn });
  }
  return { ...decl, loaded };
}
