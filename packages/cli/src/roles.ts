// grant-produce, revoke-produce and setup-roles: the database roles of a deployment
// (docs/guide/security.md), run as the schema's owner.
import { grantProduce, revokeProduce, setupRoles } from "@sqlstreams/core";
import type { CommandContext, Values } from "./context.js";
import { usageError } from "./errors.js";
import { str } from "./args.js";

function roleAndStream(positionals: string[], command: string): [string, string] {
  if (positionals.length !== 2) throw usageError(`expected <role> <stream>, got ${positionals.length} argument(s)`, command);
  return [positionals[0], positionals[1]];
}

export async function grant(ctx: CommandContext, positionals: string[], revoke: boolean): Promise<void> {
  const command = revoke ? "revoke-produce" : "grant-produce";
  const [role, stream] = roleAndStream(positionals, command);
  await (revoke ? revokeProduce : grantProduce)(ctx.client(), role, stream);
  if (ctx.json) ctx.printJson({ role, stream, produce: !revoke });
  else ctx.print(revoke ? `role ${role} may no longer produce to ${stream}` : `role ${role} may produce to ${stream} through ${ctx.client().schema}.produce()`);
}

export async function roles(ctx: CommandContext, v: Values): Promise<void> {
  const worker = str(v, "worker");
  const reader = str(v, "reader");
  if (worker === undefined && reader === undefined) throw usageError("pass --worker ROLE, --reader ROLE, or both", "setup-roles");
  await setupRoles(ctx.client(), { worker, reader });
  if (ctx.json) ctx.printJson({ worker: worker ?? null, reader: reader ?? null });
  else ctx.print(`roles set up in schema ${ctx.client().schema}:${worker ? ` worker ${worker}` : ""}${reader ? ` reader ${reader}` : ""}`);
}
