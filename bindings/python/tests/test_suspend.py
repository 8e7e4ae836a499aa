"""Suspension: wait_for, durable runs resumed in another process, relay tools, stores."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import nexus
from conftest import turn
from test_client import client

SEND_SCRIPT = [turn(calls=[("send_email", '{"to": "sam@example.com"}')]), turn("Sent.")]


@nexus.tool
def send_email(to: str, ctx: nexus.ToolContext) -> object:
    """Sends an email, once a person approves it."""
    if ctx.answer is None:
        return nexus.pending(kind="approval", prompt=f"Email {to}?", data={"to": to})
    assert ctx.request is not None and ctx.request.data == {"to": to}
    return f"sent to {to}"


def test_the_context_parameter_is_left_out_of_the_schema():
    assert send_email.input_schema == {
        "type": "object",
        "properties": {"to": {"type": "string"}},
        "required": ["to"],
    }


def test_wait_for_answers_in_process(fake_provider):
    fake = fake_provider({"m": SEND_SCRIPT})
    asked = []

    def approve(request: nexus.Request) -> bool:
        asked.append(request)
        return True

    result = client(fake, "openai", "m").run("Email Sam.", tools=[send_email], wait_for=approve)
    assert result.status == "done" and result.text == "Sent."
    assert [(r.kind, r.prompt, r.data) for r in asked] == [("approval", "Email sam@example.com?", {"to": "sam@example.com"})]
    assert asked[0].id
    assert result.tool_calls[0].output == "sent to sam@example.com"


def test_an_async_wait_for_runs_on_the_loop_and_may_decline(fake_provider):
    fake = fake_provider({"m": SEND_SCRIPT})

    async def decline(request: nexus.Request) -> nexus.Answer:
        await asyncio.sleep(0)
        return nexus.Answer(request.id, ok=False, reason="declined")

    result = asyncio.run(client(fake, "anthropic", "m").arun("Email Sam.", tools=[send_email], wait_for=decline))
    assert result.status == "done"
    assert result.tool_calls[0].is_error


def test_a_pending_run_resumes_from_its_state_in_this_process(fake_provider):
    fake = fake_provider({"m": SEND_SCRIPT})
    c = client(fake, "gemini", "m")
    first = c.run("Email Sam.", tools=[send_email])
    assert first.status == "pending" and first.state is not None
    assert [r.kind for r in first.pending] == ["approval"]
    assert "test-key" not in first.state
    assert json.loads(first.state)["format_version"] == nexus.FORMAT_VERSION
    done = c.resume(first, [nexus.Answer(first.pending[0].id)], tools=[send_email])
    assert done.status == "done" and done.text == "Sent."


def test_an_answer_for_no_request_is_a_state_error_and_changes_nothing(fake_provider):
    fake = fake_provider({"m": SEND_SCRIPT})
    c = client(fake, "openai", "m")
    first = c.run("Email Sam.", tools=[send_email])
    with pytest.raises(nexus.StateError, match="no-such-id"):
        c.resume(first.state, [nexus.Answer("no-such-id")], tools=[send_email])
    with pytest.raises(nexus.StateError):
        c.resume("{not a state", [], tools=[send_email])
    done = c.resume(first.state, [nexus.Answer(first.pending[0].id)], tools=[send_email])
    assert done.text == "Sent."


RESUME_ELSEWHERE = textwrap.dedent(
    """
    import json, sys
    import nexus

    @nexus.tool
    def send_email(to: str, ctx: nexus.ToolContext) -> object:
        '''Sends an email, once a person approves it.'''
        if ctx.answer is None:
            return nexus.pending(kind="approval", prompt=f"Email {to}?")
        return f"sent to {to} from process 2"

    base_url, store, key, request_id, model = sys.argv[1:6]
    # With a model named "parent", the run's tool is an agent (test_agents.py) whose tool suspended.
    tools = [nexus.Agent("mailer", "Sends emails.", tools=[send_email], model="child")] if model == "parent" else [send_email]
    client = nexus.Client("openai", model, base_url=base_url, api_key_env="NEXUS_TEST_KEY", store=store or None)
    result = client.resume(key, [nexus.Answer(request_id)], tools=tools)
    outputs = [c.output for c in result.tool_calls]
    print(json.dumps({"status": result.status, "text": result.text, "outputs": outputs, "agents": result.agents}))
    """
)


def resume_in_another_process(base_url: str, store: str, key: str, request_id: str, model: str = "m") -> dict:
    env = dict(os.environ)
    out = subprocess.run(
        [sys.executable, "-c", RESUME_ELSEWHERE, base_url, store, key, request_id, model],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("store", ["dir", "sqlite"])
def test_a_stored_suspension_resumes_in_a_second_process(fake_provider, tmp_path: Path, store):
    fake = fake_provider({"m": SEND_SCRIPT})
    location = f"dir:{tmp_path / 'runs'}" if store == "dir" else f"sqlite:{tmp_path / 'runs.db'}"
    c = client(fake, "openai", "m", store=location)
    first = c.run("Email Sam.", tools=[send_email])
    assert first.status == "pending" and first.run_id
    other = resume_in_another_process(fake.base_url("openai"), location, first.run_id, first.pending[0].id)
    assert other == {"status": "done", "text": "Sent.", "outputs": ["sent to sam@example.com from process 2"], "agents": []}
    # Finished: the store no longer holds it, and a second resume is refused.
    with pytest.raises(nexus.StoreError):
        c.resume(first.run_id, [nexus.Answer(first.pending[0].id)], tools=[send_email])


def test_a_state_resumes_in_a_second_process(fake_provider):
    fake = fake_provider({"m": SEND_SCRIPT})
    first = client(fake, "openai", "m").run("Email Sam.", tools=[send_email])
    other = resume_in_another_process(fake.base_url("openai"), "", first.state, first.pending[0].id)
    assert other["status"] == "done" and other["text"] == "Sent."


def test_a_directory_path_is_a_file_store(fake_provider, tmp_path: Path):
    fake = fake_provider({"m": SEND_SCRIPT})
    c = client(fake, "openai", "m", store=tmp_path / "runs")
    first = c.run("Email Sam.", tools=[send_email])
    assert (tmp_path / "runs" / f"{first.run_id}.run").is_file()
    assert c.resume(first, [nexus.Answer(first.pending[0].id)], tools=[send_email]).text == "Sent."


def test_a_memory_store_keeps_runs_for_this_client(fake_provider):
    fake = fake_provider({"m": SEND_SCRIPT})
    c = client(fake, "openai", "m", store="memory")
    first = c.run("Email Sam.", tools=[send_email])
    done = c.resume(first.run_id, [nexus.Answer(first.pending[0].id)], tools=[send_email])
    assert done.text == "Sent."


LOOKUP = nexus.relay_tool(
    "lookup",
    "Looks a word up in the caller's dictionary.",
    {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
)


@pytest.mark.parametrize("style", ["openai", "anthropic"])
def test_relay_tools_two_calls_in_one_turn(fake_provider, style):
    fake = fake_provider(
        {"m": [turn(calls=[("lookup", '{"word": "sun"}'), ("lookup", '{"word": "moon"}')]), turn("Both found.")]}
    )
    c = client(fake, style, "m")
    first = c.run("Define sun and moon.", tools=[LOOKUP])
    assert first.status == "pending"
    [request] = first.pending
    assert request.kind == "tool_call"
    calls = request.relay_calls
    assert [(call["name"], call["input"]) for call in calls] == [("lookup", {"word": "sun"}), ("lookup", {"word": "moon"})]
    results = [{"id": call["id"], "output": f"{call['input']['word']}: found", "isError": False} for call in calls]
    done = c.resume(first.state, [nexus.Answer.relay(request, results)], tools=[LOOKUP])
    assert done.status == "done" and done.text == "Both found."
    assert [c.output for c in done.tool_calls] == ["sun: found", "moon: found"]


def test_stream_resume_continues_a_suspended_run(fake_provider):
    fake = fake_provider({"m": SEND_SCRIPT})
    c = client(fake, "openai-responses", "m")
    events = list(c.stream("Email Sam.", tools=[send_email]))
    first = events[-1].result
    pendings = [e for e in events if isinstance(e, nexus.PendingEvent)]
    assert first.status == "pending" and [p.request.id for p in pendings] == [first.pending[0].id]
    rest = list(c.stream(resume=first, answers=[nexus.Answer(first.pending[0].id)], tools=[send_email]))
    assert rest[-1].result.text == "Sent."


def test_an_answerer_that_raises_declines_instead_of_hanging(fake_provider):
    fake = fake_provider({"m": SEND_SCRIPT})

    def broken(request: nexus.Request) -> bool:
        raise RuntimeError("the approval service is down")

    result = client(fake, "openai", "m").run("Email Sam.", tools=[send_email], wait_for=broken)
    assert result.status == "done" and result.text == "Sent."
    assert result.tool_calls[0].is_error
