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
#   body1-stream body2-stream"], PROFILE_BASE [50], PROFILE_RUNS [200],
#   PROFILE_NGINX=1 (also count the floor: nginx configured as
#   gateway_bench.py's nginx-openai row, one process, in front of the same
#   mock, for the same cases; needs nginx).
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

# drive PORT CASE N TOKEN PID SIGNAL: 5 warm-up requests and N measured
# ones, then stops the process under callgrind so that it writes its file.
drive() {
  wait_listening "$1"
  python3 bench/send_requests.py "$1" 5 "$out/bodies/$2.json" "$4"
  python3 bench/send_requests.py "$1" "$3" "$out/bodies/$2.json" "$4"
  kill "-$6" "$5"
  wait "$5" || true
}

# per_request NAME: instructions per request from NAME's two runs.
per_request() {
  local a b
  a=$(total "$out/$1.$base.cg")
  b=$(total "$out/$1.$((base + runs)).cg")
  echo $(((b - a) / runs))
}

echo "| upstream | case | instructions per request |"
echo "|---|---|--:|"
{
for style in ${PROFILE_STYLES:-openai anthropic}; do
  upstream "$style"
  for case in ${PROFILE_CASES:-body1 body2 body1-stream body2-stream}; do
    for n in "$base" $((base + runs)); do
      port=$(free_port)
      env "$upstream_key=sk-upstream-mock" valgrind --tool=callgrind --callgrind-out-file="$out/$style-$case.$n.cg" \
        "$bin" serve --listen "127.0.0.1:$port" --upstream-style "$style" \
        --upstream-base-url "$upstream_url" --client-token tok-profile > "$out/$style-$case.$n.log" 2>&1 &
      drive "$port" "$case" "$n" tok-profile $! INT
    done
    echo "| $style | $case | $(per_request "$style-$case") |"
  done
done
if [ "${PROFILE_NGINX:-0}" = 1 ]; then
  command -v nginx > /dev/null || { echo "gateway_profile.sh: PROFILE_NGINX=1 needs nginx" >&2; exit 1; }
  mport=${mock_url##*:}
  for case in ${PROFILE_CASES:-body1 body2 body1-stream body2-stream}; do
    for n in "$base" $((base + runs)); do
      port=$(free_port)
      mkdir -p "$out/nginx/tmp"
      # gateway_bench.py's nginx-openai configuration, in the foreground
      # as one process so that callgrind sees the worker.
      python3 - "$shared/bench/gateway_bench.py" "$out/nginx" "$port" "$mport" << 'PY'
import sys
src, where, port, mport = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
text = open(src).read()
start = text.index('NGINX_CFG = """') + len('NGINX_CFG = """')
cfg = text[start:text.index('"""', start)].lstrip("\\\n")
with open(f"{where}/nginx.conf", "w") as f:
    f.write("master_process off;\n" + cfg.format(port=port, mport=mport, tmp=f"{where}/tmp", pid=f"{where}/nginx.pid"))
PY
      valgrind --tool=callgrind --callgrind-out-file="$out/nginx-$case.$n.cg" \
        nginx -p "$out/nginx" -c "$out/nginx/nginx.conf" -g "daemon off;" > "$out/nginx-$case.$n.log" 2>&1 &
      # QUIT: nginx's graceful stop, so that callgrind writes its file.
      drive "$port" "$case" "$n" sk-upstream-mock $! QUIT
    done
    echo "| nginx (floor) | $case | $(per_request "nginx-$case") |"
  done
fi
} | tee "$out/gateway-instructions.md"
