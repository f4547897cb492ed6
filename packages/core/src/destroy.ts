// Placeholder until issue 7 lands (owned by the maintenance work).
import type { SqlStreams } from "./client.js";
import { SqlStreamsError } from "./errors.js";

export async function destroyGroup(_client: SqlStreams, stream: string, group: string, _opts: { force?: boolean }): Promise<void> {
  throw new SqlStreamsError("SQL0042", `destroy of ${stream}/${group} is not available yet`);
}
export async function destroyStream(_client: SqlStreams, stream: string, _opts: { force?: boolean }): Promise<void> {
  throw new SqlStreamsError("SQL0042", `destroy of ${stream} is not available yet`);
}
