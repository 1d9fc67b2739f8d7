"""A model call's prompt under the OpenTelemetry GenAI semantic conventions, wherever the
instrumentation put it.

The conventions moved the prompt three times, and instrumentations of every generation are
in use, so a span is read from the first of these places that holds messages:

1. ``gen_ai.input.messages`` (``[{role, parts: [...]}]``, parts ``text``, ``reasoning``,
   ``tool_call`` ``{id, name, arguments}``, ``tool_call_response`` ``{id, response}``),
   ``gen_ai.system_instructions``, ``gen_ai.tool.definitions`` and ``gen_ai.output.messages``
   on the span (current conventions, content mode ``span_only``), or the same attributes on a
   ``gen_ai.client.inference.operation.details`` event (``event_only``: a log record joined to
   the span, or a span event). Values may be structured or JSON strings;
2. ``gen_ai.prompt`` holding the messages as one JSON string, or OpenLLMetry's flattened
   ``gen_ai.prompt.<i>.role`` / ``.content`` / ``.tool_call_id`` / ``.tool_calls.<j>.*``
   (with ``gen_ai.completion`` / ``gen_ai.completion.<i>.content`` for the answer and
   ``llm.request.functions.<i>.*`` for the tools);
3. one event per message (conventions 1.28–1.36; the default of
   opentelemetry-instrumentation-openai-v2 up to 2.3b0): ``gen_ai.system.message``,
   ``gen_ai.user.message``, ``gen_ai.assistant.message`` (``{content, tool_calls}``),
   ``gen_ai.tool.message`` (``{content, id}``) and ``gen_ai.choice`` for the answer. The body
   is the log record's body, or for span events the JSON in ``gen_ai.event.content`` (Azure
   AI Inference) or the event's own attributes;
4. ``gen_ai.content.prompt`` / ``gen_ai.content.completion`` span events (conventions
   1.26–1.27, Semantic Kernel) carrying ``gen_ai.prompt`` / ``gen_ai.completion``.

Message events without any content (the instrumentation ran without content capture) are
no prompt: ``events_without_content`` tells the caller, which says how to turn capture on.
"""

from __future__ import annotations

import json
from typing import Any

from ctxcore.errors import ImportFormatError
from ctxcore.formats.accounting import Tally
from ctxcore.formats.norm import NormMessage, reply_text
from ctxcore.formats.openai import normalize_message, normalize_parts_message, parse_tools, text_of
from ctxcore.formats.otlp_records import EventRecord, Prompt, SpanRecord, structured
from ctxcore.models import ToolDef

FORMAT = "otlp"
DETAILS_EVENT = "gen_ai.client.inference.operation.details"
#: Attributes a details event carries for its span (the span's own win).
CONTENT_KEYS: tuple[str, ...] = (
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.definitions",
)
#: Per-message events and the role each stands for.
MESSAGE_EVENTS: dict[str, str] = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
CHOICE_EVENT = "gen_ai.choice"
#: Body fields a span event may carry as plain attributes.
_BODY_FIELDS = ("content", "role", "id", "tool_call_id", "tool_calls", "message", "index")


def has_genai(span: SpanRecord) -> bool:
    """Whether the span or its events speak the GenAI conventions at all."""
    return any(k.startswith("gen_ai.") for k in span.attrs) or any(
        e.name.startswith("gen_ai.") for e in span.events
    )


def prompt_from_span(span: SpanRecord) -> Prompt | None:
    """The span's prompt; ``None`` when it carries none (see the module docstring)."""
    where = span.where
    attrs = dict(span.attrs)
    for event in span.events:
        if event.name == DETAILS_EVENT:
            for key in CONTENT_KEYS:
                if key in event.attrs:
                    attrs.setdefault(key, event.attrs[key])
    tally = Tally(FORMAT)
    norm: list[NormMessage] = []
    system = attrs.get("gen_ai.system_instructions")
    if system is not None:
        norm.append(
            NormMessage(index=-1, role="system", text=_system_text(system, where), id="system-0")
        )
        tally.add("system_parts")
    output: str | None = None
    found = _attribute_messages(attrs, where)
    if found is not None:
        source, messages = found
        for i, m in enumerate(messages):
            try:
                norm.extend(normalize_parts_message(m, i, tally))
            except ImportFormatError as exc:
                prefix = "gen_ai.input." if source == "gen_ai.input.messages" else f"{source}: "
                raise ImportFormatError(f"{where}: {prefix}{exc}") from exc
    else:
        from_events = _event_messages(span.events, tally, where)
        if from_events is None:
            return None
        source, messages_norm, output = from_events
        norm.extend(messages_norm)
    tools = _tools(attrs, where)
    tally.add("tools", len(tools))
    if output is None:
        output = _output(attrs, where)
    model = attrs.get("gen_ai.request.model") or attrs.get("gen_ai.response.model")
    reserve = attrs.get("gen_ai.request.max_tokens")
    return Prompt(
        messages=norm,
        tally=tally,
        tools=tools,
        usage=usage(attrs),
        usage_mapping="otel-genai",
        output=output,
        model=model if isinstance(model, str) else None,
        output_reserve=reserve if isinstance(reserve, int) and reserve >= 0 else None,
        notes={"messages_from": source},
    )


def events_without_content(span: SpanRecord) -> bool:
    """Message events that carry no content: capture was off when they were recorded."""
    return any(e.name in MESSAGE_EVENTS or e.name == CHOICE_EVENT for e in span.events)


def usage(attrs: dict[str, Any]) -> dict[str, int]:
    """``gen_ai.usage.*`` counters, named as the conventions name them."""
    out: dict[str, int] = {}
    for key, value in attrs.items():
        if (
            key.startswith("gen_ai.usage.")
            and isinstance(value, int | float)
            and not isinstance(value, bool)
        ):
            out[key[len("gen_ai.usage.") :]] = int(value)
    return out


# --------------------------------------------------------------------------- attributes


def _attribute_messages(attrs: dict[str, Any], where: str) -> tuple[str, list[Any]] | None:
    raw = attrs.get("gen_ai.input.messages")
    if raw is not None:
        messages = structured(raw, "gen_ai.input.messages", where)
        if not isinstance(messages, list):
            raise ImportFormatError(f"{where}: gen_ai.input.messages must be a list of messages")
        return "gen_ai.input.messages", messages
    prompt = attrs.get("gen_ai.prompt")
    if prompt is not None:
        return "gen_ai.prompt", _prompt_value(prompt)
    flattened = _flattened_prompt(attrs)
    return ("gen_ai.prompt.<i>.*", flattened) if flattened else None


def _prompt_value(value: Any) -> list[Any]:
    """``gen_ai.prompt`` as one value: a JSON list of messages, an object holding them, or
    the prompt's bare text."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError):  # not JSON any parser reads: text
            return [{"role": "user", "content": value}]
    if isinstance(value, dict) and isinstance(value.get("messages"), list):
        return list(value["messages"])
    if isinstance(value, list):
        return value
    return [{"role": "user", "content": text_of(value)}]


def _flattened_prompt(attrs: dict[str, Any]) -> list[dict[str, Any]]:
    """OpenLLMetry's ``gen_ai.prompt.<i>.<field>`` (and ``.tool_calls.<j>.<field>``)."""
    rows: dict[int, dict[str, Any]] = {}
    calls: dict[int, dict[int, dict[str, Any]]] = {}
    for key, value in attrs.items():
        if not key.startswith("gen_ai.prompt."):
            continue
        idx, _, rest = key[len("gen_ai.prompt.") :].partition(".")
        if not idx.isdigit():
            continue
        if rest in ("role", "content", "tool_call_id", "name"):
            rows.setdefault(int(idx), {})[rest] = value
        elif rest.startswith("tool_calls."):
            j, _, fld = rest[len("tool_calls.") :].partition(".")
            if j.isdigit() and fld in ("id", "name", "arguments"):
                calls.setdefault(int(idx), {}).setdefault(int(j), {})[fld] = value
    out: list[dict[str, Any]] = []
    for i in sorted(rows):
        row = rows[i]
        if "role" not in row:
            continue
        msg = dict(row)
        if i in calls:
            msg["tool_calls"] = [
                {
                    "id": c.get("id"),
                    "function": {"name": c.get("name"), "arguments": c.get("arguments", "{}")},
                }
                for _, c in sorted(calls[i].items())
            ]
        out.append(msg)
    return out


def _system_text(value: Any, where: str) -> str:
    value = structured(value, "gen_ai.system_instructions", where)
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return normalize_message({"role": "system", "content": value}, 0).text
    return text_of(value)


def _tools(attrs: dict[str, Any], where: str) -> list[ToolDef]:
    raw = attrs.get("gen_ai.tool.definitions")
    try:
        if raw is not None:
            return parse_tools(structured(raw, "gen_ai.tool.definitions", where))
        return parse_tools(_flattened_functions(attrs))
    except ImportFormatError as exc:
        msg = str(exc)
        raise ImportFormatError(msg if msg.startswith(where) else f"{where}: {msg}") from exc


def _flattened_functions(attrs: dict[str, Any]) -> list[dict[str, Any]] | None:
    """OpenLLMetry's ``llm.request.functions.<i>.name`` / ``.description`` / ``.parameters``."""
    rows: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        if key.startswith("llm.request.functions."):
            idx, _, fld = key[len("llm.request.functions.") :].partition(".")
            if idx.isdigit() and fld in ("name", "description", "parameters"):
                if fld == "parameters" and isinstance(value, str):
                    try:
                        value = json.loads(value)
                    except (json.JSONDecodeError, RecursionError):
                        value = {"description": value}
                rows.setdefault(int(idx), {})[fld] = value
    return [rows[i] for i in sorted(rows)] or None


def _output(attrs: dict[str, Any], where: str) -> str | None:
    raw = attrs.get("gen_ai.output.messages")
    if raw is not None:
        value = structured(raw, "gen_ai.output.messages", where)
        if isinstance(value, list) and value:
            return reply_text(normalize_message(value[0], 0))
        return None
    completion = attrs.get("gen_ai.completion")
    if completion is not None:
        return _completion_text(completion)
    flat = attrs.get("gen_ai.completion.0.content")
    return text_of(flat) or None if flat is not None else None


def _completion_text(value: Any) -> str | None:
    """``gen_ai.completion``: JSON ``{text}`` or a list of messages, or the bare text."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return value or None
    if isinstance(value, dict):
        text = value.get("text", value.get("content"))
        return text_of(text) or None if text is not None else None
    if isinstance(value, list) and value:
        first = value[0]
        if isinstance(first, dict) and "role" in first:
            return reply_text(normalize_message(first, 0))
        return text_of(first) or None
    return None


# --------------------------------------------------------------------------- events


def _event_body(event: EventRecord) -> dict[str, Any]:
    """A GenAI event's body: the log record's body, else ``gen_ai.event.content`` (JSON) or
    the body fields among the event's attributes."""
    body = event.body
    if body is None:
        raw = event.attrs.get("gen_ai.event.content")
        if isinstance(raw, str):
            try:
                body = json.loads(raw)
            except (json.JSONDecodeError, RecursionError):
                body = {"content": raw}
        elif raw is not None:
            body = raw
        else:
            body = {k: event.attrs[k] for k in _BODY_FIELDS if k in event.attrs}
    return body if isinstance(body, dict) else {"content": body}


def _content(value: Any) -> Any:
    """Content as the events carry it: text, a list of parts, or ``{"text": ...}`` objects
    (``{"text": {"value": ...}}`` in Azure AI Agents events)."""
    if isinstance(value, dict) and "text" in value:
        text = value["text"]
        if isinstance(text, dict) and "value" in text:
            return text_of(text["value"])
        return text_of(text)
    return value


def _has_content(body: dict[str, Any]) -> bool:
    if body.get("content") not in (None, "", []):
        return True
    calls = body.get("tool_calls")
    return isinstance(calls, list) and any(
        isinstance(c, dict) and isinstance(c.get("function"), dict) and "arguments" in c["function"]
        for c in calls
    )


def _choice_output(body: dict[str, Any]) -> str | None:
    """The first choice of a ``gen_ai.choice`` event as the reply: its text, then the tool
    calls it made (a call we cannot read leaves the text only)."""
    message = body["message"]
    content = message.get("content")
    reply = NormMessage(index=0, role="assistant", text="")
    reply.text = text_of(_content(content)) if content is not None else ""
    try:  # the tool calls the reply made are part of it
        calls = {"role": "assistant", "tool_calls": message.get("tool_calls")}
        reply.tool_calls = normalize_message(calls, 0).tool_calls
    except ImportFormatError:
        pass  # calls we cannot read: the reply's text only
    return reply_text(reply)


def _events_output(events: list[EventRecord]) -> str | None:
    """The answer the events record: the first choice, else a completion event's text."""
    output: str | None = None
    for event in events:
        if event.name == CHOICE_EVENT:
            body = _event_body(event)
            if body.get("index", 0) in (0, None) and isinstance(body.get("message"), dict):
                return _choice_output(body)
        elif event.name == "gen_ai.content.completion" and "gen_ai.completion" in event.attrs:
            output = _completion_text(event.attrs["gen_ai.completion"])
    return output


def _message_of_event(event: EventRecord, body: dict[str, Any]) -> dict[str, Any]:
    """A per-message event's body as a chat message."""
    msg: dict[str, Any] = {"role": body.get("role") or MESSAGE_EVENTS[event.name]}
    if "content" in body:
        msg["content"] = _content(body["content"])
    if isinstance(body.get("tool_calls"), list):
        msg["tool_calls"] = body["tool_calls"]
    tcid = body.get("id", body.get("tool_call_id"))
    if MESSAGE_EVENTS[event.name] == "tool" and tcid is not None:
        msg["tool_call_id"] = tcid
    return msg


def _normalized(messages: list[Any], tally: Tally, where: str) -> list[NormMessage]:
    """Chat messages normalised, an error naming the event (``where``) they came from."""
    out: list[NormMessage] = []
    for i, m in enumerate(messages):
        try:
            out.append(normalize_message(m, i, tally))
        except ImportFormatError as exc:
            raise ImportFormatError(f"{where}: {exc}") from exc
    return out


def _event_messages(
    events: list[EventRecord], tally: Tally, where: str
) -> tuple[str, list[NormMessage], str | None] | None:
    """Messages from per-message events (or a ``gen_ai.content.prompt`` event), and the
    answer from ``gen_ai.choice`` / ``gen_ai.content.completion``."""
    bodies = [(e, _event_body(e)) for e in events if e.name in MESSAGE_EVENTS]
    output = _events_output(events)
    if bodies and any(_has_content(b) for _, b in bodies):
        out: list[NormMessage] = []
        for i, (event, body) in enumerate(bodies):
            try:
                out.append(normalize_message(_message_of_event(event, body), i, tally))
            except ImportFormatError as exc:
                raise ImportFormatError(f"{where}: {event.name} event: {exc}") from exc
        return "gen_ai.*.message events", out, output
    for event in events:
        if event.name == "gen_ai.content.prompt" and "gen_ai.prompt" in event.attrs:
            prompt = _prompt_value(event.attrs["gen_ai.prompt"])
            norm = _normalized(prompt, tally, f"{where}: gen_ai.content.prompt event")
            return "gen_ai.content.prompt event", norm, output
    return None


__all__ = [
    "CONTENT_KEYS",
    "DETAILS_EVENT",
    "FORMAT",
    "MESSAGE_EVENTS",
    "events_without_content",
    "has_genai",
    "prompt_from_span",
    "usage",
]
