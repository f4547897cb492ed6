/// <reference path="./.sst/platform/config.d.ts" />
// SQLStreams on AWS (sst 4.17): a VPC, an RDS Postgres locked down for SQLStreams, and the
// SqlStreams component (packages/aws/src/sst) for the groups of functions/groups.ts: a migrate
// invocation on every deploy, one poll function + EventBridge Scheduler schedule per group, and
// the maintenance schedule. `npm run build` first (the functions import the built workspace
// packages), then `npx sst deploy --stage <name>`. An existing app uses the same component: see
// docs/guide/deployment.md#an-existing-sst-app.
//
// Deploy-time settings (environment of the machine running `sst deploy`):
//   SQLSTREAMS_NAT=ec2|managed     add a NAT so handlers can reach the internet (default: none;
//                                  Secrets Manager is reached through a VPC endpoint)
//   SQLSTREAMS_RDS_PROXY=true      put an RDS Proxy in front of the database
//   SQLSTREAMS_DB_INSTANCE=t4g.small  instance class, with or without `db.` (default t4g.micro)
//   SQLSTREAMS_DASHBOARD=read-only|read-write  deploy the operator dashboard (functions/dashboard.ts)
//                                  behind a Lambda Function URL with IAM auth (default: none;
//                                  `true` means read-only)

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
    const { SqlStreams, secureDatabase, instanceClass } = await import("@sqlstreams/aws/sst");

    const nat = process.env.SQLSTREAMS_NAT as "ec2" | "managed" | undefined;
    const vpc = new sst.aws.Vpc("Vpc", nat ? { nat } : {});
    const security = secureDatabase("Streams", { vpc });
    const database = new sst.aws.Postgres("Database", {
      vpc,
      instance: instanceClass(process.env.SQLSTREAMS_DB_INSTANCE),
      storage: "20 GB",
      proxy: process.env.SQLSTREAMS_RDS_PROXY === "true",
      transform: security.postgres,
    });
    const dashboard = (process.env.SQLSTREAMS_DASHBOARD ?? "").trim().toLowerCase();
    if (dashboard && !["true", "1", "read-only", "read-write"].includes(dashboard)) {
      throw new Error(`SQLSTREAMS_DASHBOARD=${JSON.stringify(dashboard)}: expected read-only, read-write or true`);
    }
    const streams = new SqlStreams("Streams", {
      vpc,
      database,
      security,
      groups,
      wake: true,
      ...(dashboard ? { dashboardFunction: { readOnly: dashboard !== "read-write" } } : {}),
    });

    return {
      databaseSecretArn: streams.secretArn,
      databaseHost: database.host,
      migrateFunction: streams.migrate.name,
      pollers: streams.pollerNames,
      ...(streams.dashboardFunction ? { dashboardUrl: streams.dashboardFunction.url } : {}),
    };
  },
});
