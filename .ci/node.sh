#!/usr/bin/env bash
# The Node package (bindings/node, `nexus-loop`) as a user installs it:
# `npm install ./bindings/node` into a scratch project, which builds the
# native module from source with cargo through the package's own install
# script (build.mjs, release), then its `node --test` suite from there, on
# the machine's Node and, when .ci/mcp-deps.sh provided it, on Node 22.
#
# Needs the workspace's debug `fake-provider` and `nexus` binaries (the
# tests start the fake provider and compare against the CLI): `cargo test
# --workspace` builds both. Also checks the binding crate's format and
# lints, and the package's TypeScript declarations.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
pkg="$root/bindings/node"

echo "== node: binding crate format and lints"
cargo fmt --manifest-path "$pkg/Cargo.toml" -- --check
CARGO_TARGET_DIR="$root/target/node" cargo clippy --manifest-path "$pkg/Cargo.toml" --locked --all-targets -- -D warnings

echo "== node: npm install ./bindings/node into a scratch project (builds the module)"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cd "$scratch"
npm init -y >/dev/null
# zod: the optional peer dependency, for the zod schema test.
CARGO_TARGET_DIR="$root/target/node" npm install --no-audit --no-fund --foreground-scripts "$pkg" zod@4.6.7
cp -r "$pkg/test" "$scratch/test"

export NEXUS_REPO="$root"
echo "== node: node --test on $(node --version)"
node --test test/*.test.mjs
if [ -n "${NEXUS_MCP_NODE:-}" ] && [ -x "$NEXUS_MCP_NODE" ]; then
  echo "== node: node --test on $("$NEXUS_MCP_NODE" --version)"
  "$NEXUS_MCP_NODE" --test test/*.test.mjs
else
  echo "NEXUS_MCP_NODE is not set: the suite ran on $(node --version) only" >&2
fi

echo "== node: TypeScript declarations"
cd "$pkg"
npm ci --no-audit --no-fund --ignore-scripts
npm run typecheck
