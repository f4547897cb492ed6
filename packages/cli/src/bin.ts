#!/usr/bin/env node
// Entry point of the `sqlstreams` command (also what `npm start` runs: `node packages/cli/dist/bin.js dev`).
import { main } from "./cli.js";

const argv = process.argv.slice(2);
const code = await main(argv);
process.exitCode = code;
// `dev` ran the bundled functions in this process; their connection pools (kept open across warm
// invocations, as on Lambda) would keep it alive. Everything of its own is closed by now.
if (argv[0] === "dev") process.stdout.write("", () => process.exit(code));
