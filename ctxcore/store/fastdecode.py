"""Ingest's fast path: decode a trace line with msgspec into structs mirroring the models.

Validating a 60 kB trace with pydantic costs about 1 ms; bulk ingest of a million packets
spends most of its time there. ``decode`` does the same job with msgspec into plain structs
that carry the same field names, types, defaults and constraints, generated from
``ctxcore.models`` at import (the pydantic models stay the one definition of the contract),
and then runs the models' own validator functions (``check_*`` in ``ctxcore.models``).

The rule that keeps it honest: whatever ``decode`` accepts, the pydantic models accept too,
with the same values. It is stricter in places (pydantic's lax mode turns ``"3"`` into 3,
``1`` into ``True``, a Unix time into a datetime; msgspec refuses them) and then returns
``None``, and the caller validates the line with pydantic, which accepts it or words the
error. ``tests/test_fastdecode.py`` checks the rule on the demo traces and on thousands of
mutated ones.

Timestamps: msgspec rounds a fraction of a second beyond microseconds where pydantic
truncates it, so a line with seven or more digits after the seconds (``:SS.fffffff``)
goes to pydantic.
"""

from __future__ import annotations

import re
import sys
import types
import typing
from datetime import datetime
from enum import Enum
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types as at
import msgspec
from pydantic import AwareDatetime, BaseModel
from pydantic_core import PydanticUndefined

from ctxcore import models as m

_FLOAT_MAX = sys.float_info.max

#: Validators of the models and how this module covers each (a test keeps this complete).
COVERED_VALIDATORS: dict[tuple[str, str], str] = {
    ("CapturedInput", "_unique_ids"): "check_unique_ids in _post",
    ("Config", "_finite_knobs"): "finite bounds on every float",
    ("Config", "_partition_ratios"): "check_partition_budgets in _post",
    ("Trace", "_schema"): "check_schema in _post",
}
#: ":05.1234567": a timestamp msgspec would round where pydantic truncates (module doc).
#: Written dot-first (``:\d\d`` checked behind it): the regex engine then jumps from dot
#: to dot instead of stopping at every colon of the JSON, about twice as fast.
_LONG_FRACTION = re.compile(rb"\.(?<=:\d\d\.)\d{7}")


def _float_type(meta: list[Any]) -> Any:
    """A float with the field's bounds, and finite either way (as ``allow_inf_nan=False``)."""
    c = _constraints(meta)
    lower: dict[str, Any] = {k: float(c[k]) for k in ("ge", "gt") if k in c}
    upper: dict[str, Any] = {k: float(c[k]) for k in ("le", "lt") if k in c}
    lower = lower or {"ge": -_FLOAT_MAX}
    upper = upper or {"le": _FLOAT_MAX}
    return Annotated[float, msgspec.Meta(**lower, **upper)]


#: pydantic's constraint objects -> msgspec.Meta's keyword (the attribute has that name too).
_CONSTRAINTS: dict[type, str] = {
    at.MinLen: "min_length",
    at.MaxLen: "max_length",
    at.Ge: "ge",
    at.Gt: "gt",
    at.Le: "le",
    at.Lt: "lt",
}


def _constraints(meta: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for c in meta:
        name = _CONSTRAINTS.get(type(c))
        if name is None:
            raise TypeError(f"fastdecode cannot mirror the constraint {c!r}")
        out[name] = getattr(c, name)
    return out


def _mirror(tp: Any, meta: list[Any], structs: dict[type, Any]) -> Any:
    """The msgspec type for a pydantic annotation (plus its field constraints)."""
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        return Union[tuple(_mirror(a, meta, structs) for a in get_args(tp))]  # noqa: UP007
    if tp is type(None):
        return tp
    if tp is AwareDatetime:
        return Annotated[datetime, msgspec.Meta(tz=True)]
    if tp is float:
        return _float_type(meta)
    if tp in (str, int, bool) or tp is Any:
        c = _constraints(meta)
        return Annotated[tp, msgspec.Meta(**c)] if c else tp
    if isinstance(tp, type) and issubclass(tp, Enum):
        # the values as plain strings: equal to the StrEnum members, and cheaper to read
        return Literal[tuple(e.value for e in tp)]
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return _struct(tp, structs)
    if origin is Literal:
        return tp
    if origin is list:
        (item,) = get_args(tp)
        inner = _mirror(item, [], structs)
        c = _constraints(meta)
        return Annotated[list[inner], msgspec.Meta(**c)] if c else list[inner]  # type: ignore[valid-type]
    if origin is dict:
        key, value = get_args(tp)
        if key is not str:
            raise TypeError(f"fastdecode cannot mirror {tp!r}")
        return dict[str, _mirror(value, [], structs)]  # type: ignore[misc]
    raise TypeError(f"fastdecode cannot mirror {tp!r}")


def _struct(model: type[BaseModel], structs: dict[type, Any]) -> Any:
    if model in structs:
        return structs[model]
    if model.model_config.get("extra") != "forbid":
        raise TypeError(f"{model.__name__}: fastdecode mirrors extra='forbid' models only")
    hints = typing.get_type_hints(model, include_extras=False)
    fields: list[tuple[str, Any, Any]] = []
    for name, info in model.model_fields.items():
        tp = _mirror(hints[name], list(info.metadata), structs)
        rename = info.alias if info.alias and info.alias != name else None
        if info.default_factory is not None:
            spec = msgspec.field(default_factory=info.default_factory, name=rename)  # type: ignore[arg-type]
        elif info.default is not PydanticUndefined:
            spec = msgspec.field(default=info.default, name=rename)
        else:
            spec = msgspec.field(name=rename)
        fields.append((name, tp, spec))
    struct = msgspec.defstruct(
        model.__name__, fields, kw_only=True, forbid_unknown_fields=True, module=__name__, gc=False
    )
    structs[model] = struct
    return struct


_STRUCTS: dict[type, Any] = {}
TraceStruct: Any = _struct(m.Trace, _STRUCTS)
_DECODER = msgspec.json.Decoder(TraceStruct)


def _post(t: Any) -> bool:
    """The models' validators, on a decoded struct; False when any would refuse it."""
    try:
        m.check_schema(t.schema_)
        m.check_unique_ids([p.id for p in t.input.packets])
        m.check_partition_budgets(t.config.partition_budgets)
    except ValueError:
        return False
    return True


def decode(raw: bytes) -> Any | None:
    """A trace struct (same attribute names as ``models.Trace``), or ``None`` when the
    fast path does not accept the line; then validate it with pydantic."""
    if _LONG_FRACTION.search(raw):
        return None
    try:
        t = _DECODER.decode(raw)
    except msgspec.MsgspecError:
        return None
    return t if _post(t) else None
