"""What an OpenTelemetry export holds, whatever carried it: spans, their events, log records.

Instrumentations put a model call's prompt in different places (span attributes, span
events, log records) and people hand us their telemetry in different envelopes. This module
reads every envelope into one shape, ``SpanRecord`` (flat attributes, events in order), so
the convention readers (``otlp_genai``, ``otlp_openinference``, ``otlp_vercel``) never see
an envelope:

- OTLP JSON: ``{"resourceSpans": [...]}`` and ``{"resourceLogs": [...]}`` (the OTLP file
  exporter and a collector's file exporter write one such export per line; both signals may
  share a file). OTLP protobuf is decoded into the same JSON shape by ``otlp_proto``;
- log records (``eventName``, or an ``event.name`` attribute as older SDKs wrote it) are
  joined to their span by trace and span id and become that span's events, after its own;
  GenAI events whose span is not in the file make a span of their own;
- a list of spans as SDKs and tools dump them: ``{name, spanContext: {traceId, spanId},
  attributes: {...}, startTime: [s, ns], events}`` (JavaScript ``ReadableSpan``, the Vercel
  AI SDK), ``{name, context: {trace_id, span_id}, parent_id, start_time, attributes}``
  (Python's ``span.to_json()``), or OTLP-style span objects;
- one span's attributes as a flat JSON object (what many tools export).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ctxcore.errors import ImportFormatError
from ctxcore.formats.accounting import Tally
from ctxcore.formats.norm import NormMessage
from ctxcore.loading import TOO_DEEP
from ctxcore.models import ToolDef

#: Attribute-name prefixes that mark a flat JSON object as a span's attributes.
ATTRIBUTE_PREFIXES: tuple[str, ...] = (
    "gen_ai.",
    "llm.",
    "ai.",
    "openinference.",
    "traceloop.",
    "ctxscope.",
)


@dataclass
class EventRecord:
    """A span event or a log record: its name, flat attributes and (log records) body."""

    name: str
    attrs: dict[str, Any]
    body: Any = None
    time_ns: int = 0


@dataclass
class SpanRecord:
    """One span, flattened: ids as lowercase hex, attributes as plain values."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    start: datetime | None
    attrs: dict[str, Any]
    resource: dict[str, Any] = field(default_factory=dict)
    scope: str = ""
    events: list[EventRecord] = field(default_factory=list)
    #: where the span is in its file, for error messages
    where: str = "span"
    #: its position in the file (ties in start time keep file order)
    order: int = 0


@dataclass
class Prompt:
    """What a convention reader found in one span: the request the model was sent."""

    messages: list[NormMessage]
    tally: Tally
    tools: list[ToolDef] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    #: how ``usage`` reads as ``TokenUsage`` (``ctxcore.formats.usage.MAPPINGS``)
    usage_mapping: str | None = None
    output: str | None = None
    model: str | None = None
    output_reserve: int | None = None
    #: what the reader wants said in ``metadata.otlp`` (where the messages came from, …)
    notes: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- values


def any_value(v: Any) -> Any:
    """An OTLP JSON ``AnyValue`` as a plain Python value."""
    if not isinstance(v, dict):
        return v
    if "stringValue" in v:
        return v["stringValue"]
    if "boolValue" in v:
        return bool(v["boolValue"])
    if "intValue" in v:
        return int(v["intValue"])  # int64 travels as a JSON string
    if "doubleValue" in v:
        return float(v["doubleValue"])
    if "arrayValue" in v:
        inner = v["arrayValue"] if isinstance(v["arrayValue"], dict) else {}
        values = inner.get("values")
        return [any_value(x) for x in values] if isinstance(values, list) else []
    if "kvlistValue" in v:
        inner = v["kvlistValue"] if isinstance(v["kvlistValue"], dict) else {}
        values = inner.get("values")
        return attributes(values if isinstance(values, list) else [])
    if "bytesValue" in v:
        return base64.b64decode(str(v["bytesValue"])).decode("utf-8", "replace")
    return None


def attributes(items: Any) -> dict[str, Any]:
    """OTLP ``[{key, value}]`` attributes (or an already flat object) as a dict of plain
    values."""
    if isinstance(items, dict):
        return {str(k): v for k, v in items.items()}
    out: dict[str, Any] = {}
    for kv in items if isinstance(items, list) else []:
        if isinstance(kv, dict) and "key" in kv:
            out[str(kv["key"])] = any_value(kv.get("value"))
    return out


def structured(value: Any, name: str, where: str) -> Any:
    """Attributes may hold structured values or the same value as a JSON string."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ImportFormatError(f"{where}: {name} is not valid JSON ({exc.msg})") from exc
        except RecursionError as exc:
            raise ImportFormatError(f"{where}: {name}: {TOO_DEEP}") from exc
    return value


def hex_id(value: Any) -> str:
    """A trace or span id as lowercase hex: OTLP JSON writes hex, protobuf's JSON mapping
    base64, Python's ``to_json`` ``0x``-prefixed hex."""
    if not isinstance(value, str) or not value:
        return ""
    text = value[2:] if value.startswith("0x") else value
    if len(text) in (16, 32) and all(c in "0123456789abcdefABCDEF" for c in text):
        return text.lower()
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return value
    return raw.hex() if len(raw) in (8, 16) else value


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _nanos(value: Any) -> int:
    try:
        return max(int(value or 0), 0)
    except (TypeError, ValueError):
        return 0


def _time(value: Any) -> datetime | None:
    """A span's start: Unix nanoseconds (int or string), ``[seconds, nanos]`` (JavaScript
    hrtime) or an ISO 8601 string."""
    try:
        if isinstance(value, list) and len(value) == 2:
            return datetime.fromtimestamp(float(value[0]) + float(value[1]) / 1e9, tz=UTC)
        if isinstance(value, str) and not value.strip().isdigit():
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
        ns = _nanos(value)
        return datetime.fromtimestamp(ns / 1e9, tz=UTC) if ns > 0 else None
    except (TypeError, ValueError, OverflowError, OSError):
        return None


# --------------------------------------------------------------------------- detection


def is_export(data: Any) -> bool:
    """An OTLP JSON export (traces, logs, or both in one object)."""
    return isinstance(data, dict) and ("resourceSpans" in data or "resourceLogs" in data)


def is_attribute_map(data: Any) -> bool:
    """One span's attributes as a flat JSON object (not a chat request)."""
    if not isinstance(data, dict) or not data or "messages" in data or is_export(data):
        return False
    return any(isinstance(k, str) and k.startswith(ATTRIBUTE_PREFIXES) for k in data)


def is_span_object(data: Any) -> bool:
    """A span as an SDK or tool dumps it: a name and attributes (a flat object or OTLP
    key/value pairs), and no chat request keys."""
    if not isinstance(data, dict) or "messages" in data:
        return False
    attrs = data.get("attributes")
    return isinstance(data.get("name"), str) and isinstance(attrs, dict | list)


def looks_like(data: Any) -> bool:
    """Whether a parsed JSON value is OpenTelemetry data this package reads."""
    if is_export(data) or is_attribute_map(data):
        return True
    if is_span_object(data):
        return _has_known_attribute(data)
    if isinstance(data, list) and data:
        if all(is_export(x) for x in data):
            return True
        return all(is_span_object(x) for x in data) and any(_has_known_attribute(x) for x in data)
    return False


def _has_known_attribute(span: dict[str, Any]) -> bool:
    return any(k.startswith(ATTRIBUTE_PREFIXES) for k in attributes(span.get("attributes")))


# --------------------------------------------------------------------------- reading


def records_from_value(data: Any, where: str = "") -> list[SpanRecord]:
    """Every span a parsed JSON value holds, with its log records joined to it."""
    prefix = f"{where}: " if where else ""
    if is_export(data):
        return records_from_exports([(where, data)])
    if isinstance(data, list) and data and all(is_export(x) for x in data):
        return records_from_exports([(f"{prefix}[{i}]", x) for i, x in enumerate(data)])
    if is_attribute_map(data):
        return [SpanRecord("", "", "", "", None, dict(data), where=f"{prefix}span attributes")]
    if is_span_object(data):
        return [_span_object(data, f"{prefix}span", 0)]
    if isinstance(data, list) and data and all(is_span_object(x) for x in data):
        return [_span_object(x, f"{prefix}[{i}]", i) for i, x in enumerate(data)]
    raise ImportFormatError(
        "not OTLP JSON: expected an object with 'resourceSpans' or 'resourceLogs' (an OTLP "
        "export of traces or logs), a list of spans, or one span's attributes as a flat "
        "object (gen_ai.*, llm.*, ai.* keys)"
    )


def records_from_exports(exports: list[tuple[str, Any]]) -> list[SpanRecord]:
    """Spans of several OTLP exports (the lines of a file exporter's output, the messages
    of a protobuf stream), log records joined to their span across all of them."""
    spans: list[SpanRecord] = []
    logs: list[tuple[str, str, EventRecord]] = []
    for where, data in exports:
        if not is_export(data):
            spans.extend(records_from_value(data, where))  # a span or its attributes per line
            continue
        if "resourceSpans" in data:
            spans.extend(_otlp_spans(data["resourceSpans"], where, len(spans)))
        if "resourceLogs" in data:
            logs.extend(_otlp_logs(data["resourceLogs"], where))
    for n, span in enumerate(spans):
        span.order = n
    return join_logs(spans, logs)


def _listed(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ImportFormatError(f"{what}: expected a list, got {type(value).__name__}")
    return value


def _otlp_spans(resource_spans: Any, where: str, start: int) -> list[SpanRecord]:
    prefix = f"{where}: " if where else ""
    if not isinstance(resource_spans, list):
        raise ImportFormatError(
            f"{prefix}not OTLP JSON: 'resourceSpans' must be a list (the OTLP/HTTP JSON "
            "export of a trace)"
        )
    out: list[SpanRecord] = []
    for i, rs in enumerate(resource_spans):
        if not isinstance(rs, dict):
            raise ImportFormatError(f"{prefix}resourceSpans[{i}]: expected an object")
        resource = rs.get("resource")
        res = attributes(resource.get("attributes") if isinstance(resource, dict) else None)
        scopes = rs.get("scopeSpans", rs.get("instrumentationLibrarySpans"))
        for j, ss in enumerate(_listed(scopes, f"{prefix}resourceSpans[{i}].scopeSpans")):
            if not isinstance(ss, dict):
                continue
            scope = ss.get("scope", ss.get("instrumentationLibrary"))
            scope_name = scope.get("name") if isinstance(scope, dict) else None
            path = f"resourceSpans[{i}].scopeSpans[{j}].spans"
            for k, span in enumerate(_listed(ss.get("spans"), f"{prefix}{path}")):
                if not isinstance(span, dict):
                    continue
                name = _text(span.get("name"))
                out.append(
                    SpanRecord(
                        trace_id=hex_id(span.get("traceId")),
                        span_id=hex_id(span.get("spanId")),
                        parent_id=hex_id(span.get("parentSpanId")),
                        name=name,
                        start=_time(span.get("startTimeUnixNano")),
                        attrs=attributes(span.get("attributes")),
                        resource=res,
                        scope=str(scope_name or ""),
                        events=[
                            EventRecord(
                                name=str(e.get("name") or ""),
                                attrs=attributes(e.get("attributes")),
                                time_ns=_nanos(e.get("timeUnixNano")),
                            )
                            for e in _listed(span.get("events"), f"{prefix}{path}[{k}].events")
                            if isinstance(e, dict)
                        ],
                        where=f"{prefix}{path}[{k}] ({name or 'unnamed'})",
                        order=start + len(out),
                    )
                )
    return out


def _otlp_logs(resource_logs: Any, where: str) -> list[tuple[str, str, EventRecord]]:
    prefix = f"{where}: " if where else ""
    if not isinstance(resource_logs, list):
        raise ImportFormatError(f"{prefix}not OTLP JSON: 'resourceLogs' must be a list")
    out: list[tuple[str, str, EventRecord]] = []
    for i, rl in enumerate(resource_logs):
        if not isinstance(rl, dict):
            raise ImportFormatError(f"{prefix}resourceLogs[{i}]: expected an object")
        scopes = rl.get("scopeLogs", rl.get("instrumentationLibraryLogs"))
        for j, sl in enumerate(_listed(scopes, f"{prefix}resourceLogs[{i}].scopeLogs")):
            if not isinstance(sl, dict):
                continue
            path = f"{prefix}resourceLogs[{i}].scopeLogs[{j}].logRecords"
            for rec in _listed(sl.get("logRecords"), path):
                if not isinstance(rec, dict):
                    continue
                attrs = attributes(rec.get("attributes"))
                name = rec.get("eventName") or attrs.get("event.name") or ""
                out.append(
                    (
                        hex_id(rec.get("traceId")),
                        hex_id(rec.get("spanId")),
                        EventRecord(
                            name=str(name),
                            attrs=attrs,
                            body=any_value(rec.get("body")),
                            time_ns=_nanos(rec.get("timeUnixNano"))
                            or _nanos(rec.get("observedTimeUnixNano")),
                        ),
                    )
                )
    return out


def join_logs(
    spans: list[SpanRecord], logs: list[tuple[str, str, EventRecord]]
) -> list[SpanRecord]:
    """Log records become events of the span they were emitted in (by trace and span id),
    in the order they were emitted; GenAI events of a span not in the file make one."""
    by_id = {(s.trace_id, s.span_id): s for s in spans if s.span_id}
    orphans: dict[tuple[str, str], SpanRecord] = {}
    joined: set[tuple[str, str]] = set()
    for trace_id, span_id, event in logs:
        key = (trace_id, span_id)
        span = by_id.get(key) if span_id else None
        if span is None:
            if not event.name.startswith("gen_ai."):
                continue  # an application's own log line, not part of a prompt
            span = orphans.get(key)
            if span is None:
                span = SpanRecord(
                    trace_id=trace_id,
                    span_id=span_id,
                    parent_id="",
                    name="",
                    start=_time(event.time_ns),
                    attrs={},
                    where=f"log records of span {span_id or '(none)'}",
                    order=len(spans) + len(orphans),
                )
                orphans[key] = span
        span.events.append(event)
        joined.add(key)
    for key in joined:
        span = by_id.get(key) or orphans[key]
        if all(e.time_ns for e in span.events):
            span.events.sort(key=lambda e: e.time_ns)  # stable: ties keep emission order
    return spans + list(orphans.values())


def _span_object(span: dict[str, Any], where: str, order: int) -> SpanRecord:
    """A span as an SDK or tool dumps it (see the module docstring)."""
    ctx = span.get("spanContext", span.get("context"))
    ctx = ctx if isinstance(ctx, dict) else {}
    parent = span.get("parentSpanContext")
    parent_id = (
        parent.get("spanId")
        if isinstance(parent, dict)
        else span.get("parentSpanId", span.get("parent_id", span.get("parentId")))
    )
    name = _text(span.get("name"))
    start = span.get("startTime", span.get("start_time", span.get("startTimeUnixNano")))
    events = span.get("events")
    return SpanRecord(
        trace_id=hex_id(ctx.get("traceId", ctx.get("trace_id", span.get("traceId")))),
        span_id=hex_id(ctx.get("spanId", ctx.get("span_id", span.get("spanId")))),
        parent_id=hex_id(parent_id),
        name=name,
        start=_time(start),
        attrs=attributes(span.get("attributes")),
        resource=attributes(
            span["resource"].get("attributes") if isinstance(span.get("resource"), dict) else None
        ),
        events=[
            EventRecord(name=str(e.get("name") or ""), attrs=attributes(e.get("attributes")))
            for e in (events if isinstance(events, list) else [])
            if isinstance(e, dict)
        ],
        where=f"{where} ({name or 'unnamed'})",
        order=order,
    )


def ancestors(span: SpanRecord, spans: dict[tuple[str, str], SpanRecord]) -> list[SpanRecord]:
    """The span's parent, its parent's parent, … as far as the file holds them."""
    out: list[SpanRecord] = []
    seen = {span.span_id}
    parent = span.parent_id
    while parent and parent not in seen:
        up = spans.get((span.trace_id, parent))
        if up is None:
            break
        out.append(up)
        seen.add(parent)
        parent = up.parent_id
    return out


__all__ = [
    "ATTRIBUTE_PREFIXES",
    "EventRecord",
    "Prompt",
    "SpanRecord",
    "ancestors",
    "any_value",
    "attributes",
    "hex_id",
    "is_attribute_map",
    "is_export",
    "is_span_object",
    "join_logs",
    "looks_like",
    "records_from_exports",
    "records_from_value",
    "structured",
]
