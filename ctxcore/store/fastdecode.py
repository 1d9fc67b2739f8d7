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
goes to pydantic; so does a line with a surrogate escape (``\\ud800``), which msgspec
lets through unpaired into free JSON.

What msgspec cannot express natively is checked after decoding, on exactly the fields the
models mark (a plan made from the models at import, ``_PLAN``): the nesting depth of free
JSON (``models.JsonObject``) and timestamps that leave the calendar once converted to UTC
(``models.Timestamp``; only the years 1 and 9999 can). A model constraint this module does
not know makes the import fail, so a new one cannot be skipped silently.
"""

from __future__ import annotations

import re
import sys
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from enum import Enum
from operator import attrgetter
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types as at
import msgspec
from pydantic import AfterValidator, AwareDatetime, BaseModel
from pydantic_core import PydanticUndefined

from ctxcore import models as m

_FLOAT_MAX = sys.float_info.max

#: Validators of the models and how this module covers each (a test keeps this complete).
COVERED_VALIDATORS: dict[tuple[str, str], str] = {
    ("CapturedInput", "_unique_ids"): "check_unique_ids in _post",
    ("Config", "_finite_knobs"): "finite bounds on every float",
    ("Config", "_numbers"): "msgspec's int and float refuse true and false",
    ("CapturedInput", "_numbers"): "msgspec's int and float refuse true and false",
    ("Config", "_partition_ratios"): "check_partition_budgets in _post",
    ("Trace", "_schema"): "check_schema in _post",
    # stricter: a null for a field with a non-null default is refused here, and pydantic's
    # path (models.null_is_default) takes the line
    **{
        (name, "_null_is_default"): "null refused; pydantic takes the line"
        for name in (
            "_NullIsDefault",
            "Message",
            "Packet",
            "ToolDef",
            "CapturedInput",
            "Config",
            "Outcome",
            "Trace",
        )
    },
}
#: Validators the models attach to types (``Annotated``) and the check ``_PLAN`` runs.
COVERED_TYPE_VALIDATORS: dict[Any, str] = {m.check_free_json: "json"}
#: ":05.1234567": a timestamp msgspec would round where pydantic truncates (module doc).
#: Written dot-first (``:\d\d`` checked behind it): the regex engine then jumps from dot
#: to dot instead of stopping at every colon of the JSON, about twice as fast.
_LONG_FRACTION = re.compile(rb"\.(?<=:\d\d\.)\d{7}")
#: A surrogate escape (``\ud800``): msgspec lets a lone one through into free JSON, which
#: pydantic's parser refuses (and UTF-8 cannot hold), so such lines go to pydantic.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


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


#: the only bounds a timestamp may carry: the instants that convert to UTC (checked in _post)
_TIME_BOUNDS = {"ge": m.UTC_MIN, "le": m.UTC_MAX}


def _mirror(tp: Any, meta: list[Any], structs: dict[type, Any], checks: set[str]) -> Any:
    """The msgspec type for a pydantic annotation (plus its field constraints); what
    msgspec cannot check itself goes into ``checks`` ("json", "time") for ``_post``."""
    origin = get_origin(tp)
    if origin is Annotated:
        base, *extra = get_args(tp)
        return _mirror(base, [*meta, *extra], structs, checks)
    plain = []
    for c in meta:
        if isinstance(c, AfterValidator):
            kind = COVERED_TYPE_VALIDATORS.get(c.func)
            if kind is None:
                raise TypeError(f"fastdecode cannot mirror the validator {c.func!r}")
            checks.add(kind)
        else:
            plain.append(c)
    meta = plain
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        return Union[tuple(_mirror(a, meta, structs, checks) for a in args)]  # noqa: UP007
    if tp is type(None):
        return tp
    if tp is AwareDatetime:
        c = _constraints(meta)
        if c:
            if c != _TIME_BOUNDS:
                raise TypeError(f"fastdecode cannot mirror the timestamp bounds {c!r}")
            checks.add("time")
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
        inner = _inner(item, structs)
        c = _constraints(meta)
        return Annotated[list[inner], msgspec.Meta(**c)] if c else list[inner]  # type: ignore[valid-type]
    if origin is dict:
        key, value = get_args(tp)
        if key is not str:
            raise TypeError(f"fastdecode cannot mirror {tp!r}")
        return dict[str, _inner(value, structs)]  # type: ignore[misc]
    raise TypeError(f"fastdecode cannot mirror {tp!r}")


def _inner(tp: Any, structs: dict[type, Any]) -> Any:
    """The msgspec type of a list's items or a dict's values. ``_post`` checks fields, not
    items, so an item type that needs a check is refused."""
    checks: set[str] = set()
    out = _mirror(tp, [], structs, checks)
    if checks:
        raise TypeError(f"fastdecode checks {sorted(checks)} on fields, not inside {tp!r}")
    return out


def _models_in(tp: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model a field holds (directly, optionally, or as a list of them), and whether
    it is a list."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _models_in(get_args(tp)[0])
    if origin in (Union, types.UnionType):
        for a in get_args(tp):
            found = _models_in(a)
            if found[0] is not None:
                return found
        return None, False
    if origin is list:
        inner, _ = _models_in(get_args(tp)[0])
        return inner, True
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp, False
    return None, False


#: What ``_post`` checks per struct: (field, kind, the plan of the struct(s) it holds).
#: kind is "json" or "time" (a leaf), "one" (a struct) or "many" (a list of them).
Plan = tuple[tuple[str, str, Any], ...]
_PLANS: dict[type, Plan] = {}


def _struct(model: type[BaseModel], structs: dict[type, Any]) -> Any:
    if model in structs:
        return structs[model]
    if model.model_config.get("extra") != "forbid":
        raise TypeError(f"{model.__name__}: fastdecode mirrors extra='forbid' models only")
    hints = typing.get_type_hints(model, include_extras=True)
    fields: list[tuple[str, Any, Any]] = []
    plan: list[tuple[str, str, Any]] = []
    for name, info in model.model_fields.items():
        checks: set[str] = set()
        tp = _mirror(hints[name], list(info.metadata), structs, checks)
        plan += [(name, kind, None) for kind in sorted(checks)]
        inner, many = _models_in(hints[name])
        if inner is not None and _PLANS.get(inner):
            plan.append((name, "many" if many else "one", _PLANS[inner]))
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
    _PLANS[model] = tuple(plan)
    return struct


_STRUCTS: dict[type, Any] = {}
TraceStruct: Any = _struct(m.Trace, _STRUCTS)
_DECODER = msgspec.json.Decoder(TraceStruct)
_PLAN = _PLANS[m.Trace]


#: Only the first and the last year of the calendar can leave it once converted to UTC.
_EDGE_YEARS = frozenset({1, 9999})
_year = attrgetter("year")


def _check_times(stamps: Iterable[datetime]) -> None:
    for ts in stamps:
        if ts.year in _EDGE_YEARS:
            try:
                ts.astimezone(UTC)
            except OverflowError:
                raise ValueError("timestamp outside the years 1-9999 in UTC") from None


Check = Callable[[Sequence[Any]], None]


def _json_step(get: Callable[[Any], Any]) -> Check:
    def step(items: Sequence[Any]) -> None:
        if any(map(get, items)):  # most are empty
            for value in map(get, items):
                m.check_free_json(value)

    return step


def _time_step(get: Callable[[Any], Any]) -> Check:
    def step(items: Sequence[Any]) -> None:
        stamps = list(filter(None, map(get, items)))
        if not _EDGE_YEARS.isdisjoint(map(_year, stamps)):
            _check_times(stamps)

    return step


def _one_step(get: Callable[[Any], Any], inner: Check) -> Check:
    def step(items: Sequence[Any]) -> None:
        inner(list(filter(None, map(get, items))))

    return step


def _many_step(get: Callable[[Any], Any], inner: Check) -> Check:
    def step(items: Sequence[Any]) -> None:
        for value in map(get, items):
            if value:
                inner(value)

    return step


def _compile(plan: Plan) -> Check:
    """A function running ``plan`` on a list of decoded structs of one type (ValueError
    when the models would refuse one). Each field is read for the whole list at once
    (``map`` with an ``attrgetter``): ingest runs this on every packet of every trace,
    and a Python loop per packet cost a sixth of the decode."""
    steps: list[Check] = []
    for name, kind, sub in plan:
        get = attrgetter(name)
        if kind == "json":
            steps.append(_json_step(get))
        elif kind == "time":
            steps.append(_time_step(get))
        elif kind == "one":
            steps.append(_one_step(get, _compile(sub)))
        else:
            steps.append(_many_step(get, _compile(sub)))

    def run(items: Sequence[Any]) -> None:
        for step in steps:
            step(items)

    return run


_CHECK = _compile(_PLAN)


def _post(t: Any) -> bool:
    """The models' validators, on a decoded struct; False when any would refuse it."""
    try:
        m.check_schema(t.schema_)
        m.check_unique_ids([p.id for p in t.input.packets])
        m.check_partition_budgets(t.config.partition_budgets)
        _CHECK((t,))
    except ValueError:
        return False
    return True


def plain(raw: bytes) -> bool:
    """Whether ``raw`` holds neither pattern that sends a line to pydantic (a timestamp
    with seven or more digits of fraction, a surrogate escape). Each lies inside one JSON
    string, so a shared line's trace is plain when the line and every earlier line that
    brought a part are (``sharing.PartTable.plain``)."""
    return _LONG_FRACTION.search(raw) is None and _SURROGATE_ESCAPE.search(raw) is None


def decode(raw: bytes, checked: bool = False) -> Any | None:
    """A trace struct (same attribute names as ``models.Trace``), or ``None`` when the
    fast path does not accept the line; then validate it with pydantic. ``checked``: the
    caller knows the line is ``plain``."""
    if not checked and not plain(raw):
        return None
    try:
        t = _DECODER.decode(raw)
    except (msgspec.MsgspecError, RecursionError):  # nested past Python's stack
        return None
    return t if _post(t) else None
