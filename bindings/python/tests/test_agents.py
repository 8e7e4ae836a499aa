"""Sub-agents (SPEC §17) through the package: ``nexus.Agent`` in ``tools=``,
Markdown agent files, a child's suspension answered by ``wait_for``, by a
resume in this process and in a second one, and the child's stream events."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import nexus
from conftest import turn
from test_client import client
from test_suspend import resume_in_another_process, send_email

PARENT = [turn(calls=[("mailer", '{"prompt": "Email Sam."}')]), turn("Done: Sam has his email.")]
CHILD = [turn(calls=[("send_email", '{"to": "sam@example.com"}')]), turn("Sent to Sam.")]
MAILER = nexus.Agent("mailer", "Sends emails.", system="You send emails.", tools=[send_email], model="child")


def check_done(result: nexus.RunResult) -> None:
    assert result.status == "done" and result.text == "Done: Sam has his email."
    [delegated] = result.tool_calls
    assert (delegated.name, delegated.output, delegated.is_error) == ("mailer", "Sent to Sam.", False)
    [report] = result.agents
    assert report["name"] == "mailer" and report["status"] == "done" and report["turns"] == 2


@pytest.mark.parametrize("style", ["openai", "anthropic"])
def test_a_child_tool_suspends_and_wait_for_answers_it_with_its_agent_path(fake_provider, style):
    fake = fake_provider({"parent": PARENT, "child": CHILD}, log=True)
    asked = []

    def approve(request: nexus.Request) -> bool:
        asked.append(request)
        return True

    result = client(fake, style, "parent").run("Email Sam.", tools=[MAILER], wait_for=approve)
    check_done(result)
    [request] = asked
    assert request.agent and request.id.startswith(request.agent + "/")
    assert request.agent == result.tool_calls[0].id, "the path is the delegating call's id"
    child_body = json.loads(fake.requests(4)[1]["body"])
    assert "You send emails." in json.dumps(child_body), "the child runs with its own system prompt"


def test_a_childs_pending_request_resumes_in_this_process(fake_provider):
    fake = fake_provider({"parent": PARENT, "child": CHILD})
    c = client(fake, "gemini", "parent")
    first = c.run("Email Sam.", tools=[MAILER])
    assert first.status == "pending"
    [request] = first.pending
    assert request.kind == "approval" and request.agent and request.id.startswith(request.agent + "/")
    check_done(c.resume(first, [nexus.Answer(request.id)], tools=[MAILER]))


def test_a_childs_pending_request_resumes_in_a_second_process(fake_provider, tmp_path: Path):
    fake = fake_provider({"parent": PARENT, "child": CHILD}, log=True)
    store = f"sqlite:{tmp_path / 'runs.db'}"
    first = client(fake, "openai", "parent", store=store).run("Email Sam.", tools=[MAILER])
    assert first.status == "pending" and first.run_id
    [request] = first.pending
    other = resume_in_another_process(fake.base_url("openai"), store, first.run_id, request.id, "parent")
    assert other["status"] == "done" and other["text"] == "Done: Sam has his email."
    assert [a["status"] for a in other["agents"]] == ["done"]
    # The second process ran the child's tool: its result reached the child's model.
    child_last = json.loads(fake.requests(4)[2]["body"])  # parent, child, child, parent
    assert "from process 2" in json.dumps(child_last)


def test_stream_events_carry_the_agent_path(fake_provider):
    fake = fake_provider({"parent": PARENT, "child": CHILD})
    events = list(client(fake, "openai-responses", "parent").stream("Email Sam.", tools=[MAILER]))
    first = events[-1].result
    assert first.status == "pending"
    nested = [e for e in events if isinstance(e, nexus.AgentEvent)]
    assert nested and all(e.agent_path == first.pending[0].agent for e in nested)
    pendings = [e.inner for e in nested if isinstance(e.inner, nexus.PendingEvent)]
    assert [p.request.id for p in pendings] == [first.pending[0].id]
    assert pendings[0].request.agent == first.pending[0].agent
    assert [e.agent_path for e in events if isinstance(e, nexus.TurnStarted)] == [""]


def test_a_child_with_an_output_type_hands_the_parent_its_value(fake_provider):
    parent = [turn(calls=[("reader", '{"prompt": "Read it."}')]), turn("It is 18 degrees.")]
    child = [turn(calls=[("final_result", '{"city": "Paris", "celsius": 18}')])]
    fake = fake_provider({"parent": parent, "child": child})
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "celsius": {"type": "number"}}}
    reader = nexus.Agent("reader", "Reads the thermometer.", model="child", output_type=schema, output_mode="tool")
    result = client(fake, "openai", "parent").run("How warm?", tools=[reader])
    assert json.loads(result.tool_calls[0].output) == {"city": "Paris", "celsius": 18}
    assert result.text == "It is 18 degrees."


def test_markdown_agents_from_a_directory(fake_provider, tmp_path: Path):
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "mailer.md").write_text(
        "---\nname: mailer\ndescription: Sends emails.\ntools: send_email\nmodel: child\n---\nYou send emails.\n"
    )
    fake = fake_provider({"parent": PARENT, "child": CHILD}, log=True)
    c = client(fake, "openai", "parent", agents_dir=agents)
    check_done(c.run("Email Sam.", tools=[send_email], wait_for=lambda r: True))
    declared = [t["function"]["name"] for t in json.loads(fake.requests(4)[0]["body"])["tools"]]
    assert declared == ["send_email", "mailer"]
    (agents / "broken.md").write_text("---\nname: broken\n---\n")
    with pytest.raises(nexus.ConfigError, match="broken.md:1"):
        client(fake, "openai", "parent", agents_dir=agents)


def test_a_clients_agents_serve_every_run(fake_provider):
    fake = fake_provider({"parent": PARENT, "child": CHILD})
    c = client(fake, "anthropic", "parent", agents=[MAILER])
    check_done(c.run("Email Sam.", wait_for=lambda r: True))
