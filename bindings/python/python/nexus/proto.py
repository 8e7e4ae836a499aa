"""``nexus.proto``: the sans-IO machine, for hosts with their own I/O.

A :class:`Run` does no I/O, reads no clock and starts no thread: the host
feeds it inputs (response bytes, tool replies, answers, timer fires) with
:meth:`Run.handle_input` and asks what to do next with
:meth:`Run.poll_output`, as h11 is driven for HTTP. Outputs are dicts by
``type``:

* ``send`` — ``exchange``, ``method``, ``url``, ``headers`` (``[name, value]``
  pairs, the API key's included), ``body`` (JSON text), ``streaming``: send it
  and feed back ``response_head``, ``response_body`` (with ``chunk`` bytes, any
  split) and ``response_end`` (or ``transport_error``);
* ``run_tools`` — ``turn``, ``calls`` (``callId``, ``name``, ``input``,
  ``arguments``, ``idempotencyKey``, ``answer``, ``request``): run them and feed
  a ``tool_reply`` per call (``reply``: ``{"status": "done", "value":
  {"output", "isError"}}`` or ``{"status": "pending", "value": request}``);
* ``event`` — ``event``: something to show (the core's stream events);
* ``suspended`` — ``requests``: answer them (``answer`` inputs) now, or take
  :meth:`Run.snapshot` and :meth:`Run.restore` it later, anywhere;
* ``wait`` — ``until`` (ms or ``None``): nothing to do until an input
  arrives, or until then (feed ``timeout``);
* ``done`` — ``outcome``: ``{"status": "done" | "incomplete" | "failed", …}``.

An input the run cannot take raises :class:`nexus.StateError` and leaves the
run unchanged. ``bindings/python/examples/httpx_driver.py`` drives a run
with httpx.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Mapping, Optional, Sequence, Union

from . import _native

__all__ = ["Run"]


class Run:
    """The tool-calling loop of one run, as a state machine.

    Args:
        config: ``RunConfig`` keys (camelCase): ``style`` and ``model`` at
            least; ``baseUrl``, ``system``, ``maxTurns``, ``maxTokens``,
            ``stream``, ``seed``, ``params``… default as in Rust.
        tools: declarations ``{"name", "description", "input_schema"}``.
        messages: the transcript (neutral messages) with the user turn last,
            or just the prompt.
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        tools: Sequence[Mapping[str, Any]] = (),
        messages: Union[str, Sequence[Mapping[str, Any]]] = (),
        *,
        _native_run: Optional[_native.ProtoRun] = None,
    ) -> None:
        self._run: _native.ProtoRun
        if _native_run is not None:
            self._run = _native_run
            return
        if isinstance(messages, str):
            messages = [{"role": "user", "content": [{"type": "text", "text": messages}]}]
        self._run = _native.ProtoRun(json.dumps(dict(config)), json.dumps([dict(t) for t in tools]), json.dumps(list(messages)))

    @classmethod
    def restore(cls, state: Union[str, bytes]) -> "Run":
        """A run from :meth:`snapshot` text (any supported format version)."""
        text = state.decode("utf-8") if isinstance(state, bytes) else state
        return cls({}, _native_run=_native.ProtoRun.restore(text))

    def snapshot(self) -> str:
        """The run's state as JSON text: no secrets, byte-identical to what
        the Rust drivers and the CLI write."""
        return self._run.snapshot()

    def set_api_key(self, key: str) -> None:
        """The API key, kept in memory only."""
        self._run.set_api_key(key)

    def handle_input(self, now_ms: int, input: Mapping[str, Any]) -> None:
        """Feeds one input at ``now_ms`` (a monotonic clock in milliseconds).
        A ``response_body`` input carries its bytes as ``chunk``."""
        fields = dict(input)
        chunk = fields.pop("chunk", None)
        if chunk is not None and not isinstance(chunk, (bytes, bytearray, memoryview)):
            raise TypeError("chunk must be bytes")
        self._run.handle_input(now_ms, json.dumps(fields), bytes(chunk) if chunk is not None else None)

    def poll_output(self) -> Dict[str, Any]:
        """What the host must do next (see the module docs)."""
        out: Dict[str, Any] = json.loads(self._run.poll_output())
        return out

    @property
    def status(self) -> str:
        """``running``, ``pending``, ``done``, ``incomplete`` or ``failed``."""
        return self._run.status()

    def summary(self) -> Dict[str, Any]:
        """``runId``, ``status``, ``text``, ``turns``, ``usage``, ``toolCalls``,
        ``pending``, ``outcome``."""
        summary: Dict[str, Any] = json.loads(self._run.summary())
        return summary
