#!/usr/bin/env bash
# Reproduces every table of BENCHMARKS.md in one sitting:
#   1. sets up the shared harness (peer venvs + the Rust floors),
#   2. builds our runner (`overhead`, release), the Responses floor
#      (bench/floor_responses) and the smol floor (bench/floor_smol), and
#      checks the Responses floor sends what the runner sends,
#   3. runs the shared harness with our rows added through BENCH_EXTRA
#      (blocking and async driver, non-streaming and streaming, Chat
#      Completions and Responses), the Responses floors and the smol floors,
#   4. runs every cargo bench of the workspace (stream decoding, durable
#      state, async scale, and any bench added since),
#   5. collects it all, with the machine line and the load before and after
#      each part, into one directory.
#
# Knobs (all optional):
#   NEXUS_SHARED   the shared reference tree        [../shared next to the repo]
#   BENCH_VENVS    where setup.sh puts venvs/bins   [$TMPDIR/bench-venvs]
#   BENCH_RESULTS  output directory                  [target/bench-results/<UTC time>]
#   SKIP_SETUP=1   reuse an existing BENCH_VENVS
#   BENCH_SITTINGS overhead sittings back to back     [3]
#   BENCH_TIMEOUT  seconds one cargo bench may run   [900]
#   ONLY=overhead|gateway|cargo   run one part only
#   BENCH_PACKAGES=0      leave the Python/Node packages and TypeScript peers out
#   NEXUS_PG_URL   a PostgreSQL to add to the stores bench (.ci/postgres.sh start)
#   CARGO_TARGET_DIR      as usual
#   plus the harness's own: BENCH_RUNS, BENCH_WARMUP, BENCH_ROUNDS, BENCH_SEED, BENCH_PIN, BENCH_ONLY
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
export NEXUS_SHARED="${NEXUS_SHARED:-$(cd "$root/.." && pwd)/shared}"
harness="$NEXUS_SHARED/bench"
export BENCH_VENVS="${BENCH_VENVS:-${TMPDIR:-/tmp}/bench-venvs}"
target="${CARGO_TARGET_DIR:-$root/target}"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out="${BENCH_RESULTS:-$root/target/bench-results/$stamp}"
mkdir -p "$out"
log="$out/sitting.log"

note() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$log" >&2; }
load() { note "load: $(uptime | sed 's/.*load average: //') — $1"; }

{
  echo "date (UTC): $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "nproc: $(nproc)"
  lscpu | grep -E '^(Model name|Thread|Core|Socket|CPU MHz|L2|L3|Hypervisor)' || true
  free -m | sed -n '1,2p'
  echo "kernel: $(uname -sr)"
  echo "rustc: $(rustc --version)"
  echo "cargo: $(cargo --version)"
  echo "python: $(python3 --version 2>&1)"
  echo "crates: $(awk '/^name = /{n=$3} /^version = /{gsub(/"/,"",n); v=$3; gsub(/"/,"",v); if (n ~ /^(ureq|ureq-proto|smol|async-io|async-executor|serde_json|rustls)$/) printf "%s %s, ", n, v}' "$root/Cargo.lock" | sed 's/, $//')"
  echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$root" diff --quiet 2>/dev/null || echo ' (+ uncommitted changes)')"
} > "$out/machine.txt"
cat "$out/machine.txt" >&2

part() { [ -z "${ONLY:-}" ] || [ "$ONLY" = "$1" ]; }

if part overhead; then
  if [ "${SKIP_SETUP:-0}" != 1 ]; then
    load "before setup"
    start=$(date +%s)
    bash "$harness/setup.sh" 2>&1 | tee -a "$log" >&2
    note "harness setup took $(( $(date +%s) - start )) s"
  fi

  load "before building the runner"
  cargo build --release -q -p nexus-drive --example overhead 2>> "$log"
  bin="$target/release/examples/overhead"
  [ -x "$bin" ] || { note "runner not found at $bin"; exit 1; }

  # The Responses floor (bench/floor_responses): the shared floor-rust-ureq's
  # method speaking POST /v1/responses, so our Responses rows are held to a
  # floor that pays the same wire. A package outside the workspace, built
  # into its own directory under the target dir.
  load "before building the Responses floor"
  cargo build --release -q --locked --manifest-path "$root/bench/floor_responses/Cargo.toml" \
    --target-dir "$target/bench-floor-responses" 2>> "$log"
  floor="$target/bench-floor-responses/release/floor-responses"
  [ -x "$floor" ] || { note "Responses floor not found at $floor"; exit 1; }
  # Its prebuilt bodies, from the shared harness's scenario; they must hold
  # what our runner sends (checked against one request of each kind).
  export FLOOR_RESPONSES_BODIES_DIR="$out/floor-responses-bodies"
  python3 "$root/bench/floor_responses/bodies.py" "$FLOOR_RESPONSES_BODIES_DIR"
  python3 "$root/bench/floor_responses/check_bodies.py" "$bin" > "$out/floor-responses-bodies.txt" 2>&1 \
    || { cat "$out/floor-responses-bodies.txt" >&2; note "the Responses floor's bodies differ from what $bin sends: update bench/floor_responses/bodies.py"; exit 1; }

  # The I/O floor of the async driver (bench/floor_smol): the shared
  # floor-rust-raw's method (hand-written HTTP/1.1, no loop) with every wait
  # through smol's reactor, so the async rows' cost splits into what the
  # runtime costs and what the driver adds.
  load "before building the smol floor"
  cargo build --release -q --locked --manifest-path "$root/bench/floor_smol/Cargo.toml" \
    --target-dir "$target/bench-floor-smol" 2>> "$log"
  smol_floor="$target/bench-floor-smol/release/floor-smol"
  [ -x "$smol_floor" ] || { note "smol floor not found at $smol_floor"; exit 1; }

  # Our rows: both drivers, whole bodies and SSE streams. Entries are
  # separated by ';' (run_all.py splits on it).
  export BENCH_EXTRA="nexus-blocking=$bin --driver blocking; nexus-async=$bin --driver async; nexus-blocking-stream=$bin --driver blocking --stream; nexus-async-stream=$bin --driver async --stream"
  # The same scenario over OpenAI Responses (the mock answers POST /v1/responses, whole and SSE).
  r="--style openai-responses"
  BENCH_EXTRA="$BENCH_EXTRA; nexus-blocking-responses=$bin --driver blocking $r; nexus-async-responses=$bin --driver async $r"
  BENCH_EXTRA="$BENCH_EXTRA; nexus-blocking-responses-stream=$bin --driver blocking --stream $r; nexus-async-responses-stream=$bin --driver async --stream $r"
  # ... and their floors (the harness's own floors speak Chat Completions only).
  BENCH_EXTRA="$BENCH_EXTRA; floor-rust-ureq-responses=$floor; floor-rust-ureq-responses-stream=$floor --stream"
  BENCH_EXTRA="$BENCH_EXTRA; floor-rust-raw-smol=$smol_floor; floor-rust-raw-smol-stream=$smol_floor --stream"
  BENCH_EXTRA="$BENCH_EXTRA; floor-rust-raw-smol-responses=$smol_floor --responses"
  # The context budget's per-request check: a window the scenario never nears.
  BENCH_EXTRA="$BENCH_EXTRA; nexus-blocking-budget=$bin --driver blocking --context-window 200000"

  # The Python and Node packages, as users install them, beside the Python
  # peers (the harness's own rows) and the TypeScript peers (OpenAI Agents
  # JS, the Vercel AI SDK; pinned, on Node 22 from npm). BENCH_PACKAGES=0
  # leaves them out.
  if [ "${BENCH_PACKAGES:-1}" = 1 ]; then
    load "before building the Python and Node packages"
    pyv="$BENCH_VENVS/nexus-python"
    [ -x "$pyv/bin/python" ] || python3 -m venv "$pyv"
    CARGO_TARGET_DIR="$target" "$pyv/bin/pip" install -q --disable-pip-version-check --force-reinstall \
      --no-deps "$root/bindings/python" 2>> "$log" || note "the Python package did not install"
    runners="$root/bench/runners"
    BENCH_EXTRA="$BENCH_EXTRA; nexus-python=$pyv/bin/python $runners/run_nexus_python.py"
    BENCH_EXTRA="$BENCH_EXTRA; nexus-python-async=$pyv/bin/python $runners/run_nexus_python.py --async"
    js="$BENCH_VENVS/js-peers"
    mkdir -p "$js"
    [ -f "$js/package.json" ] || echo '{"name":"js-peers","private":true,"type":"module"}' > "$js/package.json"
    ( cd "$js" && npm install -q --no-audit --no-fund node@22 @openai/agents@0.20.0 openai@7.60.0 \
        ai@7.0.173 @ai-sdk/openai@4.0.118 zod@4.6.7 >> "$log" 2>&1 \
      && CARGO_TARGET_DIR="$target/node" npm install -q --no-audit --no-fund --foreground-scripts \
        "$root/bindings/node" >> "$log" 2>&1 ) || note "the Node package or the TypeScript peers did not install"
    # The runners resolve their packages from node_modules beside them.
    cp "$runners"/*.mjs "$js/"
    node22="$js/node_modules/.bin/node"
    BENCH_EXTRA="$BENCH_EXTRA; nexus-node=$node22 $js/run_nexus_node.mjs"
    BENCH_EXTRA="$BENCH_EXTRA; openai-agents-js=$node22 $js/run_openai_agents_js.mjs"
    BENCH_EXTRA="$BENCH_EXTRA; vercel-ai=$node22 $js/run_vercel_ai.mjs"
  fi
  # The machine is small and shared: one sitting's ratios move by ±15 %.
  # Several back-to-back sittings (each with its own shuffle seed) give the
  # spread of every ratio. An absolute BENCH_OUT keeps the results out of
  # the (read-only) shared tree.
  sittings="${BENCH_SITTINGS:-3}"
  for i in $(seq 1 "$sittings"); do
    load "before overhead sitting $i/$sittings"
    BENCH_OUT="$out/overhead-$i" BENCH_SEED="${BENCH_SEED:-0}$i" bash "$harness/run_all.sh" > /dev/null 2>> "$log" \
      || note "overhead sitting $i failed"
    load "after overhead sitting $i/$sittings"
  done
  # Each of our rows against its matching floor of the same sitting (same
  # wire, same body mode) and the targets (p50 ≤ 1.15 × whole / 1.10 ×
  # streamed, p95 ≤ 1.3 × the floor's p95, peak RSS ≤ 5 MB; Responses rows
  # at their Chat twin's ratio), per sitting, then the spread of each ratio
  # across sittings.
  python3 - "$out" "$sittings" > "$out/overhead-ratios.md" <<'PY'
import json, os, statistics, sys
out, n = sys.argv[1], int(sys.argv[2])
docs = []
for i in range(1, n + 1):
    path = os.path.join(out, f"overhead-{i}.json")
    if os.path.exists(path):
        docs.append((i, json.load(open(path))))
# The targets: p50 ≤ 1.15 × the matching floor for whole bodies, ≤ 1.10 × for
# streams; p95 ≤ 1.3 × the matching floor's p95; peak RSS ≤ 5 MB. A Responses
# row should sit at the ratio its Chat Completions twin does (÷ Chat = 1).
P50_WHOLE, P50_STREAM, P95_X, RSS_MB = 1.15, 1.10, 1.3, 5.0
streamed = lambda r: bool(r.get("stream")) or r["framework"].endswith("-stream")
responses = lambda name: "-responses" in name
ours = lambda name: name.startswith("nexus")
def floor_name(r):
    """The floor a row is held to: the same wire, the same body mode, ureq 2.
    The smol floors are shown against it too (not judged: they are not ours)."""
    if r["framework"].startswith("floor-") and not r["framework"].startswith("floor-rust-raw-smol"):
        return None
    return "floor-rust-ureq" + ("-responses" if responses(r["framework"]) else "") + ("-stream" if streamed(r) else "")
def raw_name(r):
    """The hand-written-HTTP floor of the same body mode (Chat Completions only)."""
    if r["framework"].startswith("floor-") or responses(r["framework"]):
        return None
    return "floor-rust-raw" + ("-stream" if streamed(r) else "")
def io_floor_name(r):
    """The hand-written-HTTP floor on the row's own I/O: std's blocking sockets
    for the blocking driver (floor-rust-raw, Chat only), smol's reactor for the
    async one (bench/floor_smol; no Responses stream)."""
    name = r["framework"]
    if not ours(name):
        return None
    if "-async" in name:
        return "floor-rust-raw-smol" + ("-responses" if responses(name) else "") + ("-stream" if streamed(r) else "")
    return raw_name(r)
def ratio(r, f, key="p50_ms"):
    return r[key] / f[key] if r and f and r.get(key) and f.get(key) else None
def over(r, f):
    return (r["p50_ms"] - f["p50_ms"]) * 1e3 if r and f and r.get("p50_ms") and f.get("p50_ms") else None
def fmt(x, spec=".2f"):
    return "—" if x is None else format(x, spec)
mark = lambda ok: "—" if ok is None else ("yes" if ok else "**no**")
def row_values(r, by):
    f = by.get(floor_name(r) or "")
    x50, x95, rss = ratio(r, f), ratio(r, f, "p95_ms"), r.get("peak_rss_mb")
    target = P50_STREAM if streamed(r) else P50_WHOLE
    judged = ours(r["framework"]) and f is not None
    vs_chat = None
    if responses(r["framework"]) and not r["framework"].startswith("floor-"):
        twin = by.get(r["framework"].replace("-responses", ""))
        twin_x50 = ratio(twin, by.get(floor_name(twin))) if twin else None
        vs_chat = x50 / twin_x50 if x50 and twin_x50 else None
    return {
        "floor": f["framework"] if f else None, "x50": x50, "x95": x95, "plus": over(r, f),
        "plus_raw": over(r, by.get(raw_name(r) or "")), "rss": rss, "target": target if judged else None,
        "ok50": None if x50 is None or not judged else x50 <= target,
        "ok95": None if x95 is None or not judged else x95 <= P95_X,
        "okrss": None if rss is None or not judged else rss <= RSS_MB, "vs_chat": vs_chat,
        "x_ours": ratio(r, by.get("nexus-async")),
        "x95_io": ratio(r, by.get(io_floor_name(r) or ""), "p95_ms"),
    }
# Each wire and body mode in its own block, its floors first.
order = lambda r: (responses(r["framework"]), streamed(r), not r["framework"].startswith("floor-"), r["p50_ms"] or 0)
print(f"Each row against its matching floor in the same sitting: whole Chat Completions rows against "
      f"floor-rust-ureq, streamed ones against floor-rust-ureq-stream, Responses rows against "
      f"floor-rust-ureq-responses(-stream) (the same method over POST /v1/responses, bench/floor_responses). "
      f"Targets: p50 ≤ {P50_WHOLE:.2f} × the floor for whole bodies, ≤ {P50_STREAM:.2f} × for streams; "
      f"p95 ≤ {P95_X:.1f} × the floor's p95; peak RSS ≤ {RSS_MB:.0f} MB. *÷ Chat* = (Responses row ÷ its floor) ÷ "
      f"(the same driver's Chat row ÷ its floor), p50: 1.00 means the Responses wire costs us what Chat "
      f"Completions does. *+ µs over raw* = p50 − floor-rust-raw(-stream) p50 (Chat rows). *× I/O floor p95* = "
      f"p95 ÷ the p95 of the hand-written-HTTP floor on the row's own I/O: floor-rust-raw(-stream) (std's blocking "
      f"sockets) for the blocking driver, floor-rust-raw-smol(-responses)(-stream) (the same client with every "
      f"wait through smol's reactor, bench/floor_smol) for the async one. The smol floors are shown against the "
      f"ureq floor and not judged.\n")
spread = {}
for i, doc in docs:
    by = {r["framework"]: r for r in doc["results"]}
    load = doc["machine"].get("loadavg_at_start") or []
    print(f"#### Sitting {i} — {doc['date_utc']}, load at start {', '.join(f'{x:.2f}' for x in load)}\n")
    print("| row | floor | p50 ms | p95 ms | mean ms | round-p50 range ms | × floor p50 | × floor p95 "
          "| × I/O floor p95 | + µs over floor | + µs over raw | peak RSS MB | p50 ≤ target | p95 ≤ 1.3 × | RSS ≤ 5 MB "
          "| ÷ Chat | ok |")
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|:-:|:-:|:-:|--:|:-:|")
    for r in sorted((r for r in doc["results"] if r.get("p50_ms")), key=order):
        name = r["framework"]
        v = row_values(r, by)
        s = spread.setdefault(name, {"p50": [], "floor": v["floor"], "ok": {"ok50": [], "ok95": [], "okrss": []}})
        s["p50"].append(r["p50_ms"])
        for key in ("x50", "x95", "x95_io", "plus", "plus_raw", "rss", "vs_chat", "x_ours"):
            if v[key] is not None:
                s.setdefault(key, []).append(v[key])
        for key in ("ok50", "ok95", "okrss"):
            if v[key] is not None:
                s["ok"][key].append(v[key])
        if not (name.startswith("nexus") or name.startswith("floor-rust")):
            continue
        target = "—" if v["target"] is None else f"{mark(v['ok50'])} (≤ {v['target']:.2f})"
        print(f"| {name} | {v['floor'] or '—'} | {r['p50_ms']:.3f} | {r['p95_ms']:.3f} | {r['mean_ms']:.3f} | "
              f"{r['round_p50_min_ms']:.3f}–{r['round_p50_max_ms']:.3f} | {fmt(v['x50'])} | {fmt(v['x95'])} | {fmt(v['x95_io'])} | "
              f"{fmt(v['plus'], '+.0f')} | {fmt(v['plus_raw'], '+.0f')} | {fmt(v['rss'], '.1f')} | {target} | "
              f"{mark(v['ok95'])} | {mark(v['okrss'])} | {fmt(v['vs_chat'])} | {'✅' if r['final_ok'] else '❌'} |")
    print()
if len(docs) > 1:
    print(f"#### Across the {len(docs)} sittings: median (min–max)\n")
    print("| row | floor | p50 ms | × floor p50 | × floor p95 | × I/O floor p95 | + µs over floor | + µs over raw "
          "| ÷ Chat | × nexus-async | peak RSS MB | sittings meeting p50 / p95 / RSS |")
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|:-:|")
    def mm(v, spec):
        return "—" if not v else f"{format(statistics.median(v), spec)} ({format(min(v), spec)}–{format(max(v), spec)})"
    def met(s):
        if s["floor"] is None:
            return "—"
        return " / ".join(f"{sum(s['ok'][k])} of {len(s['ok'][k])}" if s["ok"][k] else "—"
                          for k in ("ok50", "ok95", "okrss"))
    for name, s in sorted(spread.items(), key=lambda kv: (responses(kv[0]), kv[0].endswith("-stream"),
                                                          not kv[0].startswith("floor-"),
                                                          statistics.median(kv[1]["p50"]))):
        g = lambda k: s.get(k, [])
        print(f"| {name} | {s['floor'] or '—'} | {mm(s['p50'], '.3f')} | {mm(g('x50'), '.2f')} | {mm(g('x95'), '.2f')} | "
              f"{mm(g('x95_io'), '.2f')} | "
              f"{mm(g('plus'), '+.0f')} | {mm(g('plus_raw'), '+.0f')} | {mm(g('vs_chat'), '.2f')} | "
              f"{mm(g('x_ours'), '.2f')} | {mm(g('rss'), '.1f')} | {met(s)} |")
PY
  # The last sitting's full table (every peer) stands for the sitting.
  for f in json md; do
    [ -f "$out/overhead-$sittings.$f" ] && cp "$out/overhead-$sittings.$f" "$out/overhead.$f"
  done
  note "overhead table: $out/overhead.md (ratios: $out/overhead-ratios.md)"
fi

if part gateway; then
  # The gateway's key limits: off, counted in the process, counted in Redis,
  # beside nginx (the proxy floor) in the shared gateway harness.
  load "before the gateway limits sitting"
  cargo build --release -q -p nexus-drive --features cli --bin nexus 2>> "$log"
  SKIP_LITELLM=1 SKIP_PORTKEY=1 bash "$harness/gateway_setup.sh" >> "$log" 2>&1 || note "gateway_setup.sh failed"
  NEXUS_BIN="$target/release/nexus" GW_OUT="$out/gateway-limits" python3 "$root/bench/gateway_limits.py" >> "$log" 2>&1 \
    || note "the gateway limits sitting failed"
  load "after the gateway limits sitting"
fi

if part cargo; then
  # Every bench target of the workspace, found from the manifests, so benches
  # added later (translation, stores) land in the same sitting.
  cargo metadata --no-deps --format-version 1 \
    | python3 -c '
import json, sys
for p in json.load(sys.stdin)["packages"]:
    for t in p["targets"]:
        if "bench" not in t["kind"]:
            continue
        src = open(t["src_path"]).read()
        # A module the benches share (no entry point of its own) is not a bench.
        if "fn main" not in src and "#[test]" not in src:
            continue
        print(p["name"], t["name"], ",".join(t.get("required-features") or []) or "-",
              p["manifest_path"].rsplit("/", 1)[0])' > "$out/benches.txt"
  limit="${BENCH_TIMEOUT:-900}"
  # The bench executable cargo reports for target $1.
  executable() {
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]:
        print(m["executable"])' "$1" | tail -n 1
  }
  # The list is read on fd 3, so nothing run inside the loop can eat it.
  while read -r -u 3 pkg bench features dir; do
    load "before cargo bench $pkg/$bench"
    dest="$out/bench-$pkg-$bench.md"
    feat=()
    [ "$features" = "-" ] || feat=(--features "$features")
    # With a database to talk to (`eval "$(.ci/postgres.sh start)"`), the
    # stores bench measures PostgreSQL too.
    if [ "$bench" = stores ] && [ -n "${NEXUS_PG_URL:-}" ]; then
      if [ "$features" = "-" ]; then feat=(--features postgres); else feat=(--features "$features,postgres"); fi
    fi
    # Built by cargo, then run directly (from the package directory, as
    # cargo does) under a time limit, so a bench that hangs cannot stall the
    # sitting and a killed bench leaves nothing behind.
    exe=$(cargo bench -q --no-run --message-format=json -p "$pkg" --bench "$bench" "${feat[@]}" 2>> "$log" \
      | executable "$bench") || true
    if [ -z "$exe" ]; then
      note "cargo bench $pkg/$bench did not build"
      continue
    fi
    ( cd "$dir" && timeout "$limit" "$exe" --bench < /dev/null ) > "$dest" 2>> "$log" \
      || note "$pkg/$bench failed or ran over $limit s"
    # A bench still built under the libtest harness skips its plain main
    # under `cargo bench`; it then carries an ignored test that runs it.
    if ! grep -q '^|' "$dest" && grep -q 'ignored' "$dest"; then
      note "$pkg/$bench runs under the libtest harness: running its ignored test"
      exe=$(cargo test -q --release --no-run --message-format=json -p "$pkg" --bench "$bench" "${feat[@]}" 2>> "$log" \
        | executable "$bench") || true
      ( cd "$dir" && timeout "$limit" "$exe" --ignored --nocapture --test-threads 1 < /dev/null ) > "$dest" 2>> "$log" \
        || note "$pkg/$bench (libtest) failed or ran over $limit s"
    fi
    load "after cargo bench $pkg/$bench"
  done 3< "$out/benches.txt"
fi

# One file with everything, in the order BENCHMARKS.md uses.
{
  echo "# Benchmark sitting $stamp"
  echo
  echo '```'
  cat "$out/machine.txt"
  echo '```'
  echo
  if [ -f "$out/overhead.md" ]; then
    sed 's/^# /## /' "$out/overhead.md"
    echo
    echo "### Our rows against the Rust floors, sitting by sitting"
    echo
    cat "$out/overhead-ratios.md"
  fi
  if [ -f "$out/gateway-limits.md" ]; then
    sed 's/^# /## /' "$out/gateway-limits.md"
    echo
  fi
  # The cargo benches in BENCHMARKS.md's order (decoding, state, async scale, translation),
  # then any other bench.
  for f in "$out"/bench-nexus-proto-decode.md "$out"/bench-nexus-proto-state.md \
    "$out"/bench-nexus-drive-async_scale.md "$out"/bench-nexus-proto-translate.md \
    $(ls "$out"/bench-*.md 2>/dev/null | grep -vE 'bench-(nexus-proto-(decode|state|translate)|nexus-drive-async_scale)\.md$'); do
    [ -f "$f" ] || continue
    echo
    grep -q '^#' "$f" || { echo "## $(basename "$f" .md | sed 's/^bench-//')"; echo; }
    grep -E '^(#|\||$|[A-Z])' "$f" | grep -vE '^(running|test result|test )' || true
  done
  echo
  echo "## Load during the sitting"
  echo
  echo '```'
  grep 'load:' "$log" || true
  echo '```'
} > "$out/all.md"
mkdir -p "$root/target/bench-results" && ln -sfn "$out" "$root/target/bench-results/latest" 2>/dev/null || true
note "all tables: $out/all.md"
