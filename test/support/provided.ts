// What the global setup hands to every test file through vitest's provide/inject.
// Kept in one module so the global setup and the fixtures agree on names and types.

export type DatabaseServerKind = "embedded" | "external";

declare module "vitest" {
  export interface ProvidedContext {
    /** Connection string of the server's maintenance database; fixtures create databases from it. */
    baseDatabaseUrl: string;
    /** `external` when DATABASE_URL was set, `embedded` when the global setup started a Postgres. */
    databaseServer: DatabaseServerKind;
  }
}

/**
 * Environment variable carrying the same base URL, for code that cannot call `inject`
 * (the global setup sets it before any worker starts).
 */
export const BASE_URL_ENV = "SQLSTREAMS_TEST_BASE_URL";
