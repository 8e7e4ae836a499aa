#!/usr/bin/env python3
"""The shared overhead scenario through the Python package (`nexus-loop`, import `nexus`).

Two native tools (`@nexus.tool` over the harness's counting functions), the OpenAI style
against the harness's mock, one `client.run` per request (`--async`: `await client.arun`,
the async driver with the tools on the caller's event loop). Speaks the harness's runner
protocol through its own `harness.py`, so run_all.sh measures it beside the Rust drivers
and the Python peers:

    BENCH_EXTRA="nexus-python=$VENV/bin/python $PWD/bench/runners/run_nexus_python.py" ./run_all.sh

`$VENV` is a venv where `pip install ./bindings/python` was done (bench/run.sh makes one).
"""
import os
import sys
from importlib.metadata import version

SHARED = os.environ.get("NEXUS_SHARED") or os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "..", "shared")
sys.path.insert(0, os.path.join(SHARED, "bench", "runners"))
import harness as h  # noqa: E402

import nexus  # noqa: E402

ASYNC = "--async" in sys.argv
if ASYNC:
    sys.argv.remove("--async")


def setup():
    @nexus.tool
    def get_weather(city: str) -> str:
        """Get the current weather for a city."""
        return h.get_weather(city)

    @nexus.tool
    def add(a: int, b: int) -> str:
        """Add two integers."""
        return h.add(a, b)

    client = nexus.Client(style="openai", model="mock-model", base_url=h.OPENAI_BASE,
                          api_key=h.API_KEY, system="You are a helpful assistant.")
    tools = [get_weather, add]

    if ASYNC:
        async def run_once():
            return (await client.arun(h.QUESTION, tools=tools)).text
    else:
        def run_once():
            return client.run(h.QUESTION, tools=tools).text
    return run_once


if __name__ == "__main__":
    h.main("nexus-python-async" if ASYNC else "nexus-python", version("nexus-loop"), setup)
