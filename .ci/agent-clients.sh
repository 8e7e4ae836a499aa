#!/usr/bin/env bash
# Installs the real agent clients the gateway tests drive, pinned, into a
# cache dir, and prints the environment the tests read:
#
#   eval "$(bash .ci/agent-clients.sh)"
#
# * a Python venv with the OpenAI Agents SDK (`openai-agents`, which pins
#   its own `openai`) and the OpenResponses schema (`openresponses-types`);
# * Node 22 and the agent CLIs from npm: Claude Code, Codex CLI, Gemini CLI.
#
# Only the export lines go to stdout; progress goes to stderr. Idempotent: a
# second call with everything in place installs nothing.
set -euo pipefail

say() { echo "agent-clients.sh: $*" >&2; }

AGENTS_VERSION="0.24.0"
NODE_MAJOR="22"
CLAUDE_CODE_VERSION="2.1.332"
CODEX_VERSION="0.171.0"
GEMINI_CLI_VERSION="0.61.0"
# The OpenResponses schema as pydantic models (tests/openresponses/check_schema.py).
OPENRESPONSES_TYPES_VERSION="2.4.0"

cache="${NEXUS_CLIENTS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nexus-clients}"
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)

venv="$cache/venv"
py="${PYTHON:-python3}"
stamp="openai-agents==$AGENTS_VERSION openresponses-types==$OPENRESPONSES_TYPES_VERSION"
if [ "$(cat "$venv/.pinned" 2>/dev/null)" != "$stamp" ]; then
  say "creating $venv with $stamp"
  "$py" -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check "openai-agents==$AGENTS_VERSION" \
    "openresponses-types==$OPENRESPONSES_TYPES_VERSION" >&2
  echo "$stamp" >"$venv/.pinned"
fi

npm_dir="$cache/npm"
mkdir -p "$npm_dir"
[ -f "$npm_dir/package.json" ] || echo '{"name":"nexus-agent-clients","private":true}' >"$npm_dir/package.json"
want="node@$NODE_MAJOR @anthropic-ai/claude-code@$CLAUDE_CODE_VERSION @openai/codex@$CODEX_VERSION @google/gemini-cli@$GEMINI_CLI_VERSION"
if [ "$(cat "$npm_dir/.pinned" 2>/dev/null)" != "$want" ]; then
  say "installing $want into $npm_dir"
  # shellcheck disable=SC2086
  (cd "$npm_dir" && npm install --no-audit --no-fund --loglevel=error $want >&2)
  echo "$want" >"$npm_dir/.pinned"
fi
bin="$npm_dir/node_modules/.bin"
"$bin/node" --version >&2

echo "export NEXUS_AGENTS_PYTHON='$venv/bin/python'"
echo "export NEXUS_NODE_BIN='$bin'"
