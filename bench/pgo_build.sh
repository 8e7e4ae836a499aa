#!/usr/bin/env bash
# The `nexus` binary built with profile-guided optimization (PGO): an
# instrumented build serves a training load, then the release build uses the
# counts it wrote: hot code laid out together and cold blocks moved out of
# the way, so a gateway request runs fewer instructions from fewer code pages
# and cache lines, which matters most when its requests arrive between other
# work (BENCHMARKS.md §8, "A binary laid out by its profile").
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
# Output: target/pgo/nexus (and the merged profile, target/pgo/nexus.profdata).
#
# Needs python3, the shared mock (NEXUS_SHARED [../shared]) and an
# llvm-profdata that reads this rustc's raw profiles: LLVM_PROFDATA, else the
# rustup component's (`rustup component add llvm-tools`), else the newest
# llvm-profdata-N on PATH. Knobs: PGO_REQUESTS [200] per style, surface and
# case, PGO_DIR [target/pgo].
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
shared="${NEXUS_SHARED:-$(cd "$root/.." && pwd)/shared}"
dir="${PGO_DIR:-$root/target/pgo}"
requests="${PGO_REQUESTS:-200}"
host=$(rustc -vV | awk '/^host:/ {print $2}')

profdata="${LLVM_PROFDATA:-}"
if [ -z "$profdata" ]; then
  candidate="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
  if [ -x "$candidate" ]; then
    profdata=$candidate
  else
    profdata=$(compgen -c llvm-profdata- | sort -t- -k3 -n | tail -1 || true)
  fi
fi
[ -n "$profdata" ] || { echo "pgo_build.sh: no llvm-profdata (rustup component add llvm-tools, or set LLVM_PROFDATA)" >&2; exit 1; }
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
for style in openai anthropic gemini openai-responses; do
  upstream "$style"
  port=$(free_port)
  env "$upstream_key=sk-upstream-mock" "$trained" serve --listen "127.0.0.1:$port" --upstream-style "$style" \
    --upstream-base-url "$upstream_url" --client-token tok-pgo > "$dir/serve-$style.log" 2>&1 &
  gw=$!
  wait_listening "$port"
  python3 bench/pgo_train.py "$port" "$requests" "$dir/bodies" tok-pgo
  # The profile is written when the process exits; SIGINT is a clean shutdown.
  kill -INT "$gw"
  wait "$gw"
done

"$profdata" merge -o "$dir/nexus.profdata" "$raw"
# With the counts, LLVM marks functions hot or unlikely and splits the cold
# blocks out of hot functions (-enable-split-machine-functions); the linker
# then keeps each kind together (-z keep-text-section-prefix), so the code a
# request runs sits in about half a megabyte instead of across the binary.
RUSTFLAGS="-Cprofile-use=$dir/nexus.profdata -Cllvm-args=-enable-split-machine-functions -Clink-arg=-Wl,-z,keep-text-section-prefix" cargo build --release -p nexus-drive --features cli --bin nexus \
  --target "$host" --target-dir "$dir/use"
cp "$dir/use/$host/release/nexus" "$dir/nexus"
echo "pgo_build.sh: $dir/nexus"
