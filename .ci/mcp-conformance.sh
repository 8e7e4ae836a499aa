#!/usr/bin/env bash
# The official MCP conformance suite (client side) against nexus's MCP client
# (nexus-drive/examples/mcp_conformance.rs), at both protocol revisions, each
# with its expected-failures baseline (only auth/* scenarios may be listed).
#
#   .ci/mcp-conformance.sh            # installs what it needs (.ci/mcp-deps.sh)
#
# Exits non-zero on any unexpected failure or stale baseline entry. Prints
# the suite's summary per revision; results go to target/mcp-conformance/.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

if [ -z "${NEXUS_MCP_CONFORMANCE:-}" ] || [ -z "${NEXUS_MCP_NODE:-}" ]; then
  eval "$(bash .ci/mcp-deps.sh)"
fi

# A baseline may excuse authorization scenarios only.
for f in .ci/mcp-conformance/baseline-*.yml; do
  if grep -E '^\s*-\s' "$f" | grep -vE '^\s*-\s+auth/' >/dev/null; then
    echo "mcp-conformance.sh: $f lists a scenario outside auth/*" >&2
    exit 1
  fi
done

cargo build -p nexus-drive --example mcp_conformance
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
client="$target_dir/debug/examples/mcp_conformance"
out="$target_dir/mcp-conformance"
rm -rf "$out"
mkdir -p "$out"

status=0
for version in 2025-11-25 2026-07-28; do
  echo "== MCP conformance, client, --spec-version $version"
  log="$out/$version.log"
  if "$NEXUS_MCP_NODE" "$NEXUS_MCP_CONFORMANCE/dist/index.js" client \
    --command "$client" --suite all --spec-version "$version" \
    --expected-failures "$root/.ci/mcp-conformance/baseline-$version.yml" \
    -o "$out/$version" >"$log" 2>&1; then
    result=passed
  else
    result=FAILED
    status=1
  fi
  sed -n '/SUITE SUMMARY/,$p' "$log"
  echo "-- $version: $result (non-auth scenarios: $(sed -n '/SUITE SUMMARY/,$p' "$log" | grep -E '^[✓✗] ' | grep -vc ' auth/') run, $(sed -n '/SUITE SUMMARY/,$p' "$log" | grep -E '^✓ ' | grep -vc ' auth/') passed)"
done
exit "$status"
