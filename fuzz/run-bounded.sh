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

logs=$(mktemp -d "${TMPDIR:-/tmp}/nexus-fuzz.XXXXXX")
failed=()
for t in $targets; do
    # -max_len: the recorded streams go up to 100 KB, which would make every
    # input that long and the run a hundred times slower; 4 KiB covers every
    # framing and decoding path. -timeout: an input taking 10 s is a hang.
    if cargo fuzz run "$t" -- -max_total_time="$secs" -max_len=4096 -timeout=10 \
        -dict=dicts/wire.dict -print_final_stats=1 >"$logs/$t.log" 2>&1; then
        status=ok
    else
        status=CRASH
        failed+=("$t")
    fi
    # A crash may come before libFuzzer prints any of these.
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$logs/$t.log" || true)
    cov=$(grep -o 'cov: [0-9]*' "$logs/$t.log" | tail -1 || true)
    echo "run-bounded: $t: $status, ${execs:-?} execs, ${cov:-cov: ?}"
    if [ "$status" = CRASH ]; then
        tail -n 60 "$logs/$t.log" >&2
    fi
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "run-bounded: crashed: ${failed[*]} (inputs in $here/artifacts/, logs in $logs)" >&2
    exit 1
fi
rm -rf "$logs"
echo "run-bounded: all targets ran ${secs}s each without a crash"
