// sst.config.ts and the SqlStreams component (packages/aws/src/sst, built) run through SST's real
// components offline: `sst install` extracts the platform, the config is bundled the way the SST
// CLI bundles it and runs inside Pulumi with mocked providers (test/support/sst/harness.ts).
// Asserts the deployed shape of a deploy, of a preview in which the migrate invocation is being
// replaced, of `sst dev`, and of the existing-app fixture. No AWS account, no network besides the
// npm registry for the first `sst install`. See docs/guide/deployment.md#testing-the-stack.
process.env.AWS_EC2_METADATA_DISABLED = "true";

import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { beforeAll, describe, expect, it } from "vitest";
import { validateGroups, type GroupDeclaration } from "@sqlstreams/aws";
import { groups as declaredGroups } from "../../functions/groups.js";
import { ensurePlatform, root, runSst, type Registered, type SstRun } from "../support/sst/harness.js";

const FN = "aws:lambda/function:Function";
const SCHEDULE = "aws:scheduler/schedule:Schedule";
const ROLE = "aws:iam/role:Role";
const SG = "aws:ec2/securityGroup:SecurityGroup";
const INVOCATION = "aws:lambda/invocation:Invocation";
const MIGRATION = "StreamsMigrateOnDeploy";
const MOCK_PASSWORD = "mock-password-do-not-leak"; // what the mocked RandomPassword returns

const pascal = (s: string) => s.split(/[^A-Za-z0-9]+/).filter(Boolean).map((w) => w[0].toUpperCase() + w.slice(1)).join("");
const groups = declaredGroups as GroupDeclaration[];
const idOf = (g: GroupDeclaration) => pascal(`${g.stream}-${g.group}`);

interface Statement { actions: string[]; resources: string[]; effect?: string }
/** The statements of a function role's inline policy (the mocked getPolicyDocument renders them as given). */
function statementsOf(role: Registered): Statement[] {
  const inline = (role.inputs.inlinePolicies ?? []) as { policy: string }[];
  return inline.flatMap((p) => (JSON.parse(p.policy) as { Statement: Statement[] }).Statement);
}

const OWNER_FUNCTIONS = ["StreamsMigrateFunction", "StreamsMaintainerFunction"];
const INSTANCE_RESOURCE_ID = "db-MOCKINSTANCE0123456789"; // what the mocked RDS instance reports
const PROXY_RESOURCE_ID = "prx-0mock0123456789ab"; // the tail of the mocked RDS Proxy's ARN
const dbUser = (resourceId: string, user: string) => `arn:aws:rds-db:us-east-1:123456789012:dbuser:${resourceId}/${user}`;
/** The database user a function connects as: `owner` (the secret) or its IAM user. */
function databaseUserOf(fn: Registered): string {
  return (fn.inputs.environment.variables as Record<string, string>).SQLSTREAMS_DB_IAM_USER ?? "owner";
}
/**
 * A function's credentials: the owner reads the secret (and has no IAM user); an IAM user has
 * `rds-db:connect` on itself only, no secret ARN and no right to read the secret.
 */
function expectAccess(run: SstRun, fn: Registered, user: string, resourceId: string, secretArn: string, more: Statement[] = []): void {
  const env = fn.inputs.environment.variables as Record<string, string>;
  const statements = statementsOf(run.one(ROLE, `${fn.name.replace(/Function$/, "")}Role`));
  expect(databaseUserOf(fn), fn.name).toBe(user);
  if (user === "owner") {
    expect(env.SQLSTREAMS_DB_SECRET_ARN, fn.name).toBe(secretArn);
    expect(statements, fn.name).toEqual([{ actions: ["secretsmanager:GetSecretValue"], effect: "Allow", resources: [secretArn] }, ...more]);
  } else {
    expect(env.SQLSTREAMS_DB_SECRET_ARN, fn.name).toBeUndefined();
    expect(env.SQLSTREAMS_DB_REGION, fn.name).toBe("us-east-1");
    expect(statements, fn.name).toEqual([{ actions: ["rds-db:connect"], effect: "Allow", resources: [dbUser(resourceId, user)] }, ...more]);
  }
}

let deploy: SstRun;
let production: SstRun;
let preview: SstRun;
let dev: SstRun;
let typecheck: Promise<{ ok: boolean; output: string }>;

beforeAll(async () => {
  ensurePlatform();
  // The type check runs beside the programs (it takes the longest).
  typecheck = promisify(execFile)(process.execPath, [join(root, "node_modules/typescript/bin/tsc"), "-p", "tsconfig.sst.json"], { cwd: root })
    .then(() => ({ ok: true, output: "" }))
    .catch((e: { stdout?: string; message: string }) => ({ ok: false, output: e.stdout || e.message }));
  deploy = await runSst({ stage: "test" });
  // Production also deploys the optional dashboard (read-only: `true`).
  production = await runSst({ stage: "production", env: { SQLSTREAMS_RDS_PROXY: "true", SQLSTREAMS_DB_INSTANCE: "db.t4g.small", SQLSTREAMS_DASHBOARD: "true" } });
  preview = await runSst({ stage: "test", preview: true, replaced: [MIGRATION] });
  // `sst dev` also deploys a read-write dashboard.
  dev = await runSst({ stage: "test", dev: true, env: { SQLSTREAMS_DASHBOARD: "read-write" } });
}, 300_000);

describe("sst.config.ts with SST's real components", () => {
  it("type-checks against .sst/platform/config.d.ts (sst.config.ts, the component, the fixture)", async () => {
    const { ok, output } = await typecheck;
    expect(output).toBe("");
    expect(ok).toBe(true);
  }, 240_000);

  it("app(): AWS home; production is retained, other stages removable", () => {
    expect(production.app).toMatchObject({ name: "sqlstreams", home: "aws", removal: "retain", stage: "production" });
    expect(deploy.app).toMatchObject({ home: "aws", removal: "remove", stage: "test" });
  });

  it("one poll function and schedule per group: handler, sizes, runtime, and the schedule input names the group", () => {
    validateGroups(groups);
    expect(deploy.of(SCHEDULE)).toHaveLength(groups.length + 1); // + maintenance
    for (const g of groups) {
      const fn = deploy.one(FN, `Streams${idOf(g)}PollerFunction`);
      expect(fn.id).not.toBe("");
      expect(fn.inputs).toMatchObject({
        handler: g.function,
        runtime: "nodejs24.x",
        architectures: ["arm64"],
        timeout: (g.timeout ?? 60_000) / 1000,
        memorySize: g.memory ?? 256,
        description: `SQLStreams poller ${g.stream}/${g.group} (${g.mode ?? "drain"})`,
      });
      expect(fn.inputs.environment.variables.SQLSTREAMS_DB_IAM_USER).toBe("sqlstreams_worker");
      const schedule = deploy.one(SCHEDULE, `Streams${idOf(g)}CronSchedule`);
      expect(schedule.inputs.scheduleExpression).toBe(g.schedule);
      expect(JSON.parse(schedule.inputs.target.input as string)).toEqual({ stream: g.stream, group: g.group });
      expect(schedule.inputs.target.arn).toContain(fn.inputs.name);
      expect(schedule.inputs.target.retryPolicy).toEqual({ maximumRetryAttempts: 0 });
      // The code SST builds is the declared handler, and the file exists where SST looks for it.
      const built = deploy.rpc.find((c) => c.method === "Runtime.Build" && c.params.functionID === `Streams${idOf(g)}Poller`);
      expect(built?.params.handler).toBe(g.function);
      const file = g.function.slice(0, g.function.lastIndexOf("."));
      expect(existsSync(join(root, `${file}.ts`)), `${file}.ts`).toBe(true);
    }
    expect(deploy.one(FN, "StreamsMaintainerFunction").inputs.handler).toBe("functions/maintain.handler");
    expect(deploy.one(SCHEDULE, "StreamsMaintainCronSchedule").inputs.scheduleExpression).toBe("rate(5 minutes)");
  });

  it("per group: alarms on dead letters, the oldest unresolved age (declared threshold or 15 min), poll errors and throttles", () => {
    const ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm";
    expect(deploy.of(ALARM)).toHaveLength(groups.length * 4);
    for (const g of groups) {
      const fn = deploy.one(FN, `Streams${idOf(g)}PollerFunction`);
      // The poll function reports the Stage dimension the alarms select.
      expect(fn.inputs.environment.variables.SQLSTREAMS_STAGE).toBe("test");
      const ours = { Stream: g.stream, Group: g.group, Stage: "test" };
      const dead = deploy.one(ALARM, `Streams${idOf(g)}DeadLettersAlarm`).inputs;
      expect(dead).toMatchObject({ namespace: "SQLStreams", metricName: "Dead", dimensions: ours, statistic: "Sum", threshold: 0, comparisonOperator: "GreaterThanThreshold", treatMissingData: "notBreaching" });
      const oldest = deploy.one(ALARM, `Streams${idOf(g)}OldestUnresolvedAlarm`).inputs;
      const threshold = (g.alarms === false ? undefined : g.alarms?.oldestUnresolvedMs) ?? 15 * 60_000;
      expect(oldest).toMatchObject({ namespace: "SQLStreams", metricName: "OldestUnresolvedAgeMs", dimensions: ours, statistic: "Maximum", threshold });
      for (const key of ["Errors", "Throttles"]) {
        const a = deploy.one(ALARM, `Streams${idOf(g)}${key}Alarm`).inputs;
        expect(a).toMatchObject({ namespace: "AWS/Lambda", metricName: key, statistic: "Sum", threshold: 0 });
        expect(a.dimensions).toEqual({ FunctionName: fn.inputs.name });
      }
    }
    // The example declares the fraud-scoring threshold; apply-balance takes the default.
    expect(deploy.one(ALARM, "StreamsOrdersPlacedFraudScoringOldestUnresolvedAlarm").inputs.threshold).toBe(600_000);
    expect(deploy.one(ALARM, "StreamsLedgerAdjustmentsApplyBalanceOldestUnresolvedAlarm").inputs.threshold).toBe(900_000);
  });

  it("every output resolves: secret, host, migrate function and one poller per group", () => {
    for (const run of [deploy, preview]) {
      for (const [key, out] of Object.entries(run.outputs)) expect(out.known, key).toBe(true);
      expect(Object.keys(run.outputs.pollers.value as object).sort()).toEqual(groups.map((g) => `${g.stream}/${g.group}`).sort());
    }
  });

  it("credentials survive rotation: the functions read the instance's RDS-managed master secret; no secret of ours copies the password", () => {
    for (const run of [deploy, production]) {
      const instance = run.one("aws:rds/instance:Instance", "DatabaseInstance").inputs;
      expect(instance.manageMasterUserPassword).toBe(true);
      expect(instance.password).toBeUndefined();
      const managed = "arn:aws:secretsmanager:us-east-1:123456789012:secret:rds!db-databaseinstance-physical-AbCdEf";
      expect(run.outputs.databaseSecretArn.value).toBe(managed);
      // No secret of the component's; the only secret version left is SST's own proxy lookup
      // secret, holding a generated password the instance does not have.
      expect(run.of("aws:secretsmanager/secret:Secret").map((r) => r.name)).toEqual(["DatabaseProxySecret"]);
      expect(run.of("aws:secretsmanager/secretVersion:SecretVersion").map((r) => r.name)).toEqual(["DatabaseProxySecretVersion"]);
      for (const fn of run.of(FN)) {
        const env = fn.inputs.environment.variables as Record<string, string>;
        expect(env, fn.name).toMatchObject({ SQLSTREAMS_DB_PORT: "5432", SQLSTREAMS_DB_NAME: "sqlstreams" });
        expect(env.SQLSTREAMS_DB_HOST, fn.name).toMatch(run === production ? /databaseproxy-[a-z0-9]+\.proxy\.rds\.internal$/ : /^databaseinstance-physical\.rds\.internal$/);
        // The owner's functions (migrate, maintain) read the managed secret; the others sign in with IAM.
        if (OWNER_FUNCTIONS.includes(fn.name)) expectAccess(run, fn, "owner", "", managed);
        else expect(env.SQLSTREAMS_DB_SECRET_ARN, fn.name).toBeUndefined();
      }
    }
    // The RDS Proxy authenticates with the same managed secret, through a role that may read it.
    const proxy = production.one("aws:rds/proxy:Proxy", "DatabaseProxy").inputs;
    const managed = production.outputs.databaseSecretArn.value;
    expect(proxy.auths).toEqual([{ authScheme: "SECRETS", iamAuth: "DISABLED", secretArn: managed }]);
    // The worker and reader sign in through it with IAM, end to end.
    expect(proxy.defaultAuthScheme).toBe("IAM_AUTH");
    const role = production.one(ROLE, "DatabaseProxySecretRole");
    expect(proxy.roleArn).toContain(String(role.inputs.name ?? "databaseproxysecretrole-physical"));
    const policies = (role.inputs.inlinePolicies as { policy: string }[]).map((p) => (JSON.parse(p.policy) as { Statement: unknown[] }).Statement);
    expect(policies).toEqual([
      [{ Effect: "Allow", Action: ["secretsmanager:GetSecretValue"], Resource: [managed] }],
      // The proxy signs in to the instance as the worker and the reader only.
      [{ Effect: "Allow", Action: ["rds-db:connect"], Resource: [dbUser(INSTANCE_RESOURCE_ID, "sqlstreams_worker"), dbUser(INSTANCE_RESOURCE_ID, "sqlstreams_reader")] }],
    ]);
    expect(JSON.parse(role.inputs.assumeRolePolicy as string).Statement[0].Principal).toEqual({ Service: "rds.amazonaws.com" });
  });

  it("least privilege: migrate and maintain read the owner's secret; pollers connect as the worker with IAM (rds-db:connect on that user only); no password in any environment", () => {
    const secretArn = deploy.outputs.databaseSecretArn.value as string;
    const fns = deploy.of(FN);
    expect(fns.map((f) => f.name).sort()).toEqual([...OWNER_FUNCTIONS, ...groups.map((g) => `Streams${idOf(g)}PollerFunction`)].sort());
    for (const fn of fns) {
      const user = OWNER_FUNCTIONS.includes(fn.name) ? "owner" : "sqlstreams_worker";
      expectAccess(deploy, fn, user, INSTANCE_RESOURCE_ID, secretArn);
      const env = fn.inputs.environment.variables as Record<string, string>;
      expect(env.SQLSTREAMS_DB_CA).toBe("rds");
      expect(JSON.stringify(env)).not.toContain(MOCK_PASSWORD);
    }
    // Through the RDS Proxy the tokens are the proxy's: the poller may connect as the worker there.
    for (const g of groups) expectAccess(production, production.one(FN, `Streams${idOf(g)}PollerFunction`), "sqlstreams_worker", PROXY_RESOURCE_ID, secretArn);
  });

  it("database roles: the instance accepts IAM authentication; the migrate function creates the worker and reader (granted rds_iam)", () => {
    for (const run of [deploy, production]) {
      expect(run.one("aws:rds/instance:Instance", "DatabaseInstance").inputs.iamDatabaseAuthenticationEnabled).toBe(true);
      const migrate = run.one(FN, "StreamsMigrateFunction").inputs.environment.variables as Record<string, string>;
      expect(JSON.parse(migrate.SQLSTREAMS_DB_ROLES)).toEqual({ worker: "sqlstreams_worker", reader: "sqlstreams_reader", iam: true });
      for (const fn of run.of(FN).filter((f) => f.name !== "StreamsMigrateFunction")) expect(fn.inputs.environment.variables.SQLSTREAMS_DB_ROLES, fn.name).toBeUndefined();
    }
  });

  it("the optional dashboard: a read-only function behind an AWS_IAM Function URL that connects as the reader and nothing else", () => {
    // Not declared unless SQLSTREAMS_DASHBOARD is set.
    expect(deploy.of(FN).filter((f) => f.name.includes("Dashboard"))).toEqual([]);
    expect(deploy.of("aws:lambda/functionUrl:FunctionUrl")).toEqual([]);
    expect(deploy.outputs.dashboardUrl).toBeUndefined();

    const fn = production.one(FN, "StreamsDashboardFunction");
    expect(fn.inputs).toMatchObject({ handler: "functions/dashboard.handler", runtime: "nodejs24.x", timeout: 30, memorySize: 256 });
    expect(existsSync(join(root, "functions/dashboard.ts"))).toBe(true);
    const env = fn.inputs.environment.variables as Record<string, string>;
    const secretArn = production.outputs.databaseSecretArn.value as string;
    expect(env).toMatchObject({ SQLSTREAMS_DB_IAM_USER: "sqlstreams_reader", SQLSTREAMS_DASHBOARD_READ_ONLY: "1" });
    expect(env.SQLSTREAMS_WAKE).toBeUndefined();
    expect(JSON.stringify(env)).not.toContain(MOCK_PASSWORD);
    // The URL: IAM auth only (no public permission for "*"), pointing at this function.
    const urls = production.of("aws:lambda/functionUrl:FunctionUrl");
    expect(urls).toHaveLength(1);
    expect(urls[0].inputs.authorizationType).toBe("AWS_IAM");
    // No CORS headers for any origin (SST's default would allow "*").
    expect(urls[0].inputs.cors).toBeUndefined();
    expect(urls[0].inputs.functionName).toBe(fn.inputs.name);
    const publicGrants = production.of("aws:lambda/permission:Permission").filter((p) => p.inputs.principal === "*");
    expect(publicGrants).toEqual([]);
    expect(production.outputs.dashboardUrl).toMatchObject({ known: true, value: expect.stringMatching(/^https:\/\/.+\.lambda-url\./) });
    // Least privilege: connects as the reader through the proxy, nothing else (no secret, no
    // wake right, although the stack wakes).
    expectAccess(production, fn, "sqlstreams_reader", PROXY_RESOURCE_ID, secretArn);
    // A read-write dashboard (redrive, discard, pause, seek) writes: it connects as the worker.
    const readWrite = dev.one(FN, "StreamsDashboardFunction");
    expect(readWrite.inputs.environment.variables.SQLSTREAMS_DASHBOARD_READ_ONLY).toBe("0");
    expect(databaseUserOf(readWrite)).toBe("sqlstreams_worker");
    // (`sst dev` adds its live-function bridge's statements; ours are the rds-db:connect ones.)
    const connect = statementsOf(dev.one(ROLE, "StreamsDashboardRole")).filter((st) => st.actions.some((x) => x.startsWith("rds-db:") || x.startsWith("secretsmanager:")));
    expect(connect).toEqual([{ actions: ["rds-db:connect"], effect: "Allow", resources: [dbUser(INSTANCE_RESOURCE_ID, "sqlstreams_worker")] }]);
    // Deployed after the migration, in the functions' security group like every other function.
    expect(fn.dependsOn).toContain(MIGRATION);
    expect(fn.inputs.vpcConfig.securityGroupIds).toEqual([production.one(SG, "StreamsFunctionsSecurityGroup").id]);
  });

  it("TLS: the server requires it (rds.force_ssl = 1, requireTls on the proxy)", () => {
    for (const run of [deploy, production]) {
      const params = run.one("aws:rds/parameterGroup:ParameterGroup", "DatabaseParameterGroup").inputs.parameters as { name: string; value: string }[];
      expect(params.filter((p) => p.name === "rds.force_ssl")).toEqual([{ name: "rds.force_ssl", value: "1" }]);
    }
    expect(production.one("aws:rds/proxy:Proxy", "DatabaseProxy").inputs.requireTls).toBe(true);
  });

  it("network: the database and proxy in their own security group, 5432 only from the functions' group", () => {
    for (const run of [deploy, production]) {
      const functionsSg = run.one(SG, "StreamsFunctionsSecurityGroup");
      const dbSg = run.one(SG, "StreamsDatabaseSecurityGroup");
      expect(run.one("aws:rds/instance:Instance", "DatabaseInstance").inputs.vpcSecurityGroupIds).toEqual([dbSg.id]);
      const ingress = dbSg.inputs.ingress as { fromPort: number; toPort: number; securityGroups?: string[]; self?: boolean; cidrBlocks?: string[] }[];
      for (const rule of ingress) {
        expect([rule.fromPort, rule.toPort]).toEqual([5432, 5432]);
        expect(rule.cidrBlocks ?? []).toEqual([]);
      }
      expect(ingress.filter((r) => !r.self).map((r) => r.securityGroups)).toEqual([[functionsSg.id]]);
      for (const fn of run.of(FN)) expect(fn.inputs.vpcConfig.securityGroupIds, fn.name).toEqual([functionsSg.id]);
    }
    expect(production.one("aws:rds/proxy:Proxy", "DatabaseProxy").inputs.vpcSecurityGroupIds).toEqual([production.one(SG, "StreamsDatabaseSecurityGroup").id]);
  });

  it("production: deletion protection and a final snapshot; other stages neither; the instance class has one db. prefix", () => {
    const prod = production.one("aws:rds/instance:Instance", "DatabaseInstance").inputs;
    expect(prod).toMatchObject({ deletionProtection: true, skipFinalSnapshot: false, instanceClass: "db.t4g.small" });
    expect(prod.finalSnapshotIdentifier).toMatch(/^sqlstreams-production-[a-z0-9-]+-final$/);
    const test = deploy.one("aws:rds/instance:Instance", "DatabaseInstance").inputs;
    expect(test).toMatchObject({ deletionProtection: false, skipFinalSnapshot: true, instanceClass: "db.t4g.micro" });
  });

  it("migrates on every deploy, after the credentials, endpoint and database; pollers, schedules and maintainer after it", () => {
    const inv = deploy.one(INVOCATION, MIGRATION);
    expect(inv.inputs.functionName).toBe(deploy.one(FN, "StreamsMigrateFunction").inputs.name);
    expect(inv.inputs.triggers.deployedAt).toMatch(/^\d+$/);
    expect(inv.dependsOn.sort()).toEqual(["Database", "StreamsSecretsManagerEndpoint"]);
    for (const fn of deploy.of(FN).filter((f) => f.name !== "StreamsMigrateFunction")) expect(fn.dependsOn, fn.name).toContain(MIGRATION);
    for (const s of deploy.of(SCHEDULE)) expect(s.dependsOn, s.name).toContain(MIGRATION);
    // Never through the component options (they reach the region lookup: see the preview test).
    for (const c of deploy.of("sst:aws:Function")) expect(c.dependsOn, c.name).toEqual([]);
  });

  it("a preview that replaces the migrate invocation still registers every function, code upload, schedule and role", () => {
    expect(preview.one(INVOCATION, MIGRATION).id).toBe(""); // unknown, as in `sst diff`
    const names = (run: SstRun, type: string) => run.of(type).map((r) => r.name).sort();
    for (const type of [FN, SCHEDULE, ROLE, "aws:s3/bucketObjectv2:BucketObjectv2"]) {
      expect(names(preview, type), type).toEqual(names(deploy, type));
      expect(names(preview, type).length, type).toBeGreaterThan(0);
    }
    for (const g of groups) {
      const fn = preview.one(FN, `Streams${idOf(g)}PollerFunction`);
      expect(fn.inputs.handler).toBe(g.function);
      expect(JSON.parse(preview.one(SCHEDULE, `Streams${idOf(g)}CronSchedule`).inputs.target.input as string)).toEqual({ stream: g.stream, group: g.group });
    }
  });

  it("sst dev: no migrate invocation, no deployed schedules; the local scheduler runs as a dev command", () => {
    expect(dev.of(INVOCATION)).toHaveLength(0);
    expect(dev.of(SCHEDULE)).toHaveLength(0);
    const command = dev.one("sst:sst:DevCommand", "StreamsDev");
    // The scheduler only: never the demo workload (`--demo`) against the stage's database.
    expect(command.outputs?._dev).toMatchObject({ command: "npx sqlstreams dev", autostart: true });
    const targets = dev.rpc.filter((c) => c.method === "Runtime.AddTarget").map((c) => c.params.functionID);
    expect(targets).toContain("StreamsMigrate");
  });
});

describe("the SqlStreams component in an existing app (test/fixtures/sst-existing-app.config.ts)", () => {
  let rds: SstRun;
  let url: SstRun;
  let single: SstRun;
  let aurora: SstRun;
  let fixtureDev: SstRun;
  const config = "test/fixtures/sst-existing-app.config.ts";
  const NEON = "postgres://app:s3cret%21@ep-cool-1.eu-central-1.aws.neon.tech:5432/shop?sslmode=require";
  beforeAll(async () => {
    rds = await runSst({ config, stage: "staging" });
    url = await runSst({ config, stage: "staging", env: { FIXTURE_DATABASE: "url", SST_SECRET_ShopDatabaseUrl: NEON } });
    single = await runSst({ config, stage: "staging", env: { FIXTURE_ROLES: "off" } });
    aurora = await runSst({ config, stage: "staging", env: { FIXTURE_DATABASE: "aurora" } });
    fixtureDev = await runSst({ config, stage: "staging", dev: true });
  }, 300_000);

  it("creates migrate, poll (with its parallel schedules), maintain; the alarms hook runs per group", () => {
    for (const run of [rds, url]) {
      expect(run.one(FN, "StreamsOrdersPlacedEmailsPollerFunction").inputs).toMatchObject({ handler: "src/consumers/emails.handler", timeout: 120, memorySize: 512 });
      expect(run.one(FN, "StreamsMigrateFunction").inputs.handler).toBe("src/streams/migrate.handler");
      expect(run.one(FN, "StreamsMaintainerFunction").inputs.handler).toBe("src/streams/maintain.handler");
      const schedules = run.of(SCHEDULE).filter((s) => s.name.startsWith("StreamsOrdersPlacedEmailsCron"));
      expect(schedules.map((s) => s.name).sort()).toEqual(["StreamsOrdersPlacedEmailsCron2", "StreamsOrdersPlacedEmailsCronSchedule"]);
      for (const s of schedules) {
        expect(s.inputs.scheduleExpression).toBe("rate(10 minutes)");
        expect(JSON.parse(s.inputs.target.input as string)).toEqual({ stream: "orders.placed", group: "emails" });
        expect(s.dependsOn).toContain(MIGRATION);
      }
      expect(run.one("aws:cloudwatch/metricAlarm:MetricAlarm", "OrdersPlacedEmailsErrors").inputs.dimensions.FunctionName).toBe(
        run.one(FN, "StreamsOrdersPlacedEmailsPollerFunction").inputs.name,
      );
    }
  });

  it("link: [streams] gives a producer its database user (the worker with IAM; the secret without roles), the wake permission on the pollers, and the environment", () => {
    for (const run of [rds, url, single]) {
      const api = run.one(FN, "ShopApiFunction");
      const poller = run.one(FN, "StreamsOrdersPlacedEmailsPollerFunction");
      const secretArn = run.one(FN, "StreamsMigrateFunction").inputs.environment.variables.SQLSTREAMS_DB_SECRET_ARN as string;
      const user = run === rds ? "sqlstreams_worker" : "owner";
      const wake = { actions: ["lambda:InvokeFunction"], effect: "Allow", resources: [expect.stringContaining(poller.inputs.name as string)] };
      expectAccess(run, api, user, INSTANCE_RESOURCE_ID, secretArn, [wake]);
      // The poller connects as the same user, and may invoke nothing.
      expectAccess(run, poller, user, INSTANCE_RESOURCE_ID, secretArn);
      const env = api.inputs.environment.variables as Record<string, string>;
      expect(env).toMatchObject({ SQLSTREAMS_WAKE: "lambda" });
      // wakerFromEnv() of a linked producer finds the poller of each group.
      expect(JSON.parse(env.SQLSTREAMS_WAKE_FUNCTIONS)).toEqual({ "orders.placed/emails": poller.inputs.name });
      // Pollers do not wake anything themselves.
      expect(poller.inputs.environment.variables.SQLSTREAMS_WAKE).toBeUndefined();
      // Migrate and maintain are the owner's, whatever the roles.
      for (const name of OWNER_FUNCTIONS) expectAccess(run, run.one(FN, name), "owner", "", secretArn);
    }
  });

  it("an Aurora cluster: IAM authentication enabled; tokens scoped to the cluster's resource id; migrate and maintain the owner's", () => {
    expect(aurora.one("aws:rds/cluster:Cluster", "ShopDatabaseCluster").inputs.iamDatabaseAuthenticationEnabled).toBe(true);
    const secretArn = aurora.one(FN, "StreamsMigrateFunction").inputs.environment.variables.SQLSTREAMS_DB_SECRET_ARN as string;
    expect(secretArn).toMatch(/^arn:aws:secretsmanager:.*rds!db-/);
    expectAccess(aurora, aurora.one(FN, "StreamsOrdersPlacedEmailsPollerFunction"), "sqlstreams_worker", "cluster-MOCKCLUSTER0123456789", secretArn);
    for (const name of OWNER_FUNCTIONS) expectAccess(aurora, aurora.one(FN, name), "owner", "", secretArn);
  });

  it("roles: IAM on an RDS database by default; a URL database and roles: false keep the single secret and create no roles", () => {
    expect(rds.one("aws:rds/instance:Instance", "ShopDatabaseInstance").inputs.iamDatabaseAuthenticationEnabled).toBe(true);
    const rolesOf = (run: SstRun) => run.one(FN, "StreamsMigrateFunction").inputs.environment.variables.SQLSTREAMS_DB_ROLES as string | undefined;
    expect(JSON.parse(rolesOf(rds) ?? "null")).toEqual({ worker: "sqlstreams_worker", reader: "sqlstreams_reader", iam: true });
    expect(rolesOf(url)).toBeUndefined();
    expect(rolesOf(single)).toBeUndefined();
    for (const run of [url, single]) for (const fn of run.of(FN)) expect(databaseUserOf(fn), fn.name).toBe("owner");
  });

  it("idleTimeout reaches the pollers; devScheduler.groups the local scheduler's command", () => {
    for (const run of [rds, url, single]) {
      expect(run.one(FN, "StreamsOrdersPlacedEmailsPollerFunction").inputs.environment.variables.SQLSTREAMS_DB_IDLE_TIMEOUT_MS).toBe("10000");
      expect(run.one(FN, "StreamsMaintainerFunction").inputs.environment.variables.SQLSTREAMS_DB_IDLE_TIMEOUT_MS).toBeUndefined();
    }
    expect(fixtureDev.one("sst:sst:DevCommand", "StreamsDev").outputs?._dev).toMatchObject({ command: "npx sqlstreams dev --groups src/streams/groups.ts", autostart: true });
  });

  it("a URL in an sst.Secret: stored as an RDS-format secret, verified against the system CAs, no security groups of ours", () => {
    const value = JSON.parse(url.one("aws:secretsmanager/secretVersion:SecretVersion", "StreamsCredentialsValue").inputs.secretString as string);
    expect(value).toEqual({ engine: "postgres", username: "app", password: "s3cret!", host: "ep-cool-1.eu-central-1.aws.neon.tech", port: 5432, dbname: "shop" });
    const poller = url.one(FN, "StreamsOrdersPlacedEmailsPollerFunction");
    expect(poller.inputs.environment.variables.SQLSTREAMS_DB_CA).toBe("system");
    // A database that scales to zero is not held awake by idle pollers; RDS keeps the connection.
    expect(poller.inputs.environment.variables.SQLSTREAMS_DB_KEEP_CONNECTION).toBe("false");
    expect(rds.one(FN, "StreamsOrdersPlacedEmailsPollerFunction").inputs.environment.variables.SQLSTREAMS_DB_KEEP_CONNECTION).toBeUndefined();
    expect(JSON.stringify(poller.inputs.environment)).not.toContain("s3cret");
    expect(url.of(SG)).toHaveLength(0);
    expect(url.one(INVOCATION, MIGRATION).dependsOn.sort()).toEqual(["StreamsCredentialsValue", "StreamsSecretsManagerEndpoint"]);
    // The RDS variant locks its database down like this repository's stack.
    const params = rds.one("aws:rds/parameterGroup:ParameterGroup", "ShopDatabaseParameterGroup").inputs.parameters as { name: string; value: string }[];
    expect(params.find((p) => p.name === "rds.force_ssl")?.value).toBe("1");
    expect(rds.one("aws:rds/instance:Instance", "ShopDatabaseInstance").inputs.vpcSecurityGroupIds).toEqual([rds.one(SG, "ShopDatabaseSecurityGroup").id]);
  });
});
