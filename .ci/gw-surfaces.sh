#!/usr/bin/env bash
# The gateway surfaces' fuzz bodies under cargo test (request decoders on the
# recorded requests and random bytes, stream writers on recorded streams and
# generated upstream event sequences). The SDK scenarios (tests/tests/
# serve_surfaces.rs) run in the workspace tests with the oracle venv.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test -p nexus-proto --features fuzzing --test fuzz_surfaces
