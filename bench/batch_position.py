#!/usr/bin/env python3
"""Latency by position in a batch, as the shared harness drives a runner.

The harness (shared/bench/run_all.py) sends each runner `run K` commands in
rounds, so a runner sits idle while the others run and then starts a batch
cold. This script drives one runner the same way (`--serve`, batches of 100
with a pause between them) and prints its latencies by position in the
batch: how much of a row's tail is the start of a batch.

    MOCK_URL=http://127.0.0.1:PORT python3 bench/batch_position.py \\
        target/release/examples/overhead --driver async [--stream]

Knobs: BATCHES [30], BATCH [100], PAUSE seconds between batches [0.1].
"""
import json
import os
import subprocess
import sys
import time

BATCHES = int(os.environ.get("BATCHES", "30"))
BATCH = int(os.environ.get("BATCH", "100"))
PAUSE = float(os.environ.get("PAUSE", "0.1"))
SPANS = [(0, 5), (5, 10), (10, 20), (20, 40), (40, 70), (70, 100)]


def main():
    argv = sys.argv[1:] + ["--serve"]
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def ask(cmd):
        if cmd:
            p.stdin.write(cmd + "\n")
            p.stdin.flush()
        while True:
            line = p.stdout.readline()
            if not line:
                sys.exit(f"the runner exited (rc={p.wait()})")
            if line.startswith("{"):
                return json.loads(line)

    ask(None)  # ready
    if not ask("warmup 20").get("ok"):
        sys.exit("warm-up failed")
    by_pos = [[] for _ in range(BATCH)]
    for _ in range(BATCHES):
        answer = ask(f"run {BATCH}")
        if not answer.get("ok"):
            sys.exit(f"a batch failed: {answer.get('error')}")
        for i, ms in enumerate(answer["lat"]):
            by_pos[i].append(ms * 1000)
        time.sleep(PAUSE)
    p.stdin.write("quit\n")
    p.stdin.flush()
    p.wait(timeout=30)

    def pct(v, q):
        v = sorted(v)
        return v[min(len(v) - 1, int(q * len(v)))]

    every = [x for pos in by_pos for x in pos]
    print(f"{' '.join(sys.argv[1:])}: p50 {pct(every, .5):.0f} µs, p95 {pct(every, .95):.0f} µs")
    for lo, hi in SPANS:
        v = [x for pos in by_pos[lo:hi] for x in pos]
        if not v:
            continue
        slow = sum(1 for x in v if x > 400) / len(v) * 100
        print(f"  runs {lo:2d}–{hi:3d} of a batch: p50 {pct(v, .5):4.0f} µs  p90 {pct(v, .9):5.0f} µs  over 400 µs {slow:4.1f} %")


if __name__ == "__main__":
    main()
