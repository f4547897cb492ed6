// Reading the parsed command-line values: shared by every command module.
import type { Values } from "./context.js";
import { usageError } from "./errors.js";

/** A string option's value, or undefined when it was not given (or given as a flag). */
export function str(v: Values, name: string): string | undefined {
  const x = v[name];
  return typeof x === "string" ? x : undefined;
}

/** A string option the command cannot run without (usage error when missing or empty). */
export function required(v: Values, name: string, command: string): string {
  const x = str(v, name);
  if (x === undefined || x === "") throw usageError(`--${name} is required`, command);
  return x;
}
