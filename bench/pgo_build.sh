#!/usr/bin/env bash
# The `nexus` binary built with profile-guided optimization (PGO), then laid
# out by BOLT when one is installed: an instrumented build serves a training
# load, the release build uses the counts it wrote (hot code together, cold
# blocks out of the way); BOLT then instruments that binary, the same load
# runs again, and BOLT rewrites the binary with its functions ordered by how
# the load called them and their blocks by how it ran them. A gateway
# request then runs fewer instructions from fewer code pages and cache lines,
# which matters most when its requests arrive between other work
# (BENCHMARKS.md §8, "A binary laid out by its profile" and "Laid out by
# BOLT, ...").
#
# The training load is the gateway's (bench/pgo_train.py): the shared mock
# behind `nexus serve` for each upstream style (OpenAI, Anthropic, Gemini,
# OpenAI Responses), sent the scenario's two turns, whole and streamed, on
# each client surface (Chat Completions, Anthropic Messages, Responses,
# Gemini), on one keep-alive connection and then on 16 at once. Code the
# load does not reach (the agent loop, MCP, the stores) is compiled as in
# the plain release build, except that LLVM optimizes code with no counts
# for size: build with plain `cargo build --release` when the CLI's other
# commands matter more than the gateway.
#
# Output: target/pgo/nexus (and the merged profiles, target/pgo/nexus.profdata
# and, with BOLT, target/pgo/bolt.fdata).
#
# Needs python3, the shared mock (NEXUS_SHARED [../shared]) and an
# llvm-profdata that reads this rustc's raw profiles: LLVM_PROFDATA, else the
# rustup component's (`rustup component add llvm-tools`), else the newest
# llvm-profdata-N on PATH. BOLT (`llvm-bolt` and `merge-fdata`; Debian's
# `bolt-N` package) is LLVM_BOLT, else llvm-bolt on PATH, else the newest
# llvm-bolt-N; without one the PGO build is the output, with LLVM's machine
# function splitting standing in for BOLT's. Knobs: PGO_REQUESTS [200] per
# style, surface and case, PGO_DIR [target/pgo], PGO_BOLT [auto; 0 = never].
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
shared="${NEXUS_SHARED:-$(cd "$root/.." && pwd)/shared}"
dir="${PGO_DIR:-$root/target/pgo}"
requests="${PGO_REQUESTS:-200}"
host=$(rustc -vV | awk '/^host:/ {print $2}')

# newest TOOL: the highest-numbered TOOL-N on PATH (Debian's llvm-N packages).
newest() { compgen -c "$1-" | grep -E "^$1-[0-9]+$" | sort -t- -k3 -n | tail -1 || true; }
profdata="${LLVM_PROFDATA:-}"
if [ -z "$profdata" ]; then
  candidate="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
  if [ -x "$candidate" ]; then
    profdata=$candidate
  else
    profdata=$(newest llvm-profdata)
  fi
fi
[ -n "$profdata" ] || { echo "pgo_build.sh: no llvm-profdata (rustup component add llvm-tools, or set LLVM_PROFDATA)" >&2; exit 1; }
bolt="${LLVM_BOLT:-}"
if [ "${PGO_BOLT:-auto}" = 0 ]; then
  bolt=
elif [ -z "$bolt" ]; then
  bolt=$(command -v llvm-bolt || newest llvm-bolt)
fi
merge_fdata=
if [ -n "$bolt" ]; then
  # merge-fdata comes with llvm-bolt, suffixed alike (llvm-bolt-22, merge-fdata-22).
  merge_fdata=$(dirname "$(command -v "$bolt")")/merge-fdata${bolt##*llvm-bolt}
  [ -x "$merge_fdata" ] || merge_fdata=$(command -v merge-fdata || newest merge-fdata)
  [ -n "$merge_fdata" ] || { echo "pgo_build.sh: $bolt but no merge-fdata" >&2; exit 1; }
fi
[ -f "$shared/bench/mock_llm.py" ] || { echo "pgo_build.sh: no $shared/bench/mock_llm.py (set NEXUS_SHARED)" >&2; exit 1; }

raw="$dir/raw"
rm -rf "$raw"
mkdir -p "$raw"
# --target keeps the flags off build scripts and proc macros, which would
# otherwise write profiles of the build itself.
RUSTFLAGS="-Cprofile-generate=$raw" cargo build --release -p nexus-drive --features cli --bin nexus \
  --target "$host" --target-dir "$dir/generate"
trained="$dir/generate/$host/release/nexus"

python3 "$shared/bench/runners/floor_bodies.py" "$dir/bodies" > /dev/null

. bench/gateway_lib.sh
start_mock "$dir"
# train BIN: the training load through BIN, one `nexus serve` per upstream
# style; each writes its profile when it exits (SIGINT is a clean shutdown).
train() {
  for style in openai anthropic gemini openai-responses; do
    upstream "$style"
    port=$(free_port)
    env "$upstream_key=sk-upstream-mock" "$1" serve --listen "127.0.0.1:$port" --upstream-style "$style" \
      --upstream-base-url "$upstream_url" --client-token tok-pgo > "$dir/serve-$style.log" 2>&1 &
    gw=$!
    wait_listening "$port"
    python3 bench/pgo_train.py "$port" "$requests" "$dir/bodies" tok-pgo
    kill -INT "$gw"
    wait "$gw"
  done
}
train "$trained"

"$profdata" merge -o "$dir/nexus.profdata" "$raw"
if [ -z "$bolt" ]; then
  # With the counts, LLVM marks functions hot or unlikely and splits the cold
  # blocks out of hot functions (-enable-split-machine-functions); the linker
  # then keeps each kind together (-z keep-text-section-prefix), so the code a
  # request runs sits in about half a megabyte instead of across the binary.
  RUSTFLAGS="-Cprofile-use=$dir/nexus.profdata -Cllvm-args=-enable-split-machine-functions -Clink-arg=-Wl,-z,keep-text-section-prefix" \
    cargo build --release -p nexus-drive --features cli --bin nexus --target "$host" --target-dir "$dir/use"
  cp "$dir/use/$host/release/nexus" "$dir/nexus"
  echo "pgo_build.sh: $dir/nexus (PGO; no llvm-bolt found)"
  exit 0
fi

# For BOLT the binary keeps its relocations (--emit-relocs), so BOLT may move
# every function; LLVM's splitting is left out: BOLT splits blocks itself and
# does not take the split halves LLVM names `.cold` for local functions.
RUSTFLAGS="-Cprofile-use=$dir/nexus.profdata -Clink-arg=-Wl,--emit-relocs" \
  cargo build --release -p nexus-drive --features cli --bin nexus --target "$host" --target-dir "$dir/use-bolt"
pgo="$dir/use-bolt/$host/release/nexus"
fdata="$dir/bolt-raw"
rm -rf "$fdata"
mkdir -p "$fdata"
"$bolt" "$pgo" -o "$dir/nexus.instrumented" -instrument --instrumentation-file="$fdata/nexus.fdata" \
  --instrumentation-file-append-pid > "$dir/bolt-instrument.log" 2>&1 \
  || { cat "$dir/bolt-instrument.log" >&2; exit 1; }
train "$dir/nexus.instrumented"
"$merge_fdata" "$fdata"/*.fdata > "$dir/bolt.fdata" 2> "$dir/bolt-merge.log"
# Blocks ordered by the exact TSP heuristic, functions by the call graph
# (cdsort), cold blocks of every function split out (exception landing pads
# too). BOLT drops the debug sections it cannot rewrite (rustc's DWARF uses
# forms it does not clone); the symbol table stays, so backtraces and
# profiles still name functions, and target/pgo/use-bolt keeps the lines.
"$bolt" "$pgo" -o "$dir/nexus" -data="$dir/bolt.fdata" -reorder-blocks=ext-tsp -reorder-functions=cdsort \
  -split-functions -split-all-cold -split-eh -dyno-stats > "$dir/bolt-optimize.log" 2>&1 \
  || { cat "$dir/bolt-optimize.log" >&2; exit 1; }
echo "pgo_build.sh: $dir/nexus (PGO, then BOLT: $bolt)"
