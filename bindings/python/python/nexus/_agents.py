"""Sub-agents: ``nexus.Agent`` is a tool whose execution is a child run.

The Rust ``AgentTool`` runs the child (SPEC §17): its model calls go through
the same driver, its tool calls come back to the Python tools it was given,
and a child's suspension surfaces at the top with a path-qualified request
id (``Request.agent`` names the agent path that asks).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from ._output import Output, OutputType
from ._tools import RelayTool, Tool

__all__ = ["Agent"]


class Agent:
    """A sub-agent the model may delegate a task to: pass it in ``tools=``.

    The model sees a tool named ``name`` described by ``description`` that
    takes ``{"prompt": string}``; a call starts a child run on the client's
    wire format (and API root and key) with ``model`` (the client's when
    omitted), ``system``, ``max_turns`` and its own ``tools`` — Python
    tools, relay tools, the names of the client's built-in or MCP tools, and
    other ``Agent``\\ s it may delegate to in turn. The call's result is the
    child's final text, or with ``output_type`` (as for :meth:`Client.run`)
    its validated value as compact JSON.
    """

    def __init__(
        self,
        name: str,
        description: str,
        *,
        system: Optional[str] = None,
        tools: Sequence[Union[Tool, RelayTool, "Agent", str, Callable[..., Any]]] = (),
        model: Optional[str] = None,
        max_turns: Optional[int] = None,
        output_type: Optional[OutputType] = None,
        output_mode: Optional[str] = None,
        output_retries: Optional[int] = None,
    ) -> None:
        self.name = name
        self.description = description
        self.system = system
        self.tools = list(tools)
        self.model = model
        self.max_turns = max_turns
        self.output = Output(output_type, output_mode or "auto", output_retries) if output_type is not None else None

    def __repr__(self) -> str:
        return f"<nexus.Agent {self.name}>"

    def _options(self, index: Callable[[Tool], int]) -> Dict[str, Any]:
        """The core's agent JSON; ``index`` numbers a Python tool among the call's."""
        tools: List[Any] = []
        agents: List[Dict[str, Any]] = []
        for t in self.tools:
            if isinstance(t, Agent):
                agents.append(t._options(index))
            elif isinstance(t, RelayTool):
                tools.append({"relay": t._spec()})
            elif isinstance(t, str):
                tools.append(t)
            elif isinstance(t, Tool):
                tools.append(index(t))
            elif callable(t):
                tools.append(index(Tool(t)))
            else:
                raise TypeError(f"agent {self.name}: not a tool: {t!r}")
        out: Dict[str, Any] = {"name": self.name, "description": self.description, "tools": tools, "agents": agents}
        if self.system is not None:
            out["system"] = self.system
        if self.model is not None:
            out["model"] = self.model
        if self.max_turns is not None:
            out["maxTurns"] = self.max_turns
        if self.output is not None:
            out["output"] = self.output.spec()
        return out
