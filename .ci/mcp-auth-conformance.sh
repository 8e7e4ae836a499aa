#!/usr/bin/env bash
# The MCP conformance suite's authorization (auth/*) client scenarios against
# nexus's OAuth client (nexus_drive::mcp::auth, driven by the conformance
# client nexus-drive/examples/mcp_conformance.rs), one by one: every
# non-extension scenario at every spec version it applies to, including the
# 2025-03-26 back-compat ones that `.ci/mcp-conformance.sh`'s suite runs skip.
# Extension scenarios (client credentials, DPoP, enterprise-managed, workload
# identity) are not run: nexus does not implement them. A scenario listed in .ci/mcp-auth-conformance/expected-failures
# ("VERSION SCENARIO" lines) may fail; one that then passes is a stale entry
# and fails the run.
#
#   .ci/mcp-auth-conformance.sh        # installs what it needs (.ci/mcp-deps.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${NEXUS_MCP_CONFORMANCE:-}" ] || [ -z "${NEXUS_MCP_NODE:-}" ]; then
  eval "$(bash .ci/mcp-deps.sh)"
fi

cargo build -p nexus-drive --example mcp_conformance
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
client="$target_dir/debug/examples/mcp_conformance"
out="$target_dir/mcp-auth-conformance"
rm -rf "$out"
mkdir -p "$out"
expected=.ci/mcp-auth-conformance/expected-failures

common="metadata-default metadata-var1 metadata-var2 metadata-var3 basic-cimd scope-from-www-authenticate
  scope-from-scopes-supported scope-omitted-when-undefined scope-step-up scope-retry-limit
  token-endpoint-auth-basic token-endpoint-auth-post token-endpoint-auth-none pre-registration"
modern="resource-mismatch offline-access-scope offline-access-not-supported authorization-server-migration
  iss-supported iss-not-advertised iss-supported-missing iss-wrong-issuer iss-unexpected iss-normalized
  metadata-issuer-mismatch"
backcompat="2025-03-26-oauth-metadata-backcompat 2025-03-26-oauth-endpoint-fallback"

runs=()
for s in $backcompat; do runs+=("2025-03-26 auth/$s"); done
for s in $common; do runs+=("2025-11-25 auth/$s"); done
for s in $common $modern; do runs+=("2026-07-28 auth/$s"); done

status=0 passed=0 failed=0
for run in "${runs[@]}"; do
  version=${run%% *} scenario=${run#* }
  log="$out/${version}-${scenario//\//_}.log"
  if "$NEXUS_MCP_NODE" "$NEXUS_MCP_CONFORMANCE/dist/index.js" client --command "$client" \
    --scenario "$scenario" --spec-version "$version" >"$log" 2>&1; then
    result=pass
  else
    result=fail
  fi
  listed=no
  if grep -qxF "$run" "$expected" 2>/dev/null; then listed=yes; fi
  case "$result/$listed" in
    pass/no) passed=$((passed + 1)); echo "✓ $version $scenario" ;;
    fail/yes) failed=$((failed + 1)); echo "✗ $version $scenario (expected)" ;;
    fail/no) failed=$((failed + 1)); status=1; echo "✗ $version $scenario — see $log"
      sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E 'FAILURE|Stderr' -A2 | head -20 ;;
    pass/yes) passed=$((passed + 1)); status=1; echo "✓ $version $scenario — stale entry in $expected" ;;
  esac
done
echo "-- MCP auth conformance: $passed passed, $failed failed of ${#runs[@]}"
exit "$status"
