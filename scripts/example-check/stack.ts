// Step of scripts/example-check.sh: the example app's sst.config.ts through SST's real components
// offline (test/support/sst/harness.ts), with @sqlstreams/aws/sst resolved from the app's
// node_modules, i.e. the packed component. Asserts the stack an app gets for its declaration.
//   node scripts/example-check/stack.ts <app dir>     (Node >= 23.6: type stripping)
import assert from "node:assert/strict";
import { existsSync, realpathSync } from "node:fs";
import { join, relative } from "node:path";
import { pathToFileURL } from "node:url";
import { root, runSst, type SstRun } from "../../test/support/sst/harness.ts";

interface Group { stream: string; group: string; function: string; schedule: string }

const app = process.argv[2];
if (!app) throw new Error("usage: stack.ts <app dir>");
const config = relative(root, join(app, "sst.config.ts"));

// The component the bundle imports is the installed tarball's, not the repository's workspace.
const installed = realpathSync(join(app, "node_modules", "@sqlstreams", "aws"));
assert.ok(installed.startsWith(realpathSync(app)), `@sqlstreams/aws resolves to ${installed}, outside the app`);

const { groups } = (await import(pathToFileURL(join(app, "src", "streams", "groups.ts")).href)) as { groups: Group[] };
const pascal = (s: string) => s.split(/[^A-Za-z0-9]+/).filter(Boolean).map((w) => w[0]!.toUpperCase() + w.slice(1)).join("");
const FN = "aws:lambda/function:Function";
const SCHEDULE = "aws:scheduler/schedule:Schedule";
const ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm";

function checkDeploy(run: SstRun): void {
  assert.equal(run.app.name, "shop");
  for (const g of groups) {
    const id = `Streams${pascal(`${g.stream}-${g.group}`)}`;
    const fn = run.one(FN, `${id}PollerFunction`);
    assert.equal(fn.inputs.handler, g.function);
    assert.equal(fn.inputs.runtime, "nodejs24.x");
    const schedule = run.one(SCHEDULE, `${id}CronSchedule`);
    assert.equal(schedule.inputs.scheduleExpression, g.schedule);
    assert.deepEqual(JSON.parse(schedule.inputs.target.input as string), { stream: g.stream, group: g.group });
    for (const alarm of ["DeadLetters", "OldestUnresolved", "Errors", "Throttles"]) run.one(ALARM, `${id}${alarm}Alarm`);
    // SST builds the handler from the app's own source file.
    const file = g.function.slice(0, g.function.lastIndexOf("."));
    assert.ok(existsSync(join(app, `${file}.ts`)), `${file}.ts exists in the app`);
    const built = run.rpc.find((c) => c.method === "Runtime.Build" && c.params.functionID === `${id}Poller`);
    assert.equal(built?.params.handler, g.function);
  }
  assert.equal(run.of(ALARM).length, groups.length * 4);
  assert.equal(run.of(SCHEDULE).length, groups.length + 1); // + maintenance
  assert.equal(run.one(FN, "StreamsMigrateFunction").inputs.handler, "src/streams/migrate.handler");
  assert.equal(run.one(FN, "StreamsMaintainerFunction").inputs.handler, "src/streams/maintain.handler");
  for (const [key, out] of Object.entries(run.outputs)) assert.ok(out.known, `output ${key} is known`);
  assert.deepEqual(Object.keys(run.outputs.pollers!.value as object).sort(), groups.map((g) => `${g.stream}/${g.group}`).sort());
}

const deploy = await runSst({ config, stage: "ci" });
checkDeploy(deploy);
console.log(`ok: sst deploy of ${config}: ${deploy.resources.length} resources, ${groups.length} poll functions with schedules and 4 alarms each`);

const dev = await runSst({ config, stage: "ci", dev: true });
assert.equal(dev.of(SCHEDULE).length, 0);
assert.equal(dev.of("aws:lambda/invocation:Invocation").length, 0);
const devCommand = dev.one("sst:sst:DevCommand", "StreamsDev").outputs?._dev as { command?: unknown } | undefined;
assert.equal(devCommand?.command, "npx sqlstreams dev --groups src/streams/groups.ts");
assert.doesNotMatch(String(devCommand?.command), /--demo/, "sst dev never produces demo messages into the stage's streams");
console.log(`ok: sst dev: no schedules, no migrate invocation; the dev command runs ${JSON.stringify(devCommand?.command)}`);
