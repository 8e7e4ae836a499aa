"""JSON Schema from Python type hints, and arguments back into those types.

The model sees the schema; the tool gets its arguments as the types it
declared (a dataclass, a TypedDict, a pydantic model when pydantic is
installed). The core keeps the schema as given, so it reaches the wire as
this module builds it.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
import sys
import typing
from typing import Any, Callable, Dict, List, Optional, Tuple

try:  # Python 3.9 has no types.UnionType (the X | Y syntax)
    from types import UnionType as _UnionType  # type: ignore[attr-defined,unused-ignore]
except ImportError:  # pragma: no cover - 3.9
    _UnionType = None  # type: ignore[assignment,misc]

from ._types import ToolContext

_NONE = type(None)


def _pydantic_model(tp: Any) -> bool:
    base = sys.modules.get("pydantic")
    return base is not None and isinstance(tp, type) and issubclass(tp, base.BaseModel)


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__total__")


def _hints(obj: Any, extras: bool = False) -> Dict[str, Any]:
    try:
        return typing.get_type_hints(obj, include_extras=extras)
    except NameError as e:
        raise TypeError(
            f"cannot resolve the type hints of {getattr(obj, '__qualname__', obj)!r} ({e}): "
            "define the types they name at module level"
        ) from None


def _typeddict_keys(tp: Any) -> Tuple[Dict[str, Any], List[str]]:
    """A TypedDict's fields and required keys. ``Required``/``NotRequired``
    are read from the hints themselves: with string annotations (PEP 563)
    ``__required_keys__`` does not see them."""
    hints = _hints(tp, extras=True)
    total = getattr(tp, "__total__", True)
    fields: Dict[str, Any] = {}
    required: List[str] = []
    for name, hint in hints.items():
        needed = total
        origin = typing.get_origin(hint)
        while origin is not None and getattr(origin, "_name", None) in ("Required", "NotRequired", "Annotated"):
            if origin._name != "Annotated":
                needed = origin._name == "Required"
            hint = typing.get_args(hint)[0]
            origin = typing.get_origin(hint)
        if typing.get_origin(hint) is getattr(typing, "Annotated", None):
            hint = typing.get_args(hint)[0]
        fields[name] = hint
        if needed:
            required.append(name)
    return fields, required


class _Defs:
    """`$defs` collected from pydantic models, hoisted to the root schema."""

    def __init__(self) -> None:
        self.defs: Dict[str, Any] = {}

    def model(self, tp: Any) -> Dict[str, Any]:
        schema = dict(tp.model_json_schema())
        self.defs.update(schema.pop("$defs", {}))
        return schema


def schema_of(tp: Any, defs: Optional[_Defs] = None) -> Dict[str, Any]:
    """The JSON Schema of one type hint."""
    defs = defs or _Defs()
    if tp is inspect.Parameter.empty or tp is Any or tp is object:
        return {}
    if tp is str:
        return {"type": "string"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    if tp is _NONE or tp is None:
        return {"type": "null"}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"enum": [m.value for m in tp]}
    if _pydantic_model(tp):
        return defs.model(tp)
    if _is_typeddict(tp):
        fields, required = _typeddict_keys(tp)
        return _object({name: schema_of(h, defs) for name, h in fields.items()}, required, tp)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = _hints(tp)
        props = {}
        required = []
        for f in dataclasses.fields(tp):
            props[f.name] = schema_of(hints.get(f.name, Any), defs)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                required.append(f.name)
        return _object(props, required, tp)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Literal:
        values = list(args)
        kinds = {type(v) for v in values}
        out: Dict[str, Any] = {"enum": values}
        if len(kinds) == 1:
            only = schema_of(kinds.pop(), defs)
            if "type" in only:
                out = {"type": only["type"], "enum": values}
        return out
    if origin is typing.Union or (_UnionType is not None and origin is _UnionType):
        rest = [a for a in args if a is not _NONE]
        if len(rest) == 1:
            return schema_of(rest[0], defs)
        return {"anyOf": [schema_of(a, defs) for a in args]}
    if origin in (list, List, tuple, set, frozenset) or tp in (list, tuple, set):
        out = {"type": "array"}
        if args and not (origin is tuple and len(args) != 2 and args[-1] is not Ellipsis):
            out["items"] = schema_of(args[0], defs)
        return out
    if origin is dict or tp is dict:
        out = {"type": "object"}
        if len(args) == 2 and args[1] is not Any:
            out["additionalProperties"] = schema_of(args[1], defs)
        return out
    raise TypeError(f"no JSON Schema for the type hint {tp!r}")


def _object(props: Dict[str, Any], required: List[str], tp: Any = None) -> Dict[str, Any]:
    out: Dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    doc = inspect.getdoc(tp) if tp is not None else None
    if doc and not doc.startswith(tp.__name__ + "("):  # a dataclass's generated doc says nothing
        out["description"] = first_paragraph(doc)
    return out


def first_paragraph(doc: Optional[str]) -> str:
    """The docstring's first paragraph, on one line."""
    if not doc:
        return ""
    para = inspect.cleandoc(doc).split("\n\n", 1)[0]
    return " ".join(line.strip() for line in para.splitlines()).strip()


_ARG_LINE = re.compile(r"^\s{0,8}(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def argument_docs(doc: Optional[str]) -> Dict[str, str]:
    """Parameter descriptions from a Google-style ``Args:`` section."""
    if not doc:
        return {}
    lines = inspect.cleandoc(doc).splitlines()
    out: Dict[str, str] = {}
    inside = False
    current = None
    for line in lines:
        if re.match(r"^(Args|Arguments|Parameters):\s*$", line.strip()):
            inside = True
            continue
        if not inside:
            continue
        if not line.strip():
            current = None
            continue
        if not line.startswith((" ", "\t")):
            break  # the next section
        m = _ARG_LINE.match(line)
        indent = len(line) - len(line.lstrip())
        if m and (current is None or indent <= 4):
            current = m.group(1).lstrip("*")
            out[current] = m.group(2).strip()
        elif current is not None:
            out[current] = (out[current] + " " + line.strip()).strip()
    return out


def function_schema(fn: Callable[..., Any]) -> Tuple[Dict[str, Any], Optional[str]]:
    """The input schema of a tool function, and the name of its
    :class:`ToolContext` parameter (left out of the schema), if any."""
    sig = inspect.signature(fn)
    hints = _hints(fn)
    docs = argument_docs(inspect.getdoc(fn))
    defs = _Defs()
    props: Dict[str, Any] = {}
    required: List[str] = []
    context = None
    for name, p in sig.parameters.items():
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        hint = hints.get(name, p.annotation)
        if hint is ToolContext:
            context = name
            continue
        schema = schema_of(hint, defs)
        if name in docs:  # what the parameter is, over what its type is
            schema = {**schema, "description": docs[name]}
        props[name] = schema
        if p.default is inspect.Parameter.empty:
            required.append(name)
    out: Dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    if defs.defs:
        out["$defs"] = defs.defs
    return out, context


def convert(value: Any, tp: Any) -> Any:
    """A JSON value as the type the tool declared (dataclasses, TypedDicts
    and pydantic models built; everything else as parsed)."""
    if value is None or tp is inspect.Parameter.empty or tp is Any:
        return value
    if _pydantic_model(tp):
        return tp.model_validate(value)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type) and isinstance(value, dict):
        hints = _hints(tp)
        return tp(**{k: convert(v, hints.get(k, Any)) for k, v in value.items()})
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union or (_UnionType is not None and origin is _UnionType):
        rest = [a for a in args if a is not _NONE]
        return convert(value, rest[0]) if len(rest) == 1 else value
    if origin in (list, List) and args and isinstance(value, list):
        return [convert(v, args[0]) for v in value]
    if origin is dict and len(args) == 2 and isinstance(value, dict):
        return {k: convert(v, args[1]) for k, v in value.items()}
    return value
