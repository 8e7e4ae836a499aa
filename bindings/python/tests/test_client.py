"""The high-level API against the fake provider, on every wire format."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import List

import pytest

import nexus
from conftest import STYLES, turn


@nexus.tool
def add(a: int, b: int) -> int:
    """Adds a and b."""
    return a + b


ADD_SCRIPT = [turn(calls=[("add", '{"a": 2, "b": 2}')]), turn("2 + 2 = 4.")]


def client(fake, style: str, model: str, **kw) -> nexus.Client:
    return nexus.Client(style, model, base_url=fake.base_url(style), api_key_env="NEXUS_TEST_KEY", **kw)


def check_add(result: nexus.RunResult) -> None:
    assert result.status == "done"
    assert result.text == "2 + 2 = 4."
    assert result.turns == 2
    assert [(c.name, c.input, c.output, c.is_error) for c in result.tool_calls] == [("add", {"a": 2, "b": 2}, "4", False)]
    assert result.usage.total_tokens > 0
    assert result.state is None and result.pending == []


@pytest.mark.parametrize("style", STYLES)
def test_run_on_every_style(fake_provider, style):
    fake = fake_provider({"m": ADD_SCRIPT})
    check_add(client(fake, style, "m").run("What is 2 + 2?", tools=[add]))


@pytest.mark.parametrize("style", STYLES)
def test_run_streamed_bodies_on_every_style(fake_provider, style):
    fake = fake_provider({"m": ADD_SCRIPT})
    check_add(client(fake, style, "m", stream=True).run("What is 2 + 2?", tools=[add]))


@pytest.mark.parametrize("style", STYLES)
def test_stream_yields_typed_events_then_the_result(fake_provider, style):
    fake = fake_provider({"m": ADD_SCRIPT})
    events = list(client(fake, style, "m").stream("What is 2 + 2?", tools=[add]))
    assert isinstance(events[-1], nexus.DoneEvent)
    check_add(events[-1].result)
    text = "".join(e.text for e in events if isinstance(e, nexus.TextDelta))
    assert text == "2 + 2 = 4."
    calls = [e for e in events if isinstance(e, nexus.ToolCallEvent)]
    assert [(c.name, c.input) for c in calls] == [("add", {"a": 2, "b": 2})]
    results = [e for e in events if isinstance(e, nexus.ToolResultEvent)]
    assert [(r.call_id, r.output, r.is_error) for r in results] == [(calls[0].id, "4", False)]
    assert any(isinstance(e, nexus.UsageEvent) and e.usage.total_tokens > 0 for e in events)
    kinds = [e.type for e in events]
    assert kinds.index("tool_call") < kinds.index("tool_result") < kinds.index("text_delta")


@pytest.mark.parametrize("style", STYLES)
def test_arun_and_astream_on_every_style(fake_provider, style):
    fake = fake_provider({"m": ADD_SCRIPT})
    c = client(fake, style, "m")

    async def main():
        result = await c.arun("What is 2 + 2?", tools=[add])
        events = [e async for e in c.astream("What is 2 + 2?", tools=[add])]
        return result, events

    result, events = asyncio.run(main())
    check_add(result)
    check_add(events[-1].result)
    assert "".join(e.text for e in events if isinstance(e, nexus.TextDelta)) == "2 + 2 = 4."


def test_an_async_tool_runs_on_the_callers_event_loop(fake_provider):
    fake = fake_provider({"m": [turn(calls=[("where", "{}")]), turn("ok")]})
    seen: List[object] = []

    @nexus.tool
    async def where() -> str:
        """Says where it ran."""
        await asyncio.sleep(0)
        seen.append(asyncio.get_running_loop())
        return "on the loop"

    async def main():
        result = await client(fake, "openai", "m").arun("go", tools=[where])
        return result, asyncio.get_running_loop()

    result, loop = asyncio.run(main())
    assert result.tool_calls[0].output == "on the loop"
    assert seen == [loop]


def test_an_async_tool_under_the_blocking_run(fake_provider):
    fake = fake_provider({"m": [turn(calls=[("slow_echo", '{"text": "hi"}')]), turn("ok")]})

    @nexus.tool
    async def slow_echo(text: str) -> str:
        """Echoes after a pause."""
        await asyncio.sleep(0.01)
        return text.upper()

    result = client(fake, "anthropic", "m").run("go", tools=[slow_echo])
    assert result.tool_calls[0].output == "HI"


def test_two_tools_of_one_turn_run_concurrently(fake_provider):
    # Each call waits for the other at a barrier: run one after the other,
    # the first would time out and its result would be an error.
    fake = fake_provider({"m": [turn(calls=[("meet", '{"who": "a"}'), ("meet", '{"who": "b"}')]), turn("met")]})
    barrier = threading.Barrier(2, timeout=10)

    @nexus.tool
    def meet(who: str) -> str:
        """Waits for the other call."""
        barrier.wait()
        return f"{who} met"

    result = client(fake, "openai", "m").run("go", tools=[meet])
    assert [(c.output, c.is_error) for c in result.tool_calls] == [("a met", False), ("b met", False)]
    assert result.text == "met"


def test_two_async_tools_of_one_turn_run_concurrently_on_the_loop(fake_provider):
    fake = fake_provider({"m": [turn(calls=[("meet", '{"who": "a"}'), ("meet", '{"who": "b"}')]), turn("met")]})

    async def main():
        arrived = asyncio.Event()
        count = 0

        @nexus.tool
        async def meet(who: str) -> str:
            """Waits for the other call."""
            nonlocal count
            count += 1
            if count == 2:
                arrived.set()
            await asyncio.wait_for(arrived.wait(), 10)
            return f"{who} met"

        return await client(fake, "gemini", "m").arun("go", tools=[meet])

    result = asyncio.run(main())
    assert [(c.output, c.is_error) for c in result.tool_calls] == [("a met", False), ("b met", False)]


def test_a_tool_that_raises_gives_the_model_an_error_result(fake_provider):
    fake = fake_provider({"m": [turn(calls=[("explode", '{"why": "boom"}')]), turn("it failed")]})

    @nexus.tool
    def explode(why: str) -> str:
        """Always fails."""
        raise ValueError(why)

    result = client(fake, "openai", "m").run("go", tools=[explode])
    assert result.status == "done" and result.text == "it failed"
    assert [(c.output, c.is_error) for c in result.tool_calls] == [("ValueError: boom", True)]


def test_arguments_that_do_not_fit_are_an_error_result_naming_the_problem(fake_provider):
    fake = fake_provider({"m": [turn(calls=[("add", '{"a": 2}')]), turn("retry")]})
    result = client(fake, "openai", "m").run("go", tools=[add])
    call = result.tool_calls[0]
    assert call.is_error and call.output.startswith("invalid arguments for add: TypeError") and "'b'" in call.output


def test_a_tool_result_with_metadata_and_an_explicit_error_flag(fake_provider):
    fake = fake_provider({"m": [turn(calls=[("check", "{}")]), turn("ok")]})

    @nexus.tool
    def check() -> nexus.ToolResult:
        """Reports a soft failure."""
        return nexus.ToolResult("not found", is_error=True, metadata={"code": 404})

    result = client(fake, "anthropic", "m").run("go", tools=[check])
    assert [(c.output, c.is_error) for c in result.tool_calls] == [("not found", True)]


def test_structured_return_values_reach_the_model_as_compact_json(fake_provider):
    fake = fake_provider({"m": [turn(calls=[("info", "{}")]), turn("ok")]})

    @nexus.tool
    def info() -> dict:
        """Returns a mapping."""
        return {"name": "Zoë", "tags": [1, 2]}

    result = client(fake, "openai", "m").run("go", tools=[info])
    assert result.tool_calls[0].output == '{"name":"Zoë","tags":[1,2]}'
    assert json.loads(result.tool_calls[0].output) == {"name": "Zoë", "tags": [1, 2]}


def test_history_and_the_system_prompt_reach_the_provider(fake_provider):
    fake = fake_provider({"m": [turn("first"), turn("second")]}, log=True)
    c = client(fake, "openai", "m", system="Be brief.")
    first = c.run("one")
    second = c.run("two", history=first.messages)
    assert second.text == "second"
    body = json.loads(fake.requests(2)[-1]["body"])
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "user"]


def test_the_runs_of_one_client_share_its_connections(fake_provider):
    fake = fake_provider({"m": ADD_SCRIPT}, log=True)
    c = client(fake, "anthropic", "m")
    check_add(c.run("What is 2 + 2?", tools=[add]))
    check_add(c.run("What is 2 + 2?", tools=[add]))  # other tools per call, the same pool
    conns = [r["connection"] for r in fake.requests(4)]
    assert conns == [conns[0]] * 4


def test_the_turn_limit_ends_the_run_incomplete(fake_provider):
    fake = fake_provider({"m": [turn(calls=[("add", '{"a": 1, "b": 1}')])] * 3})
    result = client(fake, "openai", "m", max_turns=2).run("go", tools=[add])
    assert result.status == "incomplete" and result.limit == "maxTurns" and result.turns == 2


def test_a_refused_key_is_a_provider_error_with_the_providers_message(fake_provider):
    fake = fake_provider({"m": ADD_SCRIPT})
    c = nexus.Client("openai", "m", base_url=fake.base_url("openai"), api_key="wrong-key")
    with pytest.raises(nexus.ProviderError) as err:
        c.run("hi")
    assert isinstance(err.value, nexus.NexusError)
    assert "401" in str(err.value)
    assert "wrong-key" not in str(err.value)


def test_configuration_mistakes_are_config_errors():
    with pytest.raises(nexus.ConfigError):
        nexus.Client("cohere", "m")
    with pytest.raises(nexus.ConfigError, match="NEXUS_NOT_SET"):
        nexus.Client("openai", "m", api_key_env="NEXUS_NOT_SET").run("hi")
    with pytest.raises(nexus.ConfigError, match="store"):
        nexus.Client("openai", "m", store="redis://x")


def test_two_tools_with_one_name_are_refused():
    other = nexus.tool(name="add")(lambda a: a)
    with pytest.raises(nexus.ToolError, match="add"):
        nexus.Client("openai", "m", api_key="k").run("hi", tools=[add, other])


def test_a_cancelled_arun_cancels_the_run(fake_provider):
    fake = fake_provider({"m": [turn(calls=[("block", "{}")]), turn("never")]})
    started = threading.Event()
    release = threading.Event()

    @nexus.tool
    def block() -> str:
        """Blocks until released."""
        started.set()
        release.wait(10)
        return "released"

    async def main():
        task = asyncio.ensure_future(client(fake, "openai", "m").arun("go", tools=[block]))
        while not started.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()  # a running tool is not interrupted; the run stops after it

    asyncio.run(main())


def test_the_api_key_stays_out_of_the_repr():
    c = nexus.Client("openai", "m", api_key="sk-secret-value")
    assert "sk-secret-value" not in repr(c)


@pytest.fixture
def ctrl_c_raises():
    """Python's own SIGINT handler for the test: a process started with
    SIGINT ignored (a background job of a non-interactive shell, as some CI
    runners start jobs) keeps it ignored, and Ctrl-C would raise nothing."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_cancels_a_blocking_run(fake_provider, ctrl_c_raises):
    import os
    import signal

    fake = fake_provider({"m": [turn(calls=[("wait", "{}")]), turn("never")]})
    ran = []

    @nexus.tool
    def wait() -> str:
        """Sends this process Ctrl-C, then returns."""
        os.kill(os.getpid(), signal.SIGINT)
        ran.append(True)
        return "waited"

    with pytest.raises(KeyboardInterrupt):
        client(fake, "openai", "m").run("go", tools=[wait])
    assert ran == [True]


def test_ctrl_c_cancels_a_stream(fake_provider, ctrl_c_raises):
    import os
    import signal

    fake = fake_provider({"m": [turn(calls=[("wait", "{}")]), turn("never")]})

    @nexus.tool
    def wait() -> str:
        """Sends this process Ctrl-C, then returns."""
        os.kill(os.getpid(), signal.SIGINT)
        return "waited"

    events = client(fake, "openai", "m").stream("go", tools=[wait])
    with pytest.raises(KeyboardInterrupt):
        for _ in events:
            pass


def test_an_event_loop_awaits_many_runs_at_once(fake_provider):
    # Twelve runs whose tools wait until all twelve are in: runs waiting in
    # a bounded thread pool (asyncio's default executor has min(32, cpus + 4)
    # threads) could not all get there.
    runs = 12
    fake = fake_provider({"m": [turn(calls=[("gather", "{}")]), turn("together")]})

    async def main():
        arrived = 0
        everyone = asyncio.Event()

        @nexus.tool
        async def gather() -> str:
            """Waits for every run."""
            nonlocal arrived
            arrived += 1
            if arrived == runs:
                everyone.set()
            await asyncio.wait_for(everyone.wait(), 20)
            return "all here"

        c = client(fake, "openai", "m")
        return await asyncio.gather(*(c.arun("go", tools=[gather]) for _ in range(runs)))

    results = asyncio.run(main())
    assert [(r.text, r.tool_calls[0].output) for r in results] == [("together", "all here")] * runs


def test_astream_runs_beside_arun_and_stops_its_run_when_left_early(fake_provider):
    fake = fake_provider({"m": ADD_SCRIPT})
    c = client(fake, "gemini", "m")

    async def main():
        async def first_event():
            async for event in c.astream("What is 2 + 2?", tools=[add]):
                return event

        return await asyncio.gather(first_event(), c.arun("What is 2 + 2?", tools=[add]))

    event, result = asyncio.run(main())
    assert isinstance(event, nexus.Event)
    check_add(result)


def test_a_tool_past_its_timeout_gives_the_model_an_error_result(fake_provider):
    import time

    fake = fake_provider({"m": [turn(calls=[("slow", "{}"), ("add", '{"a": 1, "b": 2}')]), turn("one was slow")]})
    release = threading.Event()

    @nexus.tool(timeout=0.05)
    def slow() -> str:
        """Takes too long."""
        release.wait(10)
        return "late"

    started = time.monotonic()
    result = client(fake, "openai", "m").run("go", tools=[slow, add])
    release.set()
    assert result.text == "one was slow"
    (late, ok) = result.tool_calls
    assert late.is_error and "slow" in late.output and (ok.output, ok.is_error) == ("3", False)
    assert time.monotonic() - started < 10


def test_metrics_count_the_clients_runs(fake_provider):
    fake = fake_provider({"m": ADD_SCRIPT})
    c = client(fake, "openai", "m")
    c.run("What is 2 + 2?", tools=[add])
    c.run("What is 2 + 2?", tools=[add])
    text = c.metrics()
    assert 'nexus_runs_total{model="m",status="done"} 2' in text
    assert 'nexus_llm_requests_total{model="m",status="ok"} 4' in text
    assert 'nexus_tool_calls_total{tool="add",is_error="false",pending="false"} 2' in text


def test_a_run_past_its_deadline_is_a_limit_error(fake_provider):
    import time

    fake = fake_provider({"m": [turn(calls=[("nap", "{}")]), turn("woke")]})

    @nexus.tool
    def nap() -> str:
        """Sleeps past the deadline."""
        time.sleep(0.5)
        return "rested"

    with pytest.raises(nexus.LimitError, match="deadline"):
        client(fake, "openai", "m", timeout=0.2).run("go", tools=[nap])
