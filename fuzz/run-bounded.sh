#!/usr/bin/env bash
# Seeds the corpora and runs every fuzz target for SECONDS each (default 20).
#
#   fuzz/run-bounded.sh [SECONDS]
#
# Exits 1 when a target crashes (the input is left in fuzz/artifacts/<target>/),
# and 0 with a message, without fuzzing, when cargo-fuzz cannot be installed or
# this toolchain cannot build instrumented binaries. Works on the stable
# toolchain: RUSTC_BOOTSTRAP=1 lets it take the -Z sanitizer flags cargo-fuzz passes.
set -euo pipefail

secs=${1:-20}
case "$secs" in
    '' | *[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;;
esac

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
export RUSTC_BOOTSTRAP=1

skip() {
    echo "run-bounded: $1; fuzzing skipped"
    exit 0
}

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "run-bounded: installing cargo-fuzz"
    cargo install cargo-fuzz --locked || skip "cargo-fuzz could not be installed"
fi

targets=$(cargo fuzz list)
[ -n "$targets" ] || { echo "run-bounded: no fuzz targets found" >&2; exit 1; }

./seed.sh

if ! cargo fuzz build; then
    # A plain build tells a broken crate (a real failure) from a toolchain
    # that cannot instrument (nothing to fuzz with here).
    if cargo build --manifest-path Cargo.toml --bins; then
        skip "cargo fuzz build failed though the crate builds: this toolchain cannot build fuzz targets"
    fi
    echo "run-bounded: the fuzz crate does not build" >&2
    exit 1
fi

failed=()
for t in $targets; do
    echo "run-bounded: $t for ${secs}s"
    # -timeout: an input taking 10 s is a hang worth a report.
    if ! cargo fuzz run "$t" -- -max_total_time="$secs" -timeout=10 -dict=dicts/wire.dict -print_final_stats=1; then
        failed+=("$t")
    fi
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "run-bounded: crashed: ${failed[*]} (inputs in $here/artifacts/)" >&2
    exit 1
fi
echo "run-bounded: all targets ran ${secs}s without a crash"
