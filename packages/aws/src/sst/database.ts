// Locking an RDS database down for SQLStreams (security groups, TLS, the RDS-managed master
// secret): what `secureDatabase()` returns is passed as the `transform` of the app's
// `sst.aws.Postgres` / `sst.aws.Aurora`. Part of @sqlstreams/aws/sst (see index.ts).
import { DEFAULT_READER, DEFAULT_WORKER, dbUserArn } from "./roles.js";

type Resolved<T> = T extends $util.Input<infer U> ? U : T;

/** What `secureDatabase()` made: the two security groups and the transforms for the database. */
export interface DatabaseSecurity {
  /** Security group of every SQLStreams function (and, if you like, your producers). */
  functions: aws.ec2.SecurityGroup;
  /** Security group of the database and its proxy: 5432 from `functions` (and itself) only. */
  database: aws.ec2.SecurityGroup;
  /** Pass as `transform` of your `sst.aws.Postgres`. */
  postgres: NonNullable<sst.aws.PostgresArgs["transform"]>;
  /** Pass as `transform` of your `sst.aws.Aurora`. */
  aurora: NonNullable<sst.aws.AuroraArgs["transform"]>;
}

export interface SecureDatabaseArgs {
  vpc: sst.aws.Vpc;
  /** Deletion protection and a final snapshot. Default: the stage is `production`. */
  production?: boolean;
  /**
   * Database users that connect with RDS IAM authentication through an RDS Proxy (the proxy
   * signs in to the database as them: end-to-end IAM). Default: the SqlStreams component's
   * default worker and reader; pass your `roles` names if you changed them.
   */
  iamUsers?: string[];
}

/**
 * Security groups and resource transforms that lock an RDS database down for SQLStreams: TLS
 * required by the server (`rds.force_ssl = 1`, `requireTls` on an RDS Proxy), the database and
 * proxy in their own security group admitting 5432 only from the functions' group, deletion
 * protection and a final snapshot on production stages. Create it before the database:
 *
 *   const security = secureDatabase("Streams", { vpc });
 *   const database = new sst.aws.Postgres("Database", { vpc, transform: security.postgres });
 */
export function secureDatabase(name: string, args: SecureDatabaseArgs): DatabaseSecurity {
  const production = args.production ?? $app.stage === "production";
  const functions = new aws.ec2.SecurityGroup(`${name}FunctionsSecurityGroup`, {
    vpcId: args.vpc.id,
    description: "SQLStreams functions: egress only",
    egress: [{ protocol: "-1", fromPort: 0, toPort: 0, cidrBlocks: ["0.0.0.0/0"] }],
  });
  const database = new aws.ec2.SecurityGroup(`${name}DatabaseSecurityGroup`, {
    vpcId: args.vpc.id,
    description: "SQLStreams database: Postgres from the SQLStreams functions only",
    ingress: [
      { protocol: "tcp", fromPort: 5432, toPort: 5432, securityGroups: [functions.id], description: "SQLStreams functions" },
      { protocol: "tcp", fromPort: 5432, toPort: 5432, self: true, description: "RDS Proxy to the instance" },
    ],
    egress: [{ protocol: "tcp", fromPort: 5432, toPort: 5432, self: true, description: "RDS Proxy to the instance" }],
  });
  const finalSnapshot = (kind: string) => `${$app.name}-${$app.stage}-${name}-${kind}-final`.toLowerCase().replace(/[^a-z0-9-]/g, "-").replace(/-+/g, "-").slice(0, 255);
  const iamUsers = args.iamUsers ?? [DEFAULT_WORKER, DEFAULT_READER];
  const dbUsers = (resourceId: $util.Output<string>) => iamUsers.map((u) => dbUserArn(resourceId, u));
  const forceSsl = (parameters: Resolved<aws.rds.ParameterGroupArgs["parameters"]>) =>
    [...(parameters ?? []).filter((p) => (p as { name: string }).name !== "rds.force_ssl"), { name: "rds.force_ssl", value: "1" }];
  return {
    functions,
    database,
    postgres: {
      parameterGroup: (a) => {
        a.parameters = $util.output(a.parameters).apply((p) => forceSsl(p));
      },
      instance: (a) => {
        a.vpcSecurityGroupIds = [database.id];
        a.deletionProtection = production;
        a.skipFinalSnapshot = !production;
        if (production) a.finalSnapshotIdentifier = finalSnapshot("instance");
        // RDS keeps the master password in its own secret and rotates it (every 7 days by
        // default); nothing else holds a copy (docs/guide/operations.md#credentials).
        a.manageMasterUserPassword = true;
        delete a.password;
        // The worker and reader connect with IAM tokens (the SqlStreams component's `roles`).
        a.iamDatabaseAuthenticationEnabled = true;
      },
      proxy: (a, o, proxyName) => {
        a.requireTls = true;
        a.vpcSecurityGroupIds = [database.id];
        // The proxy authenticates with the same managed secret (SST's own proxy secret holds a
        // password the instance no longer has). The proxy is created after the instance, so the
        // parent (the sst.aws.Postgres) already knows it.
        const instance = (o.parent as sst.aws.Postgres | undefined)?.nodes.instance;
        if (!instance) throw new Error(`secureDatabase ${name}: the proxy transform found no database instance`);
        const secretArn = managedSecretArn(instance, `the instance of ${name}`);
        a.auths = [{ authScheme: "SECRETS", iamAuth: "DISABLED", secretArn }];
        // Users without an auth entry (the worker, the reader) sign in with IAM end to end.
        a.defaultAuthScheme = "IAM_AUTH";
        a.roleArn = proxySecretRole(proxyName, secretArn, dbUsers(instance.resourceId), o.parent).arn;
      },
    },
    aurora: {
      clusterParameterGroup: (a) => {
        a.parameters = $util.output(a.parameters).apply((p) => forceSsl(p));
      },
      cluster: (a) => {
        a.vpcSecurityGroupIds = [database.id];
        a.deletionProtection = production;
        a.skipFinalSnapshot = !production;
        if (production) a.finalSnapshotIdentifier = finalSnapshot("cluster");
        a.manageMasterUserPassword = true;
        delete a.masterPassword;
        a.iamDatabaseAuthenticationEnabled = true;
      },
      proxy: (a, o, proxyName) => {
        a.requireTls = true;
        a.vpcSecurityGroupIds = [database.id];
        const cluster = (o.parent as sst.aws.Aurora | undefined)?.nodes.cluster;
        if (!cluster) throw new Error(`secureDatabase ${name}: the proxy transform found no Aurora cluster`);
        const secretArn = managedSecretArn(cluster, `the cluster of ${name}`);
        a.auths = [{ authScheme: "SECRETS", iamAuth: "DISABLED", secretArn }];
        a.defaultAuthScheme = "IAM_AUTH";
        a.roleArn = proxySecretRole(proxyName, secretArn, dbUsers(cluster.clusterResourceId), o.parent).arn;
      },
    },
  };
}

/**
 * Role and policy an RDS Proxy uses to read the database's managed master secret and to sign in
 * to the database as the IAM users.
 */
function proxySecretRole(proxyName: string, secretArn: $util.Output<string>, dbUsers: $util.Output<string>[], parent: $util.Resource | undefined): aws.iam.Role {
  return new aws.iam.Role(
    // Named after the proxy: SST requires a component's children to carry its name as prefix.
    `${proxyName}SecretRole`,
    {
      assumeRolePolicy: JSON.stringify({
        Version: "2012-10-17",
        Statement: [{ Effect: "Allow", Principal: { Service: "rds.amazonaws.com" }, Action: "sts:AssumeRole" }],
      }),
      inlinePolicies: [
        {
          name: "managed-master-secret",
          policy: $jsonStringify({ Version: "2012-10-17", Statement: [{ Effect: "Allow", Action: ["secretsmanager:GetSecretValue"], Resource: [secretArn] }] }),
        },
        ...(dbUsers.length > 0
          ? [{ name: "iam-database-users", policy: $jsonStringify({ Version: "2012-10-17", Statement: [{ Effect: "Allow", Action: ["rds-db:connect"], Resource: dbUsers }] }) }]
          : []),
      ],
    },
    parent ? { parent } : {},
  );
}

/**
 * ARN of the master user secret RDS manages (and rotates) for an instance or cluster created with
 * `manageMasterUserPassword: true` (what `secureDatabase()`'s transforms set).
 */
export function managedSecretArn(resource: aws.rds.Instance | aws.rds.Cluster, label: string): $util.Output<string> {
  return resource.masterUserSecrets.apply((secrets) => {
    const arn = secrets?.[0]?.secretArn;
    if (!arn) {
      throw new Error(
        `${label} has no RDS-managed master secret: create it with secureDatabase()'s transform (or set manageMasterUserPassword: true on the instance/cluster) so that rotation keeps the functions' credentials right`,
      );
    }
    return arn;
  });
}

/** `db.t4g.micro` or `t4g.micro` → `t4g.micro` (sst.aws.Postgres adds the `db.` prefix itself). */
export function instanceClass(value: string | undefined, fallback = "t4g.micro"): `${string}.${string}` {
  const v = (value ?? "").trim().replace(/^db\./, "") || fallback;
  if (!/^[a-z0-9]+\.[a-z0-9]+$/.test(v)) throw new Error(`instance class ${JSON.stringify(value)}: expected e.g. t4g.micro or db.t4g.micro`);
  return v as `${string}.${string}`;
}

/** The connection as RDS secret JSON, from a postgres:// URL (kept in an sst.Secret). */
export function rdsJsonFromUrl(url: string): string {
  const u = new URL(url);
  if (u.protocol !== "postgres:" && u.protocol !== "postgresql:") throw new Error("the database secret must hold a postgres:// URL");
  return JSON.stringify({
    engine: "postgres",
    username: decodeURIComponent(u.username),
    password: decodeURIComponent(u.password),
    host: u.hostname,
    port: Number(u.port || 5432),
    dbname: decodeURIComponent(u.pathname.replace(/^\//, "")) || "postgres",
  });
}

/**
 * DATABASE_URL of the local scheduler in `sst dev`: with a managed secret, its current value is
 * read when `sst dev` starts (never stored in a resource of ours).
 */
export function devDatabaseUrl(db: sst.aws.Postgres | sst.aws.Aurora, secretArn: $util.Output<string> | undefined): $util.Output<string> {
  const enc = encodeURIComponent;
  if (!secretArn) return $interpolate`postgres://${db.username}:${db.password}@${db.host}:${db.port}/${db.database}`;
  const value = aws.secretsmanager.getSecretVersionOutput({ secretId: secretArn }).secretString;
  return $util.secret(
    $util.all([value, db.host, db.port, db.database]).apply(([text, host, port, database]) => {
      const s = JSON.parse(text || "{}") as { username?: string; password?: string };
      return `postgres://${enc(s.username ?? "")}:${enc(s.password ?? "")}@${host}:${port}/${enc(database)}`;
    }),
  );
}
