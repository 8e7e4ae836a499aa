#!/usr/bin/env bash
# Instructions per request of `nexus serve` under callgrind, for each
# upstream style x case (the shared harness's turn-1 and turn-2 bodies, whole
# and streamed), sent by one keep-alive client to the shared mock: counts,
# not times, so they hold on a loaded machine and compare two builds exactly.
#
# Each case runs the gateway twice, with PROFILE_BASE and PROFILE_BASE +
# PROFILE_RUNS requests after 5 warm-up ones; the difference divided by
# PROFILE_RUNS is the per-request figure (start-up and warm-up cancel out).
# The larger run's callgrind file is kept for `callgrind_annotate`.
#
# Needs valgrind and python3. Knobs: NEXUS_BIN [target/release/nexus],
#   NEXUS_SHARED [../shared], PROFILE_OUT [target/profile/gateway-<UTC time>],
#   PROFILE_STYLES ["openai anthropic"], PROFILE_CASES ["body1 body2
#   body1-stream body2-stream"], PROFILE_BASE [50], PROFILE_RUNS [200].
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
shared="${NEXUS_SHARED:-$(cd "$root/.." && pwd)/shared}"
bin="${NEXUS_BIN:-$root/target/release/nexus}"
out="${PROFILE_OUT:-$root/target/profile/gateway-$(date -u +%Y%m%dT%H%M%SZ)}"
base="${PROFILE_BASE:-50}"
runs="${PROFILE_RUNS:-200}"
mkdir -p "$out"
command -v valgrind > /dev/null || { echo "gateway_profile.sh: valgrind not found" >&2; exit 1; }
[ -x "$bin" ] || { echo "gateway_profile.sh: no $bin (cargo build --release -p nexus-drive --features cli --bin nexus)" >&2; exit 1; }
python3 "$shared/bench/runners/floor_bodies.py" "$out/bodies" > /dev/null

. bench/gateway_lib.sh
start_mock "$out"

total() { callgrind_annotate "$1" 2> /dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'; }

echo "| upstream | case | instructions per request |"
echo "|---|---|--:|"
for style in ${PROFILE_STYLES:-openai anthropic}; do
  upstream "$style"
  for case in ${PROFILE_CASES:-body1 body2 body1-stream body2-stream}; do
    for n in "$base" $((base + runs)); do
      port=$(free_port)
      env "$upstream_key=sk-upstream-mock" valgrind --tool=callgrind --callgrind-out-file="$out/$style-$case.$n.cg" \
        "$bin" serve --listen "127.0.0.1:$port" --upstream-style "$style" \
        --upstream-base-url "$upstream_url" --client-token tok-profile > "$out/$style-$case.$n.log" 2>&1 &
      gw=$!
      wait_listening "$port"
      python3 bench/send_requests.py "$port" 5 "$out/bodies/$case.json" tok-profile
      python3 bench/send_requests.py "$port" "$n" "$out/bodies/$case.json" tok-profile
      kill -INT "$gw"
      wait "$gw" || true
    done
    a=$(total "$out/$style-$case.$base.cg")
    b=$(total "$out/$style-$case.$((base + runs)).cg")
    echo "| $style | $case | $(( (b - a) / runs )) |"
  done
done | tee "$out/gateway-instructions.md"
