"""nexus: the LLM tool-calling loop — model call, tool calls, tool results,
model call — for any provider, from one Rust core.

>>> import nexus
>>> @nexus.tool
... def add(a: int, b: int) -> int:
...     '''Adds a and b.'''
...     return a + b
>>> client = nexus.Client(style="openai", model="gpt-4o-mini")   # doctest: +SKIP
>>> client.run("What is 2 + 2?", tools=[add]).text                # doctest: +SKIP
'2 + 2 = 4.'

The high-level API (:class:`Client`) runs the Rust drivers; the low-level
machine (:mod:`nexus.proto`) is for hosts that do their own I/O.
"""

from . import proto
from ._agents import Agent
from ._client import Client, WaitFor, replay
from ._native import (
    FORMAT_VERSION,
    ConfigError,
    LimitError,
    NexusError,
    OutputError,
    OutputInvalidError,
    OutputRefusedError,
    OutputTruncatedError,
    ProviderError,
    ReplayError,
    RunCancelled,
    StateError,
    StoreError,
    ToolError,
)
from ._output import OutputMode, OutputType
from ._tools import RelayTool, Tool, pending, relay_tool, tool
from ._types import (
    AgentEvent,
    Answer,
    DoneEvent,
    Event,
    OtherEvent,
    OutputPartial,
    Pending,
    PendingEvent,
    ReasoningDelta,
    Request,
    RunResult,
    RunStatus,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallEvent,
    ToolCallStarted,
    ToolContext,
    ToolResult,
    ToolResultEvent,
    TurnFinished,
    TurnStarted,
    Usage,
    UsageEvent,
)

__all__ = [
    "Client",
    "Agent",
    "OutputMode",
    "OutputType",
    "WaitFor",
    "replay",
    "proto",
    "tool",
    "Tool",
    "relay_tool",
    "RelayTool",
    "pending",
    "Pending",
    "Request",
    "Answer",
    "ToolResult",
    "ToolContext",
    "ToolCall",
    "Usage",
    "RunResult",
    "RunStatus",
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
    "NexusError",
    "ProviderError",
    "LimitError",
    "StateError",
    "ToolError",
    "ConfigError",
    "StoreError",
    "RunCancelled",
    "ReplayError",
    "OutputError",
    "OutputInvalidError",
    "OutputRefusedError",
    "OutputTruncatedError",
    "FORMAT_VERSION",
]
