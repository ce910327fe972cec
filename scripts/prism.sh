#!/usr/bin/env bash
# Install the Prism OpenAPI validator (used by tests/service_contract.rs in proxy mode) into
# target/prism of this repository, only when it is missing, and print the path of its binary.
#
#   scripts/prism.sh            # install if needed, print e.g. /repo/target/prism/node_modules/.bin/prism
#   PRISM_DIR=/elsewhere scripts/prism.sh
#
# The version is pinned: 5.14.2 is the newest 5.x whose package.json `engines` accepts Node 20
# (5.15.x and later need Node >= 24).
set -euo pipefail
PRISM_VERSION=5.14.2
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="${PRISM_DIR:-$repo_root/target/prism}"
bin="$prefix/node_modules/.bin/prism"

installed_version() {
  [ -x "$bin" ] || return 1
  "$bin" --version 2>/dev/null | tr -d '[:space:]'
}

if [ "$(installed_version || true)" != "$PRISM_VERSION" ]; then
  command -v npm >/dev/null 2>&1 || { echo "prism.sh: npm is required (Node >= 18.20.1)" >&2; exit 1; }
  mkdir -p "$prefix"
  # A private package.json keeps npm from walking up to some other project.
  [ -f "$prefix/package.json" ] || printf '{ "name": "ai-prism", "private": true }\n' >"$prefix/package.json"
  npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error \
    --save-exact "@stoplight/prism-cli@$PRISM_VERSION" >&2
  v="$(installed_version || true)"
  if [ "$v" != "$PRISM_VERSION" ]; then
    echo "prism.sh: expected prism $PRISM_VERSION at $bin, got '${v:-nothing}'" >&2
    exit 1
  fi
fi
echo "$bin"
