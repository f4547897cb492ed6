// Child of harness.ts: runs one bundled SST program inside @pulumi/pulumi's runInPulumiStack with
// mocks, and writes what it registered to a JSON file. A process per run: Pulumi's runtime state
// is global. See harness.ts for the mechanics and docs/guide/deployment.md#testing-the-stack.
import { writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const opts = JSON.parse(process.env.SQLSTREAMS_SST_HARNESS);
const require = createRequire(join(opts.platform, "package.json"));
const pulumi = require("@pulumi/pulumi");

const ACCOUNT = "123456789012";
const REGION = "us-east-1";
const registered = new Map(); // `${type}::${name}` -> record
const invokes = [];
const replaced = new Set(opts.replaced);

const SECRET_SIG = "4dabf18193072939515e22adb298388d"; // Pulumi's marker of a serialized secret
/** Inputs with secrets unwrapped to their values (so a test can look for leaked passwords). */
function plain(v) {
  if (Array.isArray(v)) return v.map(plain);
  if (v && typeof v === "object") {
    if (SECRET_SIG in v) return plain(v.value);
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]));
  }
  return v;
}

function record(type, name) {
  const key = `${type}::${name}`;
  let r = registered.get(key);
  if (!r) {
    r = { type, name, dependsOn: [], inputs: {}, id: "" };
    registered.set(key, r);
  }
  return r;
}

/** RDS creates (and rotates) the master user's secret when `manageMasterUserPassword` is set. */
function managedSecret(inputs, physical) {
  if (!inputs.manageMasterUserPassword) return { masterUserSecrets: [] };
  return { masterUserSecrets: [{ secretArn: `arn:aws:secretsmanager:${REGION}:${ACCOUNT}:secret:rds!db-${physical}-AbCdEf`, kmsKeyId: "", secretStatus: "active" }] };
}

/** Outputs a real provider would compute, so dependents have something to read. */
function computed(type, name, inputs) {
  const [, , mod, kind] = /^([^:]+):([^/]+)\/([^:]+):/.exec(type) ?? [];
  const physical = inputs.name ?? `${name.toLowerCase()}-physical`;
  const base = { arn: inputs.arn ?? `arn:aws:${mod ?? "x"}:${REGION}:${ACCOUNT}:${kind ?? "resource"}/${physical}`, name: physical };
  switch (type) {
    case "aws:rds/instance:Instance":
      return { ...base, identifier: physical, address: `${physical}.rds.internal`, endpoint: `${physical}.rds.internal:5432`, port: 5432, username: inputs.username, resourceId: "db-MOCKINSTANCE0123456789", ...managedSecret(inputs, physical) };
    case "aws:rds/proxy:Proxy":
      return { ...base, arn: `arn:aws:rds:${REGION}:${ACCOUNT}:db-proxy:prx-0mock0123456789ab`, endpoint: `${physical}.proxy.rds.internal` };
    case "aws:rds/cluster:Cluster":
      return { ...base, endpoint: `${physical}.cluster.rds.internal`, readerEndpoint: `${physical}.ro.rds.internal`, port: 5432, clusterIdentifier: physical, clusterResourceId: "cluster-MOCKCLUSTER0123456789", ...managedSecret(inputs, physical) };
    case "aws:lambda/functionUrl:FunctionUrl":
      return { ...base, functionUrl: `https://${physical}.lambda-url.${REGION}.on.aws/`, urlId: physical };
    case "random:index/randomPassword:RandomPassword":
      return { result: "mock-password-do-not-leak" };
    case "random:index/randomBytes:RandomBytes":
      return { base64: "bW9jaw==", hex: "6d6f636b" };
    default:
      return base;
  }
}

await pulumi.runtime.setMocks(
  {
    newResource(args) {
      const r = record(args.type, args.name);
      r.inputs = plain(args.inputs);
      if (opts.preview && replaced.has(args.name)) return { id: undefined, state: {} };
      r.id = `${args.name}-id`;
      return { id: r.id, state: { ...computed(args.type, args.name, args.inputs), ...args.inputs } };
    },
    call(args) {
      invokes.push({ token: args.token, inputs: args.inputs });
      switch (args.token) {
        case "aws:index/getRegion:getRegion":
          return { name: REGION, region: REGION, id: REGION, description: "US East (N. Virginia)", endpoint: `ec2.${REGION}.amazonaws.com` };
        case "aws:index/getPartition:getPartition":
          return { partition: "aws", dnsSuffix: "amazonaws.com", id: "aws", reverseDnsPrefix: "com.amazonaws" };
        case "aws:index/getCallerIdentity:getCallerIdentity":
          return { accountId: ACCOUNT, arn: `arn:aws:iam::${ACCOUNT}:user/test`, id: ACCOUNT, userId: "TEST" };
        case "aws:index/getAvailabilityZones:getAvailabilityZones":
          return { names: [`${REGION}a`, `${REGION}b`], zoneIds: ["use1-az1", "use1-az2"], id: REGION };
        case "aws:iam/getPolicyDocument:getPolicyDocument":
          // The provider echoes the statements (SST reads them back) and renders the document.
          return { json: JSON.stringify({ Version: "2012-10-17", Statement: args.inputs.statements ?? [] }), statements: args.inputs.statements, id: "policy" };
        default:
          return args.inputs;
      }
    },
  },
  opts.app.name,
  opts.app.stage,
  opts.preview,
);

const nameOf = (r) => r?.__name ?? "<unnamed>";
// What a component registers as its outputs (sst.x.DevCommand's `_dev`, which the SST CLI reads),
// plain values only: outputs and resources become "<output>".
const registerOutputs = pulumi.ComponentResource.prototype.registerOutputs;
pulumi.ComponentResource.prototype.registerOutputs = function (outputs) {
  if (outputs && typeof outputs === "object" && !pulumi.Output.isInstance(outputs)) record(this.__pulumiType, nameOf(this)).outputs = componentArgs(outputs);
  return registerOutputs.call(this, outputs);
};
function componentArgs(v) {
  if (pulumi.Output.isInstance(v) || pulumi.Resource.isInstance(v)) return "<output>";
  if (Array.isArray(v)) return v.map(componentArgs);
  if (v && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, componentArgs(x)]));
  return typeof v === "function" ? "<function>" : v;
}
let programOutputs = {};
await pulumi.runtime.runInPulumiStack(async () => {
  // Every resource's options as constructed (after component transforms): parent and dependsOn.
  pulumi.runtime.registerStackTransformation((args) => {
    const r = record(args.type, args.name);
    r.parent = args.opts.parent ? nameOf(args.opts.parent) : undefined;
    const deps = args.opts.dependsOn;
    r.dependsOn = deps === undefined ? [] : (Array.isArray(deps) ? deps : [deps]).map((d) => (pulumi.Resource.isInstance(d) ? nameOf(d) : "<input>"));
    return undefined;
  });
  const mod = await import(pathToFileURL(opts.bundle).href);
  programOutputs = mod.default ?? {};
  return programOutputs;
});
await pulumi.runtime.waitForRPCs();

const outputs = {};
for (const [key, value] of Object.entries(programOutputs)) {
  const o = pulumi.output(value);
  const known = await o.isKnown;
  outputs[key] = { known, value: known ? await o.promise() : undefined };
}
writeFileSync(opts.result, JSON.stringify({ resources: [...registered.values()].filter((r) => r.type !== "pulumi:pulumi:Stack"), outputs, invokes }));
process.exit(0);
