// @sqlstreams/aws/sst: SQLStreams as a building block of an SST (v3/v4) app. Runs inside the
// `run()` of an sst.config.ts: SST bundles this file with the config and provides the globals
// `sst`, `aws`, `$app`, `$dev`, `$interpolate`, `$jsonStringify` and `$util` (to every file it
// bundles); the types name them the same way, as the app's `.sst/platform/config.d.ts` declares
// them. See docs/guide/deployment.md#an-existing-sst-app for a complete example.
//
//   const streams = new SqlStreams("Streams", { vpc, database, groups });
//   new sst.aws.Function("Api", { handler: "src/api.handler", vpc, link: [streams] });
//
// Creates: (for an RDS database) nothing that holds a password: the functions read the database's
// own master secret, which RDS manages and rotates (docs/guide/operations.md#credentials); (for a URL)
// the credentials secret (RDS JSON) the functions read. Then a migrate function invoked on
// every deploy, one poll function + EventBridge Scheduler schedule(s) per group, the maintenance
// function + schedule, and (wake on produce) the right for linked producers to invoke the pollers.
import { groupAlarms } from "../alarms.js";
import { resolvedDeclaration, type GroupDeclaration } from "../declaration.js";
import type { PollerContext, SqlStreamsBaseArgs } from "./args.js";
import { devDatabaseUrl, managedSecretArn, rdsJsonFromUrl } from "./database.js";
import { dbUserArn, iamResourceId, resolveRoles, type ResolvedRoles } from "./roles.js";

export { instanceClass, managedSecretArn, secureDatabase, type DatabaseSecurity, type SecureDatabaseArgs } from "./database.js";
export type { DatabaseRoles } from "./roles.js";
export type { PollerContext } from "./args.js";

export interface SqlStreamsArgs extends SqlStreamsBaseArgs {
  /** Extension point: called once after every poller exists (a dashboard, …). */
  dashboard?: (streams: SqlStreams) => void;
}


const pascal = (s: string) =>
  s
    .split(/[^A-Za-z0-9]+/)
    .filter(Boolean)
    .map((w) => w[0].toUpperCase() + w.slice(1))
    .join("");
/** The app's own `function.link` and the database secret. */
function withLink(own: sst.aws.FunctionArgs["link"], secret: sst.Linkable<{ arn: $util.Output<string> }>): sst.aws.FunctionArgs["link"] {
  return own === undefined ? [secret] : $util.output(own).apply((l: unknown[]) => [...l, secret]);
}

/** The app's own `function.permissions` and one more statement. */
function withPermission(own: sst.aws.FunctionArgs["permissions"], statement: { actions: string[]; resources: $util.Input<string>[] }): sst.aws.FunctionArgs["permissions"] {
  return own === undefined ? [statement] : $util.output(own).apply((p: { actions: string[]; resources: $util.Input<string>[] }[]) => [...p, statement]);
}

/** The local scheduler's command: `npx sqlstreams dev` (never `--demo`), `--groups <path>` when given. */
function devCommand(name: string, o: SqlStreamsArgs["devScheduler"]): string {
  const command = typeof o === "object" && o.command ? o.command : "npx sqlstreams dev";
  const groups = typeof o === "object" ? o.groups : undefined;
  if (groups === undefined) return command;
  if (!/^[A-Za-z0-9_./@-]+$/.test(groups)) throw new Error(`SqlStreams ${name}: devScheduler.groups ${JSON.stringify(groups)}: expected a plain relative path (letters, digits, _ . / @ -)`);
  return `${command} --groups ${groups}`;
}
const seconds = (ms: number) => `${Math.ceil(ms / 1000)} seconds` as const;

/** What the constructor's credential step made. */
interface Credentials {
  /** True for an RDS database (its managed master secret); false for a secret this component made. */
  rdsManaged: boolean;
  secretArn: $util.Output<string>;
  secret?: aws.secretsmanager.Secret;
  secretValue?: aws.secretsmanager.SecretVersion;
  connection: Record<string, $util.Input<string>>;
}

/** The environment every SQLStreams function gets. */
function functionEnvironment(args: SqlStreamsArgs, connection: Record<string, $util.Input<string>>, secretArn: $util.Output<string>): Record<string, $util.Input<string>> {
  const isUrl = args.database instanceof sst.Secret;
  const tls = args.tls ?? (isUrl ? "system" : "rds");
  return {
    SQLSTREAMS_DB_SECRET_ARN: secretArn,
    ...connection,
    SQLSTREAMS_DB_CA: tls,
    // Node 20+ Lambda runtimes trust the RDS CAs only through this file.
    ...(tls === "rds" ? { NODE_EXTRA_CA_CERTS: "/var/runtime/ca-cert.pem" } : {}),
    ...((args.keepConnection ?? !isUrl) ? {} : { SQLSTREAMS_DB_KEEP_CONNECTION: "false" }),
    // The Stage dimension of the metrics, which the alarms select.
    SQLSTREAMS_STAGE: $app.stage,
  };
}

/** The arguments every SQLStreams function shares (runtime, VPC, environment); credentials come per function. */
function sharedFunctionArgs(args: SqlStreamsArgs, environment: Record<string, $util.Input<string>>) {
  const vpc = args.vpc
    ? { privateSubnets: args.vpc.privateSubnets, securityGroups: args.security ? [args.security.functions.id] : args.vpc.securityGroups }
    : undefined;
  return {
    // Node 24 (Active LTS, maintained to 2028); CI builds and runs the core scenarios on 22 and
    // 24 too (README "Lambda runtime and Node versions").
    runtime: "nodejs24.x",
    architecture: "arm64",
    ...(vpc ? { vpc } : {}),
    // A failed invocation is not retried by Lambda: the next tick resumes from Postgres.
    retries: 0,
    nodejs: { format: "esm", minify: true, esbuild: { external: ["pg-native"] } },
    ...args.function,
    environment: { ...environment, ...args.function?.environment },
  } satisfies Partial<sst.aws.FunctionArgs>;
}

/**
 * A transform that orders a created resource (the Lambda function, a schedule) after the
 * migration. It goes on the resources, never into the component options: sst.aws.Function forwards
 * those into its region lookup, which a preview leaves unknown while the invocation is being
 * replaced, and then nothing of the function (code, schedule targets, outputs) resolves.
 */
function afterMigration(migration: aws.lambda.Invocation | undefined) {
  return (_args: unknown, o: $util.CustomResourceOptions) => {
    if (!migration) return undefined;
    const prior = o.dependsOn;
    o.dependsOn = prior === undefined ? [migration] : Array.isArray(prior) ? [...(prior as $util.Input<$util.Resource>[]), migration] : [prior as $util.Input<$util.Resource>, migration];
    return undefined;
  };
}

/** What the constructor's steps share. */
interface Steps {
  name: string;
  args: SqlStreamsArgs;
  shared: ReturnType<typeof sharedFunctionArgs>;
  /** The owner's credentials: a link to the database secret (migrate, maintain, `roles: false`). */
  owner: Pick<sst.aws.FunctionArgs, "link">;
  afterMigration: ReturnType<typeof afterMigration>;
  /** `sst dev` with the local scheduler: no deployed schedules. */
  devScheduler: boolean;
}

/**
 * SQLStreams on AWS for an SST app. Linkable: `link: [streams]` gives a producer function the
 * credentials secret (read access to it only) and, with `wake`, the right to invoke the pollers;
 * `Resource.<Name>` holds `secretArn` and `pollers` (`"stream/group"` → function name).
 */
export class SqlStreams extends $util.ComponentResource {
  /**
   * ARN of the secret every function reads: the database's RDS-managed master secret, or (URL
   * database, or a local `dev` database) the credentials secret this component made.
   */
  readonly secretArn: $util.Output<string>;
  /** The credentials secret this component made (URL or local `dev` database only). */
  readonly secret?: aws.secretsmanager.Secret;
  readonly migrate: sst.aws.Function;
  /** The migrate invocation of this deploy (undefined in `sst dev`). */
  readonly migration?: aws.lambda.Invocation;
  readonly maintain: sst.aws.Function;
  /** One poller per group, keyed `stream/group`. */
  readonly pollers: Record<string, PollerContext> = {};
  /** The environment every SQLStreams function gets (a linked producer also gets the wake settings). */
  readonly environment: Record<string, $util.Input<string>>;
  /** The dashboard function (`dashboardFunction`), with its IAM-authenticated URL in `.url`. */
  readonly dashboardFunction?: sst.aws.Function;
  /** The worker and reader database users (`roles`), undefined with `roles: false`. */
  readonly roles?: ResolvedRoles;
  private readonly wake: boolean;
  /** The resource id IAM database tokens are scoped to (with `roles.iam`). */
  private readonly iamResourceId?: $util.Output<string>;

  constructor(name: string, args: SqlStreamsArgs, opts?: $util.ComponentResourceOptions) {
    super("sqlstreams:aws:SqlStreams", name, {}, opts);
    this.wake = args.wake ?? false;
    const db = args.database;
    if (!(db instanceof sst.Secret) && !args.vpc) throw new Error(`SqlStreams ${name}: an RDS database needs the VPC it lives in (args.vpc)`);
    const credentials = this.credentials(name, db);
    this.secretArn = credentials.secretArn;
    this.secret = credentials.secret;
    this.environment = functionEnvironment(args, credentials.connection, this.secretArn);
    if (args.idleTimeout !== undefined && !(Number.isSafeInteger(args.idleTimeout) && args.idleTimeout >= 0)) {
      throw new Error(`SqlStreams ${name}: idleTimeout ${JSON.stringify(args.idleTimeout)}: expected a whole number of milliseconds (0: keep the connection while the container lives)`);
    }
    // Roles with IAM need an RDS instance or cluster: a URL database, or SST's `dev` mode of
    // sst.aws.Postgres/Aurora (a local database, no instance), has none.
    this.roles = resolveRoles(name, args.roles, credentials.secret !== undefined);
    if (this.roles?.iam) this.iamResourceId = iamResourceId(name, db as sst.aws.Postgres | sst.aws.Aurora);
    const network = this.secretsEndpoint(name, args);
    const shared = sharedFunctionArgs(args, this.environment);
    const secretLink = new sst.Linkable(`${name}Secret`, {
      properties: { arn: this.secretArn },
      include: [sst.aws.permission({ actions: ["secretsmanager:GetSecretValue"], resources: [this.secretArn] })],
    });
    const owner = { link: withLink(args.function?.link, secretLink) };
    const roles = this.roles;

    // Migrate on every deploy, before any poller, schedule or the maintainer is updated.
    this.migrate = new sst.aws.Function(
      `${name}Migrate`,
      {
        ...shared,
        ...owner,
        // The migrate function creates the roles and grants them (rds_iam with `iam`).
        ...(roles ? { environment: { ...shared.environment, SQLSTREAMS_DB_ROLES: JSON.stringify(roles) } } : {}),
        handler: args.handlers?.migrate ?? "functions/migrate.handler",
        timeout: "5 minutes",
        memory: "512 MB",
        description: "SQLStreams: migrate and register the declared streams and groups",
      },
      { parent: this },
    );
    const before = [...(credentials.secretValue ? [credentials.secretValue] : []), ...network, ...(db instanceof sst.Secret ? [] : [db])];
    this.migration = $dev ? undefined : this.migrateOnDeploy(name, before);
    const steps: Steps = { name, args, shared, owner, afterMigration: afterMigration(this.migration), devScheduler: $dev && args.devScheduler !== false };
    for (const g of args.groups) this.addPoller(steps, g);
    this.maintain = this.maintainer(steps, credentials.rdsManaged ? this.secretArn : undefined);
    if (args.dashboardFunction) this.dashboardFunction = this.dashboardFn(steps, args.dashboardFunction === true ? {} : args.dashboardFunction);
    args.dashboard?.(this);
    this.registerOutputs({});
  }

  /**
   * Credentials (docs/guide/operations.md#credentials). An RDS database: the master secret RDS manages
   * and rotates ({username, password}); host, port and database name go to the environment.
   * A URL (or a local `dev` database): one Secrets Manager secret in the RDS format.
   * Functions get only the ARN.
   */
  private credentials(name: string, db: SqlStreamsArgs["database"]): Credentials {
    const isUrl = db instanceof sst.Secret;
    const rdsResource = isUrl ? undefined : db instanceof sst.aws.Aurora ? db.nodes.cluster : db.nodes.instance;
    if (rdsResource) {
      const rds = db as sst.aws.Postgres | sst.aws.Aurora;
      return {
        rdsManaged: true,
        secretArn: managedSecretArn(rdsResource, `SqlStreams ${name}: the database`),
        connection: {
          SQLSTREAMS_DB_HOST: rds.host,
          SQLSTREAMS_DB_PORT: $util.output(rds.port).apply(String),
          SQLSTREAMS_DB_NAME: rds.database,
        },
      };
    }
    const secret = new aws.secretsmanager.Secret(
      `${name}Credentials`,
      { description: $interpolate`SQLStreams ${$app.name}/${$app.stage} database credentials (RDS secret JSON)`, recoveryWindowInDays: 0 },
      { parent: this },
    );
    const pg = db as sst.aws.Postgres;
    const secretValue = new aws.secretsmanager.SecretVersion(
      `${name}CredentialsValue`,
      {
        secretId: secret.id,
        secretString: isUrl
          ? $util.secret((db as sst.Secret).value.apply(rdsJsonFromUrl))
          : $jsonStringify({ engine: "postgres", username: pg.username, password: pg.password, host: pg.host, port: pg.port, dbname: pg.database }),
      },
      { parent: this },
    );
    return { rdsManaged: false, secretArn: secret.arn, secret, secretValue, connection: {} };
  }

  /** An interface endpoint for Secrets Manager in the VPC (args.secretsEndpoint, default true). */
  private secretsEndpoint(name: string, args: SqlStreamsArgs): $util.Resource[] {
    if (!args.vpc || !(args.secretsEndpoint ?? true)) return [];
    return [
      new aws.ec2.VpcEndpoint(
        `${name}SecretsManagerEndpoint`,
        {
          vpcId: args.vpc.id,
          serviceName: $interpolate`com.amazonaws.${aws.getRegionOutput().region}.secretsmanager`,
          vpcEndpointType: "Interface",
          privateDnsEnabled: true,
          subnetIds: args.vpc.privateSubnets,
          securityGroupIds: args.vpc.securityGroups,
        },
        { parent: this },
      ),
    ];
  }

  /** The invocation of the migrate function, made again on every deploy, after `before`. */
  private migrateOnDeploy(name: string, before: $util.Resource[]): aws.lambda.Invocation {
    return new aws.lambda.Invocation(
      `${name}MigrateOnDeploy`,
      {
        functionName: this.migrate.name,
        input: JSON.stringify({ source: "sst-deploy" }),
        // A new value on every deploy: the invocation runs again each time.
        triggers: { deployedAt: String(Date.now()) },
      },
      { parent: this, dependsOn: before },
    );
  }

  /** One group's poll function and its schedules (none under the `sst dev` scheduler), and its alarms. */
  private addPoller(st: Steps, g: GroupDeclaration): void {
    const { name, args } = st;
    const id = pascal(`${g.stream}-${g.group}`);
    const r = resolvedDeclaration(g);
    const fn = new sst.aws.Function(
      `${name}${id}Poller`,
      {
        ...st.shared,
        ...this.access(st, this.roles?.worker, args.idleTimeout === undefined ? {} : { SQLSTREAMS_DB_IDLE_TIMEOUT_MS: String(args.idleTimeout) }),
        handler: g.function,
        timeout: seconds(r.timeout),
        memory: `${r.memory} MB`,
        description: `SQLStreams poller ${g.stream}/${g.group} (${r.mode})`,
        transform: { function: st.afterMigration },
      },
      { parent: this },
    );
    // Backlog-driven scaling (docs/guide/deployment.md#backlog-driven-scaling): the poller invokes itself.
    if (g.scale && fn.nodes.role) {
      new aws.iam.RolePolicy(
        `${name}${id}Continue`,
        { role: fn.nodes.role.name, policy: $jsonStringify({ Version: "2012-10-17", Statement: [{ Effect: "Allow", Action: ["lambda:InvokeFunction"], Resource: [fn.arn] }] }) },
        { parent: this },
      );
    }
    const schedules = st.devScheduler ? [] : this.schedules(st, `${name}${id}`, fn, g, r.parallelism);
    const poller = { id, group: g, function: fn, schedules };
    this.pollers[`${g.stream}/${g.group}`] = poller;
    if (args.defaultAlarms !== false) this.groupAlarms(name, poller);
    args.alarms?.(poller);
  }

  /**
   * A group's schedules: one CronV2, and with parallelism > 1 more schedules on the same function
   * and role, so each tick starts that many overlapping invocations (safe: claims lock the cursor,
   * rows use SKIP LOCKED).
   */
  private schedules(st: Steps, prefix: string, fn: sst.aws.Function, g: GroupDeclaration, parallelism: number): PollerContext["schedules"] {
    const event = { stream: g.stream, group: g.group };
    const cron = new sst.aws.CronV2(
      `${prefix}Cron`,
      { function: fn, schedule: g.schedule as `rate(${string})`, event, retries: 0, transform: { schedule: st.afterMigration } },
      { parent: this },
    );
    const schedules: PollerContext["schedules"] = [cron];
    for (let i = 2; i <= parallelism; i++) {
      schedules.push(
        new aws.scheduler.Schedule(
          `${prefix}Cron${i}`,
          {
            scheduleExpression: g.schedule,
            flexibleTimeWindow: { mode: "OFF" },
            target: { arn: fn.arn, roleArn: cron.nodes.role.arn, input: JSON.stringify(event), retryPolicy: { maximumRetryAttempts: 0 } },
          },
          { parent: this, dependsOn: this.migration ? [this.migration] : [] },
        ),
      );
    }
    return schedules;
  }

  /**
   * The maintenance function and its schedule; under `sst dev`, the local scheduler instead (it
   * runs every group's handler at its schedule, and on wake, against the same database).
   */
  private maintainer(st: Steps, managedSecretArn: $util.Output<string> | undefined): sst.aws.Function {
    const { name, args } = st;
    const fn = new sst.aws.Function(
      `${name}Maintainer`,
      {
        ...st.shared,
        // The owner: maintenance creates and drops partitions.
        ...st.owner,
        handler: args.handlers?.maintain ?? "functions/maintain.handler",
        timeout: "2 minutes",
        memory: "256 MB",
        description: "SQLStreams maintenance: partitions, retention, sweeps for every stream",
        transform: { function: st.afterMigration },
      },
      { parent: this },
    );
    if (!st.devScheduler) {
      new sst.aws.CronV2(
        `${name}MaintainCron`,
        { function: fn, schedule: (args.maintainSchedule ?? "rate(5 minutes)") as `rate(${string})`, retries: 0, transform: { schedule: st.afterMigration } },
        { parent: this },
      );
      return fn;
    }
    const db = args.database;
    const command = devCommand(name, args.devScheduler);
    new sst.x.DevCommand(
      `${name}Dev`,
      {
        dev: { command, autostart: true, title: "SQLStreams" },
        environment: db instanceof sst.Secret ? { DATABASE_URL: db.value } : { DATABASE_URL: devDatabaseUrl(db, managedSecretArn) },
      },
      { parent: this },
    );
    return fn;
  }

  /**
   * The dashboard function, linked to the credentials only (not to `streams`, whose link may add
   * the wake right): it reads the secret and talks to Postgres, nothing else.
   */
  private dashboardFn(st: Steps, o: Exclude<SqlStreamsArgs["dashboardFunction"], boolean | undefined>): sst.aws.Function {
    const readOnly = o.readOnly ?? true;
    return new sst.aws.Function(
      `${st.name}Dashboard`,
      {
        ...st.shared,
        // The reader cannot write: a read-write dashboard (redrive, discard, pause, seek) is the worker.
        ...this.access(st, readOnly ? this.roles?.reader : this.roles?.worker, { SQLSTREAMS_DASHBOARD_READ_ONLY: readOnly ? "1" : "0" }),
        handler: o.handler ?? "functions/dashboard.handler",
        timeout: o.timeout ?? "30 seconds",
        memory: o.memory ?? "256 MB",
        description: `SQLStreams operator dashboard (${readOnly ? "read-only" : "read-write"})`,
        // IAM-signed requests only: no browser origin gets CORS headers.
        url: { authorization: "iam", cors: false },
        transform: { function: st.afterMigration },
      },
      { parent: this },
    );
  }

  /**
   * How a function reaches the database: as `user` with an IAM token when the roles use IAM
   * (`rds-db:connect` on that user only, no secret), else with the owner's secret.
   */
  private access(st: Steps, user: string | undefined, extra: Record<string, string>): Partial<Pick<sst.aws.FunctionArgs, "link" | "permissions" | "environment">> {
    if (!user || !this.iamResourceId) return { ...st.owner, environment: { ...st.shared.environment, ...extra } };
    return {
      link: st.args.function?.link,
      permissions: withPermission(st.args.function?.permissions, { actions: ["rds-db:connect"], resources: [dbUserArn(this.iamResourceId, user)] }),
      environment: { ...this.iamEnvironment(st.shared.environment, user), ...extra },
    };
  }

  /** `environment` without the secret, with the IAM user and the region tokens are signed for. */
  private iamEnvironment(environment: Record<string, $util.Input<string>>, user: string): Record<string, $util.Input<string>> {
    const { SQLSTREAMS_DB_SECRET_ARN: _secret, ...rest } = environment;
    return { ...rest, SQLSTREAMS_DB_IAM_USER: user, SQLSTREAMS_DB_REGION: aws.getRegionOutput().region };
  }

  /** Alarms notify this topic when a group declares `alarms.email` (created on first use). */
  alarmTopic?: aws.sns.Topic;
  /** The built-in alarms of each group, keyed `stream/group`. */
  readonly groupAlarmResources: Record<string, aws.cloudwatch.MetricAlarm[]> = {};

  private groupAlarms(name: string, poller: PollerContext): void {
    const g = poller.group;
    const actions: $util.Input<string>[] = [];
    if (g.alarms !== false && g.alarms?.email?.length) {
      this.alarmTopic ??= new aws.sns.Topic(`${name}Alarms`, {}, { parent: this });
      const topic = this.alarmTopic;
      for (const [i, email] of g.alarms.email.entries()) {
        new aws.sns.TopicSubscription(`${name}${poller.id}AlarmEmail${i + 1}`, { topic: topic.arn, protocol: "email", endpoint: email }, { parent: this });
      }
      actions.push(topic.arn);
    }
    if (g.alarms !== false && g.alarms?.topicArn) actions.push(g.alarms.topicArn);
    const functionName = poller.function.name;
    this.groupAlarmResources[`${g.stream}/${g.group}`] = groupAlarms(g, { functionName: "FUNCTION", stage: $app.stage }).map((a) =>
      new aws.cloudwatch.MetricAlarm(
        `${name}${poller.id}${a.key}Alarm`,
        {
          alarmDescription: a.description,
          namespace: a.namespace,
          metricName: a.metricName,
          dimensions: a.namespace === "AWS/Lambda" ? { FunctionName: functionName } : a.dimensions,
          statistic: a.statistic,
          period: a.period,
          evaluationPeriods: a.evaluationPeriods,
          threshold: a.threshold,
          comparisonOperator: a.comparisonOperator,
          treatMissingData: a.treatMissingData,
          alarmActions: actions,
          okActions: actions,
        },
        { parent: this },
      ),
    );
  }

  /** `stream/group` → poll function name (a stack output). */
  get pollerNames(): Record<string, $util.Output<string>> {
    return Object.fromEntries(Object.entries(this.pollers).map(([k, p]) => [k, p.function.name]));
  }

  /** @internal SST's link contract (its `Link.Definition`): what `link: [streams]` gives a function. */
  getSSTLink(): { properties: { secretArn: $util.Output<string>; pollers: Record<string, $util.Output<string>> }; include: { type: string; [key: string]: unknown }[] } {
    const pollers = Object.values(this.pollers).map((p) => p.function);
    // A linked producer connects as the worker (IAM) when the roles use IAM, else with the secret.
    const worker = this.roles && this.iamResourceId ? this.roles.worker : undefined;
    return {
      properties: { secretArn: this.secretArn, pollers: this.pollerNames },
      include: [
        worker && this.iamResourceId
          ? sst.aws.permission({ actions: ["rds-db:connect"], resources: [dbUserArn(this.iamResourceId, worker)] })
          : sst.aws.permission({ actions: ["secretsmanager:GetSecretValue"], resources: [this.secretArn] }),
        ...(this.wake && pollers.length > 0 ? [sst.aws.permission({ actions: ["lambda:InvokeFunction"], resources: pollers.map((f) => f.arn) })] : []),
        {
          type: "environment" as const,
          env: {
            ...(worker ? this.iamEnvironment(this.environment, worker) : this.environment),
            // Wake on produce: the client of a linked producer invokes the pollers (wakerFromEnv).
            ...(this.wake ? { SQLSTREAMS_WAKE: "lambda", SQLSTREAMS_WAKE_FUNCTIONS: $jsonStringify(this.pollerNames) } : {}),
          },
        },
      ],
    };
  }
}
