#!/usr/bin/env bash
# How much of the `nexus` binary's code a steady-state gateway request runs:
# the distinct 4 KiB pages and 64-byte cache lines of its machine code that
# executed while one keep-alive client sent PAGES_RUNS requests (after
# PAGES_WARMUP unmeasured ones) through `nexus serve` to the shared mock.
# Fewer pages and lines is less for the instruction caches and TLB to hold
# when a request starts after other work (BENCHMARKS.md §8, "A binary laid
# out by its profile"). Callgrind, instrumentation off until the warm-up is
# done; code the binary maps outside its named object (valgrind reports
# split text sections as `???`) is counted as the binary's.
#
#   bench/gateway_code_pages.sh BIN [STYLE [CASE]]    # STYLE openai|anthropic, CASE body1|body2|…
#
# Needs valgrind and python3. Knobs: NEXUS_SHARED [../shared], PAGES_OUT
# [target/profile/pages-<UTC time>], PAGES_WARMUP [20], PAGES_RUNS [20].
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
shared="${NEXUS_SHARED:-$(cd "$root/.." && pwd)/shared}"
bin=$1
style=${2:-anthropic}
case=${3:-body1}
out="${PAGES_OUT:-$root/target/profile/pages-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$out"
command -v valgrind > /dev/null || { echo "gateway_code_pages.sh: valgrind not found" >&2; exit 1; }
python3 "$shared/bench/runners/floor_bodies.py" "$out/bodies" > /dev/null

# Distinct pages and lines of executed code in a callgrind file written with
# --dump-instr=yes --dump-line=no (positions are instruction addresses,
# "+n"/"-n" relative to the previous one).
cat > "$out/pages.py" <<'PY'
import os, re, sys
binary = os.path.realpath(sys.argv[2])
names, obj, fn_obj, last = {}, None, None, 0
pages, lines = set(), set()
for raw in open(sys.argv[1], errors="replace"):
    line = raw.rstrip("\n")
    m = re.match(r"(c?ob)=\((\d+)\)(?: (.*))?", line)
    if m:
        if m.group(3):
            names[m.group(2)] = m.group(3)
        if m.group(1) == "ob":
            obj = names.get(m.group(2))
        continue
    if line.startswith("fn="):
        fn_obj = obj
        continue
    # A `calls=` line's target is not a position of this function; the line
    # after it (the call site, with the call's inclusive cost) is.
    if line.startswith("calls="):
        continue
    if not line or not (line[0] in "+-*" or line.startswith("0x")):
        continue
    pos = line.split()[0]
    if pos.startswith("0x"):
        addr = int(pos, 16)
    elif pos == "*":
        addr = last
    else:
        addr = last + (1 if pos[0] == "+" else -1) * int(pos[1:], 0)
    last = addr
    if fn_obj and (fn_obj == "???" or os.path.realpath(fn_obj) == binary):
        pages.add(addr >> 12)
        lines.add(addr >> 6)
print(f"{len(pages)} pages of 4 KiB, {len(lines)} lines of 64 B")
PY

. bench/gateway_lib.sh
start_mock "$out"
upstream "$style"
port=$(free_port)
cg="$out/$style-$case.cg"
env "$upstream_key=sk-upstream-mock" valgrind --tool=callgrind --instr-atstart=no --dump-instr=yes --dump-line=no \
  --callgrind-out-file="$cg" "$bin" serve --listen "127.0.0.1:$port" --upstream-style "$style" \
  --upstream-base-url "$upstream_url" --client-token tok-pages > "$out/serve.log" 2>&1 &
gw=$!
wait_listening "$port"
python3 bench/send_requests.py "$port" "${PAGES_WARMUP:-20}" "$out/bodies/$case.json" tok-pages
callgrind_control -i on "$gw" > /dev/null 2>&1
python3 bench/send_requests.py "$port" "${PAGES_RUNS:-20}" "$out/bodies/$case.json" tok-pages
kill -INT "$gw"
wait "$gw" || true
echo "$style $case: $(python3 "$out/pages.py" "$cg" "$bin")"
