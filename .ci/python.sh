#!/usr/bin/env bash
# The Python package (bindings/python) as a user gets it: a fresh venv,
# `pip install ./bindings/python` (maturin from PyPI builds the abi3 wheel
# once, in the release profile, into the repository's target/), then its
# pytest suite against the fake provider, the `nexus` CLI and the Rust
# library host the workspace tests built. Also the binding crate's own
# format and lint checks (it is outside the main workspace).
#
# Reads the MCP variables (.ci/mcp-deps.sh) when set, for the MCP test.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
py="${PYTHON:-python3}"
venv="${NEXUS_PY_VENV:-${TMPDIR:-/tmp}/nexus-python-ci-venv}"

say() { echo "python.sh: $*" >&2; }

# What the tests run besides the package (no-ops when `cargo test --workspace` built them).
cargo build -p nexus-tests --bin fake-provider --example parity_host
cargo build -p nexus-drive --bin nexus

say "fresh venv at $venv"
rm -rf "$venv"
"$py" -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check --upgrade pip
say "pip install ./bindings/python (maturin builds the wheel)"
CARGO_TARGET_DIR="$root/target" "$venv/bin/pip" install --disable-pip-version-check "./bindings/python[test,pydantic]"

# The tests must import the installed package, not the source tree.
installed=$(cd / && "$venv/bin/python" -c "import nexus; print(nexus.__file__)")
case "$installed" in
  "$root"/*) say "nexus was imported from the source tree ($installed)"; exit 1 ;;
esac
say "testing $installed"

export NEXUS_FAKE_PROVIDER="$root/target/debug/fake-provider"
export NEXUS_CLI="$root/target/debug/nexus"
export NEXUS_PARITY_HOST="$root/target/debug/examples/parity_host"
(cd bindings/python && "$venv/bin/python" -m pytest -p no:cacheprovider -q tests)

say "type check (mypy --strict) of the package and its stubs"
(cd bindings/python && "$venv/bin/python" -m mypy --strict python/nexus examples tests/typing_check.py)

say "binding crate: format and lints"
cargo fmt --manifest-path bindings/python/Cargo.toml -- --check
PYO3_PYTHON="$venv/bin/python" cargo clippy --manifest-path bindings/python/Cargo.toml --locked --all-targets -- -D warnings
