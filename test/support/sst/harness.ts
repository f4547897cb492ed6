/* eslint-disable @typescript-eslint/no-explicit-any -- the mocked resources' inputs are untyped JSON */
// Runs an sst.config.ts through SST's real components offline, the way `sst deploy` / `sst diff`
// would, and returns every resource the program registers. See docs/guide/deployment.md#testing-the-stack.
//
// What the SST CLI (Go) does and what this harness does in its place:
//  1. `sst install` extracts the platform (components, shims) into .sst/platform and installs its
//     @pulumi/* packages from the npm registry: we run the real `sst install` (ensurePlatform()).
//  2. It evaluates `app()` of the config in a separate bundle to learn name, home and providers.
//  3. It bundles the program with esbuild: stdin imports platform/src/auto/run.ts and the config,
//     `$app`/`$cli`/`$dev` are defines, platform/src/shim/run.js is injected ($interpolate,
//     $jsonStringify, ...), every non-.sst file gets `import * as aws/sst` prepended, and
//     @pulumi/*, @aws-sdk/* and a few more stay external (resolved from .sst/platform/node_modules).
//  4. Pulumi runs that bundle against real AWS; the components call back into the CLI over HTTP
//     (SST_SERVER, JSON-RPC: Runtime.Build, Provider.Aws.Bootstrap, and in dev Provider.Aws.Appsync,
//     Runtime.AddTarget).
// Here the bundle runs in a child process (child.mjs) inside @pulumi/pulumi's runInPulumiStack
// with runtime.setMocks: resources and provider functions are answered by mocks (ids are never
// empty, or dependent resources silently vanish), and the RPC calls are answered by this file.
//
// On an SST upgrade: compare pkg/project/stack.go (the run bundle) and pkg/project/project.go (the
// app() evaluation) of the new CLI with steps 2-3, and the rpc.call() sites of platform/src.
import { spawn, execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { dirname, join, relative } from "node:path";
import { build } from "esbuild";

export const root = join(import.meta.dirname, "..", "..", "..");
export const platformDir = join(root, ".sst", "platform");
const SST_VERSION = (JSON.parse(readFileSync(join(root, "node_modules", "sst", "package.json"), "utf8")) as { version: string }).version;

/** The environment `sst install` needs to run without AWS and without downloading bun. */
export function sstInstallEnv(stage = "test"): NodeJS.ProcessEnv {
  return {
    ...process.env,
    SST_SKIP_DEPENDENCY_CHECK: "1",
    SST_TELEMETRY_DISABLED: "1",
    SST_STAGE: stage,
    SST_BUN_PATH: join(root, "node_modules", "bun", "bin", "bun.exe"),
  };
}

/** Runs `sst install` unless .sst/platform already holds this SST version with its packages. */
export function ensurePlatform(): void {
  const versionFile = join(platformDir, "version");
  const ready =
    existsSync(versionFile) &&
    readFileSync(versionFile, "utf8").trim() === SST_VERSION &&
    existsSync(join(platformDir, "node_modules", "@pulumi", "pulumi", "package.json")) &&
    existsSync(join(platformDir, "config.d.ts"));
  if (ready) return;
  execFileSync(join(root, "node_modules", ".bin", "sst"), ["install"], { cwd: root, env: sstInstallEnv(), stdio: "pipe", timeout: 300_000 });
}

/** One resource the program registered: type token, logical name, resolved inputs. */
export interface Registered {
  type: string;
  name: string;
  /** Logical name of the parent resource (undefined at the stack root). */
  parent?: string;
  /** Logical names of the explicit dependsOn of the resource options. */
  dependsOn: string[];
  /** Inputs as the mock provider received them (unknown values are absent in a preview). */
  inputs: Record<string, any>;
  /** A component's registered outputs, with outputs and resources as "<output>". */
  outputs?: Record<string, any>;
  /** The id the mock gave it ("" = unknown in a preview). */
  id: string;
}

export interface RpcCall {
  method: string;
  params: any;
}

export interface SstRun {
  app: Record<string, unknown>;
  resources: Registered[];
  /** The stack outputs, each `{ known, value }` (a preview can leave a value unknown). */
  outputs: Record<string, { known: boolean; value: unknown }>;
  rpc: RpcCall[];
  invokes: { token: string; inputs: any }[];
  /** Resources of one type token. */
  of(type: string): Registered[];
  /** The single resource of this type and logical name (throws if absent or ambiguous). */
  one(type: string, name: string): Registered;
}

export interface RunOptions {
  /** Config file relative to the repository root. Default sst.config.ts. */
  config?: string;
  stage?: string;
  /** `sst dev`: $dev = true. */
  dev?: boolean;
  /** `sst diff`: a Pulumi preview, with the resources of `replaced` left without id/outputs. */
  preview?: boolean;
  /** Logical names of resources a preview replaces (their outputs are unknown). */
  replaced?: string[];
  /** Extra environment of the program (e.g. SST_SECRET_<name> values, deploy-time settings). */
  env?: Record<string, string>;
}

let sequence = 0;

async function bundleApp(config: string, stage: string, out: string): Promise<Record<string, unknown>> {
  await build({
    stdin: {
      contents: `import mod from ${JSON.stringify(join(root, config))};\nconsole.log("~j" + JSON.stringify(mod.app({ stage: $input.stage || undefined })));`,
      resolveDir: root,
      sourcefile: "eval.ts",
      loader: "ts",
    },
    banner: { js: "function $config(input) { return input }" },
    define: { $input: JSON.stringify({ stage }) },
    bundle: true,
    platform: "node",
    format: "esm",
    outfile: out,
    logLevel: "silent",
  });
  const printed = execFileSync(process.execPath, ["--no-warnings", out], { cwd: root, encoding: "utf8" });
  const line = printed.split("\n").find((l) => l.startsWith("~j"));
  if (!line) throw new Error(`app() printed nothing: ${printed}`);
  const app = JSON.parse(line.slice(2)) as Record<string, unknown>;
  // The Go CLI decodes into its App struct: only these fields reach $app.
  return { name: app.name, stage, removal: app.removal ?? "", providers: app.providers ?? {}, home: app.home, version: app.version ?? "", backend: "", removalPolicy: "" };
}

async function bundleRun(config: string, app: Record<string, unknown>, dev: boolean, work: string, out: string): Promise<void> {
  const cli = { command: dev ? "dev" : "deploy", dev, paths: { home: join(work, "home"), root, work, platform: platformDir }, state: { version: {} } };
  // Providers of app() (none here besides the home's aws) become `import * as <alias>` globals.
  const providers = Object.keys((app.providers as Record<string, unknown>) ?? {});
  if (!providers.includes("aws")) providers.unshift("aws");
  const globals = [
    ...providers.map((p) => `import * as ${p} from "@pulumi/${p}";`),
    `import * as sst from ${JSON.stringify(join(platformDir, "src/components"))};`,
  ].join("\n");
  await build({
    banner: {
      js: [
        "import { createRequire as topLevelCreateRequire } from 'module';",
        "const require = topLevelCreateRequire(import.meta.url);",
        'import { fileURLToPath as topLevelFileUrlToPath, URL as topLevelURL } from "url"',
        "const __filename = topLevelFileUrlToPath(import.meta.url)",
        'const __dirname = topLevelFileUrlToPath(new topLevelURL(".", import.meta.url))',
      ].join("\n"),
    },
    mainFields: ["module", "main"],
    format: "esm",
    platform: "node",
    sourcemap: "linked",
    stdin: {
      contents: [
        `import { run } from ${JSON.stringify(join(platformDir, "src/auto/run.ts"))};`,
        `import mod from ${JSON.stringify(join(root, config))};`,
        "const result = await run(mod.run);",
        "export default result;",
      ].join("\n"),
      resolveDir: root,
      sourcefile: "eval.ts",
      loader: "ts",
    },
    nodePaths: [join(platformDir, "node_modules")],
    plugins: [
      {
        name: "InjectGlobals",
        setup(b) {
          b.onLoad({ filter: /\.(js|ts|jsx|tsx)$/ }, (args) => {
            const text = readFileSync(args.path, "utf8");
            return { contents: args.path.includes(".sst") ? text : `${globals}\n${text}`, loader: "default" };
          });
        },
      },
    ],
    external: ["@pulumi/*", "undici", "@pulumiverse/*", "@sst-provider/*", "@aws-sdk/*", "esbuild", "archiver", "glob", "vite"],
    define: { $app: JSON.stringify(app), $cli: JSON.stringify(cli), $dev: String(dev) },
    inject: [join(platformDir, "src/shim/run.js")],
    outfile: out,
    bundle: true,
    logLevel: "silent",
  });
}

/** Answers the components' calls to the CLI (SST_SERVER/rpc), recording each. */
function rpcServer(work: string, calls: RpcCall[]): Promise<Server> {
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.on("end", () => {
      const { method, params } = JSON.parse(body) as { method: string; params: any[] };
      const input = params[0];
      calls.push({ method, params: input });
      let result: unknown;
      let error: string | undefined;
      switch (method) {
        case "Runtime.Build": {
          // The CLI bundles the handler; a stub file stands in for the bundle (it is zipped).
          const handler = String(input.handler);
          const file = handler.slice(0, handler.lastIndexOf("."));
          const out = join(work, "artifacts", `${input.functionID}-src`);
          mkdirSync(dirname(join(out, file)), { recursive: true });
          writeFileSync(join(out, `${file}.mjs`), `export const ${handler.slice(handler.lastIndexOf(".") + 1)} = async () => {};\n`);
          result = { handler, out, errors: [], sourcemaps: [] };
          break;
        }
        case "Provider.Aws.Bootstrap":
          result = { asset: `sst-asset-${input.region}`, assetEcrRegistryId: "123456789012", assetEcrUrl: `123456789012.dkr.ecr.${input.region}.amazonaws.com/sst-asset`, state: `sst-state-${input.region}` };
          break;
        case "Provider.Aws.Appsync": // sst dev: the live-function bridge's endpoints
          result = { http: "mock-appsync.appsync-api.us-east-1.amazonaws.com", realtime: "mock-appsync.appsync-realtime-api.us-east-1.amazonaws.com" };
          break;
        case "Runtime.AddTarget":
          result = {};
          break;
        default:
          error = `rpc: can't find method ${method}`;
      }
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(error ? { error } : { result }));
    });
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

/** Bundles and runs `config` as `sst deploy` (or `sst diff` / `sst dev`) would, against mocks. */
export async function runSst(opts: RunOptions = {}): Promise<SstRun> {
  ensurePlatform();
  const config = opts.config ?? "sst.config.ts";
  const stage = opts.stage ?? "test";
  const dev = opts.dev ?? false;
  const work = join(root, ".sst", "harness", `${process.pid}-${++sequence}`);
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  // Bundles live in .sst/platform so that the external @pulumi/* resolve from its node_modules.
  const appOut = join(platformDir, `harness.app.${process.pid}-${sequence}.mjs`);
  const runOut = join(platformDir, `harness.run.${process.pid}-${sequence}.mjs`);
  const calls: RpcCall[] = [];
  const server = await rpcServer(work, calls);
  try {
    const app = await bundleApp(config, stage, appOut);
    await bundleRun(config, app, dev, work, runOut);
    const resultFile = join(work, "result.json");
    const { port } = server.address() as AddressInfo;
    const child = spawn(process.execPath, ["--enable-source-maps", "--no-deprecation", join(import.meta.dirname, "child.mjs")], {
      cwd: root,
      env: {
        ...process.env,
        ...opts.env,
        AWS_REGION: "us-east-1",
        SST_SERVER: `http://127.0.0.1:${port}`,
        SQLSTREAMS_SST_HARNESS: JSON.stringify({ bundle: runOut, result: resultFile, platform: platformDir, app, preview: opts.preview ?? false, replaced: opts.replaced ?? [] }),
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    child.stdout.on("data", (c: Buffer) => (output += c.toString()));
    child.stderr.on("data", (c: Buffer) => (output += c.toString()));
    const code = await new Promise<number | null>((resolve) => child.on("exit", resolve));
    if (code !== 0 || !existsSync(resultFile)) throw new Error(`the SST program failed (exit ${code}):\n${output}`);
    const result = JSON.parse(readFileSync(resultFile, "utf8")) as Omit<SstRun, "app" | "rpc" | "of" | "one">;
    const of = (type: string) => result.resources.filter((r) => r.type === type);
    const one = (type: string, name: string) => {
      const found = result.resources.filter((r) => r.type === type && r.name === name);
      if (found.length !== 1) throw new Error(`${found.length} resources ${type} ${name}; registered: ${result.resources.filter((r) => r.type === type).map((r) => r.name).join(", ")}`);
      return found[0];
    };
    return { ...result, app, rpc: calls, of, one };
  } finally {
    await new Promise((r) => server.close(r));
    for (const f of [appOut, runOut, `${runOut}.map`]) rmSync(f, { force: true });
    rmSync(work, { recursive: true, force: true });
  }
}

/** For messages: a path relative to the repository. */
export const rel = (p: string) => relative(root, p);
