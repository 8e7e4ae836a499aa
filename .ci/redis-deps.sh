#!/usr/bin/env bash
# redis-server for the gateway's shared-limits tests (tests/tests/serve_limits.rs):
# installed from the distribution's packages when missing. The tests start
# and stop their own throwaway servers; the package's service is not used.
#
#   eval "$(bash .ci/redis-deps.sh)"   # exports NEXUS_REDIS_SERVER
#
# Only the export line goes to stdout.
set -euo pipefail
say() { echo "redis-deps.sh: $*" >&2; }
if ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    say "redis-server not found and not root: apt-get install redis-server first"
    exit 1
  fi
  say "installing redis-server from the distribution packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends redis-server >&2
fi
echo "export NEXUS_REDIS_SERVER=$(command -v redis-server)"
