"""Tools: ``@nexus.tool`` functions, relay tools, and ``nexus.pending``.

The Rust driver calls a tool on one of its threads; :meth:`Tool._invoke`
runs the function there (an ``async def`` tool on the event loop of the
``arun``/``astream`` that started the run, or on a fresh loop under
``run``/``stream``) and answers with the core's ``ToolReply`` JSON. An
exception becomes an error result the model sees; the run goes on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
from typing import Any, Callable, Dict, Optional, TypeVar, Union, overload

from ._schema import _hints, convert, first_paragraph, function_schema
from ._types import Pending, ToolContext, ToolResult

__all__ = ["Tool", "RelayTool", "tool", "relay_tool", "pending"]

F = TypeVar("F", bound=Callable[..., Any])


def pending(
    *,
    kind: str,
    prompt: str,
    data: Optional[Dict[str, Any]] = None,
    url: Optional[str] = None,
    expires_at: Optional[str] = None,
) -> Pending:
    """Returned by a tool: the run suspends on this request. When the host
    answers ``ok``, the same tool runs again with the answer in its
    :class:`ToolContext`; otherwise the model gets an error result."""
    return Pending(kind=kind, prompt=prompt, data=data, url=url, expires_at=expires_at)


def render(value: Any) -> str:
    """A tool's return value as the text the model sees: a string as-is,
    anything else as compact JSON (as the Rust tools render it)."""
    if isinstance(value, str):
        return value
    if hasattr(value, "model_dump") and callable(value.model_dump):
        value = value.model_dump(mode="json")
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _done(output: str, is_error: bool, metadata: Any = None) -> str:
    value: Dict[str, Any] = {"output": output, "isError": is_error}
    if metadata is not None:
        value["metadata"] = metadata
    return json.dumps({"status": "done", "value": value})


def _exception_text(e: BaseException) -> str:
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


class Tool:
    """A Python function the model may call. Build one with :func:`tool`.

    Calling the object calls the function, so a decorated function stays
    usable as a function.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: Optional[str] = None,
        description: Optional[str] = None,
        input_schema: Optional[Dict[str, Any]] = None,
        timeout: Optional[float] = None,
    ) -> None:
        self.fn = fn
        self.timeout = timeout
        self.name = name or fn.__name__
        self.description = description if description is not None else first_paragraph(inspect.getdoc(fn))
        schema, context = function_schema(fn)
        self.input_schema: Dict[str, Any] = input_schema if input_schema is not None else schema
        self._context_param = context
        self._hints = _hints(fn)
        self._signature = inspect.signature(fn)
        self.is_async = inspect.iscoroutinefunction(fn)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<nexus.Tool {self.name}>"

    def _spec(self) -> Dict[str, Any]:
        spec: Dict[str, Any] = {"name": self.name, "description": self.description, "input_schema": self.input_schema}
        if self.timeout is not None:
            spec["timeout_ms"] = max(1, round(self.timeout * 1000))
        return spec

    def _arguments(self, raw: Any, ctx: ToolContext) -> Dict[str, Any]:
        if not isinstance(raw, dict):
            raise TypeError(f"arguments must be a JSON object, got {type(raw).__name__}")
        kwargs = {}
        for name, p in self._signature.parameters.items():
            if name == self._context_param:
                kwargs[name] = ctx
            elif name in raw:
                kwargs[name] = convert(raw[name], self._hints.get(name, p.annotation))
        extra = sorted(set(raw) - set(kwargs))
        if extra and not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in self._signature.parameters.values()):
            raise TypeError(f"unexpected arguments: {', '.join(extra)}")
        for name in extra:
            kwargs[name] = raw[name]
        self._signature.bind(**kwargs)  # a missing argument is a TypeError naming it
        return kwargs

    def _invoke(self, args_json: str, ctx_json: str, loop: Optional[asyncio.AbstractEventLoop]) -> str:
        """Runs one call; answers the core's ToolReply JSON. Never raises."""
        try:
            ctx = ToolContext._from_json(json.loads(ctx_json))
            kwargs = self._arguments(json.loads(args_json), ctx)
        except Exception as e:
            return _done(f"invalid arguments for {self.name}: {_exception_text(e)}", True)
        try:
            if self.is_async:
                coro = self.fn(**kwargs)
                if loop is not None and loop.is_running():
                    value = asyncio.run_coroutine_threadsafe(coro, loop).result()
                else:
                    value = asyncio.run(coro)
            else:
                value = self.fn(**kwargs)
                if inspect.isawaitable(value):
                    value = asyncio.run(_await(value))
        except Exception as e:  # the model sees the error and decides what next
            return _done(_exception_text(e), True)
        if isinstance(value, Pending):
            return json.dumps({"status": "pending", "value": value._to_json()})
        if isinstance(value, ToolResult):
            return _done(value.output, value.is_error, value.metadata)
        try:
            return _done(render(value), False)
        except Exception as e:
            return _done(f"the tool output could not be serialized: {_exception_text(e)}", True)


async def _await(value: Any) -> Any:
    return await value


@dataclasses.dataclass(frozen=True)
class RelayTool:
    """A declaration whose calls go back to the caller: a model turn's relay
    calls suspend the run with one ``tool_call`` request (``data.calls``),
    answered with :meth:`nexus.Answer.relay`."""

    name: str
    description: str
    input_schema: Dict[str, Any]

    def _spec(self) -> Dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


def relay_tool(name: str, description: str, input_schema: Optional[Dict[str, Any]] = None) -> RelayTool:
    """A tool the model may call whose calls run elsewhere (see :class:`RelayTool`)."""
    return RelayTool(name, description, input_schema or {"type": "object", "properties": {}})


@overload
def tool(fn: F) -> Tool: ...


@overload
def tool(
    fn: None = None,
    *,
    name: Optional[str] = None,
    description: Optional[str] = None,
    input_schema: Optional[Dict[str, Any]] = None,
    timeout: Optional[float] = None,
) -> Callable[[F], Tool]: ...


def tool(
    fn: Optional[Callable[..., Any]] = None,
    *,
    name: Optional[str] = None,
    description: Optional[str] = None,
    input_schema: Optional[Dict[str, Any]] = None,
    timeout: Optional[float] = None,
) -> Union[Tool, Callable[[Callable[..., Any]], Tool]]:
    """Makes a function (``def`` or ``async def``) a tool.

    The name is the function's, the description the docstring's first
    paragraph, and the input schema comes from the type hints (``str``,
    ``int``, ``float``, ``bool``, ``list``, ``dict``, ``Optional``,
    ``Literal``, ``TypedDict``, dataclasses, enums, and pydantic models when
    pydantic is installed); Google-style ``Args:`` lines describe the
    parameters. A parameter typed :class:`ToolContext` receives the call's
    context. Use ``@tool(name=..., description=..., input_schema=...)`` to
    override any of them, and ``timeout=`` (seconds) to give up on a call
    that takes longer (the model gets an error result; the function is not
    stopped).
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(f, name=name, description=description, input_schema=input_schema, timeout=timeout)

    if fn is not None:
        return wrap(fn)
    return wrap

