// Helpers of scripts/example-check.sh, copied into the example app's temporary copy and run there,
// so that every import resolves from the app's node_modules (the installed tarballs), never from
// the repository's.
//   node helpers.mjs createdb URL        creates a database of its own on URL's server; prints its URL
//   node helpers.mjs dropdb URL          drops that database
//   node helpers.mjs exits SCRIPT        runs SCRIPT (a path in the app) and fails if the process is
//                                        still alive 3 s after the script finished (a lingering handle)
//   node helpers.mjs register            runs the app's migrate function (dist/streams/migrate.js) (DATABASE_URL)
//   node helpers.mjs head STREAM         prints the stream's head id, or "unregistered" (DATABASE_URL)
//   node helpers.mjs produce             places three orders for `sqlstreams dev --once` (DATABASE_URL)
//   node helpers.mjs verify              checks the end state `sqlstreams dev --once` left (DATABASE_URL)
import { randomBytes } from "node:crypto";
import { closeDefaultDatabase, localContext } from "@sqlstreams/aws";
import { SqlStreams } from "@sqlstreams/core";
import pg from "pg";

const [command, arg] = process.argv.slice(2);

function fail(message) {
  console.error(`example-check: ${message}`);
  process.exitCode = 1;
}

async function admin(url, sql) {
  const u = new URL(url);
  u.pathname = "/postgres";
  const c = new pg.Client({ connectionString: u.href });
  await c.connect();
  try {
    await c.query(sql);
  } finally {
    await c.end();
  }
}

async function withClient(fn) {
  const client = new SqlStreams({ connectionString: process.env.DATABASE_URL });
  try {
    return await fn(client);
  } finally {
    await client.close();
  }
}

switch (command) {
  case "createdb": {
    const name = `example_app_${randomBytes(6).toString("hex")}`;
    await admin(arg, `CREATE DATABASE ${name}`);
    const u = new URL(arg);
    u.pathname = `/${name}`;
    console.log(u.href);
    break;
  }
  case "dropdb": {
    const name = new URL(arg).pathname.slice(1);
    if (!/^example_app_[0-9a-f]{12}$/.test(name)) throw new Error(`dropdb: ${name} is not a database this script created`);
    await admin(arg, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    break;
  }
  case "exits": {
    await import(new URL(`../${arg}`, import.meta.url).href);
    // Unref'd: it fires only if something else keeps the process alive. A pg pool left open keeps
    // it alive for its idle timeout (10 s) before Node exits by itself.
    setTimeout(() => {
      console.error(`example-check: ${arg} finished 3 s ago and the process is still alive: ${process.getActiveResourcesInfo().join(", ")}`);
      process.exit(1);
    }, 3_000).unref();
    break;
  }
  case "register": {
    const { handler } = await import(new URL("../dist/streams/migrate.js", import.meta.url).href);
    try {
      console.log(JSON.stringify(await handler({}, localContext(30_000))));
    } finally {
      await closeDefaultDatabase();
    }
    break;
  }
  case "head": {
    await withClient(async (client) => {
      const p = await client.stream(arg).consumer("confirmation-emails").progress().catch(() => null);
      console.log(p ? p.head : "unregistered");
    });
    break;
  }
  case "produce": {
    await withClient(async (client) => {
      const orders = client.stream("shop.orders");
      await orders.produce({ orderId: "D-1", customerId: "c-1", email: "ada@example.com", totalCents: 4_200 }, { key: "c-1", idempotencyKey: "order:D-1" });
      await orders.produce({ orderId: "D-2", customerId: "c-2", email: "nobody", totalCents: 100 }, { key: "c-2", idempotencyKey: "order:D-2" });
      // Asked to be confirmed 2 s from now: the handler delays it once, the next tick sends it.
      await orders.produce({ orderId: "D-3", customerId: "c-1", email: "ada@example.com", totalCents: 900, sendAfter: Date.now() + 2_000 }, { key: "c-1", idempotencyKey: "order:D-3" });
    });
    break;
  }
  case "verify": {
    await withClient(async (client) => {
      const orders = client.stream("shop.orders");
      const emails = await orders.consumer("confirmation-emails").progress();
      const loyalty = await orders.consumer("loyalty-points").progress();
      const dead = await orders.consumer("confirmation-emails").failures({ status: "dead" });
      const summary = { emails: { head: emails.head, lag: emails.lag, ...emails.exceptions }, loyalty: { lag: loyalty.lag, ...loyalty.exceptions }, dead: dead.map((d) => d.payload.orderId) };
      console.log(JSON.stringify(summary));
      if (emails.head !== loyalty.head || emails.lag !== "0" || loyalty.lag !== "0") fail("sqlstreams dev --once left lag behind");
      if (emails.exceptions.dead !== 1 || emails.exceptions.ready !== 0 || dead[0]?.payload.orderId !== "D-2") fail("confirmation-emails: expected exactly D-2 dead and nothing waiting");
      if (Object.values(loyalty.exceptions).some((n) => n > 0)) fail("loyalty-points: expected no exception rows");
    });
    break;
  }
  default:
    throw new Error(`unknown command ${command}`);
}
