"""A typed answer from a run that delegates to a sub-agent.

The top run's model may hand a task to ``researcher``, a child run with its
own system prompt, turn limit and tools; its answer comes back as the tool
result. The run's final answer is a ``Forecast``: the core sends the schema
the way the model takes it best, validates the answer, and asks again when
it does not fit. An approval the child's tool asks for is answered here by
``wait_for`` (without it, the run would come back pending, resumable in any
process with ``client.resume``).

    python typed_agents.py [STYLE] [MODEL]

With the provider's usual API key variable set (``OPENAI_API_KEY``, …).
"""

from __future__ import annotations

import sys

import pydantic

import nexus


class Forecast(pydantic.BaseModel):
    """Tomorrow's weather in one city."""

    city: str
    celsius: float
    summary: str


@nexus.tool
def weather_station(city: str, ctx: nexus.ToolContext) -> object:
    """Reads a city's weather station (a person approves each reading)."""
    if ctx.answer is None:
        return nexus.pending(kind="approval", prompt=f"Read the station in {city}?")
    return {"city": city, "celsius": 18.5, "sky": "clear"}


def approve(request: nexus.Request) -> bool:
    who = f"agent {request.agent}" if request.agent else "the run"
    print(f"{who} asks: {request.prompt} -> yes")
    return True


def main() -> None:
    style = sys.argv[1] if len(sys.argv) > 1 else "openai"
    client = nexus.Client(style, sys.argv[2] if len(sys.argv) > 2 else None)
    researcher = nexus.Agent(
        "researcher",
        "Looks up current weather readings for a city.",
        system="You read weather stations and report the readings exactly.",
        tools=[weather_station],
        max_turns=4,
    )
    result = client.run(
        "What will tomorrow be like in Paris?", tools=[researcher], wait_for=approve, output_type=Forecast
    )
    forecast: Forecast = result.output
    print(forecast.model_dump_json(indent=2))
    for agent in result.agents:
        print(f"{agent['name']}: {agent['turns']} turns, {agent['status']}")


if __name__ == "__main__":
    main()
