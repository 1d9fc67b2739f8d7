"""A decoded protobuf message as the dict ``json_format.MessageToDict`` gives, a little faster.

The OTLP receiver and the protobuf importer decode exports with the ``opentelemetry-proto``
classes and read them as the OTLP JSON mapping (camelCase names, 64-bit integers as strings,
bytes as base64, enums by name), so one reader serves JSON and protobuf. ``MessageToDict`` is
generic and pays for it on every field of every message; an export of GenAI spans is mostly
attributes (a ``KeyValue`` and an ``AnyValue`` per attribute), so it dominated the
receiver's CPU time in the main process (docs/design.md, "Live capture").

Here each message type gets a plan once: per field, its JSON name and a converter chosen by
its type; ``KeyValue`` and ``AnyValue`` are read by name and by ``WhichOneof`` instead of
``ListFields``. Measured on exports of GenAI spans: 120–146 µs a span against 142–182 µs
(1.2–1.25×); what is left is mostly the protobuf runtime's own accessors.

The result is the same dict, key for key and value for value, as ``MessageToDict`` with its
default options (``tests/test_protodict.py`` checks every protobuf fixture and
messages with every kind of value, including NaN, infinities, unknown enum numbers and empty
sub-messages). Message types this does not plan for (maps, extensions, well-known types such
as ``Any`` or ``Struct``, wrappers) are handed to ``MessageToDict`` itself.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable
from typing import Any

from google.protobuf import descriptor as pbd
from google.protobuf.internal import type_checkers
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

Converter = Callable[[Any], Any]
#: Per message type: (field number -> (json name, converter, repeated)), or None for the
#: types left to ``MessageToDict``.
_Plan = dict[int, tuple[str, Converter, bool]]

_WELL_KNOWN = "google.protobuf."
_INT64 = frozenset({pbd.FieldDescriptor.CPPTYPE_INT64, pbd.FieldDescriptor.CPPTYPE_UINT64})


def _double(v: float) -> float | str:
    if math.isinf(v):
        return "-Infinity" if v < 0 else "Infinity"
    if math.isnan(v):
        return "NaN"
    return v


def _float(v: float) -> float | str:
    if math.isinf(v) or math.isnan(v):
        return _double(v)
    return float(type_checkers.ToShortestFloat(v))


def _bytes(v: bytes) -> str:
    return base64.b64encode(v).decode("utf-8")


def _enum(enum: pbd.EnumDescriptor) -> Converter:
    names = {n: ev.name for n, ev in enum.values_by_number.items()}

    def convert(v: int) -> str | int:
        return names.get(v, v)  # an open enum's unknown number stays a number

    return convert


def _converter(field: pbd.FieldDescriptor) -> Converter | None:
    cpp = field.cpp_type
    t = pbd.FieldDescriptor
    if cpp == t.CPPTYPE_MESSAGE:
        return message_to_dict
    if cpp == t.CPPTYPE_ENUM:
        enum = field.enum_type
        if enum is None or enum.full_name == "google.protobuf.NullValue" or enum.is_closed:
            return None  # MessageToDict's own rules (None, or an error on unknown numbers)
        if any(ev.GetOptions().ListFields() for ev in enum.values):
            return None  # enum value options could carry a JSON name
        return _enum(enum)
    if cpp == t.CPPTYPE_STRING:
        return _bytes if field.type == t.TYPE_BYTES else str
    if cpp == t.CPPTYPE_BOOL:
        return bool
    if cpp in _INT64:
        return str
    if cpp == t.CPPTYPE_DOUBLE:
        return _double
    if cpp == t.CPPTYPE_FLOAT:
        return _float
    return lambda v: v  # 32-bit integers


def _plan(desc: pbd.Descriptor) -> _Plan | None:
    if desc.full_name.startswith(_WELL_KNOWN) or desc.GetOptions().map_entry:
        return None
    plan: _Plan = {}
    for field in desc.fields:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            return None
        conv = _converter(field)
        if conv is None:
            return None
        plan[field.number] = (field.json_name, conv, field.is_repeated)
    return plan


_ANY = "opentelemetry.proto.common.v1.AnyValue"
_KEY_VALUE = "opentelemetry.proto.common.v1.KeyValue"
#: AnyValue's oneof cases: field name -> (JSON name, converter)
_ANY_CASES: dict[str, tuple[str, Converter]] = {}


def _any_value(v: Any) -> dict[str, Any]:
    # One attribute value: a oneof read with ``WhichOneof`` (no ``ListFields`` tuples), the
    # bulk of an export's messages.
    case = v.WhichOneof("value")
    if case is None:
        return {}
    json_name, conv = _ANY_CASES[case]
    return {json_name: conv(getattr(v, case))}


def _direct(desc: pbd.Descriptor) -> ToDict | None:
    """A converter reading a small message's fields by name, for messages whose fields are
    all singular strings, integers, booleans or messages without explicit presence rules
    beyond ``HasField`` (``KeyValue``): what ``ListFields`` would list, without building its
    tuples. None for any other shape."""
    steps: list[tuple[str, str, Converter, bool]] = []
    for f in sorted(desc.fields, key=lambda f: f.number):
        if f.is_repeated or f.containing_oneof is not None:
            return None
        t = pbd.FieldDescriptor
        is_message = f.cpp_type == t.CPPTYPE_MESSAGE
        if not is_message and (f.has_presence or f.cpp_type in (t.CPPTYPE_FLOAT, t.CPPTYPE_DOUBLE)):
            return None  # presence and -0.0 follow rules ``ListFields`` knows best
        conv = _converter(f)
        if conv is None:
            return None
        steps.append((f.name, f.json_name, conv, is_message))

    def convert(message: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, json_name, conv, is_message in steps:
            if is_message:
                if message.HasField(name):
                    out[json_name] = conv(getattr(message, name))
            else:
                value = getattr(message, name)
                if value:
                    out[json_name] = conv(value)
        return out

    return convert


def _specialize(desc: pbd.Descriptor) -> Callable[[Any], dict[str, Any]] | None:
    """The hand-made converters of OTLP's two most frequent messages (checked against their
    descriptors: a schema change that adds a field falls back to the plan)."""
    if desc.full_name == _KEY_VALUE:
        return _direct(desc)
    if desc.full_name == _ANY and all(f.containing_oneof is not None for f in desc.fields):
        for f in desc.fields:
            conv = _converter(f)
            if conv is None:
                return None
            _ANY_CASES[f.name] = (f.json_name, conv)
        return _any_value
    return None


ToDict = Callable[[Any], dict[str, Any]]
#: Per message class, its converter (found once; ``DESCRIPTOR`` lookups cost more than the
#: conversion of a small message).
_BY_TYPE: dict[type, ToDict] = {}


def _planned(plan: dict[Any, tuple[str, Converter, bool]]) -> ToDict:
    def convert(message: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for field, value in message.ListFields():
            try:
                json_name, conv, repeated = plan[field]
            except KeyError:  # an extension: not a field of the message's own
                return MessageToDict(message)
            out[json_name] = [conv(v) for v in value] if repeated else conv(value)
        return out

    return convert


def _converter_of(message: Message) -> ToDict:
    desc: Any = message.DESCRIPTOR  # the upb or the pure-Python descriptor class
    special = _specialize(desc)
    if special is not None:
        return special
    plan = _plan(desc)
    if plan is None:
        return MessageToDict
    by_field = {f: plan[f.number] for f in desc.fields}
    return _planned(by_field)


def message_to_dict(message: Message) -> dict[str, Any]:
    """``MessageToDict(message)`` with its default options, computed faster."""
    try:
        convert = _BY_TYPE[type(message)]
    except KeyError:
        convert = _BY_TYPE[type(message)] = _converter_of(message)
    return convert(message)


__all__ = ["message_to_dict"]
