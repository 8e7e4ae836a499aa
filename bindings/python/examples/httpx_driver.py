"""Driving the sans-IO machine (``nexus.proto.Run``) with httpx.

The machine decides everything — what to send, retries and backoff, the
turn limit, which tools to run, when the run is over — and does no I/O.
This host does the I/O: it sends each request with httpx (streaming the
response into the machine as it arrives), runs the tools, and sleeps when
the machine asks it to wait. It is the whole driver.

    python httpx_driver.py BASE_URL MODEL [STYLE]

With the API key in ``NEXUS_API_KEY``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Callable, Dict

import httpx

import nexus.proto


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def add(a: int, b: int) -> str:
    return str(a + b)


TOOLS: Dict[str, Callable[..., Any]] = {"add": add}
DECLS = [
    {
        "name": "add",
        "description": "Adds a and b.",
        "input_schema": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    }
]


def send(http: httpx.Client, run: nexus.proto.Run, out: Dict[str, Any]) -> None:
    """One exchange: the head, the body as it arrives, the end (or the failure)."""
    ex = out["exchange"]
    try:
        with http.stream(out["method"], out["url"], headers=out["headers"], content=out["body"].encode()) as resp:
            headers = [[k, v] for k, v in resp.headers.multi_items()]
            run.handle_input(now_ms(), {"type": "response_head", "exchange": ex, "status": resp.status_code, "headers": headers})
            for chunk in resp.iter_raw():
                run.handle_input(now_ms(), {"type": "response_body", "exchange": ex, "chunk": chunk})
        run.handle_input(now_ms(), {"type": "response_end", "exchange": ex})
    except httpx.ConnectError as e:
        run.handle_input(now_ms(), {"type": "transport_error", "exchange": ex, "kind": "connect", "message": str(e)})
    except httpx.HTTPError as e:
        run.handle_input(now_ms(), {"type": "transport_error", "exchange": ex, "kind": "io", "message": str(e)})


def run_tools(run: nexus.proto.Run, out: Dict[str, Any]) -> None:
    for call in out["calls"]:
        try:
            reply = {"status": "done", "value": {"output": TOOLS[call["name"]](**call["input"]), "isError": False}}
        except Exception as e:  # the model sees the error
            reply = {"status": "done", "value": {"output": f"{type(e).__name__}: {e}", "isError": True}}
        run.handle_input(now_ms(), {"type": "tool_reply", "call_id": call["callId"], "reply": reply})


def drive(run: nexus.proto.Run, on_text: Callable[[str], None] = lambda t: None) -> Dict[str, Any]:
    """Runs the machine to its end and returns the outcome (or the
    ``suspended`` output, for the host to snapshot and answer later)."""
    with httpx.Client(timeout=60) as http:
        while True:
            out = run.poll_output()
            kind = out["type"]
            if kind == "send":
                send(http, run, out)
            elif kind == "run_tools":
                run_tools(run, out)
            elif kind == "event":
                if out["event"]["type"] == "text_delta":
                    on_text(out["event"]["text"])
            elif kind == "wait":
                # This driver feeds every input before it polls again, so the
                # machine only ever waits for a timer (a retry's backoff).
                if out["until"] is None:
                    raise RuntimeError("the machine waits for an input this driver does not have")
                time.sleep(max(0, out["until"] - now_ms()) / 1000)
                run.handle_input(now_ms(), {"type": "timeout"})
            elif kind == "suspended":
                return out
            elif kind == "done":
                outcome: Dict[str, Any] = out["outcome"]
                return outcome


def main() -> None:
    base_url, model = sys.argv[1], sys.argv[2]
    style = sys.argv[3] if len(sys.argv) > 3 else "openai"
    run = nexus.proto.Run({"style": style, "model": model, "baseUrl": base_url, "stream": True}, DECLS, "What is 2 + 2?")
    run.set_api_key(os.environ["NEXUS_API_KEY"])
    outcome = drive(run, on_text=lambda t: print(t, end="", flush=True))
    print()
    print(json.dumps({"outcome": outcome, "summary": run.summary()}))


if __name__ == "__main__":
    main()
