"""nexus.proto.Run: the sans-IO machine, driven from Python (the httpx example)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import nexus
from conftest import STYLES, turn

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "httpx_driver.py"
ADD_SCRIPT = [turn(calls=[("add", '{"a": 2, "b": 2}')]), turn("2 + 2 = 4.")]


def next_action(run: nexus.proto.Run) -> dict:
    """The next output that is not an event."""
    while (out := run.poll_output())["type"] == "event":
        pass
    return out


def load_example():
    spec = importlib.util.spec_from_file_location("httpx_driver", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("style", STYLES)
def test_the_httpx_example_drives_a_run_on_every_style(fake_provider, style):
    pytest.importorskip("httpx")
    fake = fake_provider({"m": ADD_SCRIPT})
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), fake.base_url(style), "m", style],
        capture_output=True,
        text=True,
        env={**os.environ, "NEXUS_API_KEY": "test-key"},
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    text, last = out.stdout.rsplit("\n", 2)[:2]
    assert text == "2 + 2 = 4."
    report = json.loads(last)
    assert report["outcome"] == {"status": "done"}
    assert report["summary"]["toolCalls"][0]["output"] == "4"
    assert report["summary"]["turns"] == 2


def test_a_suspended_machine_snapshots_and_restores(fake_provider):
    httpx = pytest.importorskip("httpx")
    driver = load_example()
    fake = fake_provider({"m": [turn(calls=[("ask", '{"q": "name?"}')]), turn("Hello, Ada.")]})
    decls = [{"name": "ask", "description": "Asks the user.", "input_schema": {"type": "object"}}]
    run = nexus.proto.Run({"style": "openai", "model": "m", "baseUrl": fake.base_url("openai")}, decls, "Greet me.")
    run.set_api_key("test-key")
    out = run.poll_output()
    assert out["type"] == "send" and json.loads(out["body"])["model"] == "m"
    with httpx.Client() as http:
        driver.send(http, run, out)
    tools = next_action(run)
    assert tools["type"] == "run_tools" and tools["calls"][0]["name"] == "ask"
    # The host's tool suspends on a question instead of answering.
    call = tools["calls"][0]
    question = {"id": "", "kind": "question", "prompt": call["input"]["q"]}
    reply = {"status": "pending", "value": question}
    run.handle_input(driver.now_ms(), {"type": "tool_reply", "call_id": call["callId"], "reply": reply})
    out = next_action(run)
    assert out["type"] == "suspended"
    [request] = out["requests"]
    state = run.snapshot()
    assert "test-key" not in state
    assert run.status == "pending"

    # Later, anywhere: restore, answer, and the tool runs again with the answer.
    again = nexus.proto.Run.restore(state)
    assert again.snapshot() == state
    again.set_api_key("test-key")
    answer = {"id": request["id"], "ok": True, "data": {"name": "Ada"}}
    again.handle_input(driver.now_ms(), {"type": "answer", "answer": answer})
    tools = next_action(again)
    assert tools["type"] == "run_tools" and tools["calls"][0]["answer"]["data"] == {"name": "Ada"}
    reply = {"status": "done", "value": {"output": "Ada", "isError": False}}
    again.handle_input(driver.now_ms(), {"type": "tool_reply", "call_id": tools["calls"][0]["callId"], "reply": reply})
    assert driver.drive(again) == {"status": "done"}
    summary = again.summary()
    assert summary["text"] == "Hello, Ada."
    assert summary["status"] == again.status == "done"


def test_bad_inputs_raise_state_errors_and_change_nothing():
    run = nexus.proto.Run({"style": "anthropic", "model": "m"}, [], "hi")
    out = run.poll_output()
    assert out["type"] == "send" and out["url"].endswith("/v1/messages")
    before = run.snapshot()
    with pytest.raises(nexus.StateError):
        run.handle_input(5, {"type": "response_end", "exchange": 99})
    with pytest.raises(nexus.StateError):
        run.handle_input(5, {"type": "no_such_input"})
    with pytest.raises(nexus.StateError):
        run.handle_input(5, {"type": "answer", "answer": {"id": "nope", "ok": True}})
    assert run.snapshot() == before
    with pytest.raises(nexus.StateError):
        nexus.proto.Run.restore('{"format_version": 999}')
    with pytest.raises(nexus.ConfigError):
        nexus.proto.Run({"model": "m"}, [], "hi")
    with pytest.raises(TypeError):
        run.handle_input(6, {"type": "response_body", "exchange": 1, "chunk": "text, not bytes"})


def test_a_cancelled_machine_is_done_with_the_cancellation():
    run = nexus.proto.Run({"style": "gemini", "model": "m"}, [], "hi")
    run.poll_output()
    run.handle_input(1, {"type": "cancel"})
    while (out := run.poll_output())["type"] != "done":
        pass
    assert out["outcome"]["status"] == "failed" and out["outcome"]["error"]["type"] == "cancelled"
    assert run.status == "failed"
