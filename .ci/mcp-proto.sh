#!/usr/bin/env bash
# The MCP client core's fuzz body over generated scripts (the MCP session
# tests themselves run with the workspace tests).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test -p nexus-proto --features fuzzing --test mcp_fuzz
