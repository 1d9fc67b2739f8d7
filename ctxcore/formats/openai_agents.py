"""OpenAI Agents SDK trace exports: one trace per model-call span that carries its input
(docs/design.md, "Formats").

The Agents SDK (openai/openai-agents-python) exports traces and spans as JSON objects:
``{"object": "trace", "id", "workflow_name", "group_id", "metadata"}`` and ``{"object":
"trace.span", "id", "trace_id", "parent_id", "started_at", "ended_at", "span_data",
"error"}``, ``span_data.type`` one of ``agent``, ``response``, ``generation``,
``function``, ``handoff``, ``guardrail``, ``custom``, … Its exporter sends them in batches
(``POST /v1/traces/ingest``, ``{"data": [...]}``); a ``TracingProcessor`` of one's own
writes the same objects, read here as such a batch or a list of them (a JSONL file of them is
read line by line, so each line must hold its batch).

A model call is a ``generation`` span (the Chat Completions model and the LiteLLM and
any-llm models: ``input`` and ``output`` are chat messages, with ``model``,
``model_config`` and ``usage``) or a ``response`` span (the Responses model). Each such span
that carries its ``input`` is one trace: chat messages are read by the chat format's mapping
(``openai.normalize_parts_message``), Responses input items (a ``response`` span whose
processor kept ``input``) by ``responses.normalize``; ``output`` becomes
``outcome.output``, ``usage`` the usage, ``model_config.max_tokens`` the output reserve.
The session is the trace's ``group_id`` when the batch holds the trace, else the trace id;
turns count in start order per session.

The SDK leaves the input out in two cases, and then nothing can be imported: a generation
span's ``input`` is ``null`` unless the run traces sensitive data
(``RunConfig(trace_include_sensitive_data=True)``, or
``OPENAI_AGENTS_TRACE_INCLUDE_SENSITIVE_DATA=true``), and a ``response`` span is exported as
its ``response_id`` and usage only, whatever the setting. A file whose call spans all lack
their input is refused in one line that says which and what to turn on.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any

from ctxcore.errors import ImportFormatError
from ctxcore.formats import responses
from ctxcore.formats.accounting import Tally
from ctxcore.formats.derive import make_trace
from ctxcore.formats.exports import RecordedCall, traces_per_call
from ctxcore.formats.norm import NormMessage, captured_input_from_norm, reply_text
from ctxcore.formats.openai import normalize_message
from ctxcore.formats.request import reserve_tokens
from ctxcore.formats.sessions.lines import parse_time
from ctxcore.formats.usage import normalize as normalize_usage
from ctxcore.models import Trace

BUILDER_NAME = "import/openai-agents"
FORMAT = "openai-agents"
OBJECTS = frozenset({"trace", "trace.span"})
#: Span types that are a model call.
CALLS = frozenset({"generation", "response"})
NO_INPUT = (
    "the Agents SDK exports a generation span's input only when the run traces sensitive "
    "data (RunConfig(trace_include_sensitive_data=True) or "
    "OPENAI_AGENTS_TRACE_INCLUDE_SENSITIVE_DATA=true), and a response span as its "
    "response_id only: turn that on and use a model that records generation spans "
    "(OpenAIChatCompletionsModel, LitellmModel), or record the calls themselves "
    "(ctxscope proxy, ctxscope run)"
)


def _is_item(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and obj.get("object") in OBJECTS
        and "id" in obj
        and (obj["object"] == "trace" or isinstance(obj.get("span_data"), dict))
    )


def _items(data: Any) -> list[Any] | None:
    """The exported objects a value holds: an ingest batch, a list, or one object."""
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        return list(data["data"])
    if isinstance(data, list):
        return data
    if isinstance(data, dict) and "object" in data:
        return [data]
    return None


def looks_like(data: Any) -> bool:
    """Whether a JSON value is an Agents SDK trace export."""
    items = _items(data)
    return items is not None and bool(items) and all(_is_item(x) for x in items[:50])


def _input(span: dict[str, Any], data: dict[str, Any], tally: Tally) -> list[NormMessage]:
    """A call span's input: chat messages (a generation) or Responses items."""
    value = data.get("input")
    if isinstance(value, str):
        value = [{"role": "user", "content": value}]
    if not isinstance(value, list):
        raise ImportFormatError(f"span_data.input: expected a list, got {type(value).__name__}")
    # a response span holds Responses items; a generation span chat messages
    items = True if data.get("type") == "response" else None
    return responses.normalize_recorded(value, tally, where="span_data.input", items=items)


def _output(value: Any) -> str | None:
    """``span_data.output`` (the reply's messages) as ``outcome.output``."""
    if isinstance(value, dict) and isinstance(value.get("output"), list):
        return responses.REQUESTS.output({}, value)
    lines = [
        reply_text(normalize_message(m, i))
        for i, m in enumerate(value if isinstance(value, list) else [])
        if isinstance(m, dict) and "role" in m
    ]
    return "\n".join(x for x in lines if x) or None


def _usage(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        return {}
    return {
        k: int(v)
        for k, v in value.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }


def trace_from_span(
    span: dict[str, Any], *, session_id: str, turn: int, default_now: datetime | None
) -> Trace:
    """One model-call span that carries its input → one trace."""
    data: dict[str, Any] = span["span_data"]
    tally = Tally(FORMAT)
    norm = _input(span, data, tally)
    when = parse_time(span.get("started_at")) or default_now or datetime.now(UTC)
    config = data.get("model_config")
    config = config if isinstance(config, dict) else {}
    inp, flat = captured_input_from_norm(
        norm, tools=[], now=when, output_reserve=reserve_tokens(config.get("max_tokens"))
    )
    model = data.get("model")
    side = {
        "trace_id": span.get("trace_id"),
        "span_id": str(span["id"]),
        "parent_id": span.get("parent_id"),
        "span_type": data.get("type"),
        "response_id": data.get("response_id"),
        "ended_at": span.get("ended_at"),
        "error": span.get("error"),
    }
    usage = _usage(data.get("usage"))
    return make_trace(
        inp,
        flat,
        builder=BUILDER_NAME,
        model=model if isinstance(model, str) else None,
        trace_id=f"{span.get('trace_id')}-{span['id']}",
        session_id=session_id,
        turn=turn,
        created_at=when,
        usage=usage,
        tokens=normalize_usage("openai-responses", usage),
        output=_output(data.get("output")),
        metadata={
            "openai_agents": {k: v for k, v in side.items() if v is not None},
            "import": tally.to_metadata(),
        },
    )


def _sessions(items: list[dict[str, Any]]) -> dict[str, str]:
    """Trace id → its session: the trace's ``group_id``, else the trace id."""
    out: dict[str, str] = {}
    for item in items:
        if item["object"] == "trace":
            group = item.get("group_id")
            out[str(item["id"])] = group if isinstance(group, str) and group else str(item["id"])
    return out


def _calls(items: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """The model-call spans with their place in the file, in start order."""
    calls = [
        (i, x)
        for i, x in enumerate(items)
        if x["object"] == "trace.span" and x["span_data"].get("type") in CALLS
    ]
    epoch = datetime.min.replace(tzinfo=UTC)
    return sorted(calls, key=lambda p: (parse_time(p[1].get("started_at")) or epoch, p[0]))


def refusal(items: list[dict[str, Any]]) -> str:
    """Why a file with no call span that carries its input imports nothing (one line)."""
    kinds = Counter(str(x["span_data"].get("type")) for x in items if x["object"] == "trace.span")
    calls = sum(kinds[k] for k in CALLS)
    held = ", ".join(f"{n} {t}" for t, n in sorted(kinds.items())) or "no span"
    if not calls:
        return f"no model call in this Agents SDK export (its spans: {held})"
    return f"none of its {calls} model-call span(s) carries its input ({held}): {NO_INPUT}"


def read(data: Any, *, where: str, session_id: str, default_now: datetime | None) -> list[Trace]:
    """The Agents SDK format's reader (``registry.Reader``)."""
    prefix = f"{where}: " if where else ""
    items = _items(data) or []
    for i, x in enumerate(items):
        if not _is_item(x):
            raise ImportFormatError(
                f"{prefix}[{i}]: not an Agents SDK trace or span (object 'trace' or "
                "'trace.span' with its span_data)"
            )
    sessions = _sessions(items)
    with_input = [(i, s) for i, s in _calls(items) if s["span_data"].get("input") is not None]
    if not with_input:
        raise ImportFormatError(prefix + refusal(items))

    def call(i: int, span: dict[str, Any]) -> RecordedCall:
        tid = str(span.get("trace_id") or session_id)
        session = sessions.get(tid, tid)
        return (
            f"{prefix}[{i}] (span {span['id']})",
            session,
            lambda turn: trace_from_span(
                span, session_id=session, turn=turn, default_now=default_now
            ),
        )

    return traces_per_call(call(i, span) for i, span in with_input)


__all__ = ["FORMAT", "NO_INPUT", "looks_like", "read", "refusal", "trace_from_span"]
