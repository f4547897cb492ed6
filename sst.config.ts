/// <reference path="./.sst/platform/config.d.ts" />
// SQLStreams on AWS (sst 4.17): a VPC, an RDS Postgres and an RDS-format secret, a migrate
// invocation on every deploy, one poll function + EventBridge Scheduler schedule per group of
// functions/groups.ts, and the maintenance schedule. `npm run build` first (the functions import
// the built workspace packages), then `npx sst deploy --stage <name>`.
//
// Deploy-time settings (environment of the machine running `sst deploy`):
//   SQLSTREAMS_NAT=ec2|managed     add a NAT so handlers can reach the internet (default: none;
//                                  Secrets Manager is reached through a VPC endpoint)
//   SQLSTREAMS_RDS_PROXY=true      put an RDS Proxy in front of the database
//   SQLSTREAMS_DB_INSTANCE=t4g.small  instance class (default t4g.micro)

export default $config({
  app(input) {
    return {
      name: "sqlstreams",
      home: "aws",
      removal: input?.stage === "production" ? "retain" : "remove",
      protect: input?.stage === "production",
    };
  },
  async run() {
    const { groups } = await import("./functions/groups.js");

    // PascalCase identifier for resource names: "orders.placed" + "fraud-scoring" -> OrdersPlacedFraudScoring.
    const pascal = (s: string) =>
      s
        .split(/[^A-Za-z0-9]+/)
        .filter(Boolean)
        .map((w) => w[0].toUpperCase() + w.slice(1))
        .join("");
    const seconds = (ms: number) => `${Math.ceil(ms / 1000)} seconds` as const;

    // Network: functions and database in private subnets. The functions reach Secrets Manager
    // through an interface endpoint (no internet path needed); a NAT is optional.
    const nat = process.env.SQLSTREAMS_NAT as "ec2" | "managed" | undefined;
    const vpc = new sst.aws.Vpc("Vpc", nat ? { nat } : {});
    const secretsEndpoint = new aws.ec2.VpcEndpoint("SecretsManagerEndpoint", {
      vpcId: vpc.id,
      serviceName: $interpolate`com.amazonaws.${aws.getRegionOutput().region}.secretsmanager`,
      vpcEndpointType: "Interface",
      privateDnsEnabled: true,
      subnetIds: vpc.privateSubnets,
      securityGroupIds: vpc.securityGroups,
    });

    const database = new sst.aws.Postgres("Database", {
      vpc,
      instance: process.env.SQLSTREAMS_DB_INSTANCE ?? "t4g.micro",
      storage: "20 GB",
      proxy: process.env.SQLSTREAMS_RDS_PROXY === "true",
    });

    // The credentials the functions use, in the RDS secret format. The functions get only its
    // ARN (never the password in their environment) and may only read this one secret.
    const credentials = new aws.secretsmanager.Secret("DatabaseCredentials", {
      description: $interpolate`SQLStreams ${$app.name}/${$app.stage} database credentials (RDS secret JSON)`,
      recoveryWindowInDays: 0,
    });
    const credentialsValue = new aws.secretsmanager.SecretVersion("DatabaseCredentialsValue", {
      secretId: credentials.id,
      secretString: $jsonStringify({
        engine: "postgres",
        username: database.username,
        password: database.password,
        host: database.host,
        port: database.port,
        dbname: database.database,
      }),
    });
    const databaseSecret = new sst.Linkable("DatabaseSecret", {
      properties: { arn: credentials.arn },
      include: [
        sst.aws.permission({ actions: ["secretsmanager:GetSecretValue"], resources: [credentials.arn] }),
      ],
    });

    const shared = {
      // nodejs20.x is past its Lambda deprecation (create/update blocked since mid 2026); the
      // bundles target Node 20 syntax and run unchanged on 22.
      runtime: "nodejs22.x" as const,
      architecture: "arm64" as const,
      vpc,
      link: [databaseSecret],
      environment: {
        SQLSTREAMS_DB_SECRET_ARN: credentials.arn,
        // Node 20+ Lambda runtimes trust the RDS CAs only through this file.
        NODE_EXTRA_CA_CERTS: "/var/runtime/ca-cert.pem",
      },
      // A failed invocation is not retried by Lambda: the next tick resumes from Postgres.
      retries: 0,
      nodejs: { format: "esm" as const, minify: true, esbuild: { external: ["pg-native"] } },
    };

    // Migrate on every deploy, before any group function or schedule is updated.
    const migrate = new sst.aws.Function("Migrate", {
      ...shared,
      handler: "functions/migrate.handler",
      timeout: "5 minutes",
      memory: "512 MB",
      description: "SQLStreams: migrate and register the streams and groups of functions/groups.ts",
    });
    const migration = $dev
      ? undefined
      : new aws.lambda.Invocation(
          "MigrateOnDeploy",
          {
            functionName: migrate.name,
            input: JSON.stringify({ source: "sst-deploy" }),
            // A new value on every deploy: the invocation runs again each time.
            triggers: { deployedAt: String(Date.now()) },
          },
          { dependsOn: [credentialsValue, secretsEndpoint, database] },
        );
    const afterMigration = migration ? { dependsOn: [migration] } : {};

    const pollers: Record<string, unknown> = {};
    for (const g of groups) {
      const id = pascal(`${g.stream}-${g.group}`);
      const event = { stream: g.stream, group: g.group };
      const fn = new sst.aws.Function(
        `${id}Poller`,
        {
          ...shared,
          handler: g.function,
          timeout: seconds(g.timeout ?? 60_000),
          memory: `${g.memory ?? 256} MB`,
          description: `SQLStreams poller ${g.stream}/${g.group} (${g.mode ?? "drain"})`,
        },
        afterMigration,
      );
      const cron = new sst.aws.CronV2(
        `${id}Cron`,
        { function: fn, schedule: g.schedule as `rate(${string})`, event, retries: 0 },
        afterMigration,
      );
      // parallelism > 1: more schedules on the same function and role, so each tick starts
      // that many overlapping invocations (safe: claims lock the cursor, rows use SKIP LOCKED).
      for (let i = 2; i <= (g.parallelism ?? 1); i++) {
        new aws.scheduler.Schedule(
          `${id}Cron${i}`,
          {
            scheduleExpression: g.schedule,
            flexibleTimeWindow: { mode: "OFF" },
            target: {
              arn: fn.arn,
              roleArn: cron.nodes.role.arn,
              input: JSON.stringify(event),
              retryPolicy: { maximumRetryAttempts: 0 },
            },
          },
          afterMigration,
        );
      }
      pollers[`${g.stream}/${g.group}`] = fn.name;
    }

    const maintain = new sst.aws.Function("Maintainer", {
      ...shared,
      handler: "functions/maintain.handler",
      timeout: "2 minutes",
      memory: "256 MB",
      description: "SQLStreams maintenance: partitions, retention, sweeps for every stream",
    });
    new sst.aws.CronV2("MaintainCron", { function: maintain, schedule: "rate(5 minutes)", retries: 0 });

    return {
      databaseSecretArn: credentials.arn,
      databaseHost: database.host,
      migrateFunction: migrate.name,
      pollers,
    };
  },
});
