"""The normalized chat message every request importer reduces its format to, and the
captured input made from a list of them (docs/design.md, "Formats").

Each reader turns its format's messages into ``NormMessage``s (role, text, tool calls, tool
results, reasoning and media kept beside the text); ``captured_input_from_norm`` then maps
them onto the trace contract the same way for all of them: system and early developer
messages into the system instructions, a late developer message into a ``policy`` packet,
tool results into ``tool:<id>`` packets, the last user message into the query, the rest
into the history.

Typed parts (docs/design.md, "Formats"): a tool call a provider runs itself (web search, code
execution, web fetch, file search, an MCP server's tool) is a tool call like any other, its
``meta`` (``server_tool``, ``mcp_server``) kept beside it, and its result a ``tool:<id>``
packet. Reasoning is kept as typed ``thinking`` parts beside the text (an encrypted one by
its size only, with no text). A compaction's summary is a ``summary`` packet
(``compaction:<id>``); when the format says the summary replaces what came before it in the
request (Anthropic's ``compaction`` block), those messages stay in the chat messages marked
``replaced_by`` and leave the captured input: ``derive`` shows them as summarized.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from ctxcore.errors import ImportFormatError
from ctxcore.formats.accounting import COMPACTION_KIND
from ctxcore.loading import error_message
from ctxcore.models import CapturedInput, Message, Packet, ToolDef
from ctxcore.pipeline.recorded import AFTER_QUERY


@dataclass
class ToolCall:
    """A tool call requested by the model, whatever format it came in."""

    id: str | None
    name: str
    arguments: str
    #: what runs it when the client does not: ``server_tool`` (the block or item type),
    #: ``mcp_server`` (the MCP server's name); kept in the call's metadata
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class NormMessage:
    """One chat message reduced to what every source format has in common."""

    index: int
    role: str
    text: str
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None  # for tool results
    name: str | None = None
    #: the message id in the trace (default ``msg-<index>``)
    id: str | None = None
    #: images, audio, documents: what each was (type, media type, size), kept in metadata
    media: list[dict[str, Any]] = field(default_factory=list)
    #: anything else worth keeping beside the text (cache_control marks, is_error, …)
    extra: dict[str, Any] = field(default_factory=dict)
    #: typed reasoning parts: ``{"type", "chars"}`` for readable reasoning (its text is in
    #: ``reasoning``), ``{"type", "encrypted_chars"}`` for an encrypted one (no text)
    thinking: list[dict[str, Any]] = field(default_factory=list)
    #: this message is a compaction's summary: ``{"type", "replaces_earlier", ...}``
    compaction: dict[str, Any] | None = None


@dataclass
class Parts:
    """What one message's blocks add up to, for a format whose tool results sit inside a
    message (Anthropic, Bedrock): its text, reasoning, calls and media (on ``main``), and
    the tool results it holds."""

    main: NormMessage
    texts: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    results: list[NormMessage] = field(default_factory=list)
    #: compaction summaries the message starts with (before it)
    lead: list[NormMessage] = field(default_factory=list)
    #: results a server returned inside the (assistant) message, each with the number of
    #: texts read before it: the text after a result follows it
    after: list[tuple[int, NormMessage]] = field(default_factory=list)

    def messages(self) -> list[NormMessage]:
        """The tool results first, then the message itself unless the results were all;
        a server's results after the text and calls before them, each followed by the text
        after it (``<result id>.text``)."""
        main = self.main
        cut = self.after[0][0] if self.after else len(self.texts)
        main.text = "\n".join(self.texts[:cut])
        main.reasoning = "\n".join(r for r in self.reasoning if r)
        own = (
            main.text or main.tool_calls or main.reasoning or main.thinking or main.media
        ) or not (self.results or self.lead or self.after)
        out = [*self.lead, *self.results, *([main] if own else [])]
        for k, (start, result) in enumerate(self.after):
            out.append(result)
            end = self.after[k + 1][0] if k + 1 < len(self.after) else len(self.texts)
            if end > start:
                rest = "\n".join(self.texts[start:end])
                out.append(NormMessage(main.index, main.role, rest, id=f"{result.id}.text"))
        return out


def _call_line(call: ToolCall) -> str:
    return f"{call.name}({call.arguments})"


def reply_text(m: NormMessage) -> str | None:
    """A recorded reply as ``outcome.output``: its text, then each tool call it made as a
    ``name(args)`` line (as the Responses and Codex readers write them): a reply that only
    calls tools is not an empty one."""
    lines = [m.text] if m.text else []
    lines.extend(_call_line(c) for c in m.tool_calls)
    return "\n".join(lines) or None


class Resume:
    """Where an assembly goes on from, and where the next one may: a session's call N+1 repeats
    call N's messages before its query, so the parts they made (``start``, a copy of call N's
    assembly stopped before its query message) are taken as they are and only the messages
    from there on are added; ``kept`` is this call's assembly stopped before its own query
    (docs/design.md, "Live capture", "Speed")."""

    def __init__(self, start: Assembly | None = None) -> None:
        self.start = start
        self.kept: Assembly | None = None


def captured_input_from_norm(
    msgs: list[NormMessage],
    *,
    tools: list[ToolDef],
    now: datetime,
    query: str | None = None,
    window: int | None = None,
    output_reserve: int | None = None,
    resume: Resume | None = None,
) -> tuple[CapturedInput, list[Message]]:
    """The captured input and the flat chat messages (for ``result.messages``).

    With ``resume``, ``msgs`` are the messages after ``resume.start``'s (which holds the
    query: its index is the last user message's); ``resume.kept`` is set to the assembly
    before the query message.

    A value the trace contract refuses (a 20 MB tool log, a negative window) becomes an
    ``ImportFormatError`` naming the message, not a pydantic traceback.
    """
    try:
        last_user = None if query is not None else last_user_index(msgs)
        if resume is not None and resume.start is not None:
            parts = resume.start.copy(last_user)
        else:
            parts = Assembly(last_user)
        for m in msgs:
            if resume is not None and m.index == last_user and resume.kept is None:
                resume.kept = parts.copy(last_user)
            try:
                parts.add(m)
            except ValidationError as exc:
                raise ImportFormatError(
                    f"messages[{m.index}] ({m.role}): {_first_error(exc)}"
                ) from exc
        if query is None:
            query = next((m.text for m in msgs if m.index == last_user and m.role == "user"), "")
        inp = CapturedInput(
            query=query,
            now=now,
            system_instructions="\n\n".join(parts.system),
            history=parts.history,
            packets=parts.packets,
            tools=tools,
            window=window,
            output_reserve=output_reserve,
        )
    except ValidationError as exc:
        raise ImportFormatError(f"cannot import this prompt: {_first_error(exc)}") from exc
    return inp, parts.flat


def _first_error(exc: ValidationError) -> str:
    err = exc.errors(include_url=False)[0]
    loc = ".".join(str(x) for x in err["loc"])
    msg = error_message(err)
    return f"{loc}: {msg}" if loc else msg


def last_user_index(msgs: list[NormMessage]) -> int | None:
    """The index of the last user message: the query (None when there is none)."""
    return next((m.index for m in reversed(msgs) if m.role == "user"), None)


class Assembly:
    """The parts of a captured input, filled message by message: system instructions,
    history, packets (late developer messages, tool results) and the flat message list.
    Tool results are matched to the calls still waiting for one, oldest first."""

    def __init__(self, last_user: int | None) -> None:
        self.last_user = last_user
        self.system: list[str] = []
        self.history: list[Message] = []
        self.packets: list[Packet] = []
        self.flat: list[Message] = []
        self.pending: list[ToolCall] = []  # calls without a result yet, oldest first
        self.seen_ids: set[str] = set()
        self.synth = 0
        self.seen_conversation = False
        #: the query was the last message added: the next part is marked ``AFTER_QUERY``
        self.after_query = False

    def copy(self, last_user: int | None) -> Assembly:
        """A copy to go on adding to (its lists its own; the frozen messages and packets, and
        the pending calls, which adding never changes, shared), with the query at
        ``last_user``."""
        other = Assembly(last_user)
        other.system = list(self.system)
        other.history = list(self.history)
        other.packets = list(self.packets)
        other.flat = list(self.flat)
        other.pending = list(self.pending)
        other.seen_ids = set(self.seen_ids)
        other.synth = self.synth
        other.seen_conversation = self.seen_conversation
        other.after_query = self.after_query
        return other

    def _mark(self, meta: dict[str, Any]) -> dict[str, Any]:
        """``meta`` of a conversation part, marked when it is the first sent after the query
        (the recorded preset puts the query back there, docs/design.md "recorded")."""
        if not self.after_query:
            return meta
        self.after_query = False
        return {**meta, AFTER_QUERY: True}

    def add(self, m: NormMessage) -> None:
        """One message, into the part its role (and place) puts it in."""
        mid = m.id or f"msg-{m.index}"
        side = _side_metadata(m)
        if m.compaction is not None:
            self._compaction(m, mid, side)
            return
        if m.role in ("system", "developer"):
            if m.role == "developer" and self.seen_conversation:
                # injected mid-conversation: a policy packet, not the system prompt
                self.packets.append(
                    Packet(
                        id=f"policy:{mid}",
                        kind="policy",
                        content=m.text,
                        must_keep=True,
                        metadata=self._mark({}),
                    )
                )
            else:
                self.system.append(m.text)
            self.flat.append(Message(role=m.role, content=m.text, id=mid, metadata=side))
            return
        self.seen_conversation = True
        if m.role in ("tool", "function", "ipython"):
            self._tool_result(m, mid, side)
        elif m.index == self.last_user:
            self.flat.append(Message(role="user", content=m.text, id=mid, metadata=side))
            self.after_query = True
        else:
            content = self._content(m)  # first: it names the calls that have no id
            meta = {**side, **self._turn_metadata(m)}
            msg = Message(role=m.role, content=content, id=mid, metadata=meta)
            marked = self._mark(meta)  # the input's copy only, as a session log's call has it
            self.history.append(
                msg if marked is meta else msg.model_copy(update={"metadata": marked})
            )
            self.flat.append(msg)

    def _compaction(self, m: NormMessage, mid: str, side: dict[str, Any]) -> None:
        """A compaction's summary: a ``summary`` packet. One that replaces what came before
        it takes the conversation read so far out of the input (the chat messages keep it,
        marked ``replaced_by``)."""
        assert m.compaction is not None
        pid = f"compaction:{mid}"
        info = {k: v for k, v in m.compaction.items() if k != "replaces_earlier"}
        if m.compaction.get("replaces_earlier"):
            replaced = 0
            ids: list[str] = []
            for k, msg in enumerate(self.flat):
                if msg.role not in ("system", "developer") and "replaced_by" not in msg.metadata:
                    meta = {**msg.metadata, "replaced_by": pid}
                    self.flat[k] = msg.model_copy(update={"metadata": meta})
                    replaced += 1
                    ids.append(msg.id or "")
            self.history.clear()
            self.packets[:] = [p for p in self.packets if p.kind == "policy"]
            self.pending.clear()
            info["replaced"] = replaced
            info["replaced_ids"] = ids
        self.seen_conversation = True
        meta = self._mark({"compaction": info, "message_index": m.index, **side})
        self.packets.append(Packet(id=pid, kind=COMPACTION_KIND, content=m.text, metadata=meta))
        self.flat.append(
            Message(role=m.role, content=m.text, id=mid, metadata={"compaction": info, **side})
        )

    def _answered_call(self, m: NormMessage) -> ToolCall | None:
        """The pending call a tool result answers (by id, else the oldest), taken off."""
        call = None
        if m.tool_call_id is not None:
            call = next((c for c in self.pending if c.id == m.tool_call_id), None)
        elif self.pending:
            call = self.pending[0]
        if call is not None:
            self.pending.remove(call)
        return call

    def _tool_result(self, m: NormMessage, mid: str, side: dict[str, Any]) -> None:
        """A tool result: a ``tool:<call id>`` packet (``#2``… when an id repeats)."""
        call = self._answered_call(m)
        cid = m.tool_call_id or (call.id if call else None) or mid
        pid = f"tool:{cid}"
        n = 2
        while pid in self.seen_ids:
            pid = f"tool:{cid}#{n}"
            n += 1
        self.seen_ids.add(pid)
        meta: dict[str, Any] = self._mark({"message_index": m.index, "tool_call_id": cid, **side})
        name = m.name or (call.name if call else None)
        if name:
            meta["name"] = name
        self.packets.append(Packet(id=pid, kind="tool_result", content=m.text, metadata=meta))
        self.flat.append(
            Message(role="tool", content=m.text, id=mid, metadata={"tool_call_id": cid, **side})
        )

    def _content(self, m: NormMessage) -> str:
        """A history message's text, its tool calls after it as ``name(args)`` lines (each
        call without an id gets ``call_<index>_<n>``, and waits for its result)."""
        if not m.tool_calls:
            return m.text
        for c in m.tool_calls:
            if c.id is None:
                self.synth += 1
                c.id = f"call_{m.index}_{self.synth}"
            self.pending.append(c)
        lines = "\n".join(_call_line(c) for c in m.tool_calls)
        return f"{m.text}\n{lines}" if m.text else lines

    @staticmethod
    def _turn_metadata(m: NormMessage) -> dict[str, Any]:
        """What a history message keeps beside its content: its calls in full, its
        reasoning, its name."""
        meta: dict[str, Any] = {}
        if m.tool_calls:
            meta["tool_calls"] = [
                {"id": c.id, "name": c.name, "arguments": c.arguments, **c.meta}
                for c in m.tool_calls
            ]
        if m.reasoning:
            meta["reasoning"] = m.reasoning
        if m.thinking:
            meta["thinking"] = list(m.thinking)
        if m.name:
            meta["name"] = m.name
        return meta


def _side_metadata(m: NormMessage) -> dict[str, Any]:
    side: dict[str, Any] = dict(m.extra)
    if m.media:
        side["media"] = list(m.media)
    return side


def usage_from_obj(obj: Any) -> dict[str, int]:
    """Integer counters of a provider ``usage`` object (nested details flattened)."""
    out: dict[str, int] = {}
    if not isinstance(obj, dict):
        return out
    for key, value in obj.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            out[key] = value
        elif isinstance(value, dict):
            for sub, v in value.items():
                if isinstance(v, int) and not isinstance(v, bool):
                    out[f"{key}.{sub}"] = v
    return out


__all__ = [
    "Assembly",
    "NormMessage",
    "Parts",
    "Resume",
    "ToolCall",
    "captured_input_from_norm",
    "last_user_index",
    "reply_text",
    "usage_from_obj",
]
