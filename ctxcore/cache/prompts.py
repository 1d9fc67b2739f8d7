"""A call as a prompt cache sees it: its blocks in prefix order, their tokens, its breakpoints
(docs/design.md, "Prompt cache").

A call's prompt is cut into blocks (``Block``): the tool definitions, then its messages in the
order they were sent (the trace's ``result.messages`` where the importer kept them, else the
history, tool-result packets and query placed by their message index). System messages before
the conversation are ``system`` blocks. Each block is counted with cl100k_base (a count is kept
per distinct block, so a session's calls count each message once); when the trace records the
prompt's total (``outcome.tokens.input_tokens``) and the importer says part of the prompt was
not recorded (``metadata.import.reconstructed``: the system prompt or the tool definitions of a
session log), that part is one ``unrecorded`` block first, holding ``input_tokens`` minus the
counted blocks; otherwise the counts are scaled so that they sum to ``input_tokens``. A prefix's
tokens are therefore the provider's count of the whole prompt less our count of what follows.

Breakpoints (Anthropic) come from the importer's marks (``metadata.import.cache_control``, the
path of each marked block, and ``cache_control_ttl``, the lifetime a mark names). A session log
(Claude Code, pi, OpenHands: ``metadata.session_log``) records no request, so no marks; the
placement those agents use is assumed: the end of the system prompt and the last message.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from operator import is_
from typing import Literal

from pydantic import BaseModel

from ctxcore.models import Message, Packet, TokenUsage, ToolDef, Trace
from ctxcore.tokens import get_counter

Ttl = Literal["5m", "1h"]
BlockKind = Literal["tools", "system", "unrecorded", "message"]
Provider = Literal["anthropic", "openai", "gemini"]

_MSG_ID = re.compile(r"^msg-(\d+)")
_MARK = re.compile(r"^(tools|system|messages)\[(\d+)\]")
#: counts kept per distinct block text (its key); emptied when it grows past this
_MEMO_LIMIT = 200_000
_COUNTS: dict[str, int] = {}
#: system texts kept for break attribution, one object per distinct text
_TEXTS: dict[str, str] = {}


def provider_of(model: str) -> Provider | None:
    """The provider whose cache serves ``model``, by its name (a provider path such as
    ``openai/`` or ``models/`` dropped); ``None`` for a model of none of them."""
    name = model.lower().rsplit("/", 1)[-1]
    if name.startswith("claude") or ".anthropic." in model or model.startswith("anthropic."):
        return "anthropic"
    if name.startswith("gemini"):
        return "gemini"
    if name.startswith(("gpt-", "o1", "o3", "o4", "chatgpt", "codex")):
        return "openai"
    return None


@dataclass(frozen=True)
class Block:
    """One block of a prompt: its kind, a label (``tools``, ``system``, a message id...), a
    key of its content, its tokens and, when marked, the lifetime of its breakpoint. For
    break attribution it also keeps the packet or message id, what it is (``tool_result``,
    ``compaction``), a system block's text and the tools' (name, key) pairs."""

    kind: BlockKind
    label: str
    key: str
    tokens: int
    breakpoint: Ttl | None = None
    packet: str | None = None
    role: str = ""
    text: str | None = None
    tools: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Prompt:
    """One call as the cache sees it: when it was sent, the model, its blocks in prefix
    order, the usage the provider recorded (``None`` when not recorded), the compaction the
    call's context follows (``metadata.import.compaction.at``), the provider's own reason
    for a cache miss where a reply records one (no format read records one yet) and its
    session (a side chain shares its parent's cache but is compared with its own calls)."""

    trace_id: str
    at: datetime
    model: str
    blocks: tuple[Block, ...]
    recorded: TokenUsage | None = None
    compaction: str | None = None
    provider_reason: str | None = None
    session_id: str = ""

    @property
    def tokens(self) -> int:
        return sum(b.tokens for b in self.blocks)

    @property
    def output_tokens(self) -> int:
        rec = self.recorded
        return rec.output_tokens or 0 if rec is not None else 0


def key_of(*parts: str) -> str:
    return hashlib.sha1("\x00".join(parts).encode()).hexdigest()


def _count(key: str, text: str, lead: int = 0, body: str = "") -> int:
    """The tokens of a block's ``text`` (kept by its key); ``text[lead:]`` starts with
    ``body`` (``_tokens``)."""
    n = _COUNTS.get(key)
    if n is None:
        if len(_COUNTS) >= _MEMO_LIMIT:
            _COUNTS.clear()
        n = _COUNTS[key] = _tokens(text, lead, body)
    return n


#: the characters a text may end with for a line end after it to start a token of its own
_WORD_END = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
#: where a line that starts with a character other than white space begins
_LINE = re.compile(r"\n(?=\S)")


def _first_cut(body: str) -> int:
    """Where ``body``'s tokens start as they do alone, after a line end (``_tokens``): 0,
    unless it starts with white space (a line end's piece ``\\s*[\\r\\n]`` would take it
    on); then the first line that does not; -1 if none does."""
    if not body[0].isspace():  # isspace holds for every \\s character and more
        return 0
    m = _LINE.search(body)
    return -1 if m is None else m.end()


def _last_cut(body: str) -> int:
    """Where ``body``'s tokens end as they do alone, before a line end (``_tokens``): its
    end, if it ends with an ASCII letter or digit (punctuation's piece takes the line ends
    after it; white space looks ahead); else the start of its last line that starts with a
    character other than white space; -1 if none does."""
    if body[-1] in _WORD_END:
        return len(body)
    i = body.rfind("\n")
    while i >= 0 and (i + 1 == len(body) or body[i + 1].isspace()):
        i = body.rfind("\n", 0, i)
    return -1 if i < 0 else i + 1


def _tokens(text: str, lead: int, body: str) -> int:
    """The tokens of ``text``, which is a head of ``lead`` characters ending with a line
    end, ``body`` (a message's or packet's text: the importer counted it, and the counter
    keeps its count) and a tail starting with a line end (or nothing).

    cl100k_base cuts a text into pieces by a pattern it matches from where the last piece
    ended (no look-behind; BPE never merges across pieces), so a place is a cut wherever
    the pieces before it end there whatever follows: after a line end followed by a
    character other than white space (no piece runs from a line end into one). With the
    first cut in ``body`` at ``q`` (``_first_cut``) and the last at ``p`` (``_last_cut``),
    the tokens are ``head + body[:q]``'s, ``body[q:p]``'s (``body``'s less ``body[:q]``'s
    and ``body[p:]``'s) and ``body[p:] + tail``'s: only the few characters around the
    cuts are counted. Without such cuts, the whole text is."""
    counter = get_counter()
    end = lead + len(body)
    lines = text[lead - 1 : lead] in ("\n", "") and text[end : end + 1] in ("\n", "")
    if not body or not lines or not text.startswith(body, lead):
        return counter.count(text)
    q = _first_cut(body)
    p = _last_cut(body) if end < len(text) else len(body)
    if q < 0 or p < q:
        return counter.count(text)
    pieces = [text[:lead] + body[:q], body, body[p:] + text[end:], body[:q], body[p:]]
    first, whole, last, before, after = (
        counter.count_many(pieces) if any(pieces[3:]) else [*counter.count_many(pieces[:3]), 0, 0]
    )
    return first + whole - before - after + last


def _kept(key: str, text: str) -> str:
    """One shared object per distinct system text (a session's calls repeat it)."""
    kept = _TEXTS.get(key)
    if kept is None:
        if len(_TEXTS) >= 256:
            _TEXTS.clear()
        kept = _TEXTS[key] = text
    return kept


# --------------------------------------------------------------------------- messages


@dataclass(frozen=True)
class _Raw:
    """A block before its tokens are fitted: kind, label, message index, packet id, role,
    what its text is made of (``ident``: compared, never hashed, to reuse an earlier call's
    digest of the same block) and how to make that text (``make``): the ``lead`` characters
    of a line, then ``body`` (the message's or packet's text), then any tail (``_tokens``).
    """

    kind: BlockKind
    label: str
    ident: tuple[object, ...]
    make: Callable[[], str]
    index: int | None
    packet: str | None = None
    role: str = ""
    lead: int = 0
    body: str = ""


def _index(ident: str | None) -> int | None:
    m = _MSG_ID.match(ident or "")
    return int(m.group(1)) if m else None


def _message_text(role: str, content: str, calls: object) -> str:
    tail = json.dumps(calls, sort_keys=True, default=str) if calls else ""
    return f"{role}\n{content}\n{tail}"


def _prefixed(head: str, text: str) -> str:
    return f"{head}\n{text}"


def _message(
    kind: BlockKind, label: str, m: Message, index: int | None, packet: str | None
) -> _Raw:
    """A message's block: its text is its role, content and tool calls."""
    calls = m.metadata.get("tool_calls")
    ident = (m.role, m.content, calls)
    make = partial(_message_text, *ident)
    lead = len(m.role) + 1
    return _Raw(kind, label, ident, make, index, packet, m.role, lead, m.content)


def _tools_text(tools: tuple[ToolDef, ...]) -> str:
    return json.dumps([t.model_dump() for t in tools], sort_keys=True)


def _packet_map(packets: list[Packet]) -> dict[object, Packet]:
    """Each message index a packet names (``metadata.message_index``), the last one naming
    it winning."""
    return {p.metadata.get("message_index"): p for p in packets}


def _as_sent(
    m: Message, pos: int, packets: dict[object, Packet], conversation: bool
) -> tuple[_Raw, bool]:
    """A message as sent (``result.messages``) at position ``pos``: a system message before
    the conversation (``conversation`` is whether it has begun) is a ``system`` block; a
    tool result names its ``tool:<call id>`` packet, a compaction summary its
    ``compaction:`` packet, any other message the packet of its message index. Returns the
    block and whether the conversation has begun with it."""
    idx = _index(m.id)
    system = m.role in ("system", "developer") and not conversation
    packet = None
    if m.role == "tool":
        call = m.metadata.get("tool_call_id")
        packet = f"tool:{call}" if call else None
    elif "compaction" in m.metadata:
        packet = f"compaction:{m.id}"
    elif idx is not None and idx in packets:
        packet = packets[idx].id
    kind: BlockKind = "system" if system else "message"
    at = idx if idx is not None else pos
    return _message(kind, m.id or f"message-{pos}", m, at, packet), conversation or not system


def _by_index(m: Message) -> int | None:
    """The message index whose packet a message as sent takes (``_as_sent``), if any."""
    if m.role == "tool" or "compaction" in m.metadata:
        return None
    return _index(m.id)


def _from_input(trace: Trace) -> list[_Raw]:
    """The messages of a trace without ``result.messages``, in request order: the system
    prompt, then history and tool-result packets by their message index and the query (the
    last user message, whose index the trace does not keep) at the first free index after
    the history's last user message."""
    inp = trace.input
    items: list[_Raw] = []
    for pos, m in enumerate(inp.history):
        idx = _index(m.id)
        at = pos if idx is None else idx
        items.append(_message("message", m.id or f"history-{pos}", m, at, None))
    for p in inp.packets:
        idx = p.metadata.get("message_index")
        at = idx if isinstance(idx, int) else (max((r.index or 0 for r in items), default=-1) + 1)
        role = "tool" if p.kind == "tool_result" else "user"
        make = partial(_prefixed, "packet", p.content)
        items.append(_Raw("message", p.id, (p.content,), make, at, p.id, role, 7, p.content))
    if inp.query:
        users = [_index(m.id) for m in inp.history if m.role == "user"]
        last_user = max((u for u in users if u is not None), default=-1)
        taken = {r.index for r in items}
        q = last_user + 1
        while q in taken:
            q += 1
        make = partial(_prefixed, "user", inp.query)
        items.append(
            _Raw("message", "query", (inp.query,), make, q, role="user", lead=5, body=inp.query)
        )
    items.sort(key=lambda r: r.index or 0)
    if inp.system_instructions:
        si = inp.system_instructions
        make = partial(_prefixed, "system", si)
        items.insert(0, _Raw("system", "system", (si,), make, None, role="system", lead=7, body=si))
    return items


def _head(trace: Trace, messages: list[Message] | None) -> list[_Raw]:
    """The blocks read afresh for every call: the tool definitions, and without
    ``result.messages`` the messages in request order (``_from_input``)."""
    raw: list[_Raw] = []
    tools = tuple(trace.input.tools)
    if tools:
        raw.append(_Raw("tools", "tools", tools, partial(_tools_text, tools), None))
    if not messages:
        raw.extend(_from_input(trace))
    return raw


# --------------------------------------------------------------------------- tokens


def _import_meta(trace: Trace) -> dict[str, object]:
    meta = trace.metadata.get("import")
    return meta if isinstance(meta, dict) else {}


def _fitted(counts: list[int], total: int | None, unrecorded: bool) -> tuple[list[int], int]:
    """Block tokens summing to the recorded total: the unrecorded part takes the rest, or the
    counts are scaled (the rounding left on the last block); (counts, unrecorded tokens)."""
    counted = sum(counts)
    if total is None:
        return counts, 0
    if unrecorded:
        return counts, max(0, total - counted)
    if counted == 0:
        return counts, 0
    scale = total / counted
    out = [round(c * scale) for c in counts]
    out[-1] = max(0, out[-1] + total - sum(out))
    return out, 0


def _tool_parts(tools: tuple[ToolDef, ...]) -> tuple[tuple[str, str], ...]:
    return tuple((t.name, key_of(json.dumps(t.model_dump(), sort_keys=True))) for t in tools)


def _compaction(meta: dict[str, object]) -> str | None:
    comp = meta.get("compaction")
    at = comp.get("at") if isinstance(comp, dict) else None
    return str(at) if at is not None else None


def _same(a: object, b: object) -> bool:
    """Whether ``a`` and ``b`` make the same block text: the same object, or alike in type
    and value all the way down (``1``, ``1.0`` and ``True`` are equal in Python but not in
    JSON; a float by its repr, so ``0.0`` is not ``-0.0``)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return a.keys() == b.keys() and all(_same(v, b[k]) for k, v in a.items())
    if isinstance(a, list | tuple):
        assert isinstance(b, list | tuple)
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return repr(a) == repr(b)
    if isinstance(a, BaseModel):
        assert isinstance(b, BaseModel)
        return _same(a.model_dump(), b.model_dump())
    if isinstance(a, str | int | bool) or a is None:
        return a == b
    return False


def _same_parts(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    """``_same`` of two blocks' parts, the same objects (a session log's calls share their
    messages) found without a call per part."""
    return len(a) == len(b) and (all(map(is_, a, b)) or _same(a, b))


@dataclass
class _Digest:
    """What a block's text comes to: what it was made of (``_Raw.ident``), its key, its
    counted tokens, a system block's text and the tools' (name, key) pairs; and the last
    ``Block`` made of it (a call that fits it to the same tokens shares that block)."""

    ident: tuple[object, ...]
    key: str
    tokens: int
    text: str | None
    tools: tuple[tuple[str, str], ...]
    block: Block | None = None

    def block_for(self, r: _Raw, tokens: int) -> Block:
        """The unmarked block of ``r`` fitted to ``tokens``: the last one when it is alike."""
        b = self.block
        if (
            b is None
            or b.tokens != tokens
            or b.label != r.label
            or b.kind != r.kind
            or b.packet != r.packet
            or b.role != r.role
        ):
            b = Block(
                r.kind, r.label, self.key, tokens, None, r.packet, r.role, self.text, self.tools
            )
            self.block = b
        return b


@dataclass
class _Sent:
    """The messages as sent (``result.messages``) of the call a reader read last, as
    blocks: the messages and packets they were read from (copies of the lists, their
    objects shared with the trace), the packet of each message index, each message's block,
    digest and message index, the sum of the digests' tokens, whether the conversation has
    begun, the positions of the messages that take the packet of their message index, and
    the blocks unfitted (each its digest's tokens; made when a call asks, ``unfitted``).
    A call whose messages and packets start with all of these same objects (a session log's
    calls share them) reads only its new tail."""

    messages: list[Message] = field(default_factory=list)
    packets: list[Packet] = field(default_factory=list)
    by_index: dict[object, Packet] = field(default_factory=dict)
    raws: list[_Raw] = field(default_factory=list)
    digests: list[_Digest] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)
    indices: list[int | None] = field(default_factory=list)
    counted: int = 0
    conversation: bool = False
    takers: dict[object, list[int]] = field(default_factory=dict)

    def extends(self, messages: list[Message], packets: list[Packet]) -> bool:
        """Whether ``messages`` and ``packets`` start with all of this call's, the same
        objects."""
        mine, theirs = self.messages, self.packets
        return (
            len(messages) >= len(mine)
            and len(packets) >= len(theirs)
            and all(map(is_, mine, messages))
            and all(map(is_, theirs, packets))
        )

    def unfitted(self) -> list[Block]:
        """The messages' blocks with their digests' tokens, those not made yet made."""
        blocks = self.blocks
        for pos in range(len(blocks), len(self.raws)):
            d = self.digests[pos]
            blocks.append(d.block_for(self.raws[pos], d.tokens))
        return blocks


class PromptReader:
    """``prompt_of`` for the calls of a session read one after another (docs/design.md,
    "Prompt cache", Incremental per session): a call whose messages as sent and packets
    start with the previous call's, the same objects, takes that call's blocks for them and
    reads only the messages after them; any other block made of the same content as a block
    of the previous call (the same message, tool list, system prompt; compared, not hashed)
    takes that block's key and count. So each message of a session is read, hashed and
    counted once, not once per call that carries it. Only the previous call's blocks and
    digests are kept."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], _Digest] = {}
        self._sent = _Sent()

    def _digest(self, r: _Raw, now: dict[tuple[str, str], _Digest]) -> _Digest:
        slot = (r.kind, r.label)
        d = now.get(slot) or self._last.get(slot)
        if d is None or not _same_parts(d.ident, r.ident):
            text = r.make()
            key = key_of(r.kind, text)
            system = _kept(key, text.split("\n", 1)[-1]) if r.kind == "system" else None
            tools = _tool_parts(r.ident) if r.kind == "tools" else ()  # type: ignore[arg-type]
            d = _Digest(r.ident, key, _count(key, text, r.lead, r.body), system, tools)
        now[slot] = d
        return d

    def _messages(
        self,
        trace: Trace,
        messages: list[Message],
        now: dict[tuple[str, str], _Digest],
        extending: bool,
    ) -> _Sent:
        """The messages as sent of ``trace``: the previous call's extended by the new tail
        when ``extending`` (they start with its messages and packets; its packets' new
        entries re-read the earlier messages whose packet they change), else read from the
        first."""
        packets = trace.input.packets
        sent = self._sent
        if extending:
            for p in packets[len(sent.packets) :]:
                idx = p.metadata.get("message_index")
                old = sent.by_index.get(idx)
                sent.by_index[idx] = p
                if old is None or old.id != p.id:
                    for pos in sent.takers.get(idx, ()):
                        self._reread(sent, messages, pos, now)
        else:
            sent = _Sent(by_index=_packet_map(packets))
        for pos in range(len(sent.messages), len(messages)):
            m = messages[pos]
            r, sent.conversation = _as_sent(m, pos, sent.by_index, sent.conversation)
            d = self._digest(r, now)
            sent.raws.append(r)
            sent.digests.append(d)
            sent.indices.append(r.index)
            sent.counted += d.tokens
            taker = _by_index(m)
            if taker is not None:
                sent.takers.setdefault(taker, []).append(pos)
        sent.messages = messages[:]
        sent.packets = packets[:]
        return sent

    def _reread(
        self, sent: _Sent, messages: list[Message], pos: int, now: dict[tuple[str, str], _Digest]
    ) -> None:
        """Read again the earlier message at ``pos``, whose packet a new packet changed."""
        conversation = pos > 0 and sent.raws[pos - 1].kind == "message"
        r, _ = _as_sent(messages[pos], pos, sent.by_index, conversation)
        d = self._digest(r, now)
        sent.raws[pos] = r
        sent.digests[pos] = d
        if pos < len(sent.blocks):
            sent.blocks[pos] = d.block_for(r, d.tokens)

    def read(self, trace: Trace) -> Prompt:
        """The call of ``trace`` as the cache sees it (module docstring: blocks, their
        tokens, the breakpoints)."""
        meta = _import_meta(trace)
        model = str(trace.metadata.get("model") or "")
        reconstructed = meta.get("reconstructed")
        hidden = {"system prompt", "tool definitions"} & set(
            reconstructed if isinstance(reconstructed, list) else ()
        )
        messages = trace.result.messages if trace.result is not None else None
        head = _head(trace, messages)
        extending = bool(messages) and self._sent.extends(messages or [], trace.input.packets)
        now = self._last if extending else {}
        digests = [self._digest(r, now) for r in head]
        sent = self._messages(trace, messages, now, extending) if messages else _Sent()
        self._last = now
        self._sent = sent
        tokens = trace.outcome.tokens if trace.outcome is not None else None
        total = tokens.input_tokens if tokens is not None else None
        blocks: list[Block] = []
        indices: list[int | None] = [r.index for r in head]
        if hidden:
            counted = sent.counted + sum(d.tokens for d in digests)
            blocks.append(_unrecorded(trace, model, sorted(hidden), total, counted))
            indices.insert(0, None)
        indices.extend(sent.indices)
        blocks.extend(_tokened(head, digests, sent, None if hidden else total))
        assumed = (
            not isinstance(meta.get("cache_control"), list) and "session_log" in trace.metadata
        )
        for i, ttl in _breakpoints(meta, blocks, indices, assumed).items():
            blocks[i] = replace(blocks[i], breakpoint=ttl)
        return Prompt(
            trace.trace_id,
            trace.input.now,
            model,
            tuple(blocks),
            tokens,
            _compaction(meta),
            None,
            trace.session_id,
        )


def _unrecorded(
    trace: Trace, model: str, hidden: list[str], total: int | None, counted: int
) -> Block:
    """The part of the prompt a session log does not record (``hidden``: the system prompt,
    the tool definitions) as one block: the recorded total less the ``counted`` blocks."""
    log = trace.metadata.get("session_log") or {}
    agent = "sidechain" if "parent" in log else "main"
    key = key_of("unrecorded", model, agent)
    return Block("unrecorded", " and ".join(hidden), key, max(0, (total or 0) - counted))


def _tokened(
    head: list[_Raw], digests: list[_Digest], sent: _Sent, total: int | None
) -> list[Block]:
    """The blocks of the head and the messages as sent, with their counts scaled to sum to
    ``total`` (``_fitted``), or as counted without one (the messages' blocks as made)."""
    if total is None:
        out = [d.block_for(r, d.tokens) for r, d in zip(head, digests, strict=True)]
        out.extend(sent.unfitted())
        return out
    every = (*digests, *sent.digests)
    counts, _ = _fitted([d.tokens for d in every], total, False)
    raws = (*head, *sent.raws)
    return [d.block_for(r, n) for r, d, n in zip(raws, every, counts, strict=True)]


def prompt_of(trace: Trace) -> Prompt:
    """The call of ``trace`` as the cache sees it (module docstring: blocks, their tokens,
    the breakpoints); a session's calls read in order: ``PromptReader``."""
    return PromptReader().read(trace)


def _breakpoints(
    meta: dict[str, object], blocks: list[Block], indices: list[int | None], assumed: bool
) -> dict[int, Ttl]:
    """The block indices marked and the lifetime of each: the importer's ``cache_control``
    paths (``cache_control_ttl`` names a mark's lifetime, else 5 minutes), or for a session
    log (``assumed``: Claude Code, pi, OpenHands... record no request, so no marks) the
    placement those agents use: the end of the system prompt and the last message."""
    marks = meta.get("cache_control")
    ttls = meta.get("cache_control_ttl")
    ttl_of = ttls if isinstance(ttls, dict) else {}
    out: dict[int, Ttl] = {}
    if assumed or meta.get("format") == "claude-code":
        for i, b in enumerate(blocks):  # they lead: unrecorded, tools, system, messages
            if b.kind == "message":
                break
            if b.kind in ("unrecorded", "system"):
                out[i] = "5m"
        if blocks:
            out[len(blocks) - 1] = "5m"
        return out
    if not isinstance(marks, list):
        return out
    for path in marks:
        m = _MARK.match(str(path))
        if m is None:
            continue
        ttl: Ttl = "1h" if ttl_of.get(str(path)) == "1h" else "5m"
        kind, n = m.group(1), int(m.group(2))
        if kind == "tools":
            hits = [i for i, b in enumerate(blocks) if b.kind == "tools"]
        elif kind == "system":
            hits = [i for i, b in enumerate(blocks) if b.kind == "system"]
        else:
            hits = [i for i, idx in enumerate(indices) if idx == n and blocks[i].kind == "message"]
        for i in hits[-1:]:
            out[i] = ttl
    return out
