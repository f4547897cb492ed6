/* eslint-disable @typescript-eslint/no-explicit-any -- stubs stand in for SST's untyped globals and resources */
// Evaluates sst.config.ts offline: SST's globals ($config, $app, $dev, sst, aws, $interpolate,
// $jsonStringify) are stubs that record every resource declared, and the test asserts the
// deployment's shape. No AWS account, no Pulumi, no network.
process.env.AWS_EC2_METADATA_DISABLED = "true";

import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { validateGroups, type GroupDeclaration } from "@sqlstreams/aws";
import { groups as declaredGroups } from "../functions/groups.js";

const root = join(import.meta.dirname, "..");
const DB_PASSWORD = "stub-master-password-do-not-leak";

interface Declared {
  kind: string;
  name: string;
  args: Record<string, any>;
  opts: Record<string, any> | undefined;
  self: any;
}

/** Installs stub globals; returns the list every constructor appends to. */
function stubSst(opts: { dev?: boolean; stage?: string } = {}): Declared[] {
  const declared: Declared[] = [];
  const g = globalThis as Record<string, unknown>;
  const resource = (kind: string, props: (name: string, args: any) => Record<string, unknown> = () => ({})) =>
    class {
      constructor(name: string, args: any = {}, o?: any) {
        Object.assign(this, props(name, args));
        declared.push({ kind, name, args, opts: o, self: this });
      }
    };
  g.$config = (c: unknown) => c;
  g.$app = { name: "sqlstreams", stage: opts.stage ?? "test", removal: "remove", protect: false };
  g.$dev = opts.dev ?? false;
  g.$interpolate = (strings: TemplateStringsArray, ...values: unknown[]) =>
    strings.reduce((acc, s, i) => acc + s + (i < values.length ? String(values[i]) : ""), "");
  g.$jsonStringify = (v: unknown) => ({ json: v });
  g.sst = {
    Linkable: resource("sst.Linkable", (_n, def) => ({ properties: def.properties })),
    aws: {
      permission: (p: object) => ({ type: "aws.permission", ...p }),
      Vpc: resource("sst.aws.Vpc", (n) => ({ id: `vpc-${n}`, privateSubnets: [`subnet-${n}-a`, `subnet-${n}-b`], securityGroups: [`sg-${n}`] })),
      Postgres: resource("sst.aws.Postgres", (n) => ({
        username: "postgres",
        password: DB_PASSWORD,
        host: `${n.toLowerCase()}.rds.internal`,
        port: 5432,
        database: "sqlstreams",
      })),
      Function: resource("sst.aws.Function", (n) => ({ name: `fn-${n}`, arn: `arn:aws:lambda:us-east-1:123456789012:function:fn-${n}` })),
      CronV2: resource("sst.aws.CronV2", (n) => ({ nodes: { role: { arn: `arn:aws:iam::123456789012:role/${n}Role` } } })),
    },
  };
  g.aws = {
    getRegionOutput: () => ({ region: "us-east-1" }),
    ec2: { VpcEndpoint: resource("aws.ec2.VpcEndpoint") },
    secretsmanager: {
      Secret: resource("aws.secretsmanager.Secret", (n) => ({ id: `secret-${n}`, arn: `arn:aws:secretsmanager:us-east-1:123456789012:secret:${n}` })),
      SecretVersion: resource("aws.secretsmanager.SecretVersion"),
    },
    lambda: { Invocation: resource("aws.lambda.Invocation") },
    scheduler: { Schedule: resource("aws.scheduler.Schedule") },
  };
  return declared;
}

async function evaluate(opts: { dev?: boolean; stage?: string; groups?: GroupDeclaration[] } = {}) {
  vi.resetModules();
  if (opts.groups) vi.doMock("../functions/groups.ts", () => ({ groups: opts.groups }));
  const declared = stubSst(opts);
  // A computed specifier: the type checker must not pull sst.config.ts (and SST's generated
  // global types, which exist only after `sst install`) into the test program.
  const configPath = "../sst.config.ts";
  const config = (await import(/* @vite-ignore */ configPath)).default as {
    app(input: { stage: string }): Record<string, unknown>;
    run(): Promise<Record<string, unknown>>;
  };
  const outputs = await config.run();
  const of = (kind: string) => declared.filter((d) => d.kind === kind);
  const one = (kind: string, name: string) => {
    const found = declared.filter((d) => d.kind === kind && d.name === name);
    expect(found, `${kind} ${name}`).toHaveLength(1);
    return found[0];
  };
  return { config, declared, outputs, of, one };
}

afterEach(() => {
  vi.doUnmock("../functions/groups.ts");
  vi.resetModules();
});

describe("sst.config.ts", () => {
  it("app(): AWS home; production is retained and protected, other stages removable", async () => {
    const { config } = await evaluate();
    expect(config.app({ stage: "production" })).toMatchObject({ name: "sqlstreams", home: "aws", removal: "retain", protect: true });
    expect(config.app({ stage: "pr-12" })).toMatchObject({ home: "aws", removal: "remove", protect: false });
  });

  it("declares one CronV2 per group of functions/groups.ts, with its function, schedule and event", async () => {
    validateGroups(declaredGroups);
    const { of, one } = await evaluate();
    const crons = of("sst.aws.CronV2");
    expect(crons).toHaveLength(declaredGroups.length + 1); // + maintenance
    const vpc = one("sst.aws.Vpc", "Vpc").self;
    const link = one("sst.Linkable", "DatabaseSecret").self;
    for (const g of declaredGroups as GroupDeclaration[]) {
      const forGroup = crons.filter((c) => c.args.event?.stream === g.stream && c.args.event?.group === g.group);
      expect(forGroup, `${g.stream}/${g.group}`).toHaveLength(1);
      const cron = forGroup[0];
      expect(cron.args.event).toEqual({ stream: g.stream, group: g.group });
      expect(cron.args.schedule).toBe(g.schedule);
      expect(cron.args.retries).toBe(0);
      const fn = of("sst.aws.Function").find((f) => f.self === cron.args.function);
      expect(fn, "the cron's function").toBeDefined();
      expect(fn!.args.handler).toBe(g.function);
      expect(fn!.args.timeout).toBe(`${(g.timeout ?? 60_000) / 1000} seconds`);
      expect(fn!.args.memory).toBe(`${g.memory ?? 256} MB`);
      expect(fn!.args.runtime).toBe("nodejs22.x");
      expect(fn!.args.retries).toBe(0);
      expect(fn!.args.vpc).toBe(vpc);
      expect(fn!.args.link).toEqual([link]);
      // The handler file exists where SST will look for it.
      const file = g.function.slice(0, g.function.lastIndexOf("."));
      expect(existsSync(join(root, `${file}.ts`)), `${file}.ts`).toBe(true);
    }
    // parallelism 1 everywhere in the example: no extra schedules.
    expect(of("aws.scheduler.Schedule")).toHaveLength(0);
  });

  it("links the database secret: ARN in the environment, read access to that secret only, no password anywhere", async () => {
    const { of, one } = await evaluate();
    const secret = one("aws.secretsmanager.Secret", "DatabaseCredentials").self;
    const version = one("aws.secretsmanager.SecretVersion", "DatabaseCredentialsValue");
    expect(version.args.secretId).toBe(secret.id);
    // The RDS secret JSON, built from the database's outputs.
    expect(version.args.secretString.json).toMatchObject({
      username: "postgres",
      password: DB_PASSWORD,
      host: "database.rds.internal",
      port: 5432,
      dbname: "sqlstreams",
    });
    const link = one("sst.Linkable", "DatabaseSecret");
    expect(link.args.properties).toEqual({ arn: secret.arn });
    expect(link.args.include).toEqual([{ type: "aws.permission", actions: ["secretsmanager:GetSecretValue"], resources: [secret.arn] }]);

    const db = one("sst.aws.Postgres", "Database").self;
    const functions = of("sst.aws.Function");
    expect(functions.map((f) => f.name).sort()).toEqual(["Maintainer", "Migrate", "LedgerAdjustmentsApplyBalancePoller", "OrdersPlacedFraudScoringPoller"].sort());
    for (const f of functions) {
      expect(f.args.environment.SQLSTREAMS_DB_SECRET_ARN, f.name).toBe(secret.arn);
      expect(f.args.environment.NODE_EXTRA_CA_CERTS).toBe("/var/runtime/ca-cert.pem");
      expect(f.args.link, f.name).toEqual([link.self]);
      expect(f.args.link).not.toContain(db);
      expect(f.args.permissions, f.name).toBeUndefined();
      expect(f.args.policies, f.name).toBeUndefined();
      expect(JSON.stringify(f.args.environment)).not.toContain(DB_PASSWORD);
    }
  });

  it("the VPC reaches Secrets Manager through an interface endpoint; the database lives in it", async () => {
    const { one } = await evaluate();
    const vpc = one("sst.aws.Vpc", "Vpc").self;
    const ep = one("aws.ec2.VpcEndpoint", "SecretsManagerEndpoint");
    expect(ep.args).toMatchObject({
      vpcId: vpc.id,
      serviceName: "com.amazonaws.us-east-1.secretsmanager",
      vpcEndpointType: "Interface",
      privateDnsEnabled: true,
      subnetIds: vpc.privateSubnets,
      securityGroupIds: vpc.securityGroups,
    });
    expect(one("sst.aws.Postgres", "Database").args.vpc).toBe(vpc);
  });

  it("invokes the migrate function on every deploy, and the group functions and schedules depend on it", async () => {
    const { one, of } = await evaluate();
    const migrate = one("sst.aws.Function", "Migrate");
    expect(migrate.args.handler).toBe("functions/migrate.handler");
    const inv = one("aws.lambda.Invocation", "MigrateOnDeploy");
    expect(inv.args.functionName).toBe(migrate.self.name);
    expect(typeof inv.args.triggers.deployedAt).toBe("string");
    const deps = inv.opts?.dependsOn ?? [];
    expect(deps).toContain(one("aws.secretsmanager.SecretVersion", "DatabaseCredentialsValue").self);
    expect(deps).toContain(one("aws.ec2.VpcEndpoint", "SecretsManagerEndpoint").self);
    expect(deps).toContain(one("sst.aws.Postgres", "Database").self);
    const pollers = of("sst.aws.Function").filter((f) => f.name.endsWith("Poller"));
    expect(pollers).toHaveLength(declaredGroups.length);
    for (const f of pollers) expect(f.opts?.dependsOn, f.name).toEqual([inv.self]);
    for (const c of of("sst.aws.CronV2").filter((c) => c.args.event)) expect(c.opts?.dependsOn).toEqual([inv.self]);

    // A second evaluation (the next deploy) changes the trigger, so the invocation runs again.
    await new Promise((r) => setTimeout(r, 5));
    const next = await evaluate();
    const inv2 = next.one("aws.lambda.Invocation", "MigrateOnDeploy");
    expect(inv2.args.triggers.deployedAt).not.toBe(inv.args.triggers.deployedAt);
  });

  it("runs maintenance every 5 minutes", async () => {
    const { one } = await evaluate();
    const fn = one("sst.aws.Function", "Maintainer");
    expect(fn.args.handler).toBe("functions/maintain.handler");
    const cron = one("sst.aws.CronV2", "MaintainCron");
    expect(cron.args.function).toBe(fn.self);
    expect(cron.args.schedule).toBe("rate(5 minutes)");
    expect(cron.args.retries).toBe(0);
  });

  it("parallelism N adds N-1 schedules on the same function and role; sst dev skips the migrate invocation", async () => {
    const groups: GroupDeclaration[] = [
      { stream: "a.stream", group: "fan", function: "functions/handlers/fraud-scoring.handler", schedule: "rate(1 minute)", parallelism: 3, timeout: 120_000, memory: 512 },
    ];
    const { of, one } = await evaluate({ groups });
    const cron = one("sst.aws.CronV2", "AStreamFanCron");
    const fn = one("sst.aws.Function", "AStreamFanPoller");
    expect(fn.args).toMatchObject({ timeout: "120 seconds", memory: "512 MB" });
    const extra = of("aws.scheduler.Schedule");
    expect(extra.map((s) => s.name)).toEqual(["AStreamFanCron2", "AStreamFanCron3"]);
    for (const s of extra) {
      expect(s.args.scheduleExpression).toBe("rate(1 minute)");
      expect(s.args.target).toMatchObject({
        arn: fn.self.arn,
        roleArn: cron.self.nodes.role.arn,
        input: JSON.stringify({ stream: "a.stream", group: "fan" }),
        retryPolicy: { maximumRetryAttempts: 0 },
      });
    }

    const dev = await evaluate({ dev: true });
    expect(dev.of("aws.lambda.Invocation")).toHaveLength(0);
    for (const f of dev.of("sst.aws.Function")) expect(f.opts?.dependsOn ?? []).toEqual([]);
  });
});
