"""One model call the proxy saw, turned into a trace by the importer of its API.

A call captured live and the same request imported from a file must give the same context,
so nothing here reads a prompt: the request goes through ``ctxcore.formats`` (``openai`` for
Chat Completions, ``responses`` for the Responses API, ``anthropic`` for Messages) with the
response the upstream sent, a stream first put back together (``capture.sse``). What only a
live call has is added on top:

- the trace id is the call's own (the importers hash the request, and an agent may send the
  same request twice), ``created_at`` the moment the request arrived;
- the session: Anthropic ``metadata.user_id``, else OpenAI ``prompt_cache_key``, else the
  session of the response a ``previous_response_id`` continues, else a fingerprint of the
  system prompt and the first user message (what stays the same through a conversation);
  turns count per session in the order calls end;
- the outcome: the reply (text, and tool calls as ``name(args)`` lines), the usage, and for a
  call that failed what went wrong (the upstream's status and error, a timeout, a reset, a
  client that hung up);
- ``metadata.capture``: API, path, source tag, status, latency, time to first byte, model,
  the usage as ``input`` (the whole prompt, cached tokens included), ``output``, ``cached``,
  ``cache_creation``, and the upstream's request id. Headers are never kept.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from ctxcore.capture import sse
from ctxcore.capture.inflate import CODINGS, Broken, TooBig, inflate
from ctxcore.errors import CtxscopeError
from ctxcore.formats import anthropic, openai, responses
from ctxcore.formats.openai import text_of, usage_from_obj
from ctxcore.loading import TOO_DEEP
from ctxcore.models import Outcome, Trace

Api = Literal["openai.chat", "openai.responses", "anthropic.messages"]
APIS: tuple[str, ...] = ("openai.chat", "openai.responses", "anthropic.messages")
#: Tags every captured trace carries (and ``failed`` when the call did not succeed).
LIVE_TAG = "live"
FAILED_TAG = "failed"
#: How a call the client hung up on begins its error (not the upstream's failure).
CLIENT_GONE = "the client disconnected"


@dataclass
class CallRecord:
    """What the proxy knows about one call besides the two bodies (no headers but the
    response's type and encoding, and the upstream's request id)."""

    id: str
    api: str
    path: str
    source: str
    started_at: float
    latency_ms: float
    ttfb_ms: float | None = None
    status: int | None = None
    content_type: str = ""
    content_encoding: str = ""
    request_id: str = ""
    #: what went wrong on the wire: a timeout, a reset, the client hanging up
    error: str | None = None
    #: the copy of the response stopped short (too big to keep whole)
    truncated: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_obj(cls, data: dict[str, Any]) -> CallRecord:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


# --------------------------------------------------------------------------- bodies


#: The most a reply is unpacked to for its trace (the copy the proxy keeps is as big at most).
MAX_DECODED_BYTES = 32 * 1024 * 1024


def decode_body(raw: bytes, encoding: str, limit: int = MAX_DECODED_BYTES) -> bytes | None:
    """The body without its ``Content-Encoding`` (gzip, deflate), each coding unpacked to at
    most ``limit`` bytes (``inflate.TooBig`` past it, ``inflate.Broken`` for damaged data);
    None for an encoding Python cannot undo without another package (br, zstd)."""
    codings = [c.strip().lower() for c in encoding.split(",") if c.strip()]
    for coding in reversed(codings):
        if coding == "identity":
            continue
        if coding not in CODINGS:
            return None
        raw = inflate(raw, coding, limit)
    return raw


def _obj(raw: bytes | None) -> dict[str, Any] | None:
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


# --------------------------------------------------------------------------- sessions


def _first_user(messages: Any) -> Any:
    for m in messages if isinstance(messages, list) else []:
        if isinstance(m, dict) and m.get("role") == "user":
            return m.get("content")
    return None


def fingerprint(api: str, request: dict[str, Any]) -> str:
    """A session id from what stays the same through a conversation: the system prompt and
    the first user message."""
    if api == "anthropic.messages":
        parts = [request.get("system"), _first_user(request.get("messages"))]
    elif api == "openai.responses":
        items = request.get("input")
        first = items if isinstance(items, str) else _first_user(items)
        parts = [request.get("instructions"), first]
    else:
        raw = request.get("messages")
        messages: list[Any] = raw if isinstance(raw, list) else []
        system = [
            m.get("content")
            for m in messages
            if isinstance(m, dict) and m.get("role") in ("system", "developer")
        ][:1]
        parts = [system, _first_user(messages)]
    digest = hashlib.blake2b(
        json.dumps(parts, sort_keys=True, default=str).encode("utf-8"), digest_size=6
    ).hexdigest()
    return f"live-{digest}"


class Sessions:
    """Session ids and turn numbers of the calls one process has seen (a bounded memory of
    which session each Responses API response id belongs to)."""

    def __init__(self, remember: int = 100_000) -> None:
        self.remember = remember
        self._by_response: OrderedDict[str, str] = OrderedDict()
        self._turns: OrderedDict[str, int] = OrderedDict()

    def session_of(self, api: str, request: dict[str, Any]) -> tuple[str, str]:
        """The call's session and what named it."""
        meta = request.get("metadata")
        user = meta.get("user_id") if isinstance(meta, dict) else None
        if api == "anthropic.messages" and isinstance(user, str) and user:
            return user, "metadata.user_id"
        key = request.get("prompt_cache_key")
        if isinstance(key, str) and key:
            return key, "prompt_cache_key"
        previous = request.get("previous_response_id")
        if isinstance(previous, str) and previous:
            known = self._by_response.get(previous)
            if known is not None:
                return known, "previous_response_id"
        return fingerprint(api, request), "system prompt and first user message"

    def next_turn(self, session: str) -> int:
        turn = self._turns.pop(session, 0)
        self._turns[session] = turn + 1
        while len(self._turns) > self.remember:
            self._turns.popitem(last=False)
        return turn

    def answered(self, response_id: str, session: str) -> None:
        self._by_response[response_id] = session
        while len(self._by_response) > self.remember:
            self._by_response.popitem(last=False)


# --------------------------------------------------------------------------- the reply


def _reply_text(api: str, response: dict[str, Any]) -> str | None:
    """The assistant's reply: its text, and each tool call as a ``name(args)`` line."""
    lines: list[str] = []
    if api == "anthropic.messages":
        for block in response.get("content") or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                lines.append(block["text"])
            elif block.get("type") in ("tool_use", "server_tool_use"):
                lines.append(f"{block.get('name')}({text_of_args(block.get('input'))})")
    elif api == "openai.responses":
        for item in response.get("output") or []:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "message":
                for part in item.get("content") or []:
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        lines.append(part["text"])
            elif item.get("type") == "function_call":
                lines.append(f"{item.get('name')}({text_of_args(item.get('arguments'))})")
    else:
        choices = response.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            message = choices[0].get("message")
            if isinstance(message, dict):
                text = text_of(message.get("content"))
                if text:
                    lines.append(text)
                for call in message.get("tool_calls") or []:
                    fn = call.get("function") if isinstance(call, dict) else None
                    if isinstance(fn, dict):
                        lines.append(f"{fn.get('name')}({text_of_args(fn.get('arguments'))})")
    return "\n".join(lines) or None


def text_of_args(args: Any) -> str:
    return args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)


def usage_summary(api: str, usage: dict[str, int]) -> dict[str, int]:
    """``input`` (the whole prompt: Anthropic's ``input_tokens`` leaves out what was read
    from or written to the cache, so those are added back), ``output``, ``cached`` and
    ``cache_creation``, from a flattened provider usage."""
    out: dict[str, int] = {}
    if api == "anthropic.messages":
        read = usage.get("cache_read_input_tokens", 0)
        made = usage.get("cache_creation_input_tokens", 0)
        if "input_tokens" in usage:
            out["input"] = usage["input_tokens"] + read + made
        if "output_tokens" in usage:
            out["output"] = usage["output_tokens"]
        if "cache_read_input_tokens" in usage:
            out["cached"] = read
        if "cache_creation_input_tokens" in usage:
            out["cache_creation"] = made
        return out
    pairs = (
        ("input", ("prompt_tokens", "input_tokens")),
        ("output", ("completion_tokens", "output_tokens")),
        ("cached", ("prompt_tokens_details.cached_tokens", "input_tokens_details.cached_tokens")),
    )
    for name, keys in pairs:
        for key in keys:
            if key in usage:
                out[name] = usage[key]
                break
    return out


def _error_text(body: dict[str, Any] | None, raw: bytes | None) -> str:
    err = body.get("error") if body else None
    if isinstance(err, dict):
        kind = err.get("type") or err.get("code") or "error"
        return f"{kind}: {err.get('message', '')}".strip()
    if isinstance(err, str):
        return err
    text = (raw or b"").decode("utf-8", "replace").strip()
    return text[:300] + ("…" if len(text) > 300 else "")


# --------------------------------------------------------------------------- the trace


class CallError(CtxscopeError):
    """A call whose request no importer can read (not JSON, or not that API's request)."""


def trace_from_call(
    record: CallRecord, request_body: bytes, response_body: bytes, sessions: Sessions
) -> Trace:
    """The trace of one captured call (see the module docstring)."""
    try:
        request = _obj(request_body)
    except RecursionError as exc:  # the call's one line, in the words of every JSON reader
        raise CallError(f"call {record.id} to {record.path}: the request body: {TOO_DEEP}") from exc
    if request is None:
        raise CallError(f"call {record.id} to {record.path}: the request body is not a JSON object")
    problems: list[str] = []
    if record.error:
        problems.append(record.error)
    try:
        decoded = decode_body(response_body, record.content_encoding)
        if decoded is None:
            problems.append(
                f"the reply is {record.content_encoding}-encoded; ctxscope read no reply"
            )
    except (TooBig, Broken) as exc:
        decoded = None
        problems.append(f"{str(exc).replace('body', 'reply', 1)}; ctxscope read no reply")
    stream = record.content_type.split(";")[0].strip().lower() == "text/event-stream"
    ok = record.status is not None and 200 <= record.status < 300
    response: dict[str, Any] | None = None
    if decoded is not None and stream:
        text = decoded.decode("utf-8", "replace")
        assemble = {
            "openai.chat": sse.chat_completion,
            "openai.responses": sse.responses,
            "anthropic.messages": sse.anthropic_message,
        }[record.api]
        got = assemble(text)
        response = got.response
        if got.error is not None:
            problems.append(
                f"the stream ended in an error event: {_error_text({'error': got.error}, None)}"
            )
        elif ok and not got.complete and not record.error:
            problems.append("the stream ended before its last event")
    elif decoded is not None:
        try:
            body = _obj(decoded)
        except RecursionError:
            body = None
            problems.append(f"the reply: {TOO_DEEP}")
        if ok:
            response = body
        elif record.status is not None:
            problems.insert(0, f"upstream answered {record.status}: {_error_text(body, decoded)}")
    if record.truncated:
        problems.append("the reply was too big to keep whole; the outcome holds its beginning")

    session, named_by = sessions.session_of(record.api, request)
    created = datetime.fromtimestamp(record.started_at, tz=UTC)
    try:
        if record.api == "anthropic.messages":
            trace = anthropic.trace_from_request(
                request, session_id=session, now=created, response=response
            )
        elif record.api == "openai.responses":
            trace = responses.trace_from_request(
                request, session_id=session, now=created, response=response
            )
        else:
            merged = {**request, "response": response} if response else request
            trace = openai.trace_from_request(merged, session_id=session, now=created)
    except CtxscopeError as exc:
        raise CallError(f"call {record.id} to {record.path}: {exc}") from exc
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
        raise CallError(
            f"call {record.id} to {record.path}: not a request the {record.api} importer "
            f"reads ({type(exc).__name__}: {exc})"
        ) from exc

    usage = usage_from_obj(response.get("usage")) if response else {}
    model = (response or {}).get("model") or request.get("model")
    capture: dict[str, Any] = {
        "via": "proxy",
        "api": record.api,
        "path": record.path,
        "status": record.status,
        "latency_ms": round(record.latency_ms, 3),
        "ttfb_ms": None if record.ttfb_ms is None else round(record.ttfb_ms, 3),
        "stream": stream,
        "session_from": named_by,
        "usage": usage_summary(record.api, usage),
    }
    if record.source:
        capture["source"] = record.source
    if isinstance(model, str):
        capture["model"] = model
    if record.request_id:
        capture["request_id"] = record.request_id
    response_id = (response or {}).get("id")
    if isinstance(response_id, str) and response_id:
        capture["response_id"] = response_id
        if record.api == "openai.responses":
            sessions.answered(response_id, session)
    if problems:
        capture["error"] = "; ".join(problems)
    tags = [LIVE_TAG] + ([f"source:{record.source}"] if record.source else [])
    if problems and not (record.error or "").startswith(CLIENT_GONE):
        tags.append(FAILED_TAG)
    outcome = Outcome(
        output=_reply_text(record.api, response) if response else None,
        usage=usage,
        note="; ".join(problems),
    )
    return trace.model_copy(
        update={
            "trace_id": record.id,
            "session_id": session,
            "turn": sessions.next_turn(session),
            "created_at": created,
            "tags": tags,
            "metadata": {**trace.metadata, "capture": capture},
            "outcome": outcome,
        }
    )


__all__ = [
    "APIS",
    "Api",
    "CallError",
    "CallRecord",
    "CLIENT_GONE",
    "FAILED_TAG",
    "LIVE_TAG",
    "MAX_DECODED_BYTES",
    "Sessions",
    "decode_body",
    "fingerprint",
    "trace_from_call",
    "usage_summary",
]
