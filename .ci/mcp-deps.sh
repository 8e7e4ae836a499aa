#!/usr/bin/env bash
# Installs what the MCP tests talk to, into a cache dir, and prints the
# environment the tests read:
#
#   eval "$(.ci/mcp-deps.sh)"
#
# * a Python venv with the PyPI `mcp` package (the test servers in
#   tests/mcp/servers/ are written with it);
# * Node 22 from the npm registry (the conformance suite needs Node >= 22),
#   `@modelcontextprotocol/server-everything` and the conformance suite,
#   pinned.
#
# Only the export lines go to stdout; progress goes to stderr. Idempotent: a
# second call with everything in place installs nothing.
set -euo pipefail

say() { echo "mcp-deps.sh: $*" >&2; }

MCP_PY_VERSION="2.3.0"
EVERYTHING_VERSION="2026.8.31"
CONFORMANCE_VERSION="0.2.0-alpha.12"
NODE_MAJOR="22"

cache="${NEXUS_MCP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nexus-mcp}"
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)

# Python venv with `mcp`.
venv="$cache/venv"
py="${PYTHON:-python3}"
if ! "$venv/bin/python" -c "import mcp, sys; from importlib.metadata import version; sys.exit(0 if version('mcp') == '$MCP_PY_VERSION' else 1)" 2>/dev/null; then
  say "creating $venv with mcp==$MCP_PY_VERSION"
  "$py" -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check "mcp==$MCP_PY_VERSION" >&2
fi

# Node 22 and the npm packages, in one npm prefix.
npm_dir="$cache/npm"
mkdir -p "$npm_dir"
if [ ! -f "$npm_dir/package.json" ]; then
  echo '{"name":"nexus-mcp-deps","private":true}' >"$npm_dir/package.json"
fi
need_npm=0
[ -x "$npm_dir/node_modules/.bin/node" ] || need_npm=1
[ -f "$npm_dir/node_modules/@modelcontextprotocol/server-everything/package.json" ] || need_npm=1
grep -q "\"version\": \"$CONFORMANCE_VERSION\"" "$npm_dir/node_modules/@modelcontextprotocol/conformance/package.json" 2>/dev/null || need_npm=1
if [ "$need_npm" = 1 ]; then
  say "installing node@$NODE_MAJOR, server-everything@$EVERYTHING_VERSION, conformance@$CONFORMANCE_VERSION into $npm_dir"
  (cd "$npm_dir" && npm install --no-audit --no-fund --loglevel=error \
    "node@$NODE_MAJOR" \
    "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION" \
    "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION" >&2)
fi
node="$npm_dir/node_modules/.bin/node"
"$node" --version >&2

echo "export NEXUS_MCP_PYTHON='$venv/bin/python'"
echo "export NEXUS_MCP_NODE='$node'"
echo "export NEXUS_MCP_EVERYTHING='$npm_dir/node_modules/@modelcontextprotocol/server-everything'"
echo "export NEXUS_MCP_CONFORMANCE='$npm_dir/node_modules/@modelcontextprotocol/conformance'"
