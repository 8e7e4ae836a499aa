"""Typed output: what a run's final answer must be, and that answer as a
Python value.

The schema goes to the core as an ``OutputSpec`` (SPEC §16); the core picks
how it reaches each model (the provider's own schema field, an output tool,
or the prompt), validates the answer against the schema, and retries an
invalid one. The facade then builds the declared type from the validated
JSON value: a pydantic model instance, a dataclass, a TypedDict (a dict), or
for a JSON Schema dict the value itself.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Dict, Literal, Mapping, Optional, Union

from . import _native
from ._schema import _Defs, _is_typeddict, _pydantic_model, convert, schema_of

__all__ = ["OutputMode", "OutputType", "Output"]

OutputMode = Literal["auto", "native", "tool", "prompted"]
OutputType = Union[type, Mapping[str, Any]]
_MODES = ("auto", "native", "tool", "prompted")


class Output:
    """A resolved ``output_type``: the spec the core gets, and how the
    validated value becomes the declared type."""

    def __init__(self, output_type: OutputType, mode: str = "auto", retries: Optional[int] = None) -> None:
        if mode not in _MODES:
            raise _native.ConfigError(f"output_mode {mode!r}: use one of {', '.join(_MODES)}")
        if retries is not None and (isinstance(retries, bool) or not isinstance(retries, int) or retries < 0):
            raise _native.ConfigError(f"output_retries {retries!r}: a whole number from 0")
        self.output_type = output_type
        self.mode = mode
        self.retries = retries
        self.schema, self._build = _schema_and_builder(output_type)
        if self.schema.get("type") != "object":
            raise TypeError(f"output_type {output_type!r}: the output must be a JSON object (a model, a dataclass, ...)")

    def spec(self) -> Dict[str, Any]:
        """The core's ``OutputSpec`` JSON."""
        out: Dict[str, Any] = {"name": "final_result", "schema": self.schema, "mode": self.mode}
        if self.retries is not None:
            out["retries"] = self.retries
        return out

    def build(self, value: Any) -> Any:
        """The validated JSON value as the declared type. The core checked it
        against the schema; a pydantic validator that still refuses it is an
        :class:`OutputInvalidError` (``raw`` the value's JSON, ``errors`` the
        validator's message)."""
        if value is None:
            return None
        try:
            return self._build(value)
        except Exception as e:
            err = _native.OutputInvalidError(f"the output did not build into {self.output_type!r}: {e}")
            err.raw = json.dumps(value)
            err.attempts = 0
            err.errors = [str(e)]
            raise err from e


def _schema_and_builder(tp: OutputType) -> "tuple[Dict[str, Any], Callable[[Any], Any]]":
    if isinstance(tp, Mapping):
        return dict(tp), lambda v: v
    if _pydantic_model(tp) or _is_typeddict(tp) or (dataclasses.is_dataclass(tp) and isinstance(tp, type)):
        defs = _Defs()
        schema = dict(schema_of(tp, defs))
        if defs.defs:
            schema["$defs"] = defs.defs
        return schema, lambda v: convert(v, tp)
    raise TypeError(
        f"output_type {tp!r}: use a pydantic model class, a dataclass, a TypedDict or a JSON Schema dict"
    )


def resolve(
    output_type: Optional[OutputType], mode: Optional[str], retries: Optional[int], default: Optional[Output]
) -> Optional[Output]:
    """A call's output: its own ``output_type`` (with its mode and retries,
    else the client's), else the client's default."""
    if output_type is None:
        if default is None:
            if mode is not None or retries is not None:
                raise _native.ConfigError("output_mode and output_retries need an output_type")
            return None
        if mode is None and retries is None:
            return default
        output_type = default.output_type
        mode = mode or default.mode
        retries = retries if retries is not None else default.retries
    return Output(output_type, mode or "auto", retries)
