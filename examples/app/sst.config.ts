/// <reference path="./.sst/platform/config.d.ts" />
// The shop on AWS (sst 4): a VPC, an RDS Postgres locked down for SQLStreams, and the SqlStreams
// component of @sqlstreams/aws/sst for the groups of src/streams/groups.ts: a migrate invocation on
// every deploy, one poll function + schedule + alarms per group, and the maintenance schedule.
// `npx sst deploy --stage <name>`.
export default $config({
  app(input) {
    return {
      name: "shop",
      home: "aws",
      removal: input?.stage === "production" ? "retain" : "remove",
      protect: input?.stage === "production",
    };
  },
  async run() {
    const { groups } = await import("./src/streams/groups.js");
    const { SqlStreams, secureDatabase } = await import("@sqlstreams/aws/sst");

    const vpc = new sst.aws.Vpc("Vpc");
    const security = secureDatabase("Streams", { vpc });
    const database = new sst.aws.Postgres("Database", { vpc, transform: security.postgres });
    const streams = new SqlStreams("Streams", {
      vpc,
      database,
      security,
      groups,
      wake: true,
      handlers: { migrate: "src/streams/migrate.handler", maintain: "src/streams/maintain.handler" },
      // `sst dev` runs the local scheduler against the stage's database, on this app's declaration.
      devScheduler: { command: "npx sqlstreams dev --groups src/streams/groups.ts" },
    });

    return {
      databaseSecretArn: streams.secretArn,
      migrateFunction: streams.migrate.name,
      pollers: streams.pollerNames,
    };
  },
});
