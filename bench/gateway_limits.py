#!/usr/bin/env python3
"""What the gateway's key limits cost per request: off, counted in the process, counted in Redis.

Runs the shared gateway harness (`$NEXUS_SHARED/bench/gateway_bench.py`, its method and
output unchanged) with three rows of its own beside the harness's `nexus-openai` and
`nginx-openai`:

  nexus-openai-key      `nexus serve --config`: one named client key, no limits (what a
                        keyed gateway pays before any limit: the key lookup, per-key metrics)
  nexus-openai-limits   the same key with rpm, tpm, daily and monthly token limits counted
                        in the process (the default store)
  nexus-openai-redis    the same limits counted in Redis (`[limits] store = "redis://…"`):
                        a redis-server started for the row as the gateway's child, so the
                        row's CPU per request includes Redis's own work

The limits are far above what a sitting sends, so every request is admitted: the rows
measure the bookkeeping, not rejections. Every response is checked by the harness's load
generator as for any other row.

    python3 bench/gateway_limits.py                  # GW_* knobs as gateway_bench.py's
    GW_SWEEP=1,64 GW_RUNS=500 python3 bench/gateway_limits.py

Results: bench/results/gateway-limits.{md,json} unless GW_OUT says otherwise. Needs the
release `nexus` (cargo build --release -p nexus-drive --features cli --bin nexus, or
NEXUS_BIN), nginx and the load generator (the harness's gateway_setup.sh) and redis-server.
"""
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARED = os.environ.get("NEXUS_SHARED") or os.path.join(os.path.dirname(ROOT), "shared")
sys.path.insert(0, os.path.join(SHARED, "bench"))

import gateway_bench as gb  # noqa: E402  (found through the path above)

CLIENT_KEY_ENV = "BENCH_CLIENT_KEY"
# Far above what one sitting sends (a 3 s sweep at c = 256 is < 50k requests).
LIMITS = "rpm = 1000000000\ntpm = 1000000000000\ndaily_tokens = 1000000000000\nmonthly_tokens = 1000000000000\n"


def config(port, mock, limits, store):
    """The gateway's TOML: the harness's OpenAI upstream, one route, one key."""
    text = f'listen = "127.0.0.1:{port}"\n'
    if store:
        text += f'[limits]\nstore = "{store}"\n'
    text += (
        "[[upstreams]]\n"
        'name = "mock"\nstyle = "openai"\n'
        f'base_url = "{mock}/v1"\n'
        'api_key_env = "OPENAI_API_KEY"\n'
        '[[routes]]\nmodel = "*"\nupstream = "mock"\n'
        f'[[keys]]\nname = "bench"\nkey_env = "{CLIENT_KEY_ENV}"\n'
    )
    return text + (LIMITS if limits else "")


def limit_rows(workdir, mock):
    nexus = gb.find_nexus()
    redis = shutil.which("redis-server")
    rows = []
    for name, limits, with_redis, what in (
        ("nexus-openai-key", False, False, "one named client key, no limits"),
        ("nexus-openai-limits", True, False, "rpm, tpm, daily and monthly token limits counted in the process"),
        ("nexus-openai-redis", True, True, "the same limits counted in Redis (its CPU included)"),
    ):
        port = gb.free_port()
        store = None
        argv = [nexus or "nexus", "serve", "--config", os.path.join(workdir, name + ".toml")]
        if with_redis:
            rport = gb.free_port()
            store = f"redis://127.0.0.1:{rport}/0"
            # redis-server is started by the shell that then becomes the gateway,
            # so it is the gateway's child: its CPU counts, and it stops with it.
            argv = ["sh", "-c",
                    f'{redis or "redis-server"} --port {rport} --bind 127.0.0.1 --save "" --appendonly no '
                    f'--logfile "" >/dev/null & sleep 0.3; exec "$@"', "sh"] + argv
        with open(os.path.join(workdir, name + ".toml"), "w") as f:
            f.write(config(port, mock, limits, store))
        r = gb.Row(name, "openai", f"`nexus serve --config` (OpenAI pass-through): {what}",
                   [f"Authorization: Bearer {gb.CLIENT_TOKEN}"], argv=argv,
                   env={"OPENAI_API_KEY": "sk-upstream-mock", CLIENT_KEY_ENV: gb.CLIENT_TOKEN},
                   url=f"http://127.0.0.1:{port}/v1/chat/completions", ready_timeout=30)
        if not nexus:
            r.missing = "nexus binary not found: set NEXUS_BIN"
        elif with_redis and not redis:
            r.missing = "redis-server not found (apt-get install redis-server)"
        rows.append(r)
    return rows


def main():
    make_rows = gb.make_rows

    def with_limit_rows(workdir, mock):
        return make_rows(workdir, mock) + limit_rows(workdir, mock)

    gb.make_rows = with_limit_rows
    gb.ONLY[:] = gb.ONLY or ["nginx-openai", "nexus-openai", "nexus-openai-key", "nexus-openai-limits",
                             "nexus-openai-redis"]
    if "GW_OUT" not in os.environ:
        os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
        gb.OUT = os.path.join(HERE, "results", "gateway-limits")
    gb.main()


if __name__ == "__main__":
    main()
