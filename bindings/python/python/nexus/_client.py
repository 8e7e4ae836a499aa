"""``nexus.Client``: the Rust drivers behind a Python API.

Each call builds the native client from the settings and the call's tools,
then runs the blocking Rust driver with the GIL released. ``arun`` and
``astream`` wait for that driver in a worker thread, so the caller's event
loop keeps running and can run ``async def`` tools and answerers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import os
import threading
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from . import _native
from ._agents import Agent
from ._output import Output, OutputMode, OutputType, resolve
from ._tools import RelayTool, Tool
from ._types import Answer, DoneEvent, Event, Request, RunResult, event_from_json

__all__ = ["Client", "WaitFor", "ToolLike", "replay"]

ToolLike = Union[Tool, RelayTool, Agent, Callable[..., Any]]
WaitFor = Callable[[Request], Union[Answer, bool, Awaitable[Union[Answer, bool]]]]
Messages = Sequence[Mapping[str, Any]]

DEFAULT_MODELS = {
    "anthropic": "claude-sonnet-4-5",
    "openai": "gpt-4o-mini",
    "gemini": "gemini-2.5-flash",
    "openai-responses": "gpt-5-mini",
}


def _mcp_configs(mcp: Any) -> List[Dict[str, Any]]:
    """``mcp=``: an ``{"mcpServers": …}`` dict, a path to such a JSON file, or a list of them."""
    if mcp is None:
        return []
    items = mcp if isinstance(mcp, (list, tuple)) else [mcp]
    out = []
    for item in items:
        if isinstance(item, (str, os.PathLike)):
            with open(item, encoding="utf-8") as f:
                out.append(json.load(f))
        elif isinstance(item, Mapping):
            out.append(dict(item))
        else:
            raise TypeError(f"mcp: expected a dict or a path, got {type(item).__name__}")
    return out


def _answer_of(request: Request, value: Any) -> Answer:
    if isinstance(value, Answer):
        return value
    if isinstance(value, bool):
        return Answer(id=request.id, ok=value, reason=None if value else "declined")
    raise TypeError(f"wait_for must return an Answer or a bool, got {type(value).__name__}")


def _waiter(wait_for: WaitFor, loop: Optional[asyncio.AbstractEventLoop]) -> Callable[[str], str]:
    def answer(request_json: str) -> str:
        request = Request._from_json(json.loads(request_json))
        value = wait_for(request)
        if inspect.isawaitable(value):
            if loop is not None and loop.is_running():
                value = asyncio.run_coroutine_threadsafe(_await(value), loop).result()
            else:
                value = asyncio.run(_await(value))
        return json.dumps(_answer_of(request, value)._to_json())

    return answer


async def _await(value: Awaitable[Any]) -> Any:
    return await value


def _messages(prompt: Optional[str], history: Optional[Messages]) -> str:
    messages = [dict(m) for m in (history or [])]
    if prompt is not None:
        messages.append({"role": "user", "content": [{"type": "text", "text": prompt}]})
    if not messages:
        raise ValueError("a run needs a prompt or messages")
    return json.dumps(messages)


def _answers(answers: Optional[Iterable[Answer]]) -> str:
    return json.dumps([a._to_json() for a in (answers or [])])


class Client:
    """A configured client for one provider (plus fallbacks).

    Args:
        style: the wire format: ``"openai"`` (Chat Completions),
            ``"openai-responses"``, ``"anthropic"`` or ``"gemini"``.
        model: the model id (a default per style when omitted).
        base_url: the API root (the provider's public one when omitted).
        api_key: the API key. Held in memory only: never in a state, a
            cassette or an error.
        api_key_env: the environment variable holding the key (default
            ``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY`` or ``GEMINI_API_KEY``).
        system: the system prompt.
        max_turns: the most model calls per run.
        max_tokens: the output token cap per call.
        stream: ask the provider for SSE streams in ``run`` too (``stream``
            and ``astream`` always do).
        fallbacks: upstreams tried in order when a call fails for the
            upstream's fault: dicts with ``style``, ``base_url``, and
            optionally ``model`` and ``api_key_env``.
        mcp: MCP servers whose tools the model may call (as
            ``{server}__{tool}``): an ``{"mcpServers": …}`` dict or a path
            to such a file, or a list of them. They start with the client
            and serve all its runs.
        store: where pending runs are kept by run id: ``"memory"``,
            ``"sqlite:PATH"``, ``"dir:PATH"`` or a directory path.
        record: a cassette file the client's runs are appended to (see
            :func:`replay`); the API keys are redacted.
        seed: a fixed seed (run ids, retry jitter) for reproducible runs.
        params: extra request body keys (``temperature``, …).
        builtins: the built-in tools to turn on (``bash``, ``read``,
            ``write``, ``edit``, ``grep``, ``glob``, ``webfetch``,
            ``question``, ``apply_patch``, ``todowrite``): ``True`` for all,
            or a list of names.
        root: the directory the built-in path tools are confined to (default:
            the current directory).
        skills: Agent Skills directories (folders with a ``SKILL.md``): a
            catalog in the system prompt and a ``skill`` tool that loads one.
        timeout: a whole-run deadline in seconds: a run past it fails with
            :class:`LimitError`.
        output_type: the default typed output of the client's runs (see
            :meth:`run`), with ``output_mode`` and ``output_retries``.
        agents: :class:`Agent`\ s every run of the client has (beside the
            run's own ``tools``).
        agents_dir: a directory (or a list of them) of Markdown agent
            definitions, Claude Code's ``.claude/agents/`` format as
            ``nexus run --agents DIR`` reads it: each file an agent whose
            ``tools`` names the run's tools. A broken file or a name
            defined twice is a :class:`ConfigError`.
    """

    def __init__(
        self,
        style: str = "openai",
        model: Optional[str] = None,
        *,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        api_key_env: Optional[str] = None,
        system: Optional[str] = None,
        max_turns: int = 10,
        max_tokens: Optional[int] = None,
        stream: bool = False,
        fallbacks: Optional[Sequence[Mapping[str, Any]]] = None,
        mcp: Any = None,
        store: Optional[Union[str, "os.PathLike[str]"]] = None,
        record: Optional[Union[str, "os.PathLike[str]"]] = None,
        seed: Optional[int] = None,
        params: Optional[Mapping[str, Any]] = None,
        builtins: Union[bool, Sequence[str]] = False,
        root: Optional[Union[str, "os.PathLike[str]"]] = None,
        skills: Optional[Sequence[Union[str, "os.PathLike[str]"]]] = None,
        timeout: Optional[float] = None,
        output_type: Optional[OutputType] = None,
        output_mode: Optional[OutputMode] = None,
        output_retries: Optional[int] = None,
        agents: Optional[Sequence[Agent]] = None,
        agents_dir: Optional[Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]]] = None,
    ) -> None:
        if style not in DEFAULT_MODELS:
            raise _native.ConfigError(f"style {style!r}: use one of {', '.join(DEFAULT_MODELS)}")
        self.style = style
        self.model = model or DEFAULT_MODELS[style]
        settings: Dict[str, Any] = {
            "style": style,
            "model": self.model,
            "base_url": base_url,
            "api_key_env": api_key_env,
            "system": system,
            "max_turns": max_turns,
            "max_tokens": max_tokens,
            "stream": stream,
            "seed": seed,
            "params": dict(params or {}),
            "fallbacks": [dict(f) for f in (fallbacks or [])],
            "mcp": _mcp_configs(mcp),
            "record": os.fspath(record) if record is not None else None,
            "api_key": api_key,
            "builtins": None if builtins is False else ([] if builtins is True else list(builtins)),
            "root": os.fspath(root) if root is not None else None,
            "skills": [os.fspath(d) for d in (skills or [])],
            "timeout_ms": max(1, round(timeout * 1000)) if timeout is not None else None,
            "agents_dirs": _paths(agents_dir),
        }
        self._output = resolve(output_type, output_mode, output_retries, None)
        self._agents = list(agents or [])
        # One session per client: its connection pool, its MCP servers
        # (started now), its cassette and its store serve every run. The
        # settings (the key among them) stay in Rust memory only.
        native_store = _native.NativeStore(os.fspath(store)) if store is not None else None
        self._store = native_store
        self._session = _native.NativeSession(json.dumps(settings), native_store)

    def __repr__(self) -> str:
        return f"nexus.Client(style={self.style!r}, model={self.model!r})"

    def metrics(self) -> str:
        """Counters over every run of this client (model calls, tools, runs,
        by outcome, with latencies) as Prometheus text."""
        return self._session.metrics()

    # -- building the native client -------------------------------------------------

    def _native_client(
        self,
        tools: Optional[Sequence[ToolLike]],
        wait_for: Optional[WaitFor],
        loop: Optional[asyncio.AbstractEventLoop],
        cancel: Optional[_native.NativeCancel] = None,
        stream: bool = False,
        output: Optional[Output] = None,
    ) -> _native.NativeClient:
        python_tools: List[Tool] = []
        top: List[int] = []
        relays = []
        agents = []

        def index(t: Tool) -> int:
            for i, known in enumerate(python_tools):
                if known is t:
                    return i
            python_tools.append(t)
            return len(python_tools) - 1

        for t in [*self._agents, *(tools or [])]:
            if isinstance(t, Agent):
                agents.append(t)
            elif isinstance(t, RelayTool):
                relays.append(t._spec())
            elif isinstance(t, Tool):
                top.append(index(t))
            elif callable(t):
                top.append(index(Tool(t)))
            else:
                raise TypeError(f"not a tool: {t!r}")
        call = {
            "top": top,
            "relay_tools": relays,
            "agents": [a._options(index) for a in agents],
            "stream": stream,
        }
        if output is not None:
            call["output"] = output.spec()
        call["tools"] = [t._spec() for t in python_tools]
        invokers = [_bind(t, loop) for t in python_tools]
        waiter = _waiter(wait_for, loop) if wait_for is not None else None
        return _native.NativeClient(self._session, json.dumps(call), invokers, waiter, cancel)

    def _output_of(
        self, output_type: Optional[OutputType], mode: Optional[OutputMode], retries: Optional[int]
    ) -> Optional[Output]:
        return resolve(output_type, mode, retries, self._output)

    def _resume_key(self, state_or_run_id: Union[str, RunResult]) -> str:
        if isinstance(state_or_run_id, RunResult):
            key = state_or_run_id.run_id if self._store is not None and state_or_run_id.run_id else None
            key = key or state_or_run_id.state
            if key is None:
                raise _native.StateError("this result is not pending: there is nothing to resume")
            return key
        return state_or_run_id

    # -- blocking -------------------------------------------------------------------

    def run(
        self,
        prompt: Optional[str] = None,
        *,
        tools: Optional[Sequence[ToolLike]] = None,
        wait_for: Optional[WaitFor] = None,
        history: Optional[Messages] = None,
        output_type: Optional[OutputType] = None,
        output_mode: Optional[OutputMode] = None,
        output_retries: Optional[int] = None,
    ) -> RunResult:
        """Runs the loop on ``prompt`` (after ``history``, neutral messages)
        until the model answers, a limit stops it, or it suspends.

        ``output_type`` makes the final answer a typed value,
        :attr:`RunResult.output`: a pydantic model class (an instance of
        it), a dataclass, a TypedDict, or a JSON Schema dict (the validated
        JSON value). ``output_mode`` says how the schema reaches the model:
        ``"auto"`` (per model), ``"native"`` (the provider's schema field),
        ``"tool"`` (an output tool) or ``"prompted"``; ``output_retries``
        how many invalid answers the model may replace (default 2). A run
        that ends without a valid value raises an :class:`OutputError`.
        ``tools`` may hold :class:`Agent`\ s: sub-agents the model may
        delegate to.

        ``wait_for`` answers suspensions in-process (sync or ``async def``;
        return an :class:`Answer` or a bool); without it a suspended run
        comes back ``pending`` with its ``state`` (and ``run_id`` with a store).
        Ctrl-C cancels the run (:class:`RunCancelled` is not raised: the
        ``KeyboardInterrupt`` is).
        """
        output = self._output_of(output_type, output_mode, output_retries)
        native = self._native_client(tools, wait_for, None, _native.NativeCancel(), output=output)
        return _result(native.run(_messages(prompt, history), _on_main_thread()), output)

    def resume(
        self,
        state_or_run_id: Union[str, RunResult],
        answers: Optional[Iterable[Answer]] = None,
        *,
        tools: Optional[Sequence[ToolLike]] = None,
        wait_for: Optional[WaitFor] = None,
        output_type: Optional[OutputType] = None,
    ) -> RunResult:
        """Continues a suspended run from its state (or, with a store, its run
        id) with the host's answers, in this process or another one. Pass
        the same tools (and agents) the run had. The output schema is in the
        state; ``output_type`` (else the client's) builds the value."""
        output = self._output_of(output_type, None, None)
        native = self._native_client(tools, wait_for, None, _native.NativeCancel(), output=output)
        text = native.resume(self._resume_key(state_or_run_id), _answers(answers), _on_main_thread())
        return _result(text, output)

    def stream(
        self,
        prompt: Optional[str] = None,
        *,
        tools: Optional[Sequence[ToolLike]] = None,
        wait_for: Optional[WaitFor] = None,
        history: Optional[Messages] = None,
        resume: Optional[Union[str, RunResult]] = None,
        answers: Optional[Iterable[Answer]] = None,
        output_type: Optional[OutputType] = None,
        output_mode: Optional[OutputMode] = None,
        output_retries: Optional[int] = None,
    ) -> Iterator[Event]:
        """Runs the loop, yielding its events as they happen (text deltas as
        their bytes arrive); the last one is a :class:`DoneEvent` with the
        result. With ``resume=`` it continues a suspended run instead. A
        sub-agent's events come as :class:`AgentEvent` (its path and the event)."""
        output = self._output_of(output_type, output_mode, output_retries)
        native = self._native_client(tools, wait_for, None, stream=True, output=output)
        stream = self._start_stream(native, prompt, history, resume, answers)
        while True:
            item = stream.next()
            if item is None:
                return
            yield _event(item, output)

    def _start_stream(
        self,
        native: _native.NativeClient,
        prompt: Optional[str],
        history: Optional[Messages],
        resume: Optional[Union[str, RunResult]],
        answers: Optional[Iterable[Answer]],
    ) -> _native.NativeStream:
        if resume is not None:
            return native.stream("[]", self._resume_key(resume), _answers(answers))
        return native.stream(_messages(prompt, history))

    # -- async ----------------------------------------------------------------------

    async def arun(
        self,
        prompt: Optional[str] = None,
        *,
        tools: Optional[Sequence[ToolLike]] = None,
        wait_for: Optional[WaitFor] = None,
        history: Optional[Messages] = None,
        output_type: Optional[OutputType] = None,
        output_mode: Optional[OutputMode] = None,
        output_retries: Optional[int] = None,
    ) -> RunResult:
        """:meth:`run`, awaited: ``async def`` tools and answerers run on this
        event loop. Cancelling the task cancels the run."""
        loop = asyncio.get_running_loop()
        cancel = _native.NativeCancel()
        output = self._output_of(output_type, output_mode, output_retries)
        native = self._native_client(tools, wait_for, loop, cancel, output=output)
        text = await _awaited(loop, cancel, native.start, _messages(prompt, history))
        return _result(text, output)

    async def aresume(
        self,
        state_or_run_id: Union[str, RunResult],
        answers: Optional[Iterable[Answer]] = None,
        *,
        tools: Optional[Sequence[ToolLike]] = None,
        wait_for: Optional[WaitFor] = None,
        output_type: Optional[OutputType] = None,
    ) -> RunResult:
        """:meth:`resume`, awaited."""
        loop = asyncio.get_running_loop()
        cancel = _native.NativeCancel()
        output = self._output_of(output_type, None, None)
        native = self._native_client(tools, wait_for, loop, cancel, output=output)
        key = self._resume_key(state_or_run_id)
        text = await _awaited(loop, cancel, native.start_resume, key, _answers(answers))
        return _result(text, output)

    async def astream(
        self,
        prompt: Optional[str] = None,
        *,
        tools: Optional[Sequence[ToolLike]] = None,
        wait_for: Optional[WaitFor] = None,
        history: Optional[Messages] = None,
        resume: Optional[Union[str, RunResult]] = None,
        answers: Optional[Iterable[Answer]] = None,
        output_type: Optional[OutputType] = None,
        output_mode: Optional[OutputMode] = None,
        output_retries: Optional[int] = None,
    ) -> AsyncIterator[Event]:
        """:meth:`stream`, as an async iterator."""
        loop = asyncio.get_running_loop()
        cancel = _native.NativeCancel()
        output = self._output_of(output_type, output_mode, output_retries)
        native = self._native_client(tools, wait_for, loop, cancel, stream=True, output=output)
        stream = self._start_stream(native, prompt, history, resume, answers)
        items: "asyncio.Queue[Tuple[Optional[str], Optional[BaseException]]]" = asyncio.Queue()

        def on_item(text: Optional[str], error: Optional[BaseException]) -> None:
            _tell(loop, items.put_nowait, (text, error))

        stream.pump(on_item)
        try:
            while True:
                text, error = await items.get()
                if error is not None:
                    raise error
                if text is None:
                    return
                event = _event(text, output)
                yield event
                if isinstance(event, DoneEvent):
                    return
        finally:
            cancel.cancel()  # a consumer that stops early (or is cancelled) stops the run; a no-op after Done


def _paths(given: Any) -> List[str]:
    """One path or a list of them, as strings."""
    if given is None:
        return []
    if isinstance(given, (str, os.PathLike)):
        return [os.fspath(given)]
    return [os.fspath(p) for p in given]


def _result(text: str, output: Optional[Output]) -> RunResult:
    """The native result JSON as a :class:`RunResult`, its output built into the declared type."""
    result = RunResult._from_json(json.loads(text))
    if output is not None and result.output is not None:
        result = dataclasses.replace(result, output=output.build(result.output))
    return result


def _event(text: str, output: Optional[Output]) -> Event:
    event = event_from_json(json.loads(text))
    if isinstance(event, DoneEvent) and output is not None and event.result.output is not None:
        event = DoneEvent(result=dataclasses.replace(event.result, output=output.build(event.result.output)))
    return event


def _on_main_thread() -> bool:
    """Python handles signals on its main thread only: a run started there
    checks for them while it waits, so Ctrl-C cancels it."""
    return threading.current_thread() is threading.main_thread()


def _bind(t: Tool, loop: Optional[asyncio.AbstractEventLoop]) -> Callable[[str, str], str]:
    def invoke(args_json: str, ctx_json: str) -> str:
        return t._invoke(args_json, ctx_json, loop)

    return invoke


def _tell(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: Any) -> None:
    """Schedules ``callback`` on ``loop`` from a run's thread. A run that
    outlives its event loop (its task was cancelled, then the loop closed)
    has no one left to tell."""
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:
        if not loop.is_closed():
            raise


async def _awaited(
    loop: asyncio.AbstractEventLoop, cancel: _native.NativeCancel, start: Callable[..., None], *args: Any
) -> str:
    """Starts a run on its own Rust thread and awaits its result; a
    cancelled await cancels the run."""
    future: "asyncio.Future[str]" = loop.create_future()

    def settle(text: Optional[str], error: Optional[BaseException]) -> None:
        if not future.done():
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(text or "")

    def done(text: Optional[str], error: Optional[BaseException]) -> None:
        _tell(loop, settle, text, error)

    start(*args, done)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        cancel.cancel()
        raise


def replay(cassette: Union[str, "os.PathLike[str]"]) -> Dict[str, Any]:
    """Replays a recorded session offline, checking every request byte for
    byte against the recording. Returns ``outcome``, ``text``,
    ``toolCalls``, ``turns``, ``usage``, ``runs``, ``requests`` (how many
    were checked) and ``pending``; raises :class:`ReplayError` on a mismatch."""
    replayed: Dict[str, Any] = json.loads(_native.replay(os.fspath(cassette)))
    return replayed
