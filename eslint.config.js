// Lint: eslint + typescript-eslint recommended, syntax-only (no type-aware rules, so lint stays
// fast and does not depend on the packages being built). `npm run check` runs it with zero
// errors required; `any` is only a warning.
import js from "@eslint/js";
import { defineConfig, globalIgnores } from "eslint/config";
import tseslint from "typescript-eslint";

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
    // sst.config.ts conventionally starts with `/// <reference path="./.sst/platform/config.d.ts" />`.
    files: ["sst.config.ts"],
    rules: { "@typescript-eslint/triple-slash-reference": "off" },
  },
);
