#!/usr/bin/env python3
"""Ratios to the floor from gateway_bench.py sittings.

Each argument is LABEL=FILE[,FILE...]: the JSON files gateway_bench.py wrote
(GW_OUT) for one build, one per sitting, each with the nginx-openai row in
it. For every nexus row and case, it prints the median over the sittings of
the row's figure and of its ratio to nginx's figure *in the same sitting*
(added p50, added p99, gateway CPU per request at c = 1; req/s and p99 in
the concurrency sweep, with the highest peak RSS and upstream connections
per request of any sitting), so that builds measured in alternating
sittings compare without trusting one sitting's machine state; then each
sitting's quietness as the harness measured it.

    python3 bench/gateway_ratios.py before=a1.json,a2.json after=b1.json,b2.json
"""
import json
import statistics
import sys

FLOOR = "nginx-openai"


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, digits=2):
    return "—" if x is None else f"{x:.{digits}f}"


def ratio(a, b):
    return None if a is None or not b else a / b


def main(args):
    builds = []
    for arg in args:
        label, _, files = arg.partition("=")
        builds.append((label, [json.load(open(f)) for f in files.split(",")]))
    first = builds[0][1][0]
    cases = first["config"]["cases"]
    rows = sorted({r["row"] for r in first["latency"] if r["row"].startswith("nexus")})
    print("| build | row | added p50 µs (" + " / ".join(cases) + ") | ÷ nginx | added p99 ÷ nginx | CPU µs/req | CPU ÷ nginx |")
    print("|---|---|---|---|---|---|---|")
    for label, sittings in builds:
        for row in [FLOOR] + rows:
            cols = {k: [] for k in ("p50", "p50r", "p99r", "cpu", "cpur")}
            for case in cases:
                vals = {k: [] for k in cols}
                for s in sittings:
                    by = {(r["row"], r["case"]): r for r in s["latency"]}
                    r, f = by.get((row, case)), by.get((FLOOR, case))
                    if not r or not f:
                        continue
                    vals["p50"].append(r["added_p50_ms"] * 1e3)
                    vals["cpu"].append(r["gw_cpu_us_per_req"])
                    vals["p50r"].append(ratio(r["added_p50_ms"], f["added_p50_ms"]))
                    vals["p99r"].append(ratio(r["added_p99_ms"], f["added_p99_ms"]))
                    vals["cpur"].append(ratio(r["gw_cpu_us_per_req"], f["gw_cpu_us_per_req"]))
                for k in cols:
                    cols[k].append(med(vals[k]))
            show = lambda k, d=2: " / ".join(fmt(x, d) for x in cols[k])
            print(f"| {label} | {row} | {show('p50', 0)} | {show('p50r')} | {show('p99r')} | {show('cpu', 0)} | {show('cpur')} |")
    print()
    print("| build | row | c | req/s | ÷ nginx | p99 ms | ÷ nginx | CPU µs/req | errors | peak RSS MB | upstream conns/req |")
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for label, sittings in builds:
        conns = sorted({r["conns"] for s in sittings for r in s["sweep"]})
        for row in [FLOOR] + rows:
            for c in conns:
                rps, rpsr, p99, p99r, cpu, errs, rss, ups = [], [], [], [], [], 0, [], []
                for s in sittings:
                    by = {(r["row"], r["conns"]): r for r in s["sweep"] if r["case"] == "turn1"}
                    r, f = by.get((row, c)), by.get((FLOOR, c))
                    if not r or not f:
                        continue
                    rps.append(r["rps"])
                    p99.append(r["p99_ms"])
                    cpu.append(r["gw_cpu_us_per_req"])
                    rpsr.append(ratio(r["rps"], f["rps"]))
                    p99r.append(ratio(r["p99_ms"], f["p99_ms"]))
                    errs += r["errors"]
                    rss.append(r.get("gw_peak_rss_mb"))
                    ups.append(r.get("upstream_conns_per_req"))
                rss = [x for x in rss if x is not None]
                ups = [x for x in ups if x is not None]
                print(f"| {label} | {row} | {c} | {fmt(med(rps), 0)} | {fmt(med(rpsr))} | {fmt(med(p99), 1)} | "
                      f"{fmt(med(p99r))} | {fmt(med(cpu), 0)} | {errs} | {fmt(max(rss) if rss else None, 1)} | "
                      f"{fmt(max(ups) if ups else None)} |")
    print()
    # How quiet each sitting was: other processes' CPU and steal, as the harness measured them.
    print("| build | sitting (UTC) | other processes' CPU % (latency / sweep) | steal % (latency / sweep) |")
    print("|---|---|---|---|")
    for label, sittings in builds:
        for s in sittings:
            m = s.get("machine", {})
            other, steal = m.get("other_processes_cpu_pct", {}), m.get("steal_pct", {})
            print(f"| {label} | {s.get('date_utc', '?')} | {other.get('latency', '?')} / {other.get('sweep', '?')} | "
                  f"{steal.get('latency', '?')} / {steal.get('sweep', '?')} |")


if __name__ == "__main__":
    main(sys.argv[1:])
