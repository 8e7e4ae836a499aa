"""Typed output (SPEC §16) through the package: pydantic models, dataclasses
and JSON Schema dicts, every output mode, retries and the typed errors."""

from __future__ import annotations

import dataclasses
import json
from typing import Optional

import pydantic
import pytest

import nexus
from conftest import turn
from test_client import client

VALID = '{"city": "Paris", "celsius": 18}'
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "celsius": {"type": "number"}},
    "required": ["city", "celsius"],
}


class Weather(pydantic.BaseModel):
    """The weather in one city."""

    city: str
    celsius: float
    note: Optional[str] = None


@dataclasses.dataclass
class Reading:
    city: str
    celsius: float


def test_a_pydantic_model_round_trips_through_the_native_field(fake_provider):
    fake = fake_provider({"m": [turn(VALID)]}, log=True)
    result = client(fake, "openai", "m").run("Weather in Paris?", output_type=Weather, output_mode="native")
    assert result.status == "done" and result.output_mode == "native"
    assert isinstance(result.output, Weather)
    assert result.output == Weather(city="Paris", celsius=18)
    [request] = fake.requests(1)
    body = json.loads(request["body"])
    sent = body["response_format"]["json_schema"]
    assert sent["name"] == "final_result" and sent["strict"] is True
    assert set(sent["schema"]["properties"]) == {"city", "celsius", "note"}


@pytest.mark.parametrize("style", ["openai", "anthropic", "gemini", "openai-responses"])
def test_a_schema_dict_in_tool_mode_is_the_validated_value(fake_provider, style):
    fake = fake_provider({"m": [turn(calls=[("final_result", VALID)])]})
    result = client(fake, style, "m").run("Weather in Paris?", output_type=SCHEMA, output_mode="tool")
    assert result.status == "done" and result.output_mode == "tool"
    assert result.output == {"city": "Paris", "celsius": 18}


def test_an_invalid_answer_is_retried_then_the_valid_one_is_built(fake_provider):
    script = [turn('Here: {"city": "Paris", "celsius": "warm"}'), turn(f"```json\n{VALID}\n```")]
    fake = fake_provider({"m": script}, log=True)
    c = client(fake, "anthropic", "m", output_type=Reading, output_mode="prompted")
    result = c.run("Weather in Paris?")
    assert result.output == Reading(city="Paris", celsius=18.0)
    assert result.turns == 2, "the retry is an ordinary turn"
    retry = json.loads(fake.requests(2)[1]["body"])
    said = json.dumps(retry["messages"][-1])
    assert "celsius" in said, "the model is told what failed"


def test_retries_spent_raise_output_invalid_with_what_the_model_wrote(fake_provider):
    fake = fake_provider({"m": [turn('{"city": "Paris", "celsius": "warm"}')]})
    c = client(fake, "openai", "m")
    with pytest.raises(nexus.OutputInvalidError) as raised:
        c.run("Weather in Paris?", output_type=SCHEMA, output_mode="prompted", output_retries=0)
    err = raised.value
    assert isinstance(err, nexus.OutputError) and isinstance(err, nexus.NexusError)
    assert err.attempts == 1 and "warm" in err.raw and err.errors


def test_a_client_default_applies_to_stream_and_arun(fake_provider):
    import asyncio

    fake = fake_provider({"m": [turn(calls=[("final_result", VALID)])]})
    c = client(fake, "openai", "m", output_type=Weather, output_mode="tool")
    events = list(c.stream("Weather in Paris?"))
    assert isinstance(events[-1], nexus.DoneEvent)
    assert events[-1].result.output == Weather(city="Paris", celsius=18)
    assert asyncio.run(c.arun("Weather in Paris?")).output == Weather(city="Paris", celsius=18)


def test_bad_output_settings_are_refused_before_anything_is_sent(fake_provider):
    fake = fake_provider({"m": [turn(VALID)]})
    c = client(fake, "openai", "m")
    with pytest.raises(nexus.ConfigError, match="output_mode"):
        c.run("x", output_type=SCHEMA, output_mode="json")  # type: ignore[arg-type]
    with pytest.raises(nexus.ConfigError, match="need an output_type"):
        c.run("x", output_retries=1)
    with pytest.raises(TypeError, match="JSON object"):
        c.run("x", output_type={"type": "string"})
    with pytest.raises(TypeError, match="pydantic model class"):
        c.run("x", output_type=int)
