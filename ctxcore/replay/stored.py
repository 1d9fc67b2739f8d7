"""Stored traces as the replay reads them: the JSON the store keeps, read into ``Trace``s where
they are replayed (in the worker processes), and a session's traces put in turn order."""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from pydantic import BaseModel

from ctxcore.errors import CtxscopeError, InputError
from ctxcore.models import Finding, Trace, unvalidated
from ctxcore.replay.report import TurnError


@dataclass(frozen=True)
class TraceJson:
    """A trace as the JSON it is stored as (UTF-8), read into a ``Trace`` where it is replayed.

    ``ctxscope replay --all`` hands the worker processes the stored JSON rather than traces:
    a ``Trace`` of ~100 packets pickles to ~250 kB and costs more to pickle and unpickle than
    to validate from JSON, and the validation then runs in the workers, in parallel, instead
    of in the one process that reads the store.

    ``decode``, when given, reads the JSON faster than pydantic into a struct with the
    models' field names and values that the models would accept as they are, or returns
    None (``ctxscope replay`` passes ingest's msgspec reader, ``ctxcore.store.fastdecode``,
    which keeps that rule: about half the time of validating). What it cannot read, pydantic
    validates, and a trace neither reads is that turn's error, worded by pydantic.
    """

    trace_id: str
    raw: bytes
    decode: Callable[[bytes], Any] | None = None
    #: with ``unpack``, ``raw`` is the JSON as the store keeps it (compressed) and ``size``
    #: its length unpacked: ``unpack(raw, size)`` is the JSON (``ctxscope replay --all``
    #: leaves that to the workers too)
    size: int = 0
    unpack: Callable[[bytes, int], bytes] | None = None
    #: the trace's findings as the store computed them at insert, alone (no other turns)
    #: and by this very code (``diagnostics.fingerprint``): the recorded side takes the
    #: detectors that read one trace from them (``diagnose(..., alone=)``)
    findings: Sequence[Finding] | None = None

    def load(self) -> Trace:
        raw = self.raw
        if self.unpack is not None:
            try:
                raw = self.unpack(raw, self.size)
            except Exception as exc:  # noqa: BLE001 - one damaged blob is that turn's error
                why = f"{type(exc).__name__}: {exc}"
                raise InputError(f"trace_id {self.trace_id!r}: cannot be unpacked ({why})") from exc
        if self.decode is not None:
            try:
                fast = self.decode(raw)
                if fast is not None:
                    return _read_struct(Trace, fast)
            except Exception:  # noqa: BLE001 - pydantic reads it again and words what is wrong
                pass
        try:
            return Trace.model_validate_json(raw)
        except ValueError as exc:  # pydantic's ValidationError, or bad UTF-8
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise InputError(f"trace_id {self.trace_id!r}: cannot be read ({first})") from exc


_M = TypeVar("_M", bound=BaseModel)
_Reader = Callable[[Any], Any]
#: per (model, struct type): the function that makes the model from such a struct
_READERS: dict[tuple[type[BaseModel], type], _Reader] = {}


def _read_struct(model: type[_M], struct: Any) -> _M:
    """``model`` made from a struct that has its fields (same names, same order) holding
    values the model accepts as they are (``TraceJson.decode``): nested structs become their
    models and plain strings the enum members, the rest is taken as it is, nothing is
    validated again (the same internals a validated model has; tests/test_replay_speed.py
    compares them). What to convert is worked out once per model and struct type."""
    read = _READERS.get((model, type(struct)))
    if read is None:
        read = _READERS[(model, type(struct))] = _reader(model, type(struct))
    out: _M = read(struct)
    return out


def _reader(model: type[BaseModel], struct_type: type) -> _Reader:
    if tuple(getattr(struct_type, "__struct_fields__", ())) != tuple(model.model_fields):
        raise TypeError(f"a {struct_type.__name__} struct is not a {model.__name__}")
    # msgspec only here: ctxcore is imported where it is not installed (the hello-agents
    # adapter runs in the package's own environment), and only the store's reader makes structs
    from msgspec.structs import asdict

    hints = typing.get_type_hints(model, include_extras=True)
    convert = [(n, fn) for n in model.model_fields if (fn := _converter(hints[n])) is not None]

    def read(struct: Any) -> BaseModel:
        values: dict[str, Any] = asdict(struct)
        for name, fn in convert:
            values[name] = fn(values[name])
        return unvalidated(model, values)

    return read


def _converter(tp: Any) -> _Reader | None:
    """How a field's struct value becomes the model's (None: as it is)."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _converter(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        inner = [fn for a in typing.get_args(tp) if (fn := _converter(a)) is not None]
        if not inner:
            return None
        if len(inner) > 1 or type(None) not in typing.get_args(tp):
            raise TypeError(f"replay cannot read {tp!r} from a struct")
        one = inner[0]
        return lambda v: None if v is None else one(v)
    if origin is list:
        args = typing.get_args(tp)
        if isinstance(args[0], type) and issubclass(args[0], BaseModel):
            return functools.partial(_read_structs, args[0])
        item = _converter(args[0])
        return None if item is None else (lambda v: [item(x) for x in v])
    if origin is dict:
        if _converter(typing.get_args(tp)[1]) is not None:
            raise TypeError(f"replay cannot read {tp!r} from a struct")
        return None
    if isinstance(tp, type) and issubclass(tp, Enum):
        return tp._value2member_map_.__getitem__
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return functools.partial(_read_struct, tp)
    return None


def _read_structs(model: type[BaseModel], structs: list[Any]) -> list[Any]:
    """A list of structs made models (one reader looked up for a list of one struct type)."""
    if not structs:
        return []
    kind = type(structs[0])
    read = _READERS.get((model, kind)) or _READERS.setdefault((model, kind), _reader(model, kind))
    return [read(x) if type(x) is kind else _read_struct(model, x) for x in structs]


TraceLike = Trace | TraceJson


def _turn_order(
    traces: Iterable[TraceLike], stored: dict[str, Sequence[Finding]] | None = None
) -> tuple[list[Trace], list[TurnError]]:
    """The traces in turn order, and one error per stored trace that could not be read;
    ``stored`` gets the findings that came with a stored trace, by its id."""
    loaded: list[Trace] = []
    errors: list[TurnError] = []
    for t in traces:
        if not isinstance(t, TraceJson):
            loaded.append(t)
            continue
        try:
            loaded.append(t.load())
            if stored is not None and t.findings is not None:
                stored[loaded[-1].trace_id] = t.findings
        except CtxscopeError as exc:
            errors.append(
                TurnError(
                    session_id="", turn=-1, trace_id=t.trace_id, side="read", message=str(exc)
                )
            )
    return sorted(loaded, key=lambda t: (t.turn, t.created_at, t.trace_id)), errors
