// The database users of a deployment: which user each SQLStreams function connects as, and how.
// Pollers connect as the worker, the dashboard as the reader, both with RDS IAM database
// authentication (a token signed from the function's own role, no password anywhere); migrate
// and maintain keep the owner's secret (maintain creates partitions). Part of
// @sqlstreams/aws/sst (see index.ts).

/** `roles` of the component: the worker and reader database users. */
export interface DatabaseRoles {
  /** Database user of the pollers (and, through `link`, of producers): DML on the schema. Default `sqlstreams_worker`. */
  worker?: string;
  /** Database user of the dashboard: SELECT only, read-only transactions. Default `sqlstreams_reader`. */
  reader?: string;
  /**
   * RDS IAM database authentication for the worker and reader (granted `rds_iam` by the migrate
   * function; each function's role may connect as its own user only). Default true; an RDS
   * database only.
   */
  iam?: boolean;
}

export interface ResolvedRoles {
  worker: string;
  reader: string;
  iam: boolean;
}

export const DEFAULT_WORKER = "sqlstreams_worker";
export const DEFAULT_READER = "sqlstreams_reader";
const ROLE_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

/**
 * The roles to set up, or undefined for the single-secret deployment (`roles: false`, or a
 * database without an RDS instance or cluster and without `roles`).
 */
export function resolveRoles(name: string, roles: DatabaseRoles | false | undefined, noRds: boolean): ResolvedRoles | undefined {
  if (roles === false || (roles === undefined && noRds)) return undefined;
  const r = { worker: roles?.worker ?? DEFAULT_WORKER, reader: roles?.reader ?? DEFAULT_READER, iam: roles?.iam ?? !noRds };
  for (const [key, value] of Object.entries({ worker: r.worker, reader: r.reader })) {
    if (!ROLE_NAME.test(value)) throw new Error(`SqlStreams ${name}: roles.${key} ${JSON.stringify(value)} is not a plain lower-case Postgres role name (a-z, 0-9, _)`);
  }
  if (r.worker === r.reader) throw new Error(`SqlStreams ${name}: roles.worker and roles.reader must be different users`);
  if (r.iam && noRds) throw new Error(`SqlStreams ${name}: roles.iam needs an RDS instance or cluster (sst.aws.Postgres or sst.aws.Aurora, not in SST's dev mode); for a URL database set roles.iam to false or roles to false`);
  return r;
}

/** The text after the last `:` of an ARN (an RDS Proxy's `prx-…` id). */
const arnTail = (arn: string) => arn.slice(arn.lastIndexOf(":") + 1);

/**
 * The resource id IAM database tokens are scoped to: the RDS Proxy's (`prx-…`) when the database
 * has one (its host is the proxy), else the instance's (`db-…`) or cluster's (`cluster-…`).
 * Fails the deploy when the instance or cluster does not accept IAM authentication.
 */
export function iamResourceId(name: string, db: sst.aws.Postgres | sst.aws.Aurora): $util.Output<string> {
  const aurora = db instanceof sst.aws.Aurora;
  const resource = aurora ? (db as sst.aws.Aurora).nodes.cluster : (db as sst.aws.Postgres).nodes.instance;
  if (!resource) throw new Error(`SqlStreams ${name}: the database has no instance or cluster to authenticate against (roles.iam); set roles: false for a database linked in dev mode`);
  // sst.aws.Postgres and sst.aws.Aurora keep their proxy in a private field; `host` reads it too.
  const proxy = (db as unknown as { proxy?: $util.Output<aws.rds.Proxy | undefined> }).proxy;
  const own: $util.Output<string> = aurora ? (resource as aws.rds.Cluster).clusterResourceId : (resource as aws.rds.Instance).resourceId;
  return $util.all([resource.iamDatabaseAuthenticationEnabled, $util.output(proxy)]).apply(([enabled, p]: [boolean | undefined, aws.rds.Proxy | undefined]) => {
    if (!enabled) {
      throw new Error(
        `SqlStreams ${name}: the database does not accept IAM authentication: create it with secureDatabase()'s transform (or set iamDatabaseAuthenticationEnabled: true), or set roles: { iam: false } or roles: false`,
      );
    }
    return p ? p.arn.apply(arnTail) : own;
  });
}

/** `arn:…:rds-db:<region>:<account>:dbuser:<resourceId>/<user>`: what `rds-db:connect` allows. */
export function dbUserArn(resourceId: $util.Input<string>, user: string): $util.Output<string> {
  const partition = aws.getPartitionOutput().partition;
  const region = aws.getRegionOutput().region;
  const account = aws.getCallerIdentityOutput().accountId;
  return $interpolate`arn:${partition}:rds-db:${region}:${account}:dbuser:${resourceId}/${user}`;
}
