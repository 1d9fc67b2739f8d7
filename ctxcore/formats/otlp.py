"""Import OpenTelemetry GenAI spans (OTLP JSON) as ctxscope traces.

Agents instrumented with OpenTelemetry already record each model call as a span. The GenAI
semantic conventions put the prompt on span attributes: ``gen_ai.system_instructions``
(a list of parts), ``gen_ai.input.messages`` (``[{role, parts: [...]}]`` with parts of
type ``text``, ``reasoning``, ``tool_call`` ``{id, name, arguments}`` and
``tool_call_response`` ``{id, response}``), ``gen_ai.tool.definitions``,
``gen_ai.usage.input_tokens``/``output_tokens``, ``gen_ai.request.model``,
``gen_ai.conversation.id``. Values may be structured OTLP ``AnyValue``s or JSON strings;
both are read. The older flattened ``gen_ai.prompt.<i>.role``/``.content`` attributes
(OpenLLMetry) are read too.

One span that carries a prompt becomes one trace. A span written by ``ctxcore.formats.share``'s
OTLP export also carries ``ctxscope.*`` attributes (the captured input, config, result
and one group of ``ctxscope.decision.<i>.*`` attributes per decision); those are read
back as they were, so the decisions survive a round trip through a tracing backend.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

from ctxcore.errors import ImportFormatError, InputError
from ctxcore.formats.derive import make_trace
from ctxcore.formats.openai import (
    NormMessage,
    captured_input_from_norm,
    normalize_message,
    parse_tools,
    text_of,
)
from ctxcore.loading import trace_from_obj
from ctxcore.models import Trace

BUILDER_NAME = "import/otlp"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
PREFIX = "ctxscope."
DECISION_PREFIX = "ctxscope.decision."
#: Decision fields exported as one attribute each (``ctxscope.decision.<i>.<field>``).
DECISION_FIELDS: tuple[str, ...] = (
    "packet_id",
    "kind",
    "status",
    "reason",
    "reason_text",
    "partition",
    "relevance",
    "recency",
    "score",
    "rank",
    "tokens_before",
    "tokens_after",
    "budget_left",
    "notes",
)
#: Trace fields carried as JSON-valued ``ctxscope.<name>`` attributes.
JSON_FIELDS: tuple[str, ...] = ("input", "config", "builder", "metadata", "redactions", "outcome")
RESULT_JSON_FIELDS: tuple[str, ...] = (
    "messages",
    "partitions",
    "totals",
    "report",
    "warnings",
    "timings",
)


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
        return [any_value(x) for x in (v["arrayValue"] or {}).get("values", [])]
    if "kvlistValue" in v:
        return {
            kv["key"]: any_value(kv.get("value"))
            for kv in (v["kvlistValue"] or {}).get("values", [])
        }
    if "bytesValue" in v:
        return base64.b64decode(v["bytesValue"]).decode("utf-8", "replace")
    return None


def attributes(items: Any) -> dict[str, Any]:
    """OTLP ``[{key, value}]`` attributes as a dict of plain values."""
    out: dict[str, Any] = {}
    for kv in items if isinstance(items, list) else []:
        if isinstance(kv, dict) and "key" in kv:
            out[str(kv["key"])] = any_value(kv.get("value"))
    return out


def _structured(value: Any, name: str, where: str) -> Any:
    """Attributes may hold structured values or the same value as a JSON string."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ImportFormatError(f"{where}: {name} is not valid JSON ({exc.msg})") from exc
    return value


def iter_spans(data: Any) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(resource attributes, span) for every span of an OTLP JSON export."""
    if not isinstance(data, dict) or not isinstance(data.get("resourceSpans"), list):
        raise ImportFormatError(
            "not OTLP JSON: expected an object with 'resourceSpans' "
            "(the OTLP/HTTP JSON export of a trace)"
        )
    out = []
    for i, rs in enumerate(data["resourceSpans"]):
        if not isinstance(rs, dict):
            raise ImportFormatError(f"resourceSpans[{i}]: expected an object")
        resource = rs.get("resource")
        res = attributes(resource.get("attributes") if isinstance(resource, dict) else None)
        scopes = rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or []
        for ss in scopes if isinstance(scopes, list) else []:
            spans = ss.get("spans") if isinstance(ss, dict) else None
            for span in spans if isinstance(spans, list) else []:
                if isinstance(span, dict):
                    out.append((res, span))
    return out


def _span_time(span: dict[str, Any]) -> datetime | None:
    try:
        ns = int(span.get("startTimeUnixNano") or 0)
    except (TypeError, ValueError):
        return None
    return datetime.fromtimestamp(ns / 1e9, tz=UTC) if ns > 0 else None


def _legacy_prompt(attrs: dict[str, Any]) -> list[dict[str, Any]]:
    """OpenLLMetry's ``gen_ai.prompt.<i>.role``/``.content`` flattened messages."""
    rows: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        if not key.startswith("gen_ai.prompt."):
            continue
        idx, _, field = key[len("gen_ai.prompt.") :].partition(".")
        if idx.isdigit() and field in ("role", "content", "tool_call_id"):
            rows.setdefault(int(idx), {})[field] = value
    return [rows[i] for i in sorted(rows) if "role" in rows[i]]


def _system_text(value: Any, where: str) -> str:
    value = _structured(value, "gen_ai.system_instructions", where)
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        msg = normalize_message({"role": "system", "content": value}, 0)
        return msg.text
    return text_of(value)


def _output_text(value: Any, where: str) -> str | None:
    value = _structured(value, "gen_ai.output.messages", where)
    if not isinstance(value, list) or not value:
        return None
    return normalize_message(value[0], 0).text or None


def _usage(attrs: dict[str, Any]) -> dict[str, int]:
    usage: dict[str, int] = {}
    for key, value in attrs.items():
        if key.startswith("gen_ai.usage.") and isinstance(value, int | float):
            usage[key[len("gen_ai.usage.") :]] = int(value)
    return usage


def _is_ctxscope_span(attrs: dict[str, Any]) -> bool:
    return isinstance(attrs.get("ctxscope.input"), str) and "ctxscope.trace_id" in attrs


def trace_from_ctxscope_span(attrs: dict[str, Any], where: str) -> Trace:
    """Rebuild a trace exported by ``ctxcore.formats.share.otlp_export`` from its attributes."""

    def js(name: str) -> Any:
        raw = attrs.get(name)
        return None if raw is None else _structured(raw, name, where)

    data: dict[str, Any] = {
        "schema": attrs.get("ctxscope.schema"),
        "trace_id": attrs["ctxscope.trace_id"],
        "session_id": attrs.get("ctxscope.session_id", "default"),
        "turn": attrs.get("ctxscope.turn", 0),
        "created_at": attrs.get("ctxscope.created_at"),
        "tags": list(attrs.get("ctxscope.tags") or []),
        "source_trace_id": attrs.get("ctxscope.source_trace_id"),
    }
    for name in JSON_FIELDS:
        data[name] = js(PREFIX + name)
    if "ctxscope.result.prompt" in attrs:
        result: dict[str, Any] = {"prompt": attrs["ctxscope.result.prompt"]}
        for name in RESULT_JSON_FIELDS:
            result[name] = js(f"ctxscope.result.{name}")
        count = int(attrs.get("ctxscope.decision.count", 0))
        decisions = []
        for i in range(count):
            d = {f: attrs.get(f"{DECISION_PREFIX}{i}.{f}") for f in DECISION_FIELDS}
            d["notes"] = list(d["notes"] or [])
            decisions.append(d)
        result["decisions"] = decisions
        data["result"] = result
    else:
        data["result"] = None
    try:
        return trace_from_obj(data, where)
    except InputError as exc:
        raise ImportFormatError(f"{exc} (the ctxscope.* attributes of this span)") from exc


def trace_from_span(
    span: dict[str, Any],
    resource: dict[str, Any] | None = None,
    *,
    where: str = "span",
    turn: int = 0,
) -> Trace | None:
    """One GenAI span → one trace; ``None`` for spans that carry no prompt."""
    attrs = attributes(span.get("attributes"))
    if _is_ctxscope_span(attrs):
        return trace_from_ctxscope_span(attrs, where)
    raw_msgs = attrs.get("gen_ai.input.messages")
    if raw_msgs is not None:
        messages = _structured(raw_msgs, "gen_ai.input.messages", where)
        if not isinstance(messages, list):
            raise ImportFormatError(f"{where}: gen_ai.input.messages must be a list of messages")
    else:
        messages = _legacy_prompt(attrs)
        if not messages:
            return None
    norm: list[NormMessage] = []
    system = attrs.get("gen_ai.system_instructions")
    offset = 0
    if system is not None:
        norm.append(NormMessage(index=0, role="system", text=_system_text(system, where)))
        offset = 1
    for i, m in enumerate(messages):
        try:
            norm.append(normalize_message(m, i + offset))
        except ImportFormatError as exc:
            raise ImportFormatError(f"{where}: gen_ai.input.{exc}") from exc
    tools_raw = attrs.get("gen_ai.tool.definitions")
    tools = (
        parse_tools(_structured(tools_raw, "gen_ai.tool.definitions", where)) if tools_raw else []
    )
    when = _span_time(span) or datetime.now(UTC)
    max_out = attrs.get("gen_ai.request.max_tokens")
    inp, flat = captured_input_from_norm(
        norm,
        tools=tools,
        now=when,
        output_reserve=max_out if isinstance(max_out, int) and max_out >= 0 else None,
    )
    model = attrs.get("gen_ai.request.model") or attrs.get("gen_ai.response.model")
    trace_hex = str(span.get("traceId") or "")
    span_hex = str(span.get("spanId") or "")
    session = attrs.get("gen_ai.conversation.id") or trace_hex or "otlp"
    meta: dict[str, Any] = {"otlp": {"trace_id": trace_hex, "span_id": span_hex}}
    if span.get("name"):
        meta["otlp"]["span_name"] = span["name"]
    for key in ("gen_ai.provider.name", "gen_ai.system", "gen_ai.operation.name"):
        if isinstance(attrs.get(key), str):
            meta["otlp"][key] = attrs[key]
    if resource and isinstance(resource.get("service.name"), str):
        meta["otlp"]["service.name"] = resource["service.name"]
    out_raw = attrs.get("gen_ai.output.messages")
    return make_trace(
        inp,
        flat,
        builder=BUILDER_NAME,
        model=model if isinstance(model, str) else None,
        trace_id=f"{trace_hex}-{span_hex}" if trace_hex and span_hex else f"otlp-{where}",
        session_id=str(session),
        turn=turn,
        created_at=when,
        usage=_usage(attrs),
        output=_output_text(out_raw, where) if out_raw is not None else None,
        metadata=meta,
    )


def traces_from_otlp(data: Any) -> list[Trace]:
    """Every GenAI span of an OTLP JSON export, as traces (turn = order in its session)."""
    spans = iter_spans(data)
    ordered = sorted(enumerate(spans), key=lambda p: (_span_time(p[1][1]) or _EPOCH, p[0]))
    turns: dict[str, int] = {}
    out: list[Trace] = []
    for i, (res, span) in ordered:
        attrs = attributes(span.get("attributes"))
        session = str(attrs.get("gen_ai.conversation.id") or span.get("traceId") or "otlp")
        trace = trace_from_span(
            span, res, where=f"span {i} ({span.get('name', '?')})", turn=turns.get(session, 0)
        )
        if trace is not None:
            turns[session] = turns.get(session, 0) + 1
            out.append(trace)
    if not out:
        raise ImportFormatError(
            f"none of the {len(spans)} spans carries a prompt (gen_ai.input.messages); "
            "enable content capture in your GenAI instrumentation "
            "(e.g. OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true)"
        )
    return out
