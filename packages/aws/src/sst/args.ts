// The options of the SqlStreams component and what its `alarms` hook receives. Part of
// @sqlstreams/aws/sst (see index.ts).
import type { GroupDeclaration } from "../declaration.js";
import type { DatabaseSecurity } from "./database.js";
import type { DatabaseRoles } from "./roles.js";

/** The context an `alarms` hook receives, once per group. */
export interface PollerContext {
  /** PascalCase id of the group, used in resource names: `OrdersPlacedFraudScoring`. */
  id: string;
  group: GroupDeclaration;
  function: sst.aws.Function;
  schedules: (sst.aws.CronV2 | aws.scheduler.Schedule)[];
}

/** The options of SqlStreams except the hook that receives the component (index.ts adds it). */
export interface SqlStreamsBaseArgs {
  /** The stream and group declaration (functions/groups.ts). */
  groups: GroupDeclaration[];
  /**
   * The database: your `sst.aws.Postgres` or `sst.aws.Aurora`, or an `sst.Secret` holding a
   * postgres:// URL (Neon, Supabase, self-hosted).
   */
  database: sst.aws.Postgres | sst.aws.Aurora | sst.Secret;
  /** Your VPC: the functions run in its private subnets (required for an RDS database). */
  vpc?: sst.aws.Vpc;
  /** From `secureDatabase()`: the functions get its functions security group. */
  security?: DatabaseSecurity;
  /**
   * An interface endpoint for Secrets Manager in the VPC, so functions without a NAT read the
   * credentials. Default true with a VPC; false when your VPC has a NAT or its own endpoint.
   */
  secretsEndpoint?: boolean;
  /** Handler paths of the migrate and maintain functions. */
  handlers?: { migrate?: string; maintain?: string };
  /** Maintenance schedule. Default `rate(5 minutes)`. */
  maintainSchedule?: string;
  /**
   * Wake on produce: linked producers may invoke the pollers (an asynchronous `Event`
   * invocation after a produce commits); the group schedules become the safety net. Default false.
   */
  wake?: boolean;
  /**
   * TLS verification of the database certificate. `rds` (default for RDS databases): verify
   * against the pinned RDS CA bundle; `system`: the runtime's CAs (default for a URL).
   */
  tls?: "rds" | "system";
  /**
   * Keep each function's database connection open between warm invocations (saves the TLS
   * handshake). Default true for RDS, false for a URL database (Neon, Supabase): a database that
   * scales to zero is then not held awake by idle pollers.
   */
  keepConnection?: boolean;
  /**
   * The database users (docs/guide/security.md): pollers and linked producers connect as the
   * worker, the dashboard as the reader, with RDS IAM database authentication (each function's
   * role may connect as its own user only; no password); migrate and maintain keep the owner's
   * secret, and the migrate function creates and grants the roles. Default on for an RDS database
   * (`{ worker: "sqlstreams_worker", reader: "sqlstreams_reader", iam: true }`; the database needs
   * IAM authentication enabled: secureDatabase()'s transform does it), off for a URL database.
   * `false`: every function reads the owner's secret.
   */
  roles?: DatabaseRoles | false;
  /**
   * How long (ms) a poller keeps an idle pooled connection before closing it
   * (SQLSTREAMS_DB_IDLE_TIMEOUT_MS). Default: the library's (30 s).
   */
  idleTimeout?: number;
  /** Overrides of the shared function arguments (runtime, architecture, nodejs, environment, …). */
  function?: Partial<sst.aws.FunctionArgs>;
  /**
   * In `sst dev`: run `sqlstreams dev` locally (true, default) instead of deployed schedules.
   * `groups`: the path of the app's group declaration, passed as `--groups <path>`.
   */
  devScheduler?: boolean | { command?: string; groups?: string };
  /** Extension point: called once per group after its poller and schedules exist (alarms, …). */
  alarms?: (poller: PollerContext) => void;
  /**
   * The built-in CloudWatch alarms per group (dead letters, oldest unresolved age, poll errors
   * and throttles; settings in each group's `alarms`): docs/guide/operations.md#alarms. Default true.
   */
  defaultAlarms?: boolean;
  /**
   * The operator dashboard as a Lambda function behind a Function URL with IAM auth
   * (docs/guide/operations.md#dashboard): only principals allowed `lambda:InvokeFunctionUrl` open it.
   * It connects to the database (as the reader; read-write: the worker) and does nothing else. `true` = read-only; `{ readOnly: false }`
   * enables the actions (redrive, discard, pause, seek). Default: no dashboard.
   */
  dashboardFunction?: boolean | { handler?: string; readOnly?: boolean; memory?: `${number} MB`; timeout?: `${number} seconds` };
}
