"""LiteLLM standard logging payloads: one trace per logged call (docs/design.md, "Formats").

LiteLLM hands every logging integration one ``StandardLoggingPayload`` per call (what its
GCS, S3, Pub/Sub and custom loggers write, one per object or per JSONL line): the request's
``messages`` (OpenAI chat messages, whatever provider served the call; a text completion's
prompt is a string), the ``response`` (an OpenAI chat completion), ``model``,
``model_parameters`` (the request's other parameters: ``tools``, ``max_tokens``), the token
counts and ``response_cost``, ``startTime``, ``status`` and ``trace_id``.

The call is read by the chat format's mapping (``openai.Chat``: messages, tool calls and
results, reasoning, tools, the reply as ``outcome.output``, the reply's ``usage``); this
module only says where a payload keeps each part. The payload's token counts stand in when
the response has no ``usage``; its cost, status, call type, provider and call id go to
``metadata.litellm``. The session is the payload's ``trace_id`` (LiteLLM's
``litellm_trace_id``), else the file's name; its time ``startTime`` (epoch seconds or a
``YYYY-MM-DD HH:MM:SS`` text in UTC). A file holds one payload, a list of them, or (JSONL)
one per line.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ctxcore.errors import ImportFormatError
from ctxcore.formats.openai import Chat
from ctxcore.formats.request import each_looks_like
from ctxcore.formats.responses import time_from_epoch
from ctxcore.models import Trace

BUILDER_NAME = "import/litellm"
FORMAT = "litellm"
#: Fields only a standard logging payload has beside its messages (one is enough).
PAYLOAD_KEYS = frozenset(
    {"response_cost", "model_map_information", "hidden_params", "saved_cache_cost"}
)
#: Payload fields kept in ``metadata.litellm``.
KEPT = (
    "id",
    "call_type",
    "status",
    "custom_llm_provider",
    "api_base",
    "model_group",
    "response_cost",
    "cache_hit",
    "stream",
    "error_str",
)
#: The payload's own token counts, used when the response carries no ``usage``.
COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")


def is_payload(data: Any) -> bool:
    """Whether one JSON value is a standard logging payload."""
    return (
        isinstance(data, dict)
        and "messages" in data
        and "call_type" in data
        and "response" in data
        and any(k in data for k in PAYLOAD_KEYS)
    )


def start_time(value: Any) -> datetime | None:
    """``startTime``: epoch seconds, or LiteLLM's ``YYYY-MM-DD HH:MM:SS.ffffff`` (UTC)."""
    if isinstance(value, str):
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            return None
        return when if when.tzinfo is not None else when.replace(tzinfo=UTC)
    return time_from_epoch(value)


def request_of(payload: dict[str, Any]) -> dict[str, Any]:
    """The chat request (with its reply) a payload logs, as ``openai.Chat`` reads one."""
    messages = payload.get("messages")
    if isinstance(messages, str):  # a text completion's prompt
        messages = [{"role": "user", "content": messages}]
    if not isinstance(messages, list):
        raise ImportFormatError(
            f"messages: expected a list of chat messages or a prompt, got {type(messages).__name__}"
        )
    params = payload.get("model_parameters")
    params = params if isinstance(params, dict) else {}
    request: dict[str, Any] = {"messages": messages, "model": payload.get("model")}
    for key in ("tools", "max_tokens", "max_completion_tokens"):
        if params.get(key) is not None:
            request[key] = params[key]
    response = payload.get("response")
    if isinstance(response, dict):
        request["response"] = response
    if not isinstance(request.get("response"), dict) or "usage" not in request["response"]:
        counts = {k: payload[k] for k in COUNTS if isinstance(payload.get(k), int)}
        if any(counts.values()):
            request["usage"] = counts
    request["litellm"] = {k: payload[k] for k in KEPT if payload.get(k) not in (None, "")}
    return request


class Payloads(Chat):
    """The chat mapping, for a request taken out of a payload (``request_of``)."""

    builder = BUILDER_NAME
    source = FORMAT
    shape = "a LiteLLM standard logging payload (messages, response, call_type, …)"
    file_session = True

    def looks_like(self, data: Any) -> bool:
        return is_payload(data)

    def request_meta(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"litellm": request["litellm"]} if request.get("litellm") else {}


PAYLOADS = Payloads()


def detects(data: Any) -> bool:
    """Whether a JSON value is a payload or a list of them."""
    return each_looks_like(is_payload, data)


def read(data: Any, *, where: str, session_id: str, default_now: datetime | None) -> list[Trace]:
    """The LiteLLM format's reader (``registry.Reader``): a payload or a list of them, one
    trace each (turn = its place in its session)."""
    out: list[Trace] = []
    turns: dict[str, int] = {}
    for i, payload in enumerate(data if isinstance(data, list) else [data]):
        at = f"[{i}]: " if isinstance(data, list) else ""
        if not is_payload(payload):
            raise ImportFormatError(f"{at}not a LiteLLM standard logging payload")
        try:
            request = request_of(payload)
        except ImportFormatError as exc:
            raise ImportFormatError(f"{at}{exc}") from exc
        trace_id = payload.get("trace_id")
        session = trace_id if isinstance(trace_id, str) and trace_id else session_id
        call_id = payload.get("id")
        out.append(
            PAYLOADS.trace(
                request,
                session_id=session,
                turn=turns.get(session, 0),
                now=start_time(payload.get("startTime")),
                default_now=default_now,
                trace_id=f"litellm-{call_id}" if isinstance(call_id, str) and call_id else None,
            )
        )
        turns[session] = turns.get(session, 0) + 1
    return out


__all__ = ["FORMAT", "PAYLOADS", "detects", "is_payload", "read", "request_of", "start_time"]
