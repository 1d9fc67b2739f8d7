"""Import OpenTelemetry traces of model calls as ctxscope traces, as instrumentations emit them.

Agents instrumented with OpenTelemetry already record each model call as a span, but where
the prompt is depends on the instrumentation and its version, and the envelope on the
exporter. This module ties the parts together:

- ``otlp_records`` reads the envelope (OTLP JSON traces and logs, a collector's JSONL file,
  a span list, one span's attributes as a flat object) into spans with their events, log
  records joined to their span by trace and span id; ``otlp_proto`` decodes OTLP protobuf
  files (a bare export request, or the collector's length-prefixed stream) into the same;
- a convention reader finds the prompt in each span: ``otlp_vercel`` (Vercel AI SDK,
  ``ai.prompt.messages``), ``otlp_openinference`` (``llm.input_messages.<i>.*``), else
  ``otlp_genai`` (the GenAI conventions: ``gen_ai.input.messages`` on the span or on a
  details event, ``gen_ai.*.message`` events as log records or span events, the older
  flattened and JSON-string prompts);
- one span that carries a prompt becomes one trace (spans that carry none, such as agent
  and tool spans, are skipped); a span whose prompt is broken is skipped with its error
  (file:line, span), the rest imported, and the error listed in the first trace's
  ``metadata.import.skipped``;
- the session is ``gen_ai.conversation.id`` or ``session.id`` (or the AI SDK's
  ``ai.telemetry.metadata.sessionId``) of the span or its nearest ancestor that has one,
  else the trace id; turns count in start-time order within a session;
- when no span carries a prompt, the error says what the instrumentations in the file need
  to record one (``no_prompt_hint``).

A span written by ``ctxcore.formats.share``'s OTLP export also carries ``ctxscope.*``
attributes (the captured input, config, result and one group of ``ctxscope.decision.<i>.*``
attributes per decision); those are read back as they were, so the decisions survive a round
trip through a tracing backend.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ctxcore.errors import ImportFormatError, InputError
from ctxcore.formats import otlp_genai, otlp_openinference, otlp_vercel
from ctxcore.formats.derive import make_trace, stable_id
from ctxcore.formats.norm import captured_input_from_norm
from ctxcore.formats.otlp_proto import exports_from_bytes
from ctxcore.formats.otlp_records import (
    Prompt,
    SpanRecord,
    ancestors,
    any_value,
    attributes,
    looks_like,
    records_from_exports,
    records_from_value,
    structured,
)
from ctxcore.formats.usage import normalize as normalize_usage
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
#: Attributes that name a conversation, the first found wins (on the span, then upwards).
SESSION_KEYS: tuple[str, ...] = (
    "gen_ai.conversation.id",
    "session.id",
    "ai.telemetry.metadata.sessionId",
)
#: Span attributes kept in ``metadata.otlp`` when present.
_KEPT_ATTRIBUTES: tuple[str, ...] = (
    "gen_ai.provider.name",
    "gen_ai.system",
    "gen_ai.operation.name",
    "gen_ai.response.id",
    "openinference.span.kind",
    "ai.operationId",
)


# --------------------------------------------------------------------------- ctxscope spans


def _is_ctxscope_span(attrs: dict[str, Any]) -> bool:
    return isinstance(attrs.get("ctxscope.input"), str) and "ctxscope.trace_id" in attrs


def trace_from_ctxscope_span(attrs: dict[str, Any], where: str) -> Trace:
    """Rebuild a trace exported by ``ctxcore.formats.share.otlp_export`` from its attributes."""

    def js(name: str) -> Any:
        raw = attrs.get(name)
        return None if raw is None else structured(raw, name, where)

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


# --------------------------------------------------------------------------- one span


def read_prompt(span: SpanRecord) -> Prompt | None:
    """The prompt a span carries, read by the convention its attributes follow."""
    if otlp_vercel.is_vercel(span.attrs):
        found = otlp_vercel.prompt_from_span(span)
        if found is not None:
            return found
    if otlp_openinference.is_openinference(span.attrs):
        found = otlp_openinference.prompt_from_span(span)
        if found is not None:
            return found
    return otlp_genai.prompt_from_span(span)


def session_of(
    span: SpanRecord, spans: dict[tuple[str, str], SpanRecord], fallback: str = "otlp"
) -> tuple[str, str]:
    """The span's session and where it came from: an attribute of the span or of an
    ancestor, else the trace id, else ``fallback`` (the file's name when importing one)."""
    for holder in (span, *ancestors(span, spans)):
        for key in SESSION_KEYS:
            value = holder.attrs.get(key)
            if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
                return str(value), f"{key} of span {holder.name or holder.span_id!r}"
    if span.trace_id:
        return span.trace_id, "trace id"
    return fallback, "no session attribute and no trace id"


def trace_from_record(
    span: SpanRecord,
    *,
    session: str = "otlp",
    session_from: str = "",
    turn: int = 0,
    default_now: datetime | None = None,
    prompt: Prompt | None = None,
) -> Trace | None:
    """One span → one trace; ``None`` for spans that carry no prompt. ``prompt``: the span's
    ``read_prompt``, when the caller already read it (the OTLP receiver reads it to accept
    or reject the span, and hands it to the process that builds the trace)."""
    if _is_ctxscope_span(span.attrs):
        return trace_from_ctxscope_span(span.attrs, span.where)
    if prompt is None:
        prompt = read_prompt(span)
    if prompt is None:
        return None
    when = span.start or default_now or datetime.now(UTC)
    try:
        inp, flat = captured_input_from_norm(
            prompt.messages, tools=prompt.tools, now=when, output_reserve=prompt.output_reserve
        )
    except ImportFormatError as exc:
        raise ImportFormatError(f"{span.where}: {exc}") from exc
    otlp: dict[str, Any] = {"trace_id": span.trace_id, "span_id": span.span_id}
    if span.name:
        otlp["span_name"] = span.name
    if span.scope:
        otlp["scope"] = span.scope
    for key in _KEPT_ATTRIBUTES:
        if isinstance(span.attrs.get(key), str):
            otlp[key] = span.attrs[key]
    if isinstance(span.resource.get("service.name"), str):
        otlp["service.name"] = span.resource["service.name"]
    otlp.update(prompt.notes)
    if session_from:
        otlp["session_from"] = session_from
    trace_id = (
        f"{span.trace_id}-{span.span_id}"
        if span.trace_id and span.span_id
        else stable_id(BUILDER_NAME, span.order, span.name, span.attrs)
    )
    return make_trace(
        inp,
        flat,
        builder=BUILDER_NAME,
        model=prompt.model,
        trace_id=trace_id,
        session_id=session,
        turn=turn,
        created_at=when,
        usage=prompt.usage,
        tokens=normalize_usage(prompt.usage_mapping, prompt.usage)
        if prompt.usage_mapping
        else None,
        output=prompt.output,
        metadata={"otlp": otlp, "import": prompt.tally.to_metadata()},
    )


# --------------------------------------------------------------------------- many spans


def no_prompt_hint(spans: list[SpanRecord]) -> str:
    """Why no span carried a prompt, and what the instrumentations in the file need to
    record one (one line)."""
    said = [f"none of the {len(spans)} spans carries a prompt"]
    kinds = {
        "vercel": any(otlp_vercel.is_vercel(s.attrs) for s in spans),
        "openinference": any(otlp_openinference.is_openinference(s.attrs) for s in spans),
        "traceloop": any(k.startswith("traceloop.") for s in spans for k in s.attrs),
    }
    if any(otlp_genai.events_without_content(s) for s in spans):
        said.append(
            "its gen_ai.*.message events were recorded without content: set "
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true for the OpenTelemetry "
            "GenAI instrumentations (opentelemetry-instrumentation-openai-v2 up to 2.3b0 and "
            "the others on semantic conventions 1.30)"
        )
    elif not any(kinds.values()) or any(otlp_genai.has_genai(s) for s in spans):
        said.append(
            "turn on content capture: the OpenTelemetry GenAI instrumentations record none by "
            "default; OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true puts the messages "
            "in log records (gen_ai.*.message events: export the logs too, e.g. both signals "
            "into one collector file), and with "
            "OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental (current "
            "opentelemetry-instrumentation-openai-v2) "
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only puts them on the spans "
            "(event_only or span_and_event: in gen_ai.client.inference.operation.details log "
            "records)"
        )
    if kinds["openinference"]:
        said.append(
            "OpenInference spans hide their inputs when OPENINFERENCE_HIDE_INPUTS or "
            "OPENINFERENCE_HIDE_INPUT_MESSAGES is true: unset them"
        )
    if kinds["vercel"]:
        said.append(
            "the Vercel AI SDK records the prompt on its doGenerate/doStream spans with "
            "experimental_telemetry: { isEnabled: true, recordInputs: true }"
        )
    if kinds["traceloop"]:
        said.append("OpenLLMetry records content unless TRACELOOP_TRACE_CONTENT=false")
    return "; ".join(said)


def traces_from_records(
    spans: list[SpanRecord],
    *,
    where: str = "",
    session_id: str = "otlp",
    default_now: datetime | None = None,
) -> list[Trace]:
    """Every span that carries a prompt, as traces (turn = order in its session).
    ``session_id`` names the session of spans that have neither a session attribute nor a
    trace id; ``where`` (the file) begins an error that is about no span in particular."""
    by_id = {(s.trace_id, s.span_id): s for s in spans if s.span_id}
    ordered = sorted(spans, key=lambda s: (s.start or _EPOCH, s.order))
    turns: dict[str, int] = {}
    out: list[Trace] = []
    skipped: list[str] = []
    for span in ordered:
        session, session_from = session_of(span, by_id, session_id)
        try:
            trace = trace_from_record(
                span,
                session=session,
                session_from=session_from,
                turn=turns.get(session, 0),
                default_now=default_now,
            )
        except ImportFormatError as exc:
            skipped.append(str(exc))
            continue
        if trace is not None:
            turns[session] = turns.get(session, 0) + 1
            out.append(trace)
    if not out:
        if skipped:
            more = f" (and {len(skipped) - 1} more broken span(s))" if len(skipped) > 1 else ""
            raise ImportFormatError(skipped[0] + more)
        raise ImportFormatError(
            f"{where}: {no_prompt_hint(spans)}" if where else no_prompt_hint(spans)
        )
    if skipped:
        first = out[0]
        meta = dict(first.metadata)
        imp = dict(meta.get("import") or {})
        imp["skipped"] = skipped
        meta["import"] = imp
        out[0] = first.model_copy(update={"metadata": meta})
    return out


def traces_from_otlp(
    data: Any,
    *,
    where: str = "",
    session_id: str = "otlp",
    default_now: datetime | None = None,
) -> list[Trace]:
    """Every model call an OpenTelemetry JSON value holds (see the module docstring)."""
    return traces_from_records(
        records_from_value(data, where), session_id=session_id, default_now=default_now
    )


def traces_from_exports(
    exports: list[tuple[str, Any]],
    *,
    where: str = "",
    session_id: str = "otlp",
    default_now: datetime | None = None,
) -> list[Trace]:
    """Several OTLP exports read as one (the lines of a collector's JSONL file, each with
    its ``file:line``): log records join their spans across lines, turns count across them."""
    return traces_from_records(
        records_from_exports(exports), where=where, session_id=session_id, default_now=default_now
    )


def traces_from_protobuf(
    raw: bytes, where: str, *, session_id: str = "otlp", default_now: datetime | None = None
) -> list[Trace]:
    """An OTLP protobuf file (see ``otlp_proto``)."""
    return traces_from_exports(
        exports_from_bytes(raw, where), where=where, session_id=session_id, default_now=default_now
    )


__all__ = [
    "BUILDER_NAME",
    "DECISION_FIELDS",
    "DECISION_PREFIX",
    "JSON_FIELDS",
    "RESULT_JSON_FIELDS",
    "SESSION_KEYS",
    "any_value",
    "attributes",
    "looks_like",
    "no_prompt_hint",
    "read_prompt",
    "session_of",
    "trace_from_ctxscope_span",
    "trace_from_record",
    "traces_from_exports",
    "traces_from_otlp",
    "traces_from_protobuf",
    "traces_from_records",
]
