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
- the outcome: the reply (text, and tool calls as ``name(args)`` lines), the usage (as the
  provider named it, and normalized by the importer's mapping), and for a call that failed
  what went wrong (the upstream's status and error, a timeout, a reset, a client that hung
  up);
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
from typing import Any

from ctxcore.capture.inflate import CODINGS, Broken, TooBig, inflate
from ctxcore.capture.sse import Assembled
from ctxcore.errors import CtxscopeError
from ctxcore.formats import registry
from ctxcore.formats.norm import usage_from_obj
from ctxcore.formats.request import Incremental
from ctxcore.loading import TOO_DEEP
from ctxcore.models import Outcome, Trace

#: The APIs the proxy records, as ``metadata.capture.api`` names them (``registry``).
APIS: tuple[str, ...] = tuple(f.live.api for f in registry.live_formats() if f.live is not None)
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


def fingerprint(api: str, request: dict[str, Any], source: str = "") -> str:
    """A session id from what stays the same through a conversation: the system prompt and
    the first user message, and the call's source when it has one (two agents, or two
    machines writing into one team store, that open with the same words are two sessions,
    each numbering its own turns)."""
    parts = registry.by_api(api).converter().conversation(request)
    key = [parts, source] if source else parts
    digest = hashlib.blake2b(
        json.dumps(key, sort_keys=True, default=str).encode("utf-8"), digest_size=6
    ).hexdigest()
    return f"live-{digest}"


#: Sessions whose recent calls' derivation the converter keeps (``Sessions.incremental``):
#: each holds its conversation's messages and parts once, so this bounds the memory.
DERIVED_SESSIONS = 64


class Sessions:
    """Session ids and turn numbers of the calls one process has seen (a bounded memory of
    which session each Responses API response id belongs to)."""

    def __init__(self, remember: int = 100_000, derived: int = DERIVED_SESSIONS) -> None:
        self.remember = remember
        self._by_response: OrderedDict[str, str] = OrderedDict()
        self._turns: OrderedDict[str, int] = OrderedDict()
        self.derived = derived
        self._derived: OrderedDict[str, Incremental] = OrderedDict()

    def incremental(self, session: str) -> Incremental:
        """What the session's previous call derived (``request.Incremental``; the
        ``derived`` sessions seen last are kept)."""
        memo = self._derived.pop(session, None) or Incremental()
        self._derived[session] = memo
        while len(self._derived) > self.derived:
            self._derived.popitem(last=False)
        return memo

    def session_of(self, api: str, request: dict[str, Any], source: str = "") -> tuple[str, str]:
        """The call's session and what named it (``source``: the call's source tag, part of
        a session id derived from the conversation)."""
        named = registry.by_api(api).converter().session(request)
        if named is not None:
            return named
        key = request.get("prompt_cache_key")
        if isinstance(key, str) and key:
            return key, "prompt_cache_key"
        previous = request.get("previous_response_id")
        if isinstance(previous, str) and previous:
            known = self._by_response.get(previous)
            if known is not None:
                return known, "previous_response_id"
        return fingerprint(api, request, source), "system prompt and first user message"

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


def usage_summary(api: str, usage: dict[str, int]) -> dict[str, int]:
    """``input`` (the whole prompt, cached tokens included), ``output``, ``cached`` and
    ``cache_creation``, from a flattened provider usage (each API's own reading)."""
    return registry.by_api(api).converter().usage(usage)


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


@dataclass
class _Reply:
    """What the reply of a call came to: the response read from it (None when there is
    none to read) and what went wrong on the way."""

    response: dict[str, Any] | None
    problems: list[str]
    stream: bool


def _decoded(record: CallRecord, body: bytes, problems: list[str]) -> bytes | None:
    """The reply without its content encoding, or None (and why) when it cannot be read."""
    try:
        decoded = decode_body(body, record.content_encoding)
    except (TooBig, Broken) as exc:
        problems.append(f"{str(exc).replace('body', 'reply', 1)}; ctxscope read no reply")
        return None
    if decoded is None:
        problems.append(f"the reply is {record.content_encoding}-encoded; ctxscope read no reply")
    return decoded


def _streamed(form: registry.Format, record: CallRecord, decoded: bytes, ok: bool) -> _Reply:
    """A server-sent event stream, put back together as the response it stands for."""
    got: Assembled = form.assembler()(decoded.decode("utf-8", "replace"))
    problems: list[str] = []
    if got.error is not None:
        problems.append(
            f"the stream ended in an error event: {_error_text({'error': got.error}, None)}"
        )
    elif ok and not got.complete and not record.error:
        problems.append("the stream ended before its last event")
    return _Reply(got.response, problems, True)


def _read_reply(form: registry.Format, record: CallRecord, body: bytes) -> _Reply:
    """The reply of a call: its response (streamed or whole) and what went wrong, the
    error on the wire first."""
    problems = [record.error] if record.error else []
    decoded = _decoded(record, body, problems)
    stream = record.content_type.split(";")[0].strip().lower() == "text/event-stream"
    ok = record.status is not None and 200 <= record.status < 300
    reply = _Reply(None, [], stream)
    if decoded is not None and stream:
        reply = _streamed(form, record, decoded, ok)
    elif decoded is not None:
        try:
            body_obj = _obj(decoded)
        except RecursionError:
            body_obj = None
            reply.problems.append(f"the reply: {TOO_DEEP}")
        if ok:
            reply.response = body_obj
        elif record.status is not None:
            problems.insert(
                0, f"upstream answered {record.status}: {_error_text(body_obj, decoded)}"
            )
    reply.problems = problems + reply.problems
    if record.truncated:
        reply.problems.append(
            "the reply was too big to keep whole; the outcome holds its beginning"
        )
    return reply


def _request(record: CallRecord, body: bytes) -> dict[str, Any]:
    """The call's request as a JSON object, or a ``CallError`` naming the call."""
    try:
        request = _obj(body)
    except RecursionError as exc:  # the call's one line, in the words of every JSON reader
        raise CallError(f"call {record.id} to {record.path}: the request body: {TOO_DEEP}") from exc
    if request is None:
        raise CallError(f"call {record.id} to {record.path}: the request body is not a JSON object")
    return request


def _imported(
    form: registry.Format,
    record: CallRecord,
    request: dict[str, Any],
    response: dict[str, Any] | None,
    session: str,
    incremental: Incremental | None = None,
) -> Trace:
    """The request (and reply) read by its format's importer, as a file of it would be
    (going on from what the session's previous call derived, ``incremental``)."""
    created = datetime.fromtimestamp(record.started_at, tz=UTC)
    try:
        return form.converter().trace(request, response, session, created, incremental)
    except CtxscopeError as exc:
        raise CallError(f"call {record.id} to {record.path}: {exc}") from exc
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
        raise CallError(
            f"call {record.id} to {record.path}: not a request the {record.api} importer "
            f"reads ({type(exc).__name__}: {exc})"
        ) from exc


def _capture_meta(
    record: CallRecord,
    request: dict[str, Any],
    reply: _Reply,
    usage: dict[str, int],
    named_by: str,
) -> dict[str, Any]:
    """``metadata.capture``: what only a live call has (see the module docstring)."""
    response = reply.response or {}
    model = response.get("model") or request.get("model")
    capture: dict[str, Any] = {
        "via": "proxy",
        "api": record.api,
        "path": record.path,
        "status": record.status,
        "latency_ms": round(record.latency_ms, 3),
        "ttfb_ms": None if record.ttfb_ms is None else round(record.ttfb_ms, 3),
        "stream": reply.stream,
        "session_from": named_by,
        "usage": usage_summary(record.api, usage),
    }
    if record.source:
        capture["source"] = record.source
    if isinstance(model, str):
        capture["model"] = model
    if record.request_id:
        capture["request_id"] = record.request_id
    response_id = response.get("id")
    if isinstance(response_id, str) and response_id:
        capture["response_id"] = response_id
    if reply.problems:
        capture["error"] = "; ".join(reply.problems)
    return capture


def trace_from_call(
    record: CallRecord, request_body: bytes, response_body: bytes, sessions: Sessions
) -> Trace:
    """The trace of one captured call (see the module docstring)."""
    form = registry.by_api(record.api)
    request = _request(record, request_body)
    reply = _read_reply(form, record, response_body)
    response = reply.response
    session, named_by = sessions.session_of(record.api, request, record.source)
    trace = _imported(form, record, request, response, session, sessions.incremental(session))
    usage = usage_from_obj(response.get("usage")) if response else {}
    capture = _capture_meta(record, request, reply, usage, named_by)
    if "response_id" in capture and form.converter().continues:
        sessions.answered(capture["response_id"], session)
    problems = reply.problems
    tags = [LIVE_TAG] + ([f"source:{record.source}"] if record.source else [])
    if problems and not (record.error or "").startswith(CLIENT_GONE):
        tags.append(FAILED_TAG)
    lines = form.converter().reply(response) if response else []
    # the importer read the same reply: its normalized usage is this call's
    tokens = trace.outcome.tokens if trace.outcome is not None else None
    outcome = Outcome(
        output="\n".join(lines) or None, usage=usage, tokens=tokens, note="; ".join(problems)
    )
    return trace.model_copy(
        update={
            "trace_id": record.id,
            "session_id": session,
            "turn": sessions.next_turn(session),
            "created_at": datetime.fromtimestamp(record.started_at, tz=UTC),
            "tags": tags,
            "metadata": {**trace.metadata, "capture": capture},
            "outcome": outcome,
        }
    )


__all__ = [
    "APIS",
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
