#!/usr/bin/env bash
# The example app (examples/app) built the way an outside team builds it: from the packed
# tarballs of the three workspaces, installed into a copy of the app outside the repository, so
# no module resolution can reach the repository's node_modules. Steps:
#   build      npm run build at the root (skip with --no-build when it just ran), npm pack each workspace
#   install    copy examples/app to a temporary folder, npm install the tarballs and its pinned deps
#   typecheck  tsc --noEmit under NodeNext (strict, skipLibCheck false), again under Bundler resolution
#   quickstart the app's quick start (src/quickstart.ts), then README.md's quick start block as the
#              README says to run it, each against a database of its own: exits 0, promptly once
#              done (no handle left open; a pool left open would hold the process for 10 s)
#   e2e        produce from a Drizzle transaction and from SQL; Delay and Permanent through the
#              Lambda poll handlers; end states from progress() and failures()
#   dev        sqlstreams dev --groups src/streams/groups.ts --once: no demo messages; then the
#              app's handlers drain what the app produced
#   doctor     sqlstreams doctor --groups src/streams/groups.ts: no errors, declaration matches
#   sst        sst install in the app; sst.config.ts type-checks against SST's types
#   stack      sst.config.ts through SST's real components with the packed component (offline)
#   docs       every TypeScript block of README.md and docs/ type-checked against the installed packages
# Every step after install runs even when an earlier one failed; the summary names each result
# and the script exits 1 if any failed.
#
# Environment: DATABASE_URL (required: a server where it may create and drop databases),
# EXAMPLE_NODE_BIN (a bin folder with the Node the app runs on; default Node 24 from
# scripts/extra-node.sh, the Lambda runtime the component deploys), EXAMPLE_DIR (where to put the
# app copy; default a fresh temporary folder, removed at the end), SST_BUN_PATH (default the
# repository's bun).
set -euo pipefail
exec </dev/null
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO="$PWD"

BUILD=1
for a in "$@"; do
  case "$a" in
    --no-build) BUILD=0 ;;
    *) echo "usage: scripts/example-check.sh [--no-build]" >&2; exit 2 ;;
  esac
done
: "${DATABASE_URL:?example-check: set DATABASE_URL to a Postgres server where databases may be created}"
BASE_URL="$DATABASE_URL"

export AWS_EC2_METADATA_DISABLED=true SST_TELEMETRY_DISABLED=1 SST_SKIP_DEPENDENCY_CHECK=1 SST_STAGE=ci
export SST_BUN_PATH="${SST_BUN_PATH:-$REPO/node_modules/bun/bin/bun.exe}"
NODE_BIN="${EXAMPLE_NODE_BIN:-${SQLSTREAMS_NODE24_BIN:-$(scripts/extra-node.sh 24)}}"

START=$SECONDS
RESULTS=()
FAILED=0
if [ -n "${EXAMPLE_DIR:-}" ]; then
  # Kept after the run for inspection. Only what this script puts there is replaced.
  WORK="$(realpath -m "$EXAMPLE_DIR")"; KEEP=1
  case "$WORK/" in "$REPO"/*) echo "example-check: EXAMPLE_DIR=$EXAMPLE_DIR is inside the repository" >&2; exit 2 ;; esac
  mkdir -p "$WORK"
  rm -rf "$WORK/app" "$WORK/packs" "$WORK/databases"
else
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/sqlstreams-example.XXXXXX")"; KEEP=0
  case "$(realpath "$WORK")/" in "$REPO"/*) echo "example-check: $WORK is inside the repository" >&2; exit 2 ;; esac
fi
APP="$WORK/app"
PACKS="$WORK/packs"

cleanup() {
  if [ -d "$APP/node_modules" ] && [ -f "$WORK/databases" ]; then
    while read -r db; do in_app node .check/helpers.mjs dropdb "$db" || true; done <"$WORK/databases"
  fi
  if [ "$KEEP" = 0 ]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT

say() { printf '\n=== [%4ss] example-check: %s\n' "$((SECONDS - START))" "$*"; }
# run NAME COMMAND...: runs one step in a subshell (with errexit: not in an `if`, where bash would
# ignore it), records passed/FAILED, never stops the script.
run() {
  local name="$1"; shift
  say "$name"
  local t0=$SECONDS rc
  set +e
  ( set -euo pipefail; "$@" )
  rc=$?
  set -e
  if [ "$rc" = 0 ]; then
    RESULTS+=("passed  $name ($((SECONDS - t0)) s)")
  else
    RESULTS+=("FAILED  $name ($((SECONDS - t0)) s)")
    FAILED=1
  fi
}
summary() {
  say "summary"
  printf '%s\n' "${RESULTS[@]}"
}
# Runs a command in the app's folder on the app's Node, with its installed binaries first on PATH.
in_app() { (cd "$APP" && PATH="$NODE_BIN:$APP/node_modules/.bin:$PATH" "$@"); }
# Creates a database of its own (dropped at exit) and prints its URL.
createdb() {
  local url
  url="$(in_app node .check/helpers.mjs createdb "$BASE_URL")"
  echo "$url" >>"$WORK/databases"
  echo "$url"
}

step_build() {
  if [ "$BUILD" = 1 ]; then npm run build; fi
  mkdir -p "$PACKS"
  for w in packages/core packages/aws packages/cli; do
    npm pack -w "$w" --pack-destination "$PACKS" --silent
  done
  ls -l "$PACKS"
}

step_install() {
  mkdir -p "$APP"
  # The app as committed: no node_modules, build output or SST state from a local run.
  tar -C examples/app --exclude=node_modules --exclude=dist --exclude=.sst --exclude=.sqlstreams -cf - . | tar -C "$APP" -xf -
  mkdir -p "$APP/.check"
  cp scripts/example-check/helpers.mjs "$APP/.check/"
  in_app node --version
  in_app npm install "$PACKS"/*.tgz --no-audit --no-fund
  # The packages must come from the tarballs: real folders inside the app.
  for p in core aws cli; do
    local d
    d="$(realpath "$APP/node_modules/@sqlstreams/$p")"
    case "$d" in "$(realpath "$APP")"/*) ;; *) echo "@sqlstreams/$p resolves to $d" >&2; return 1 ;; esac
  done
  # The app's JavaScript for the steps that run it (type errors are the typecheck step's to report).
  in_app tsc -p tsconfig.json --noCheck
}

# tsc_strict TOLERATED NOTE ARGS...: tsc in the app; every diagnostic fails the step except those
# located in files matching the extended regex TOLERATED (third-party declarations that do not
# type-check with skipLibCheck false), which are counted and named with NOTE, not shown.
tsc_strict() {
  local tolerated="$1" note="$2"; shift 2
  local out others n
  out="$(in_app tsc "$@" --pretty false 2>&1)" && return 0
  others="$(printf '%s\n' "$out" | grep -E '^[^ ].*error TS|^error TS' | grep -Ev "^($tolerated)" || true)"
  n="$(printf '%s\n' "$out" | grep -E "^($tolerated).*error TS" -c || true)"
  echo "tsc $*: $n error(s) tolerated: $note"
  if [ -n "$others" ]; then printf '%s\n' "$others"; return 1; fi
  if [ "$n" = 0 ]; then printf '%s\n' "$out"; return 1; fi
}

# drizzle-orm's own declarations do not type-check with skipLibCheck false
# (drizzle-team/drizzle-orm#5187; 71 errors at 0.45.4 under TypeScript 5.9, none in what this app
# or @sqlstreams/core/drizzle uses).
DRIZZLE='node_modules/drizzle-orm/'
# both "A ARGS..." "B ARGS...": runs two commands (word-split) side by side, prints their output in
# order, fails if either failed. The type-checks are CPU-bound and independent.
both() {
  local a="$WORK/both.a.log" b="$WORK/both.b.log" ra=0 rb=0
  # shellcheck disable=SC2086
  $1 >"$a" 2>&1 & local pa=$!
  # shellcheck disable=SC2086
  $2 >"$b" 2>&1 & local pb=$!
  wait "$pa" || ra=1
  wait "$pb" || rb=1
  cat "$a" "$b"
  [ "$ra" = 0 ] && [ "$rb" = 0 ]
}

typecheck_nodenext() { tsc_strict "$DRIZZLE" "inside drizzle-orm's declarations (drizzle-orm#5187)" -p tsconfig.json --noEmit; }
typecheck_bundler() { tsc_strict "$DRIZZLE" "inside drizzle-orm's declarations (drizzle-orm#5187)" -p tsconfig.bundler.json; }
step_typecheck() {
  both typecheck_nodenext typecheck_bundler
}

step_quickstart() {
  DATABASE_URL="$(createdb)"; export DATABASE_URL
  in_app timeout --kill-after=5s 60 node .check/helpers.mjs exits dist/quickstart.js
  # And the README's own block, as the README says to run it (saved as quickstart.mts, run by a
  # Node that strips types), in a database of its own.
  awk '/^## Quick start/ { f = 1 } f && /^```ts/ { c = 1; next } c && /^```/ { exit } c { print }' README.md >"$APP/quickstart-readme.mts"
  if [ ! -s "$APP/quickstart-readme.mts" ]; then echo "README.md has no TypeScript block under '## Quick start'" >&2; return 1; fi
  DATABASE_URL="$(createdb)"; export DATABASE_URL
  in_app timeout --kill-after=5s 60 node .check/helpers.mjs exits quickstart-readme.mts
}

step_e2e() {
  DATABASE_URL="$(createdb)"; export DATABASE_URL
  in_app timeout --kill-after=5s 90 node .check/helpers.mjs exits dist/e2e.js
}

step_dev() {
  DATABASE_URL="$(createdb)"; export DATABASE_URL
  # Nothing to do yet: it migrates and registers the declaration, and produces nothing.
  in_app timeout --kill-after=5s 120 sqlstreams dev --groups src/streams/groups.ts --once --no-dashboard
  local head
  head="$(in_app node .check/helpers.mjs head shop.orders)"
  if [ "$head" != "0" ]; then echo "sqlstreams dev wrote into shop.orders (head $head)" >&2; return 1; fi
  # The app's own messages, drained by the app's handlers (one delayed, one dead).
  in_app node .check/helpers.mjs produce
  in_app timeout --kill-after=5s 120 sqlstreams dev --groups src/streams/groups.ts --once --no-dashboard --tick 500
  in_app node .check/helpers.mjs verify
}

step_doctor() {
  DATABASE_URL="$(createdb)"; export DATABASE_URL
  # What a deploy does first: the app's migrate function registers its declaration.
  in_app node .check/helpers.mjs register
  local out
  out="$(in_app sqlstreams doctor --groups src/streams/groups.ts --json)"
  printf '%s\n' "$out"
  printf '%s' "$out" | in_app node -e '
    const r = JSON.parse(require("fs").readFileSync(0, "utf8"));
    const d = r.findings.filter((f) => f.check === "declaration");
    if (r.errors !== 0 || d.length !== 1 || d[0].severity !== "ok" || !/exactly the registered ones/.test(d[0].message)) {
      console.error("doctor: expected no errors and the declaration to match the registered groups");
      process.exit(1);
    }'
}

step_sst() {
  local want
  want="$(node -p 'require("./node_modules/sst/package.json").version')"
  [ "$(in_app node -p 'require("./node_modules/sst/package.json").version')" = "$want" ] || { echo "the app's sst is not the repository's $want" >&2; return 1; }
  in_app timeout --kill-after=10s 300 sst install
  # sst.config.ts, and through it the packed component's declarations, against SST's own
  # .sst/platform/config.d.ts, strict with skipLibCheck false, under NodeNext and under Bundler.
  # SST's platform does not type-check that way itself (an extensionless import under NodeNext, and
  # its own copy of @types/node beside the app's): those diagnostics are tolerated, none in
  # sst.config.ts, src/ or node_modules/@sqlstreams/.
  both sst_typecheck_nodenext sst_typecheck_bundler
}
SST_FLAGS=(--noEmit --strict --skipLibCheck false --noUncheckedIndexedAccess --target ES2023 --lib ES2023 --types node sst.config.ts)
SST_TOLERATED='\.sst/platform/|node_modules/@types/node/'
SST_NOTE="inside SST's platform and the @types/node it duplicates"
sst_typecheck_nodenext() { tsc_strict "$SST_TOLERATED" "$SST_NOTE" --module NodeNext --moduleResolution NodeNext "${SST_FLAGS[@]}"; }
sst_typecheck_bundler() { tsc_strict "$SST_TOLERATED" "$SST_NOTE" --module ESNext --moduleResolution Bundler "${SST_FLAGS[@]}"; }

step_stack() {
  # The repository's harness, on a Node that strips types; the platform is the repository's
  # .sst/platform at the same SST version (test/sst-components.test.ts installs it).
  PATH="$NODE_BIN:$PATH" timeout --kill-after=10s 300 node --no-warnings scripts/example-check/stack.ts "$APP"
}

step_docs() {
  # Every TypeScript block of README.md and docs/ (docs/README.md#code-blocks-are-checked), against
  # the packed packages installed in the app, with the libraries the blocks import at the
  # repository's pinned versions.
  local v deps=()
  for d in zod kysely postgres valibot; do
    v="$(node -p "require('./package.json').devDependencies['$d'] ?? ''")"
    [ -n "$v" ] && deps+=("$d@$v")
  done
  in_app npm install --no-save --no-audit --no-fund "${deps[@]}"
  node scripts/extract-doc-blocks.mjs "$APP/doc-blocks" --sst-platform "$APP/.sst/platform/config.d.ts"
  in_app tsc -p doc-blocks/tsconfig.json --pretty false
  tsc_strict "$DRIZZLE" "inside drizzle-orm's declarations (drizzle-orm#5187)" -p doc-blocks/tsconfig.peers.json
  tsc_strict "$SST_TOLERATED" "$SST_NOTE" -p doc-blocks/tsconfig.sst.json
}

run build step_build
if [ "$FAILED" = 0 ]; then run install step_install; fi
if [ "$FAILED" != 0 ]; then summary; exit 1; fi
run typecheck step_typecheck
run quickstart step_quickstart
run e2e step_e2e
run dev step_dev
run doctor step_doctor
run sst step_sst
run stack step_stack
run docs step_docs
summary
exit "$FAILED"
