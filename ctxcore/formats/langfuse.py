"""Langfuse trace exports: one trace per ``GENERATION`` observation (docs/design.md, "Formats").

Langfuse keeps a trace as observations (``SPAN``, ``GENERATION``, ``EVENT``, ``TOOL``, …),
each with its ``traceId``, ``parentObservationId``, ``startTime``, ``input``, ``output``,
``model`` and, for a model call, ``usageDetails``. A file holds them as Langfuse hands them
out: ``{"trace": {...}, "observations": [...]}`` (the trace page's data, what Langfuse's own
adapter tests keep), a trace object holding its ``observations`` (``GET
/api/public/traces/{id}``), ``{"data": [...]}`` (``GET /api/public/observations``) or a bare
list of observations.

A ``GENERATION`` is a model call; its ``input`` is the request as the instrumentation
recorded it (a JSON string or a value), in the shape of the API or convention it came from.
Each shape is read by the reader that already knows it, never copied here:

- a list of ``{role, content}`` chat messages, or of OpenTelemetry GenAI ``{role, parts}``
  messages (``tool_call`` / ``tool_call_response`` parts) → ``openai.normalize_parts_message``
  (a tool result in a user message is a tool result of its own);
- a list holding Responses items (``function_call``, ``function_call_output``, a
  ``reasoning`` item: any item with a ``type`` and no ``role``) → ``responses.normalize``;
- a Gemini ``generateContent`` request (``contents``: Google ADK, Vertex AI) →
  ``gemini.normalize``;
- an object holding ``messages`` (a chat request) → its messages as above; one message →
  itself; a bare string or ``{"prompt": ...}`` (the Vercel AI SDK) → one user message.

Its ``output`` becomes ``outcome.output`` (text, then each tool call as a ``name(args)``
line): a Responses object, a Gemini candidate, a message or a list of messages.
``usageDetails`` is the usage (``input``/``output``/``total`` as ``input_tokens``/
``output_tokens``/``total_tokens``, the other counters under their own names; absent when
Langfuse has none), ``model`` the model, ``startTime`` the time, ``toolDefinitions`` (else
the request's own) the tools. The session is the trace's ``sessionId``, else its id; turns
count in start order per session. An observation that cannot be read is that observation's
error (where, which field, why), listed in the first trace's ``metadata.import.skipped``; the
others are imported. A file with no ``GENERATION`` is refused in one line that says what it
holds.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from ctxcore.errors import ImportFormatError
from ctxcore.formats import gemini, responses
from ctxcore.formats.accounting import Tally
from ctxcore.formats.derive import make_trace
from ctxcore.formats.exports import RecordedCall, traces_per_call
from ctxcore.formats.norm import NormMessage, captured_input_from_norm, reply_text
from ctxcore.formats.openai import normalize_message, tool_from_obj
from ctxcore.formats.sessions.lines import parse_time
from ctxcore.formats.usage import normalize as normalize_usage
from ctxcore.models import ToolDef, Trace

BUILDER_NAME = "import/langfuse"
FORMAT = "langfuse"
#: Langfuse's observation types (its ``ObservationType``).
OBSERVATION_TYPES = frozenset(
    {
        "SPAN",
        "GENERATION",
        "EVENT",
        "AGENT",
        "TOOL",
        "CHAIN",
        "RETRIEVER",
        "EVALUATOR",
        "EMBEDDING",
        "GUARDRAIL",
    }
)
#: ``usageDetails`` keys → the usage names the other readers use.
USAGE_KEYS = {"input": "input_tokens", "output": "output_tokens", "total": "total_tokens"}


def _is_observation(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and obj.get("type") in OBSERVATION_TYPES
        and isinstance(obj.get("traceId"), str)
        and "id" in obj
    )


def _split(data: Any) -> tuple[dict[str, Any], list[Any]] | None:
    """The trace (or ``{}``) and the observations a value holds, if it has that shape."""
    if isinstance(data, list):
        return {}, data
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("observations"), list):
        trace = data.get("trace")
        if isinstance(trace, dict):
            return trace, data["observations"]
        return {k: v for k, v in data.items() if k != "observations"}, data["observations"]
    if isinstance(data.get("data"), list):
        return {}, data["data"]
    return None


def looks_like(data: Any) -> bool:
    """Whether a JSON value is a Langfuse export: observations, alone or with their trace."""
    found = _split(data)
    if found is None or not found[1]:
        return False
    return all(_is_observation(o) for o in found[1][:50])


def _value(raw: Any) -> Any:
    """A field as Langfuse stores it: JSON text is parsed, anything else kept as it is."""
    if isinstance(raw, str) and raw[:1] in ('"', "[", "{"):
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, RecursionError):
            return raw
    return raw


def normalize_input(value: Any, tally: Tally) -> list[NormMessage]:
    """A generation's ``input``, in whichever shape its instrumentation recorded it."""
    if isinstance(value, dict):
        if gemini.looks_like(value):  # a generateContent request (Google ADK, Vertex AI)
            return gemini.normalize(value, tally)[0]
        if isinstance(value.get("messages"), list):
            value = value["messages"]
        elif "role" in value:  # one message
            value = [value]
        elif isinstance(value.get("prompt"), str):  # the Vercel AI SDK's prompt
            value = value["prompt"]
    if isinstance(value, str):
        tally.add("messages")
        return [NormMessage(index=0, role="user", text=value)]
    if not isinstance(value, list):
        raise ImportFormatError(
            "input: expected a list of messages or items, a chat request or a string, got "
            + (
                f"an object with {sorted(value)[:6]}"
                if isinstance(value, dict)
                else type(value).__name__
            )
        )
    return responses.normalize_recorded(value, tally, where="input")


def output_text(value: Any) -> str | None:
    """A generation's ``output`` as ``outcome.output``: text, then ``name(args)`` lines."""
    if value is None or isinstance(value, str):
        return value or None
    if isinstance(value, dict) and isinstance(value.get("output"), list):
        return responses.REQUESTS.output({}, value)  # a Responses object
    if isinstance(value, dict) and isinstance(value.get("content"), dict):
        return gemini.REQUESTS.output({}, {"candidates": [value]})  # a Gemini candidate
    replies = value if isinstance(value, list) else [value]
    lines = []
    for i, reply in enumerate(replies):
        if isinstance(reply, dict) and "role" in reply:
            text = reply_text(normalize_message(reply, i))
            if text:
                lines.append(text)
        else:
            lines.append(json.dumps(reply, ensure_ascii=False))
    return "\n".join(lines) or None


def usage_of(observation: dict[str, Any]) -> dict[str, int]:
    """``usageDetails`` as the usage of the call (empty when Langfuse has none)."""
    details = observation.get("usageDetails")
    if not isinstance(details, dict):
        return {}
    return {
        USAGE_KEYS.get(str(k), str(k)): int(v)
        for k, v in details.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }


def tools_of(observation: dict[str, Any], request: Any, tally: Tally) -> list[ToolDef]:
    """The call's tools: ``toolDefinitions`` (a list, or an object by name), else those of
    the request its input is (a Gemini request's ``config.tools``, a chat request's
    ``tools``)."""
    declared = observation.get("toolDefinitions")
    if not declared and isinstance(request, dict):
        if gemini.looks_like(request):
            return gemini.REQUESTS.tools(request, tally)
        declared = request.get("tools")
    listed = list(declared.values()) if isinstance(declared, dict) else declared
    if not isinstance(listed, list):
        return []
    try:
        tools = [tool_from_obj(t, i) for i, t in enumerate(listed)]
    except ImportFormatError as exc:
        raise ImportFormatError(f"toolDefinitions: {exc}") from exc
    tally.add("tools", len(tools))
    return tools


def trace_from_observation(
    observation: dict[str, Any],
    *,
    session_id: str,
    turn: int,
    default_now: datetime | None,
) -> Trace:
    """One ``GENERATION`` observation → one trace."""
    tally = Tally(FORMAT)
    request = _value(observation.get("input"))
    norm = normalize_input(request, tally)
    tools = tools_of(observation, request, tally)
    when = parse_time(observation.get("startTime")) or default_now or datetime.now(UTC)
    inp, flat = captured_input_from_norm(norm, tools=tools, now=when)
    model = observation.get("model")
    side = {
        "trace_id": observation["traceId"],
        "observation_id": str(observation["id"]),
        "name": observation.get("name"),
        "parent_observation_id": observation.get("parentObservationId"),
        "end_time": observation.get("endTime"),
    }
    usage = usage_of(observation)
    return make_trace(
        inp,
        flat,
        builder=BUILDER_NAME,
        model=model if isinstance(model, str) else None,
        trace_id=f"{observation['traceId']}-{observation['id']}",
        session_id=session_id,
        turn=turn,
        created_at=when,
        usage=usage,
        tokens=normalize_usage("langfuse", usage),
        output=output_text(_value(observation.get("output"))),
        metadata={
            "langfuse": {k: v for k, v in side.items() if v is not None},
            "import": tally.to_metadata(),
        },
    )


def _session(trace: dict[str, Any], observation: dict[str, Any]) -> str:
    """The trace's session, else the trace's id."""
    session = trace.get("sessionId")
    return session if isinstance(session, str) and session else str(observation["traceId"])


def _start(observation: dict[str, Any]) -> datetime:
    return parse_time(observation.get("startTime")) or datetime.min.replace(tzinfo=UTC)


def _generations(observations: list[Any], where: str) -> list[tuple[int, dict[str, Any]]]:
    """The ``GENERATION`` observations with their place in the file, in start order; none
    is the file's one-line refusal, naming what it holds."""
    for i, o in enumerate(observations):
        if not _is_observation(o):
            raise ImportFormatError(
                f"{where}observations[{i}]: not a Langfuse observation (it needs 'id', "
                "'traceId' and a 'type' such as GENERATION or SPAN)"
            )
    found = [(i, o) for i, o in enumerate(observations) if o["type"] == "GENERATION"]
    if not found:
        held = Counter(str(o["type"]) for o in observations)
        kinds = ", ".join(f"{n} {t}" for t, n in sorted(held.items()))
        raise ImportFormatError(
            f"{where}no GENERATION observation, so no model call to import (the file holds "
            f"{kinds or 'no observation'})"
        )
    return sorted(found, key=lambda pair: (_start(pair[1]), pair[0]))


def read(data: Any, *, where: str, session_id: str, default_now: datetime | None) -> list[Trace]:
    """The Langfuse format's reader (``registry.Reader``)."""
    prefix = f"{where}: " if where else ""
    found = _split(data)
    if found is None:
        raise ImportFormatError(
            f"{prefix}not a Langfuse export: expected {{'trace', 'observations'}}, a trace "
            "with its 'observations', {'data': [...]} or a list of observations"
        )
    trace, observations = found

    def call(i: int, o: dict[str, Any]) -> RecordedCall:
        session = _session(trace, o)
        return (
            f"{prefix}observations[{i}] ({o.get('name') or o['id']})",
            session,
            lambda turn: trace_from_observation(
                o, session_id=session, turn=turn, default_now=default_now
            ),
        )

    return traces_per_call(call(i, o) for i, o in _generations(observations, prefix))


__all__ = [
    "FORMAT",
    "looks_like",
    "normalize_input",
    "output_text",
    "read",
    "trace_from_observation",
    "usage_of",
]
