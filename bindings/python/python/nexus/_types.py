"""The package's value types: requests and answers, results, stream events.

Their JSON forms are the core's own (``Request{id, kind, prompt, url?, data?,
expiresAt?}``, ``Answer{id, ok, data?, reason?}``), so what Python hands the
Rust drivers is byte for byte what the CLI and the Rust library hand them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List, Literal, Optional, Union

__all__ = [
    "Request",
    "Answer",
    "Pending",
    "ToolResult",
    "ToolContext",
    "ToolCall",
    "Usage",
    "RunResult",
    "Event",
    "TurnStarted",
    "TextDelta",
    "ReasoningDelta",
    "ToolCallStarted",
    "ToolCallDelta",
    "ToolCallEvent",
    "ToolResultEvent",
    "PendingEvent",
    "UsageEvent",
    "TurnFinished",
    "DoneEvent",
    "AgentEvent",
    "OutputPartial",
    "OtherEvent",
    "RunStatus",
]

RunStatus = Literal["done", "pending", "incomplete"]


@dataclass(frozen=True)
class Request:
    """Something a suspended run waits for: an approval, an answer, a login, relay calls.

    A sub-agent's request has a path-qualified ``id`` (the delegating call
    ids, then its own, joined by ``/``: answer it by that id) and ``agent``,
    the agent path of the run that asks (``""`` for the run itself).
    """

    id: str
    kind: str
    prompt: str
    url: Optional[str] = None
    data: Optional[Dict[str, Any]] = None
    expires_at: Optional[str] = None
    agent: str = ""

    @classmethod
    def _from_json(cls, d: Dict[str, Any]) -> "Request":
        return cls(
            id=d["id"],
            kind=d["kind"],
            prompt=d.get("prompt", ""),
            url=d.get("url"),
            data=d.get("data"),
            expires_at=d.get("expiresAt"),
            agent=d.get("agent", ""),
        )

    def _to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"id": self.id, "kind": self.kind, "prompt": self.prompt}
        if self.url is not None:
            out["url"] = self.url
        if self.data is not None:
            out["data"] = self.data
        if self.expires_at is not None:
            out["expiresAt"] = self.expires_at
        return out

    @property
    def relay_calls(self) -> List[Dict[str, Any]]:
        """For a ``tool_call`` request: the relayed calls (``id``, ``name``, ``input``, ``arguments``)."""
        return list((self.data or {}).get("calls", []))


@dataclass(frozen=True)
class Answer:
    """The host's reply to a :class:`Request`. The loop branches on ``ok`` alone;
    ``reason`` (when not ok) is ``"declined"``, ``"cancelled"`` or ``"expired"``."""

    id: str
    ok: bool = True
    data: Optional[Dict[str, Any]] = None
    reason: Optional[str] = None

    @classmethod
    def relay(cls, request: Union[Request, str], results: List[Dict[str, Any]]) -> "Answer":
        """Answers a ``tool_call`` request with one result per relayed call:
        ``[{"id": call_id, "output": "...", "isError": False}, ...]``."""
        rid = request.id if isinstance(request, Request) else request
        return cls(id=rid, ok=True, data={"results": results})

    def _to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"id": self.id, "ok": self.ok}
        if self.data is not None:
            out["data"] = self.data
        if self.reason is not None:
            out["reason"] = self.reason
        return out

    @classmethod
    def _from_json(cls, d: Dict[str, Any]) -> "Answer":
        return cls(id=d["id"], ok=bool(d["ok"]), data=d.get("data"), reason=d.get("reason"))


@dataclass(frozen=True)
class Pending:
    """What a tool returns to suspend the run (see :func:`nexus.pending`)."""

    kind: str
    prompt: str
    data: Optional[Dict[str, Any]] = None
    url: Optional[str] = None
    expires_at: Optional[str] = None

    def _to_json(self) -> Dict[str, Any]:
        # The id is stamped by the run.
        return Request(
            id="", kind=self.kind, prompt=self.prompt, url=self.url, data=self.data, expires_at=self.expires_at
        )._to_json()


@dataclass(frozen=True)
class ToolResult:
    """A tool's result with an explicit error flag (a plain return value is a success)."""

    output: str
    is_error: bool = False
    metadata: Any = None


@dataclass(frozen=True)
class ToolContext:
    """What one execution of a tool is told. Declare a parameter of this type
    to receive it (it is left out of the input schema)."""

    call_id: str
    name: str
    turn: int
    idempotency_key: str
    answer: Optional[Answer] = None
    request: Optional[Request] = None

    @classmethod
    def _from_json(cls, d: Dict[str, Any]) -> "ToolContext":
        return cls(
            call_id=d["callId"],
            name=d["name"],
            turn=d["turn"],
            idempotency_key=d["idempotencyKey"],
            answer=Answer._from_json(d["answer"]) if d.get("answer") else None,
            request=Request._from_json(d["request"]) if d.get("request") else None,
        )


@dataclass(frozen=True)
class ToolCall:
    """One tool call of a run with its result."""

    id: str
    name: str
    input: Any
    output: str
    is_error: bool

    @classmethod
    def _from_json(cls, d: Dict[str, Any]) -> "ToolCall":
        return cls(id=d["id"], name=d["name"], input=d.get("input"), output=d["output"], is_error=d["isError"])


@dataclass(frozen=True)
class Usage:
    """Token counts, summed over the run."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0

    @classmethod
    def _from_json(cls, d: Optional[Dict[str, Any]]) -> "Usage":
        d = d or {}
        return cls(
            prompt_tokens=d.get("promptTokens", 0),
            completion_tokens=d.get("completionTokens", 0),
            total_tokens=d.get("totalTokens", 0),
            cached_tokens=d.get("cachedTokens", 0),
            reasoning_tokens=d.get("reasoningTokens", 0),
        )


@dataclass(frozen=True)
class RunResult:
    """The result of a run that did not fail.

    ``status`` is ``"done"``, ``"pending"`` (answer :attr:`pending` and
    resume :attr:`state`, or :attr:`run_id` with a store) or
    ``"incomplete"`` (:attr:`limit` says which limit stopped it).
    ``output`` is the typed output (see ``output_type``) of a run that is
    done, ``output_mode`` the strategy that carried it; ``agents`` reports
    each sub-agent of the run (``path``, ``name``, ``turns``, ``usage``,
    ``status``).
    """

    status: RunStatus
    text: str
    tool_calls: List[ToolCall]
    turns: int
    usage: Usage
    model: str
    pending: List[Request] = field(default_factory=list)
    state: Optional[str] = None
    run_id: Optional[str] = None
    limit: Optional[str] = None
    stop_reason: Optional[str] = None
    messages: List[Dict[str, Any]] = field(default_factory=list)
    output: Any = None
    output_mode: Optional[str] = None
    agents: List[Dict[str, Any]] = field(default_factory=list)

    @classmethod
    def _from_json(cls, d: Dict[str, Any]) -> "RunResult":
        return cls(
            status=d["status"],
            text=d.get("text", ""),
            tool_calls=[ToolCall._from_json(c) for c in d.get("toolCalls", [])],
            turns=d.get("turns", 0),
            usage=Usage._from_json(d.get("usage")),
            model=d.get("model", ""),
            pending=[Request._from_json(r) for r in d.get("pending", [])],
            state=d.get("state"),
            run_id=d.get("runId"),
            limit=d.get("limit"),
            stop_reason=d.get("stopReason"),
            messages=d.get("messages", []),
            output=d.get("output"),
            output_mode=d.get("outputMode"),
            agents=d.get("agents", []),
        )


@dataclass(frozen=True)
class Event:
    """Base of the stream events; ``type`` is the core's event name."""

    type: ClassVar[str] = ""

    @property
    def agent_path(self) -> str:
        """The agent path of the run that emitted it: ``""`` for the run itself."""
        return ""

    @property
    def inner(self) -> "Event":
        """The event itself, out of an :class:`AgentEvent`."""
        return self


@dataclass(frozen=True)
class TurnStarted(Event):
    """A model call began (``turn`` counts from 1)."""

    turn: int
    type: ClassVar[str] = "turn_started"


@dataclass(frozen=True)
class TextDelta(Event):
    """A piece of the model's visible text, as it arrived."""

    text: str
    type: ClassVar[str] = "text_delta"


@dataclass(frozen=True)
class ReasoningDelta(Event):
    """A piece of the model's reasoning, where the provider shows it."""

    text: str
    type: ClassVar[str] = "reasoning_delta"


@dataclass(frozen=True)
class ToolCallStarted(Event):
    """The model began a tool call."""

    id: str
    name: str
    type: ClassVar[str] = "tool_call_started"


@dataclass(frozen=True)
class ToolCallDelta(Event):
    """A piece of a tool call's raw argument text."""

    id: str
    arguments: str
    type: ClassVar[str] = "tool_call_delta"


@dataclass(frozen=True)
class ToolCallEvent(Event):
    """A complete tool call from the model."""

    id: str
    name: str
    input: Any
    arguments: str
    type: ClassVar[str] = "tool_call"


@dataclass(frozen=True)
class ToolResultEvent(Event):
    """A tool's result was recorded (in call order once the turn's results are in)."""

    call_id: str
    name: str
    output: str
    is_error: bool
    type: ClassVar[str] = "tool_result"


@dataclass(frozen=True)
class PendingEvent(Event):
    """A call suspended: the run waits for an answer to ``request``."""

    request: Request
    type: ClassVar[str] = "pending"


@dataclass(frozen=True)
class UsageEvent(Event):
    """The token counts of one model call."""

    usage: Usage
    type: ClassVar[str] = "usage"


@dataclass(frozen=True)
class TurnFinished(Event):
    """The model's turn ended (``stop``: ``end_turn``, ``tool_use``, ``max_tokens``, …)."""

    turn: int
    stop: str
    type: ClassVar[str] = "turn_finished"


@dataclass(frozen=True)
class DoneEvent(Event):
    """The last event of a stream: the run's result."""

    result: RunResult
    type: ClassVar[str] = "done"


@dataclass(frozen=True)
class OutputPartial(Event):
    """The typed output as streamed so far: partial, never validated (the
    final value is the result's ``output``)."""

    value: Any
    type: ClassVar[str] = "output_partial"


@dataclass(frozen=True)
class AgentEvent(Event):
    """An event of a sub-agent's run: ``agent`` is its path (the delegating
    call ids from the top run down, joined by ``/``), ``event`` the child's
    event (a :class:`PendingEvent` in it carries the qualified request id)."""

    agent: str
    event: Event
    type: ClassVar[str] = "agent"

    @property
    def agent_path(self) -> str:
        return self.agent

    @property
    def inner(self) -> Event:
        return self.event


@dataclass(frozen=True)
class OtherEvent(Event):
    """An event this version of the package has no class for, as the core sent it."""

    data: Dict[str, Any]

    @property
    def type(self) -> str:  # type: ignore[override]
        """The core's name for it."""
        return str(self.data.get("type", ""))


def event_from_json(d: Dict[str, Any]) -> Event:
    t = d.get("type")
    if t == "turn_started":
        return TurnStarted(turn=d["turn"])
    if t == "text_delta":
        return TextDelta(text=d["text"])
    if t == "reasoning_delta":
        return ReasoningDelta(text=d["text"])
    if t == "tool_call_started":
        return ToolCallStarted(id=d["id"], name=d["name"])
    if t == "tool_call_delta":
        return ToolCallDelta(id=d["id"], arguments=d["arguments"])
    if t == "tool_call_finished":
        c = d["call"]
        return ToolCallEvent(id=c["id"], name=c["name"], input=c.get("input"), arguments=c.get("arguments", ""))
    if t == "tool_result":
        r = d["result"]
        return ToolResultEvent(
            call_id=d["call_id"], name=d["name"], output=r["output"], is_error=bool(r.get("isError", False))
        )
    if t == "pending":
        return PendingEvent(request=Request._from_json(d["request"]))
    if t == "agent":
        inner = event_from_json(d["event"])
        if isinstance(inner, PendingEvent) and not inner.request.agent:
            request = Request._from_json({**d["event"]["request"], "agent": d["agent"]})
            inner = PendingEvent(request=request)
        return AgentEvent(agent=d["agent"], event=inner)
    if t == "output_partial":
        return OutputPartial(value=d.get("value"))
    if t == "usage":
        return UsageEvent(usage=Usage._from_json(d["usage"]))
    if t == "turn_finished":
        return TurnFinished(turn=d["turn"], stop=d["stop"])
    if t == "done":
        return DoneEvent(result=RunResult._from_json(d["result"]))
    return OtherEvent(data=d)
