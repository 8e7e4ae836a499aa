#!/usr/bin/env bash
# Instructions and heap allocations per request of the overhead runner, for
# each path (blocking/async driver × whole/streamed bodies), under valgrind:
# counts, not times, so they hold on a loaded machine.
#
# Each path runs twice against one mock, with PROFILE_BASE and
# PROFILE_BASE + PROFILE_RUNS measured requests (after the same warm-up);
# the difference divided by PROFILE_RUNS is the per-request figure, with
# start-up and warm-up cancelled out. Instructions come from callgrind,
# allocations (blocks) from DHAT. The larger callgrind run of each path is
# kept for `callgrind_annotate --inclusive=yes`.
#
# Needs valgrind (apt-get install valgrind) and python3.
#
# Knobs: NEXUS_SHARED [../shared], PROFILE_OUT [target/profile/<UTC time>],
#   PROFILE_STYLE [openai], PROFILE_PATHS ["blocking async blocking-stream async-stream"],
#   PROFILE_WARMUP [5], PROFILE_BASE [10], PROFILE_RUNS [40], SKIP_BUILD=1,
#   PROFILE_BIN (a runner built elsewhere, e.g. an earlier commit's),
#   CARGO_TARGET_DIR as usual.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
shared="${NEXUS_SHARED:-$(cd "$root/.." && pwd)/shared}"
target="${CARGO_TARGET_DIR:-$root/target}"
out="${PROFILE_OUT:-$root/target/profile/$(date -u +%Y%m%dT%H%M%SZ)}"
style="${PROFILE_STYLE:-openai}"
warmup="${PROFILE_WARMUP:-5}"
base="${PROFILE_BASE:-10}"
runs="${PROFILE_RUNS:-40}"
mkdir -p "$out"
command -v valgrind > /dev/null || { echo "profile.sh: valgrind not found (apt-get install valgrind)" >&2; exit 1; }

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  cargo build --release -q -p nexus-drive --example overhead
fi
bin="${PROFILE_BIN:-$target/release/examples/overhead}"

python3 "$shared/bench/mock_llm.py" --port 0 --port-file "$out/port" > "$out/mock.log" 2>&1 &
mock=$!
trap 'kill "$mock" 2> /dev/null || true' EXIT
for _ in $(seq 1 100); do [ -s "$out/port" ] && break; sleep 0.1; done
[ -s "$out/port" ] || { echo "profile.sh: the mock did not start (see $out/mock.log)" >&2; exit 1; }
export MOCK_URL="http://127.0.0.1:$(cat "$out/port")"

# $1 path, $2 measured requests: the runner's flags and its output's name.
flags() {
  local f="--driver ${1%-stream} --style $style --warmup $warmup --runs $2"
  case "$1" in *-stream) f="$f --stream" ;; esac
  echo "$f"
}

ir() { awk '/^(summary|totals):/ {print $2; exit}' "$1"; }
blocks() { sed -n 's/.*Total: .* bytes in \([0-9,]*\) blocks.*/\1/p' "$1" | tr -d , | head -n 1; }

printf '| path | Ir / request | allocations / request | final_ok |\n|---|--:|--:|:-:|\n' > "$out/summary.md"
for path in ${PROFILE_PATHS:-blocking async blocking-stream async-stream}; do
  for n in "$base" $((base + runs)); do
    # shellcheck disable=SC2046
    valgrind --tool=callgrind --callgrind-out-file="$out/cg.$path.$n" "$bin" $(flags "$path" "$n") \
      > "$out/run.$path.$n.json" 2> "$out/cg.$path.$n.log"
    # shellcheck disable=SC2046
    valgrind --tool=dhat --dhat-out-file=/dev/null "$bin" $(flags "$path" "$n") \
      > /dev/null 2> "$out/dhat.$path.$n.log"
  done
  big=$((base + runs))
  ok=$(python3 -c 'import json,sys; print("yes" if json.load(open(sys.argv[1]))["final_ok"] else "NO")' "$out/run.$path.$big.json")
  ir_req=$(( ($(ir "$out/cg.$path.$big") - $(ir "$out/cg.$path.$base")) / runs ))
  al_req=$(python3 -c 'import sys; a,b,n=map(int,sys.argv[1:]); print(f"{(b-a)/n:.1f}")' \
    "$(blocks "$out/dhat.$path.$base.log")" "$(blocks "$out/dhat.$path.$big.log")" "$runs")
  echo "| $path | $ir_req | $al_req | $ok |" >> "$out/summary.md"
  callgrind_annotate --inclusive=yes "$out/cg.$path.$big" 2> /dev/null | head -n 60 > "$out/top.$path.txt" || true
done
cat "$out/summary.md"
echo "profile: $out" >&2
