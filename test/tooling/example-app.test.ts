// examples/app, the app that adopts SQLStreams from the packed tarballs, stays what
// scripts/example-check.sh relies on: outside the workspaces, exact pins (the same SST as the
// repository, whose .sst/platform the stack step uses), the strict compiler flags an outside team
// uses, and a declaration whose handlers exist. The harness itself (pack, install, type-check, run
// against Postgres, sst install, the real-component stack) takes minutes and is its own CI step.
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { validateGroups } from "@sqlstreams/aws";
import { groups } from "../../examples/app/src/streams/groups.js";

const root = join(import.meta.dirname, "..", "..");
const app = join(root, "examples", "app");
const json = (path: string) => JSON.parse(readFileSync(path, "utf8")) as Record<string, unknown>;
const pkg = json(join(app, "package.json")) as { dependencies: Record<string, string>; devDependencies: Record<string, string>; type?: string };
const rootPkg = json(join(root, "package.json")) as { workspaces: string[]; devDependencies: Record<string, string> };
const deps = { ...pkg.dependencies, ...pkg.devDependencies };

describe("examples/app", () => {
  it("is not a workspace: the repository's install never links it", () => {
    expect(rootPkg.workspaces.some((w) => w.startsWith("examples"))).toBe(false);
    expect(readFileSync(join(root, "package-lock.json"), "utf8")).not.toContain("examples/app");
    expect(existsSync(join(app, "package-lock.json"))).toBe(false);
  });

  it("pins every dependency exactly; @sqlstreams/* at the workspaces' versions, the tarballs' paths never committed", () => {
    for (const [name, spec] of Object.entries(deps)) expect(spec, name).toMatch(/^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/);
    for (const p of ["core", "aws", "cli"]) {
      const version = (json(join(root, "packages", p, "package.json")) as { version: string }).version;
      expect(deps[`@sqlstreams/${p}`], p).toBe(version);
    }
    // The stack step runs the app's sst.config.ts on the repository's .sst/platform.
    expect(deps.sst).toBe(rootPkg.devDependencies.sst);
    for (const shared of ["drizzle-orm", "typescript"]) expect(deps[shared], shared).toBe(rootPkg.devDependencies[shared]);
    const core = json(join(root, "packages", "core", "package.json")) as { dependencies: Record<string, string> };
    expect(deps.pg).toBe(core.dependencies.pg); // one pg in the app, not a second copy beside the library's
  });

  it("compiles like a strict app: NodeNext, skipLibCheck false, noUncheckedIndexedAccess; and again under Bundler", () => {
    expect(pkg.type).toBe("module");
    const { compilerOptions: o } = json(join(app, "tsconfig.json")) as { compilerOptions: Record<string, unknown> };
    expect(o).toMatchObject({ strict: true, module: "NodeNext", moduleResolution: "NodeNext", skipLibCheck: false, noUncheckedIndexedAccess: true });
    const bundler = json(join(app, "tsconfig.bundler.json")) as { extends: string; compilerOptions: Record<string, unknown> };
    expect(bundler.extends).toBe("./tsconfig.json");
    expect(bundler.compilerOptions.moduleResolution).toBe("Bundler");
  });

  it("declares valid groups whose handlers exist in the app and bind createPollHandler to their own pair", () => {
    validateGroups(groups);
    const handlers = readdirSync(join(app, "src", "handlers")).filter((f) => f.endsWith(".ts"));
    expect(handlers).toHaveLength(groups.length);
    for (const g of groups) {
      const file = join(app, `${g.function.slice(0, g.function.lastIndexOf("."))}.ts`);
      expect(existsSync(file), file).toBe(true);
      const source = readFileSync(file, "utf8");
      expect(source).toContain(`export const handler = createPollHandler({ stream: ordersPlaced, group: ${JSON.stringify(g.group)},`);
      expect(g.stream).toBe("shop.orders");
    }
  });

  it("sst.config.ts takes the component from the package and the app's own migrate and maintain functions", () => {
    const config = readFileSync(join(app, "sst.config.ts"), "utf8");
    expect(config).toContain('await import("@sqlstreams/aws/sst")');
    expect(config).toContain('handlers: { migrate: "src/streams/migrate.handler", maintain: "src/streams/maintain.handler" }');
    for (const f of ["migrate", "maintain"]) expect(existsSync(join(app, "src", "streams", `${f}.ts`)), f).toBe(true);
  });
});
