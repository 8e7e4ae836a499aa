"""MCP servers' tools, cassettes and replay, fallbacks, and schemas from type hints."""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import sys
from pathlib import Path
from typing import Dict, List, Literal, Optional

import pytest

import nexus
from conftest import REPO, turn
from test_client import ADD_SCRIPT, add, check_add, client

if sys.version_info >= (3, 11):
    from typing import NotRequired, TypedDict
else:  # pragma: no cover
    from typing_extensions import NotRequired, TypedDict


def mcp_python() -> str:
    path = os.environ.get("NEXUS_MCP_PYTHON", "")
    if not path or not Path(path).exists():
        if os.environ.get("CI") in ("1", "true"):
            pytest.fail("NEXUS_MCP_PYTHON is not set: run `eval \"$(.ci/mcp-deps.sh)\"` first")
        pytest.skip("NEXUS_MCP_PYTHON is not set: run `eval \"$(.ci/mcp-deps.sh)\"` first")
    return path


def test_an_mcp_servers_tool(fake_provider, tmp_path):
    py = mcp_python()
    kitchen = str(REPO / "tests" / "mcp" / "servers" / "kitchen.py")
    config = {"mcpServers": {"kitchen": {"command": py, "args": [kitchen, "stdio"], "allow": ["echo", "add"]}}}
    fake = fake_provider({"m": [turn(calls=[("kitchen__add", '{"a": 2, "b": 3}')]), turn("5.")]}, log=True)
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(config))
    for mcp in (config, str(path)):
        result = client(fake, "openai", "m", mcp=mcp).run("2 + 3?")
        assert result.text == "5."
        [call] = result.tool_calls
        assert call.name == "kitchen__add" and not call.is_error
        assert "5" in call.output
    body = json.loads(fake.requests(4)[0]["body"])
    assert sorted(t["function"]["name"] for t in body["tools"]) == ["kitchen__add", "kitchen__echo"]


def test_a_recorded_session_replays_byte_for_byte(fake_provider, tmp_path):
    fake = fake_provider({"m": ADD_SCRIPT})
    cassette = tmp_path / "session.jsonl"
    check_add(client(fake, "anthropic", "m", record=cassette).run("What is 2 + 2?", tools=[add]))
    text = cassette.read_text()
    assert "test-key" not in text
    replayed = nexus.replay(cassette)
    assert replayed["outcome"] == {"status": "done"}
    assert replayed["text"] == "2 + 2 = 4."
    assert replayed["requests"] == 2 and replayed["runs"] == 1
    # A tampered recording is refused.
    lines = text.splitlines()
    tampered = [ln.replace("What is 2 + 2?", "What is 3 + 3?") if '"request"' in ln else ln for ln in lines]
    assert tampered != lines
    bad = tmp_path / "tampered.jsonl"
    bad.write_text("\n".join(tampered) + "\n")
    with pytest.raises(nexus.ReplayError):
        nexus.replay(bad)


def test_a_suspended_session_and_its_resume_are_one_cassette(fake_provider, tmp_path):
    from test_suspend import SEND_SCRIPT, send_email

    fake = fake_provider({"m": SEND_SCRIPT})
    cassette = tmp_path / "durable.jsonl"
    c = client(fake, "openai", "m", record=cassette)
    first = c.run("Email Sam.", tools=[send_email])
    c.resume(first.state, [nexus.Answer(first.pending[0].id)], tools=[send_email])
    replayed = nexus.replay(cassette)
    # One run, suspended and resumed: the replay checks the stored state too.
    assert replayed["runs"] == 1 and replayed["requests"] == 2 and replayed["text"] == "Sent."


def test_a_failing_upstream_falls_back(fake_provider):
    fake = fake_provider({"m": ADD_SCRIPT})
    dead = "http://127.0.0.1:9"  # discard port: nothing listens
    c = nexus.Client(
        "gemini",
        "m",
        base_url=dead,
        api_key_env="NEXUS_TEST_KEY",
        fallbacks=[{"style": "openai", "base_url": fake.base_url("openai"), "api_key_env": "NEXUS_TEST_KEY"}],
    )
    check_add(c.run("What is 2 + 2?", tools=[add]))


class Unit(enum.Enum):
    C = "celsius"
    F = "fahrenheit"


class Place(TypedDict):
    """Where."""

    city: str
    country: NotRequired[str]


@dataclasses.dataclass
class Window:
    start: int
    end: Optional[int] = None


def test_schemas_from_type_hints():
    @nexus.tool
    def forecast(
        place: Place,
        window: Window,
        unit: Unit,
        mode: Literal["brief", "full"] = "brief",
        tags: Optional[List[str]] = None,
        extra: Dict[str, float] = {},  # noqa: B006 - a default the schema leaves optional
        ratio: float = 1.0,
        ok: bool = True,
    ) -> str:
        """Gives the forecast.

        More detail the model does not need.

        Args:
            place: where to look
            window: the hours, as
                a start and an end
        """
        return f"{place['city']} {window.start}-{window.end} {unit.value} {mode} {tags} {extra} {ratio} {ok}"

    assert forecast.name == "forecast"
    assert forecast.description == "Gives the forecast."
    assert forecast.input_schema == {
        "type": "object",
        "properties": {
            "place": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
                "required": ["city"],
                "description": "where to look",
            },
            "window": {
                "type": "object",
                "properties": {"start": {"type": "integer"}, "end": {"type": "integer"}},
                "required": ["start"],
                "description": "the hours, as a start and an end",
            },
            "unit": {"enum": ["celsius", "fahrenheit"]},
            "mode": {"type": "string", "enum": ["brief", "full"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "extra": {"type": "object", "additionalProperties": {"type": "number"}},
            "ratio": {"type": "number"},
            "ok": {"type": "boolean"},
        },
        "required": ["place", "window", "unit"],
    }
    ctx = json.dumps({"callId": "c1", "name": "forecast", "turn": 1, "idempotencyKey": "r/1/c1"})
    args = {"place": {"city": "Oslo"}, "window": {"start": 9, "end": 17}, "unit": "celsius", "ratio": 2}
    reply = json.loads(forecast._invoke(json.dumps(args), ctx, None))
    assert reply == {"status": "done", "value": {"output": "Oslo 9-17 celsius brief None {} 2.0 True", "isError": False}}


try:
    import pydantic
except ImportError:  # pragma: no cover - the test below is skipped then
    pydantic = None
else:

    class Address(pydantic.BaseModel):
        street: str
        number: int = 1

    class Order(pydantic.BaseModel):
        """An order."""

        item: str
        to: Address


def test_pydantic_models_as_parameters():
    if pydantic is None:
        pytest.skip("pydantic is not installed")

    @nexus.tool
    def place_order(order: Order) -> Order:
        """Places an order."""
        return order

    schema = place_order.input_schema
    assert schema["required"] == ["order"]
    assert schema["properties"]["order"]["properties"]["to"] == {"$ref": "#/$defs/Address"}
    assert schema["$defs"]["Address"]["required"] == ["street"]
    ctx = json.dumps({"callId": "c1", "name": "place_order", "turn": 1, "idempotencyKey": "k"})
    reply = json.loads(place_order._invoke(json.dumps({"order": {"item": "tea", "to": {"street": "Main"}}}), ctx, None))
    assert json.loads(reply["value"]["output"]) == {"item": "tea", "to": {"street": "Main", "number": 1}}
    bad = json.loads(place_order._invoke(json.dumps({"order": {"item": "tea"}}), ctx, None))
    assert bad["value"]["isError"] and "ValidationError" in bad["value"]["output"]


def test_an_unsupported_type_hint_is_refused_when_the_tool_is_made():
    class Opaque:
        pass

    with pytest.raises(TypeError, match="Opaque"):

        @nexus.tool
        def use(thing: Opaque) -> str:
            return ""

    with pytest.raises(TypeError, match="module level"):

        @nexus.tool
        def unresolved(thing: NoSuchType) -> str:  # noqa: F821 - the point of the test
            return ""


def test_built_in_tools_confined_to_their_root(fake_provider, tmp_path):
    (tmp_path / "notes.md").write_text("TODO: ship it\n")
    outside = tmp_path.parent / "outside.md"
    script = [
        turn(calls=[("read", '{"path": "notes.md"}'), ("read", json.dumps({"path": str(outside)}))]),
        turn("Read."),
    ]
    fake = fake_provider({"m": script}, log=True)
    result = client(fake, "openai", "m", builtins=["read", "grep"], root=tmp_path).run("Read my notes.")
    ok, refused = result.tool_calls
    assert "TODO: ship it" in ok.output and not ok.is_error
    assert refused.is_error
    body = json.loads(fake.requests(2)[0]["body"])
    assert sorted(t["function"]["name"] for t in body["tools"]) == ["grep", "read"]
    with pytest.raises(nexus.ConfigError, match="no_such_tool"):
        client(fake, "openai", "m", builtins=["no_such_tool"])


def test_agent_skills_are_listed_and_loaded(fake_provider):
    skills = REPO / "nexus-drive" / "examples" / "skills"
    fake = fake_provider({"m": [turn(calls=[("skill", '{"name": "sql-review"}')]), turn("Loaded.")]}, log=True)
    result = client(fake, "anthropic", "m", skills=[skills]).run("Review my query.")
    [call] = result.tool_calls
    assert call.name == "skill" and not call.is_error and "SQL" in call.output
    body = json.loads(fake.requests(2)[0]["body"])
    assert "sql-review" in json.dumps(body["system"])
    assert "skill" in [t["name"] for t in body["tools"]]
