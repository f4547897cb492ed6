// Imports resolved from bench/peers/node_modules (this file's folder), not the repository's root,
// which pins the older peers (pg-boss 10, graphile-worker 0.17) for the history rows.
export const pgBoss = () => import("pg-boss");
export const graphileWorker = () => import("graphile-worker");
