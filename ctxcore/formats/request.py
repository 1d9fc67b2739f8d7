"""The shape every request importer shares (docs/design.md, "Formats").

A request to a model API (OpenAI chat, Anthropic Messages, the Responses API, Gemini, Bedrock
Converse) becomes a trace the same way: check the request's shape, reduce its messages to
``NormMessage``s and its tools to ``ToolDef``s (counting what was read in a ``Tally``), map
them onto a captured input (``norm.captured_input_from_norm``), and read the reply, if one
came with the request, for the outcome (text, usage, model). ``RequestFormat.trace`` does that
once; each format subclasses it and supplies only its mapping: the hooks below.

A file may hold a request, a ``{"request": ..., "response": ...}`` pair, or a list of either
(``requests``); ``read`` is the format's reader in ``registry``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

from ctxcore.errors import ImportFormatError
from ctxcore.formats.accounting import Tally
from ctxcore.formats.derive import make_trace, stable_id
from ctxcore.formats.norm import (
    Assembly,
    NormMessage,
    Resume,
    captured_input_from_norm,
    last_user_index,
    usage_from_obj,
)
from ctxcore.formats.usage import normalize as normalize_usage
from ctxcore.models import TokenUsage, ToolDef, Trace
from ctxcore.pipeline.recorded import Carry


def each_looks_like(looks_like: Callable[[Any], bool], data: Any) -> bool:
    """Whether a request, a ``{"request": ...}`` pair, or every item of a list, passes."""

    def one(x: Any) -> bool:
        return looks_like(x) or (isinstance(x, dict) and looks_like(x.get("request")))

    return bool(data) and all(one(x) for x in data) if isinstance(data, list) else one(data)


def reserve_tokens(value: Any) -> int | None:
    """A request's output-token limit, if it is a count (not a bool, not negative)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def call_line(name: Any, args: Any) -> str:
    """A tool call as one ``name(args)`` line of a reply (arguments as JSON text)."""
    return f"{name}({args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)})"


def first_user(messages: Any) -> Any:
    """The content of the first user message of a list, if any (a session fingerprint)."""
    for m in messages if isinstance(messages, list) else []:
        if isinstance(m, dict) and m.get("role") == "user":
            return m.get("content")
    return None


def write_lifetime(tokens: TokenUsage | None, tally: Tally) -> TokenUsage | None:
    """A cache write the reply does not split by lifetime, split by the request's marks: a
    ``cache_control`` mark writes for 5 minutes unless it names ``ttl: "1h"`` (Anthropic's
    prompt-caching page), so when every mark of the request is a 5-minute one the whole write
    was (docs/design.md, "The trace contract", Usage). A request with a 1-hour mark, or
    none, keeps the split unknown."""
    if tokens is None or not tokens.cache_write_tokens or not tally.cache_control:
        return tokens
    if tokens.cache_write_5m_tokens is not None or tokens.cache_write_1h_tokens is not None:
        return tokens
    if any(tally.cache_ttl.get(path, "5m") != "5m" for path in tally.cache_control):
        return tokens
    return tokens.model_copy(
        update={"cache_write_5m_tokens": tokens.cache_write_tokens, "cache_write_1h_tokens": 0}
    )


def _copied(tally: Tally) -> Tally:
    """A tally to go on counting into, the original left as it is."""
    return Tally(
        tally.format,
        dict(tally.counts),
        list(tally.unknown),
        tally.unknown_total,
        list(tally.cache_control),
        dict(tally.cache_ttl),
    )


#: how ``derive.stable_id`` writes a request's identity before hashing it
_ID_JSON: dict[str, Any] = {"sort_keys": True, "ensure_ascii": False, "default": str}


@dataclass(frozen=True)
class _IdHash:
    """The trace id's hash (``derive.stable_id``) fed up to a checkpoint's last message:
    the JSON before the message list (``head``: the builder and the identity's parts
    before the list), the list's ``[`` and its messages up to the checkpoint's query."""

    head: str
    hash: Any


@dataclass
class _GoingOn:
    """One call's normalizing, as ``Incremental.go_on`` did it: its messages from ``start``
    on (all of them when it did not go on from the previous call), the tally, the tally
    before each message read, and the assembly to start from."""

    items: list[Any]
    head: Any
    start: int
    norm: list[NormMessage]
    tally: Tally
    before: dict[int, Tally]
    resume: Resume
    #: the checkpoint it went on from
    origin: _Checkpoint | None = None


@dataclass(frozen=True)
class _Checkpoint:
    """A call's messages before its query, the tally before the query and the parts the
    assembly had made before it (``format`` and ``head``: what else they depend on)."""

    format: str
    head: Any
    items: list[Any]
    tally: Tally
    parts: Assembly
    #: the trace id's hash up to ``items``' end, once the call's id is made
    id_hash: list[_IdHash] = field(default_factory=list)

    def extended_by(self, form: RequestFormat, head: Any, items: list[Any]) -> bool:
        n = len(self.items)
        return (
            len(items) > n
            and self.format == form.source
            and self.head == head
            and items[:n] == self.items
        )


#: Calls of a session remembered to go on from (the most recent): calls that end out of
#: order under a burst, or two conversations under one session id, each find theirs.
CHECKPOINTS = 8


class Incremental:
    """What one session's recent calls derived, for its next call to go on from
    (docs/design.md, "Live capture", "Speed").

    A call extends an earlier one when its format normalizes message by message
    (``RequestFormat.items``), its head (a system field) is the same and its messages start
    with that call's messages before its query. Its messages are then normalized from there
    on only, onto the tally the earlier ones made, and assembled onto the parts they made
    (``norm.Resume``); of the ``CHECKPOINTS`` calls kept, the one with the most messages it
    extends. A call that extends none (an edit in the middle, a compaction that rewrote the
    history, a format read as a whole) is derived in full. The trace is the same either
    way (tests/test_capture_incremental.py)."""

    def __init__(self, kept: int = CHECKPOINTS) -> None:
        self.kept = kept
        self._checkpoints: list[_Checkpoint] = []  # most recent last
        self.tools: list[ToolDef] | None = None
        #: the recorded derivation of the recent calls up to their queries
        self.derived = Carry(kept)
        #: calls that went on from an earlier one, and calls derived in full
        self.resumed = 0
        self.full = 0

    def go_on(self, form: RequestFormat, request: dict[str, Any]) -> _GoingOn | None:
        """The call's messages normalized (from where an earlier call's query was, when it
        extends that call); None for a format normalized as a whole."""
        items = form.items(request)
        if items is None:
            return None
        head = form.head(request)
        for cp in sorted(self._checkpoints, key=lambda c: len(c.items), reverse=True):
            if cp.extended_by(form, head, items):
                got = self._normalized(form, items, head, len(cp.items), [], _copied(cp.tally))
                if last_user_index(got.norm) is not None:
                    got.resume = Resume(cp.parts)
                    got.origin = cp
                    # the equal messages kept as the checkpoint's objects: a session's
                    # checkpoints hold one copy of its conversation, not one each
                    got.items = cp.items + items[len(cp.items) :]
                    return got
        tally = Tally(form.source)
        lead = form.normalize_head(request, tally)
        return self._normalized(form, items, head, 0, lead, tally)

    @staticmethod
    def _normalized(
        form: RequestFormat,
        items: list[Any],
        head: Any,
        start: int,
        lead: list[NormMessage],
        tally: Tally,
    ) -> _GoingOn:
        norm = list(lead)
        before: dict[int, Tally] = {}
        for i in range(start, len(items)):
            before[i] = _copied(tally)
            norm.extend(form.normalize_item(items[i], i, tally))
        return _GoingOn(items, head, start, norm, tally, before, Resume(None))

    def same_tools(self, tools: list[ToolDef]) -> list[ToolDef]:
        """The previous call's tool list when this one's is equal (one object: its compact
        JSON is made once, ``recorded.tools_text``)."""
        if self.tools is not None and tools == self.tools:
            return self.tools
        self.tools = tools
        return tools

    def keep(self, got: _GoingOn | None) -> _Checkpoint | None:
        """Remember this call for the next ones: its messages before its query, the tally
        before the query and the parts assembled before it (the checkpoint made)."""
        if got is not None and got.start and got.resume.start is not None:
            self.resumed += 1
        else:
            self.full += 1
        if got is None or got.resume.kept is None:
            return None
        cut = got.resume.kept.last_user
        assert cut is not None
        cp = _Checkpoint(
            got.tally.format, got.head, got.items[:cut], got.before[cut], got.resume.kept
        )
        self._checkpoints.append(cp)
        del self._checkpoints[: -self.kept]
        return cp

    @staticmethod
    def trace_id(
        form: RequestFormat, request: dict[str, Any], got: _GoingOn | None, kept: _Checkpoint | None
    ) -> str:
        """``stable_id(form.builder, *form.identity(request))``, the hash going on from
        where the checkpoint the call went on from left it: the JSON of a list is ``[``, its
        items' JSON joined by ``, ``, and ``]`` (``json.dumps`` writes an item inside a
        list as it writes it alone), so the hash of the JSON up to a checkpoint's last
        message is the start of this call's. The state at this call's checkpoint is kept
        with it (``kept``)."""
        ident = form.identity(request)
        items = form.items(request)
        at = next((k for k, x in enumerate(ident) if x is items), None)
        if got is None or items is None or at is None:
            return stable_id(form.builder, *ident)
        head = json.dumps([form.builder, *ident[:at]], **_ID_JSON)[:-1] + ", ["
        origin = got.origin
        if origin is not None and origin.id_hash and origin.id_hash[0].head == head:
            h, start = origin.id_hash[0].hash.copy(), len(origin.items)
        else:
            h, start = hashlib.sha256(head.encode("utf-8")), 0
        cut = len(kept.items) if kept is not None else -1
        for i in range(start, len(items)):
            if i == cut and kept is not None:
                kept.id_hash.append(_IdHash(head, h.copy()))
            text = json.dumps(items[i], **_ID_JSON)
            h.update(((", " if i else "") + text).encode("utf-8"))
        rest = "".join(", " + json.dumps(x, **_ID_JSON) for x in ident[at + 1 :])
        h.update(("]" + rest + "]").encode("utf-8"))
        return str(h.hexdigest())[:32]


class RequestFormat:
    """A request API's importer: the skeleton (``trace``, ``traces``, ``read``) and the hooks
    a format overrides. ``builder`` names the traces' builder (``import/<name>``); ``source``
    is the format named in ``metadata.import``; ``shape`` says what a request is, for the
    error when one is not."""

    builder: ClassVar[str]
    source: ClassVar[str]
    shape: ClassVar[str]
    #: the reader gives the file's name as the traces' session (else the request's own)
    file_session: ClassVar[bool] = True
    #: how the API's usage reads as ``TokenUsage`` (``ctxcore.formats.usage.MAPPINGS``)
    usage_mapping: ClassVar[str]

    # ------------------------------------------------------------------ the mapping

    def looks_like(self, data: Any) -> bool:
        """Whether one JSON value is a request of this API (detection)."""
        raise NotImplementedError

    def accepts(self, request: Any) -> bool:
        """Whether a value has the shape ``trace`` needs (else ``shape_error``)."""
        raise NotImplementedError

    def shape_error(self, request: Any) -> str:
        return self.shape

    def normalize(
        self, request: dict[str, Any], tally: Tally
    ) -> tuple[list[NormMessage], dict[str, Any]]:
        """The request's messages (system included), normalised, and what was noticed
        beyond the tally (for ``metadata.import``)."""
        raise NotImplementedError

    def tools(self, request: dict[str, Any], tally: Tally) -> list[ToolDef]:
        raise NotImplementedError

    # A format whose ``normalize`` is its head (what it reads before the message list: a
    # system field) and then each message on its own says so with the three hooks below;
    # a session's next call then normalizes only its new messages (``Incremental``).

    def items(self, request: dict[str, Any]) -> list[Any] | None:
        """The list of messages ``normalize_item`` reads one by one, or None when the format
        normalizes the request as a whole."""
        return None

    def head(self, request: dict[str, Any]) -> Any:
        """What ``normalize_head`` reads (compared between a session's calls)."""
        return None

    def normalize_head(self, request: dict[str, Any], tally: Tally) -> list[NormMessage]:
        """The messages ``normalize`` makes before the message list's."""
        return []

    def normalize_item(self, item: Any, index: int, tally: Tally) -> list[NormMessage]:
        """The messages ``normalize`` makes of ``items(request)[index]``."""
        raise NotImplementedError

    def identity(self, request: dict[str, Any]) -> tuple[Any, ...]:
        """The parts of the request its trace id is a hash of."""
        raise NotImplementedError

    def reserve(self, request: dict[str, Any]) -> Any:
        """The request's output-token limit, as written."""
        return None

    def window(self, request: dict[str, Any]) -> int | None:
        return None

    def response_of(self, request: dict[str, Any], response: Any) -> dict[str, Any] | None:
        """The reply read for the outcome: the one given beside the request, if any."""
        return response if isinstance(response, dict) else None

    def created(self, request: dict[str, Any], response: dict[str, Any] | None) -> datetime | None:
        """When the call was made, if the request or its reply says."""
        return None

    def request_meta(self, request: dict[str, Any]) -> dict[str, Any]:
        """What the request says beside its prompt, for the trace's metadata."""
        return {}

    def response_meta(self, response: dict[str, Any]) -> dict[str, Any]:
        """What the reply says beside its text and usage, for the trace's metadata."""
        return {}

    def usage(self, request: dict[str, Any], response: dict[str, Any] | None) -> dict[str, int]:
        return usage_from_obj(response.get("usage")) if response is not None else {}

    def output(self, request: dict[str, Any], response: dict[str, Any] | None) -> str | None:
        """The reply as ``outcome.output``."""
        return None

    def model(self, request: dict[str, Any], response: dict[str, Any] | None) -> Any:
        return request.get("model")

    def session(self, request: dict[str, Any], session_id: str | None) -> str:
        return session_id or "import"

    # ------------------------------------------------------------------ the skeleton

    def trace(
        self,
        request: dict[str, Any],
        *,
        session_id: str | None = None,
        turn: int = 0,
        now: datetime | None = None,
        default_now: datetime | None = None,
        response: dict[str, Any] | None = None,
        query: str | None = None,
        trace_id: str | None = None,
        incremental: Incremental | None = None,
    ) -> Trace:
        """One request (and, if given, its reply) → a trace. Its time is ``now``, else the
        time the request or reply says, else ``default_now`` (importers pass the file's
        time), else the clock; its id is ``trace_id``, else a hash of the request (importing
        it twice is a no-op in the store). ``incremental``: what the session's previous call
        derived (the proxy's converter keeps one a session); the trace is the same without
        it, made from the new messages only when the request extends that call's."""
        if not self.accepts(request):
            raise ImportFormatError(self.shape_error(request))
        going_on = None
        if incremental is not None and query is None:
            going_on = incremental.go_on(self, request)
        if going_on is not None:
            norm, tally, resume = going_on.norm, going_on.tally, going_on.resume
            notes: dict[str, Any] = {}
        else:
            tally = Tally(self.source)
            norm, notes = self.normalize(request, tally)
            resume = None
        tools = self.tools(request, tally)
        if incremental is not None:
            tools = incremental.same_tools(tools)
        reply = self.response_of(request, response)
        when = now or self.created(request, reply) or default_now or datetime.now(UTC)
        inp, flat = captured_input_from_norm(
            norm,
            tools=tools,
            now=when,
            query=query,
            window=self.window(request),
            output_reserve=reserve_tokens(self.reserve(request)),
            resume=resume,
        )
        kept = incremental.keep(going_on) if incremental is not None else None
        meta: dict[str, Any] = {"import": {**tally.to_metadata(), **notes}}
        meta.update(self.request_meta(request))
        if reply is not None:
            meta.update(self.response_meta(reply))
        model = self.model(request, reply)
        usage = self.usage(request, reply)
        return make_trace(
            inp,
            flat,
            builder=self.builder,
            model=model if isinstance(model, str) else None,
            trace_id=trace_id
            or (
                incremental.trace_id(self, request, going_on, kept)
                if incremental is not None
                else stable_id(self.builder, *self.identity(request))
            ),
            session_id=self.session(request, session_id),
            turn=turn,
            created_at=when,
            usage=usage,
            tokens=write_lifetime(normalize_usage(self.usage_mapping, usage), tally),
            output=self.output(request, reply),
            metadata=meta,
            carry=incremental.derived if incremental is not None else None,
        )

    def detects(self, data: Any) -> bool:
        """Whether a JSON value is a request of this API, a pair, or a list of either."""
        return each_looks_like(self.looks_like, data)

    def requests(self, data: Any) -> Iterator[tuple[Any, Any]]:
        """Each (request, reply) a value holds: a request, a ``{"request": ...,
        "response": ...}`` pair, or a list of either."""
        for item in data if isinstance(data, list) else [data]:
            pair = isinstance(item, dict) and isinstance(item.get("request"), dict)
            yield (item["request"], item.get("response")) if pair else (item, None)

    def traces(
        self, data: Any, *, session_id: str | None = None, default_now: datetime | None = None
    ) -> list[Trace]:
        """One trace per request ``data`` holds (turn = its position)."""
        return [
            self.trace(req, response=resp, session_id=session_id, turn=n, default_now=default_now)
            for n, (req, resp) in enumerate(self.requests(data))
        ]

    def read(
        self, data: Any, *, where: str, session_id: str, default_now: datetime | None
    ) -> list[Trace]:
        """The format's reader (``registry.Reader``): ``load`` says ``where`` in errors."""
        return self.traces(
            data, session_id=session_id if self.file_session else None, default_now=default_now
        )


__all__ = [
    "Incremental",
    "RequestFormat",
    "call_line",
    "each_looks_like",
    "first_user",
    "reserve_tokens",
]
