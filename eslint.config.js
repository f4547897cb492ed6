// Lint: eslint + typescript-eslint recommended everywhere; on the library's own sources also the
// rules that keep the house in order: no import cycles, no floating promises (type-aware; `npm run
// check` runs tsc -b first, so the packages' types exist), and short functions (at most 80 lines; SQL text lives in
// packages/core/src/sql/ and is exempt from the length rule). Zero errors required; `any` warns.
// import-x/no-cycle skips `import type` and cannot be told otherwise: scripts/check-import-cycles.mjs
// (also in `npm run check`) finds cycles with type imports included.
import js from "@eslint/js";
import { defineConfig, globalIgnores } from "eslint/config";
import tseslint from "typescript-eslint";
import importX from "eslint-plugin-import-x";
import { createTypeScriptImportResolver } from "eslint-import-resolver-typescript";

// Node globals for the plain .js/.mjs scripts (TypeScript files get them from @types/node,
// and typescript-eslint turns no-undef off for them).
const node = Object.fromEntries(
  [
    "process", "console", "Buffer", "URL", "URLSearchParams", "TextEncoder", "TextDecoder",
    "AbortController", "AbortSignal", "Event", "EventTarget", "fetch", "Headers", "Request",
    "Response", "FormData", "Blob", "structuredClone", "queueMicrotask", "performance",
    "setTimeout", "clearTimeout", "setInterval", "clearInterval", "setImmediate", "clearImmediate",
    "globalThis", "crypto",
  ].map((name) => [name, "readonly"]),
);

export default defineConfig(
  globalIgnores([
    "**/node_modules/**",
    "**/dist/**",
    ".build/**",
    ".sst/**",
    ".sqlstreams/**",
    "coverage/**",
    "bench/results/**",
    "packages/core/src/generated/**",
    "test/prisma/generated/**",
  ]),
  {
    files: [
      "packages/*/src/**/*.{ts,mts,js,mjs}",
      "test/**/*.{ts,mts,js,mjs}",
      "functions/**/*.{ts,mts,js,mjs}",
      "bench/**/*.{ts,mts,js,mjs}",
      "scripts/**/*.{ts,mts,js,mjs}",
      "sst.config.ts",
      "vitest.config.ts",
      "eslint.config.js",
    ],
    extends: [js.configs.recommended, tseslint.configs.recommended],
    languageOptions: {
      ecmaVersion: 2023,
      sourceType: "module",
      globals: node,
    },
    rules: {
      "@typescript-eslint/no-unused-vars": [
        "error",
        {
          argsIgnorePattern: "^_",
          varsIgnorePattern: "^_",
          caughtErrorsIgnorePattern: "^_",
          destructuredArrayIgnorePattern: "^_",
          ignoreRestSiblings: true,
        },
      ],
      "@typescript-eslint/no-explicit-any": "warn",
      "no-empty": ["error", { allowEmptyCatch: true }],
    },
  },
  {
    files: ["packages/*/src/**/*.ts"],
    plugins: { "import-x": importX },
    settings: {
      ...importX.flatConfigs.typescript.settings,
      "import-x/resolver-next": [createTypeScriptImportResolver({ project: "packages/*/tsconfig.json", noWarnOnMultipleProjects: true })],
    },
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      "import-x/no-cycle": ["error", { ignoreExternal: true }],
      "@typescript-eslint/no-floating-promises": "error",
      "@typescript-eslint/no-misused-promises": ["error", { checksVoidReturn: { arguments: false } }],
      "max-lines-per-function": ["error", { max: 80, skipBlankLines: true, skipComments: true }],
    },
  },
  {
    // The deployed functions are library code too (not type-aware here).
    files: ["functions/**/*.ts", "sst.config.ts"],
    rules: { "max-lines-per-function": ["error", { max: 80, skipBlankLines: true, skipComments: true }] },
  },
  {
    // Statement builders are SQL text with a few lines of TypeScript around it.
    files: ["packages/core/src/sql/**/*.ts", "packages/core/src/generated/**/*.ts"],
    rules: { "max-lines-per-function": "off" },
  },
  {
    // sst.config.ts conventionally starts with `/// <reference path="./.sst/platform/config.d.ts" />`.
    files: ["sst.config.ts", "test/fixtures/sst-*.config.ts"],
    rules: { "@typescript-eslint/triple-slash-reference": "off" },
  },
);
