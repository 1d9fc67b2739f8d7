"""The ``recorded`` preset: the context exactly as the agent sent it (docs/design.md, Presets,
"recorded").

An imported or live-captured trace holds what another system sent to its model. This preset
rebuilds that request from the captured input alone — the system instructions, the tool
definitions and the conversation in the order it was sent — and derives what an import
derives: every part kept (``FITS``), counted with the real tokenizer, in the import
partitions. ``ctxscope replay FILE --preset recorded`` therefore changes no turn, and every
policy preset (``pipeline/policies.py``) is a set of edits against this rebuild.

The derivation is shared with the importers (``ctxcore.formats.derive`` re-exports it), so an
import and a rebuild cannot drift apart. What the input alone does not say, the importers
write beside the parts they concern (``AFTER_QUERY``, ``REPLACED``); see ``conversation``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxcore.errors import InputError
from ctxcore.knobs import preset_defaults, refused
from ctxcore.models import (
    BuildResult,
    CapturedInput,
    Config,
    Decision,
    Message,
    Packet,
    PartitionUsage,
    Reason,
    Status,
    ToolDef,
    Totals,
)
from ctxcore.pipeline.common import INSTRUCTIONS_ID, Summarizer, Timer, finish, history_id
from ctxcore.tokens import TOKENIZERS, TokenCounter

NAME = "recorded"
VERSION = "1"

DEFAULTS: dict[str, object] = preset_defaults(NAME)
UNSUPPORTED = refused(NAME)

TOOLS_ID = "builder:tools"
TASK_ID = "builder:task"
FORMAT_ID = "builder:format"
FORMAT_TOKENS_PER_MESSAGE = 3
FORMAT_TOKENS_REPLY = 3

#: The partitions of a recorded prompt: what a chat request really holds, in prompt order
#: (not the six sections of a ctxscope build, which another system's prompt does not have).
IMPORT_PARTITIONS: tuple[str, ...] = (
    "system",
    "tool definitions",
    "history",
    "tool results",
    "current message",
    "format overhead",
)

#: Metadata an importer writes on the first conversation part (history message or packet)
#: sent after the query: the last user message is the query, and agent loops send the
#: model's calls and their results after it. Without it the query is the last message.
AFTER_QUERY = "after_query"
#: Metadata on a compaction's summary packet (``compaction.replaced_ids``) or, in a session
#: log's first call after a compaction, on the call's first conversation part: the ids of
#: the messages the compaction replaced (shown summarized, as the import shows them).
REPLACED = "compaction_replaced"

KEPT_TEXT = "present in the imported prompt (imports keep everything they saw)"


# --------------------------------------------------------------------------- config


def resolve(config: Config, input: CapturedInput) -> Config:
    """Fill the tokenizer (the recorded trace's, carried over by replay; cl100k_base else);
    refuse every other knob: the recorded context has none."""
    del input
    given = [k for k in UNSUPPORTED if getattr(config, k) is not None]
    if given:
        raise InputError(
            f"preset {NAME} has no {', '.join(given)} (it rebuilds the recorded request as it "
            "was sent); remove them or choose a policy preset"
        )
    return with_tokenizer(config, DEFAULTS)


def with_tokenizer(config: Config, defaults: dict[str, object]) -> Config:
    """``config`` with every unset knob at its default; an unknown tokenizer is an error."""
    if config.tokenizer is not None and config.tokenizer not in TOKENIZERS:
        raise InputError(
            f"unknown tokenizer {config.tokenizer!r} in config; choose one of "
            f"{', '.join(TOKENIZERS)}"
        )
    updates = {k: v for k, v in defaults.items() if getattr(config, k) is None}
    return config.model_copy(update=updates)


#: the presets that rebuild the recorded request (this one and the policies on top of it):
#: a replay switching to one keeps the recorded trace's tokenizer (``carried_knobs``)
RECORDED_BASED: set[str] = {
    NAME,
    "langchain-context-editing",
    "langchain-summarization",
    "langchain-trim",
    "anthropic-context-editing",
    "auto-compact",
    "swe-agent-masking",
    "openhands-observation-masking",
    "openhands-recent-events",
    "openhands-conversation-window",
    "openhands-summarizing",
    "masking-summary-hybrid",
}


def carried_knobs(recorded: Config, preset: str) -> dict[str, object]:
    """The knobs of a recorded config a replay with another ``preset`` keeps: the tokenizer,
    when ``preset`` rebuilds the recorded request (its counts must be the recording's),
    nothing otherwise."""
    if preset in RECORDED_BASED and recorded.tokenizer is not None:
        return {"tokenizer": recorded.tokenizer}
    return {}


def run(
    input: CapturedInput,
    config: Config,
    counter: TokenCounter,
    summarizer: Summarizer | None = None,
) -> BuildResult:
    """The recorded request rebuilt from ``input``, every part kept."""
    del config, summarizer
    return derive_result(input, conversation(input).messages(), counter)


# --------------------------------------------------------------------------- rebuilding


@dataclass(frozen=True, slots=True)
class Part:
    """One conversation part of the recorded request, in prompt order: its decision id, its
    kind (``history``, ``tool_result``, ``task``, ``summary``, ``policy``), the message sent
    and, for a history message or a packet, where it comes from in the input."""

    id: str
    kind: str
    message: Message
    packet: Packet | None = None
    history: Message | None = None


@dataclass(slots=True)
class Conversation:
    """The recorded request: its system text, its conversation parts in order, and the
    messages a compaction replaced before it (ids only: the input no longer holds them)."""

    system: str
    parts: list[Part]
    replaced: list[str] = field(default_factory=list)

    def messages(self) -> list[Message]:
        """The chat messages sent (``result.messages``), replaced ones marked as such."""
        out = [Message(role="system", content=self.system)] if self.system else []
        out.extend(
            Message(
                role="tool" if rid.startswith("tool:") else "user",
                content="",
                id=rid,
                metadata={"replaced_by": "compaction"},
            )
            for rid in self.replaced
        )
        out.extend(p.message for p in self.parts)
        return out


def history_ids(input: CapturedInput) -> list[str]:
    """The decision id of each history message: its own id where it has a unique one that no
    packet takes (as a session import names it, so the Timeline follows a message), else
    ``builder:history:K``."""
    taken = {p.id for p in input.packets}
    seen: dict[str, int] = {}
    for m in input.history:
        if m.id:
            seen[m.id] = seen.get(m.id, 0) + 1
    return [
        m.id if m.id and seen[m.id] == 1 and m.id not in taken else history_id(k)
        for k, m in enumerate(input.history)
    ]


def _call_ids(m: Message) -> list[str]:
    calls = m.metadata.get("tool_calls")
    if not isinstance(calls, list):
        return []
    return [str(c["id"]) for c in calls if isinstance(c, dict) and c.get("id") is not None]


def _packet_message(p: Packet) -> Message:
    """The chat message a packet was sent as."""
    if p.kind == "policy":
        return Message(role="developer", content=p.content, id=p.id)
    if p.kind == "tool_result":
        cid = p.metadata.get("tool_call_id", p.id.removeprefix("tool:"))
        return Message(role="tool", content=p.content, id=p.id, metadata={"tool_call_id": cid})
    return Message(role="assistant", content=p.content, id=p.id)


def _interleave(input: CapturedInput, ids: list[str]) -> list[Part]:
    """History messages in order, each packet after the message that made its call (a tool
    result) or, with no such message, right after the packet before it."""
    after_call: dict[str, int] = {}
    for k, m in enumerate(input.history):
        for cid in _call_ids(m):
            after_call.setdefault(cid, k)
    slots: list[list[Part]] = [[] for _ in range(len(input.history) + 1)]  # slot 0: first
    last = 0
    for p in input.packets:
        answers = p.metadata.get("tool_call_id") if p.kind == "tool_result" else None
        at = after_call.get(str(answers)) if answers is not None else None
        last = at + 1 if at is not None else last
        slots[last].append(Part(p.id, p.kind, _packet_message(p), packet=p))
    parts = list(slots[0])
    for k, m in enumerate(input.history):
        parts.append(Part(ids[k], "history", m, history=m))
        parts.extend(slots[k + 1])
    return parts


def _marked(part: Part, key: str) -> Any:
    src = part.packet.metadata if part.packet is not None else part.message.metadata
    return src.get(key)


#: the rebuilds of the inputs seen last, by object (an input is frozen): every policy preset
#: starts from the same rebuild, so a sweep's cells or a comparison's policies on one call
#: rebuild it once (docs/design.md, "Agent policies", "Speed")
_REBUILT: dict[int, tuple[CapturedInput, Conversation]] = {}
_REBUILT_MAX = 1024


def conversation(input: CapturedInput) -> Conversation:
    """The recorded request rebuilt from ``input``: tool results after the message that made
    their calls, the query before the part its importer marked ``AFTER_QUERY`` (else last),
    and the ids a compaction replaced (``REPLACED`` on its summary packet or on the call's
    first part). Remembered by input object, so the value is shared: read it, never change
    it."""
    hit = _REBUILT.get(id(input))
    if hit is not None and hit[0] is input:
        return hit[1]
    conv = _rebuild(input)
    if len(_REBUILT) >= _REBUILT_MAX:
        _REBUILT.clear()
    _REBUILT[id(input)] = (input, conv)
    return conv


def _rebuild(input: CapturedInput) -> Conversation:
    """``conversation`` computed."""
    parts = _interleave(input, history_ids(input))
    query = Part(TASK_ID, "task", Message(role="user", content=input.query))
    at = next((k for k, p in enumerate(parts) if _marked(p, AFTER_QUERY)), len(parts))
    replaced: list[str] = []
    for p in parts:
        comp = p.packet.metadata.get("compaction") if p.packet is not None else None
        ids = comp.get("replaced_ids") if isinstance(comp, dict) else _marked(p, REPLACED)
        if isinstance(ids, list):
            replaced.extend(str(i) for i in ids)
    if input.query or at < len(parts):
        parts.insert(at, query)
    return Conversation(input.system_instructions, parts, replaced)


# --------------------------------------------------------------------------- deriving


#: ``tools_text`` of the tool lists seen last, by list object (a session's calls share one)
_TOOLS_TEXT: dict[int, tuple[Sequence[ToolDef], str]] = {}


def tools_text(tools: Sequence[ToolDef]) -> str:
    """The tool definitions as the compact JSON a provider puts into the prompt."""
    hit = _TOOLS_TEXT.get(id(tools))
    if hit is not None and hit[0] is tools:
        return hit[1]
    text = json.dumps(
        [t.model_dump(mode="json") for t in tools], ensure_ascii=False, separators=(",", ":")
    )
    if len(_TOOLS_TEXT) >= _REBUILT_MAX:
        _TOOLS_TEXT.clear()
    _TOOLS_TEXT[id(tools)] = (tools, text)
    return text


@dataclass
class _Item:
    id: str
    kind: str
    content: str
    partition: str
    must_keep: bool = False
    notes: list[str] = field(default_factory=list)


def _items(input: CapturedInput) -> list[_Item]:
    items: list[_Item] = []
    if input.system_instructions:
        items.append(
            _Item(INSTRUCTIONS_ID, "instructions", input.system_instructions, "system", True)
        )
    if input.tools:
        items.append(
            _Item(
                TOOLS_ID,
                "tools",
                tools_text(input.tools),
                "tool definitions",
                notes=[f"{len(input.tools)} tool definitions, counted as compact JSON"],
            )
        )
    for p in input.packets:
        items.append(_Item(p.id, p.kind, p.content, _partition_of(p.kind), p.must_keep))
    for hid, m in zip(history_ids(input), input.history, strict=True):
        items.append(_Item(hid, "history", m.content, "history"))
    items.append(_Item(TASK_ID, "task", input.query, "current message", True))
    return items


def _in_prompt_order(items: list[_Item], conv: Conversation) -> list[_Item]:
    """``items`` ranked as the request sent them: the system text and the tools first, then
    the conversation's parts in their order (a session log's importer and every policy on the
    recorded request rank them so); an item no part names keeps its place after the head."""
    at = {p.id: k for k, p in enumerate(conv.parts)}
    head = [it for it in items if it.id in (INSTRUCTIONS_ID, TOOLS_ID)]
    rest = [it for it in items if it.id not in (INSTRUCTIONS_ID, TOOLS_ID)]
    rest.sort(key=lambda it: at.get(it.id, -1))
    return head + rest


def _replaced(messages: list[Message]) -> list[Message]:
    """The chat messages a compaction replaced: the model never saw them."""
    return [m for m in messages if m.metadata.get("replaced_by")]


def _summarized(
    messages: list[Message], counter: TokenCounter, rank: int, left: int
) -> list[Decision]:
    """A decision per message a compaction replaced: summarized, no tokens left in the
    prompt (as a session log's compaction shows what it replaced)."""
    out: list[Decision] = []
    for m in _replaced(messages):
        kind = "tool_result" if m.role == "tool" else "history"
        n = counter.count(m.content)
        out.append(
            Decision(
                packet_id=m.id or f"replaced:{rank + len(out)}",
                kind=kind,
                status=Status.SUMMARIZED,
                reason=Reason.DEGRADED,
                reason_text=(
                    f"replaced by the summary {m.metadata['replaced_by']}: the model saw the "
                    "summary, not this message"
                ),
                partition="tool results" if kind == "tool_result" else "history",
                rank=rank + len(out),
                tokens_before=n,
                tokens_after=0,
                budget_left=left,
            )
        )
    return out


def render_prompt(messages: list[Message], tools_json: str) -> str:
    """A readable flat form of a chat request: one ``[role]`` block per message.

    Consecutive system parts (several system or developer messages, or Anthropic's list of
    system blocks) make one block, joined by a blank line: exactly the system instructions
    of the captured input, so the prompt can be searched for them. A message a compaction
    replaced is not in it."""
    if any(m.metadata.get("replaced_by") for m in messages):
        messages = [m for m in messages if not m.metadata.get("replaced_by")]
    blocks = [f"[tools]\n{tools_json}"] if tools_json else []
    k = 0
    while k < len(messages):
        m = messages[k]
        if m.role not in ("system", "developer"):
            blocks.append(f"[{m.role}]\n{m.content}")
            k += 1
            continue
        run = [m]
        while k + len(run) < len(messages) and messages[k + len(run)].role in (
            "system",
            "developer",
        ):
            run.append(messages[k + len(run)])
        label = "/".join(dict.fromkeys(r.role for r in run))
        blocks.append(f"[{label}]\n" + "\n\n".join(r.content for r in run))
        k += len(run)
    return "\n\n".join(blocks)


def window_warnings(window: int | None, used: int, reserve: int) -> tuple[int, int, list[str]]:
    """The window an imported prompt's totals use (its own size when the window is
    unknown), the space available in it, and the warnings about either."""
    warns: list[str] = []
    if window is None:
        window = used + reserve
        warns.append(
            "the model's context window is unknown; the totals use the prompt's own size "
            "(pass ctxscope import --window N or --model NAME to see the free space)"
        )
    available = max(window - reserve, 0)
    if used > available:
        warns.append(
            f"the imported prompt uses {used:,} tokens, more than the {available:,} available"
        )
    return window, available, warns


def format_overhead(n_messages: int) -> int:
    """The chat format's own tokens: role markers around every message and the reply primer
    (3 + 3 in OpenAI's published accounting for its chat models)."""
    return FORMAT_TOKENS_PER_MESSAGE * n_messages + FORMAT_TOKENS_REPLY


def format_note(n_messages: int) -> str:
    return (
        f"{FORMAT_TOKENS_PER_MESSAGE} tokens of chat format per message × "
        f"{n_messages} + {FORMAT_TOKENS_REPLY} to prime the reply"
    )


def _format_item(input: CapturedInput, messages: list[Message]) -> tuple[_Item, int]:
    """The chat format's own tokens as an item. Providers differ a little; the reported
    usage, where the source has it, shows by how much."""
    n_messages = sum(
        1
        for m in messages
        if m.role not in ("system", "developer") and not m.metadata.get("replaced_by")
    ) + (1 if input.system_instructions else 0)
    item = _Item(FORMAT_ID, "format", "", "format overhead", notes=[format_note(n_messages)])
    return item, format_overhead(n_messages)


#: kept decisions made, by what they say: a session's calls repeat their earlier items at the
#: same ranks with the same budget left, and a Decision is frozen, so call N shares call N-1's
#: instead of validating them again (docs/design.md, "Live capture", "Speed")
_KEPT: dict[tuple[str, str, str, int, int, int, tuple[str, ...]], Decision] = {}
_KEPT_MAX = 200_000


def _kept_decision(it: _Item, rank: int, n: int, left: int) -> Decision:
    """The decision keeping ``it`` (``n`` tokens, ``left`` after it), made once."""
    key = (it.id, it.kind, it.partition, rank, n, left, tuple(it.notes))
    hit = _KEPT.get(key)
    if hit is None:
        if len(_KEPT) >= _KEPT_MAX:
            _KEPT.clear()
        hit = _KEPT[key] = Decision(
            packet_id=it.id,
            kind=it.kind,
            status=Status.KEPT,
            reason=Reason.FITS,
            reason_text=KEPT_TEXT,
            partition=it.partition,
            rank=rank,
            tokens_before=n,
            tokens_after=n,
            budget_left=left,
            notes=it.notes,
        )
    return hit


# --------------------------------------------------------------------------- carrying on


def _partition_of(kind: str) -> str:
    """The import partition of a packet of ``kind``."""
    if kind in ("instructions", "policy"):
        return "system"
    return "tool results" if kind == "tool_result" else "history"


@dataclass
class _Prefix:
    """A call's derivation up to its query, for a later call of the session that repeats
    it: the head (system text, tools' JSON, tokenizer), the history messages and packets
    before the query (the objects: a later call that goes on from it holds the same ones,
    ``request.Incremental``), their items in prompt order with their counts, the kept
    decisions and partition sums made of them at ``available``, what their ids and tool
    calls say about the parts after them, and the prompt rendered from the first ``flat``
    chat messages."""

    system: str
    tools_json: str
    tokenizer: str
    history: list[Message]
    packets: list[Packet]
    items: list[_Item]
    counts: list[int]
    available: int
    decisions: list[Decision]
    p_used: dict[str, int]
    p_items: dict[str, int]
    #: decision ids of the items, the packets' ids, and what the history messages' own
    #: ids and the tool calls say about later parts
    ids: set[str]
    packet_ids: set[str]
    links: _Links
    flat: list[Message]
    prompt: str


def _same_objects(old: Sequence[object], new: Sequence[object]) -> bool:
    """Whether ``new`` starts with the objects of ``old`` (by identity)."""
    return len(new) >= len(old) and all(a is b for a, b in zip(old, new, strict=False))


#: a conversation part a call adds after a prefix: its decision id, its item, its source
_TailPart = tuple[str, _Item, Message | Packet]


class Carry:
    """What a session's recent derivations made, for the next call to go on from (the
    proxy's converter keeps one a session, in ``request.Incremental``; docs/design.md, "Live
    capture", "Speed"). A call whose input starts with a kept prefix's history messages and
    packets (the same objects), under the same system text, tools and tokenizer, builds the
    items, counts and kept decisions of its new parts only, and renders only its new chat
    messages onto the prefix's prompt. A call whose new parts would change the prefix's
    ids or order (a repeated id, a tool result answering an earlier call), or that has no
    query part, or a compaction, is derived in full. The result is the same either way
    (tests/test_capture_incremental.py)."""

    def __init__(self, kept: int = 8) -> None:
        self.kept = kept
        self._prefixes: list[_Prefix] = []  # most recent last
        #: derivations that went on from a prefix, and derivations made in full
        self.resumed = 0
        self.full = 0

    def find(self, input: CapturedInput, counter: TokenCounter) -> _Prefix | None:
        """The longest kept prefix ``input`` goes on from, if any."""
        tools_json = tools_text(input.tools) if input.tools else ""
        for pre in sorted(self._prefixes, key=lambda p: len(p.items), reverse=True):
            if (
                pre.tokenizer == counter.name
                and pre.system == input.system_instructions
                and pre.tools_json == tools_json
                and _same_objects(pre.history, input.history)
                and _same_objects(pre.packets, input.packets)
            ):
                return pre
        return None

    def keep(self, pre: _Prefix) -> None:
        self._prefixes.append(pre)
        del self._prefixes[: -self.kept]


def _tail(pre: _Prefix, input: CapturedInput) -> list[_TailPart] | None:
    """The parts ``input`` adds after ``pre`` (``_interleave`` and ``history_ids`` on the new
    history messages and packets only), or None when they would change the prefix's."""
    h, p = len(pre.history), len(pre.packets)
    new_hist, new_packets = input.history[h:], input.packets[p:]
    own = dict(pre.links.own_ids)
    for m in new_hist:
        if m.id:
            if m.id in pre.links.own_ids:
                return None  # the prefix's message would lose its own id
            own[m.id] = own.get(m.id, 0) + 1
    taken = pre.packet_ids | {q.id for q in new_packets}
    if any(q.id in pre.links.own_ids for q in new_packets):
        return None
    calls = dict(pre.links.calls)
    for k, m in enumerate(new_hist, start=h):
        for cid in _call_ids(m):
            if cid in pre.links.answered and cid not in pre.links.calls:
                return None  # a prefix packet would move after this message
            calls.setdefault(cid, k)
    slots: list[list[Packet]] = [[] for _ in range(len(new_hist) + 1)]  # slot 0: slot h
    last = pre.links.last_slot
    for q in new_packets:
        answers = q.metadata.get("tool_call_id") if q.kind == "tool_result" else None
        at = calls.get(str(answers)) if answers is not None else None
        last = at + 1 if at is not None else last
        if last < h:
            return None  # among the prefix's parts
        slots[last - h].append(q)
    parts: list[_TailPart] = []
    for q in slots[0]:
        parts.append((q.id, _Item(q.id, q.kind, q.content, _partition_of(q.kind), q.must_keep), q))
    for j, m in enumerate(new_hist):
        hid = m.id if m.id and own[m.id] == 1 and m.id not in taken else history_id(h + j)
        parts.append((hid, _Item(hid, "history", m.content, "history"), m))
        for q in slots[j + 1]:
            item = _Item(q.id, q.kind, q.content, _partition_of(q.kind), q.must_keep)
            parts.append((q.id, item, q))
    return parts


@dataclass
class _Gathered:
    """A call's items in prompt order (the format's not yet), their counts, the history
    message or packet of each conversation part (None for the head and the query), where
    the query is (None when there is no query part) and the prefix it went on from."""

    items: list[_Item]
    counts: list[int]
    sources: list[Message | Packet | None]
    task_at: int | None
    prefix: _Prefix | None = None


def _gathered(input: CapturedInput, counter: TokenCounter) -> _Gathered:
    """The items of ``input`` built in full."""
    conv = conversation(input)
    items = _in_prompt_order(_items(input), conv)
    source: dict[str, Message | Packet | None] = {
        p.id: p.packet if p.packet is not None else p.history for p in conv.parts
    }
    task_at = next((k for k, it in enumerate(items) if it.id == TASK_ID), None)
    unique = len(source) == len(conv.parts) and len({it.id for it in items}) == len(items)
    return _Gathered(
        items,
        counter.count_many([it.content for it in items]),
        [source.get(it.id) for it in items],
        task_at if unique and any(p.id == TASK_ID for p in conv.parts) else None,
    )


def _went_on(pre: _Prefix, input: CapturedInput, counter: TokenCounter) -> _Gathered | None:
    """The items of ``input`` built onto ``pre``'s: its new parts only, the query before the
    first one marked ``AFTER_QUERY`` (else last); None when ``input`` cannot go on from it."""
    tail = _tail(pre, input)
    if tail is None:
        return None
    at = next(
        (k for k, (_, _, src) in enumerate(tail) if src.metadata.get(AFTER_QUERY)),
        len(tail),
    )
    if not input.query and at == len(tail):
        return None  # no query part: the query's item goes first (``_in_prompt_order``)
    new_ids = [pid for pid, _, _ in tail]
    if TASK_ID in pre.ids or TASK_ID in new_ids or len(set(new_ids)) < len(new_ids):
        return None
    if not pre.ids.isdisjoint(new_ids):
        return None
    task = _Item(TASK_ID, "task", input.query, "current message", True)
    new_items = [it for _, it, _ in tail]
    new_items.insert(at, task)
    sources: list[Message | Packet | None] = [src for _, _, src in tail]
    sources.insert(at, None)
    return _Gathered(
        [*pre.items, *new_items],
        [*pre.counts, *counter.count_many([it.content for it in new_items])],
        [*([None] * len(pre.items)), *sources],
        len(pre.items) + at,
        pre,
    )


@dataclass
class _Links:
    """What a prefix's ids and tool calls say about the parts after it (``_Prefix``)."""

    own_ids: dict[str, int] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    answered: set[str] = field(default_factory=set)
    last_slot: int = 0


def _linked(base: _Links, hist: list[Message], h0: int, packets: list[Packet], p0: int) -> _Links:
    """``base`` (the links of ``hist[:h0]`` and ``packets[:p0]``) gone on with the rest:
    their own ids, the first message making each call, the calls the packets answer and the
    slot the last packet went to, as ``history_ids`` and ``_interleave`` see them."""
    out = _Links(dict(base.own_ids), dict(base.calls), set(base.answered), base.last_slot)
    for k in range(h0, len(hist)):
        m = hist[k]
        if m.id:
            out.own_ids[m.id] = out.own_ids.get(m.id, 0) + 1
        for cid in _call_ids(m):
            out.calls.setdefault(cid, k)
    for q in packets[p0:]:
        answers = q.metadata.get("tool_call_id") if q.kind == "tool_result" else None
        if answers is not None:
            out.answered.add(str(answers))
        at = out.calls.get(str(answers)) if answers is not None else None
        out.last_slot = at + 1 if at is not None else out.last_slot
    return out


def _prefix_of(
    got: _Gathered,
    input: CapturedInput,
    counter: TokenCounter,
    sums: _Sums,
    messages: list[Message],
    prompt: str,
) -> _Prefix | None:
    """What the next call may go on from: this call's derivation up to its query (None when
    its packets before the query are not the first of its packets)."""
    assert got.task_at is not None
    pre, cut = got.prefix, got.task_at
    hist = list(pre.history) if pre is not None else []
    packets = list(pre.packets) if pre is not None else []
    h0, p0 = len(hist), len(packets)
    for src in got.sources[len(pre.items) if pre is not None else 0 : cut]:
        if isinstance(src, Packet):
            packets.append(src)
        elif src is not None:
            hist.append(src)
    if not _same_objects(packets, input.packets) or not _same_objects(hist, input.history):
        return None
    links = _linked(pre.links if pre is not None else _Links(), hist, h0, packets, p0)
    f = next((k for k in range(len(messages) - 1, -1, -1) if messages[k].role == "user"), 0)
    return _Prefix(
        system=input.system_instructions,
        tools_json=tools_text(input.tools) if input.tools else "",
        tokenizer=counter.name,
        history=hist,
        packets=packets,
        items=got.items[:cut],
        counts=got.counts[:cut],
        available=sums.available,
        decisions=sums.decisions[:cut],
        p_used=sums.cut_used,
        p_items=sums.cut_items,
        ids={it.id for it in got.items[:cut]},
        packet_ids={q.id for q in packets},
        links=links,
        flat=messages[:f],
        prompt=prompt[: sums.cut_prompt],
    )


@dataclass
class _Sums:
    """Every item kept: the decisions, the partitions' sums, and the sums of the items
    before the query (``cut_*``) with the length of the prompt's part before it."""

    available: int
    decisions: list[Decision]
    p_used: dict[str, int]
    p_items: dict[str, int]
    cut_used: dict[str, int] = field(default_factory=dict)
    cut_items: dict[str, int] = field(default_factory=dict)
    cut_prompt: int = 0

    def partitions(self) -> list[PartitionUsage]:
        return [
            PartitionUsage(name=n, budget=None, used=self.p_used[n], items=self.p_items[n])
            for n in IMPORT_PARTITIONS
            if n in self.p_items
        ]


def _kept(
    items: list[_Item], counts: list[int], available: int, got: _Gathered | None = None
) -> _Sums:
    """Every item kept, in order (what the source builder thought is unknown: it simply
    fit), and the partitions they fill; the prefix ``got`` went on from reused when its
    decisions were made at the same ``available``."""
    pre = got.prefix if got is not None else None
    if pre is not None and pre.available == available:
        sums = _Sums(available, list(pre.decisions), dict(pre.p_used), dict(pre.p_items))
        start, left = len(pre.items), available - sum(pre.counts)
    else:
        sums, start, left = _Sums(available, [], {}, {}), 0, available
    cut = got.task_at if got is not None else None
    p_used, p_items, decisions = sums.p_used, sums.p_items, sums.decisions
    for rank in range(start, len(items)):
        if rank == cut:
            sums.cut_used, sums.cut_items = dict(p_used), dict(p_items)
        it, n = items[rank], counts[rank]
        left -= n
        p_used[it.partition] = p_used.get(it.partition, 0) + n
        p_items[it.partition] = p_items.get(it.partition, 0) + 1
        decisions.append(_kept_decision(it, rank, n, left))
    return sums


def _render(messages: list[Message], tools_json: str, pre: _Prefix | None, sums: _Sums) -> str:
    """``render_prompt(messages, tools_json)``, the first ``pre.flat`` messages' part taken
    from ``pre``; ``sums.cut_prompt`` set to the length of the part before the query
    message (the last user message). Blocks split where a message is not a system one on
    both sides, so the parts join with a blank line."""
    f = next((k for k in range(len(messages) - 1, -1, -1) if messages[k].role == "user"), 0)
    if f == 0 or any(m.metadata.get("replaced_by") for m in messages):
        return render_prompt(messages, tools_json)
    fp = len(pre.flat) if pre is not None else 0
    system = ("system", "developer")
    if (
        pre is not None
        and 0 < fp <= f
        and _same_objects(pre.flat, messages)
        and not (messages[fp - 1].role in system and messages[fp].role in system)
    ):
        mid = render_prompt(messages[fp:f], "")
        head = pre.prompt + "\n\n" + mid if mid else pre.prompt
    else:
        head = render_prompt(messages[:f], tools_json)
    sums.cut_prompt = len(head)
    return head + "\n\n" + render_prompt(messages[f:], "")


def derive_result(
    input: CapturedInput,
    messages: list[Message],
    counter: TokenCounter,
    *,
    warnings: list[str] | None = None,
    carry: Carry | None = None,
) -> BuildResult:
    """Decisions, partitions and totals for a prompt that was sent as it is (going on from
    what the session's earlier calls derived, ``carry``: the result is the same)."""
    timer = Timer()
    replaced = _replaced(messages)
    with timer.stage("gather"):
        pre = carry.find(input, counter) if carry is not None and not replaced else None
        got = (_went_on(pre, input, counter) if pre is not None else None) or _gathered(
            input, counter
        )
        items, counts = [*got.items], [*got.counts]
        item, overhead = _format_item(input, messages)
        items.append(item)
        counts.append(overhead)
    used = sum(counts)
    reserve = input.output_reserve or 0
    window, available, warns = window_warnings(input.window, used, reserve)
    with timer.stage("select"):
        sums = _kept(items, counts, available, got)
        decisions = sums.decisions
        if replaced:
            # after the instructions and the tools, as a session log's compaction shows them
            head = sum(1 for it in items if it.id in (INSTRUCTIONS_ID, TOOLS_ID))
            before = decisions[head - 1].budget_left if head else available
            gone = _summarized(messages, counter, head, before or 0)
            rest = [
                d.model_copy(update={"rank": (d.rank or 0) + len(gone)}) for d in decisions[head:]
            ]
            decisions = [*decisions[:head], *gone, *rest]
    tools_json = tools_text(input.tools) if input.tools else ""
    prompt = _render(messages, tools_json, got.prefix, sums)
    if carry is not None:
        _carry_on(carry, got, input, counter, sums, messages, prompt, replaced)
    totals = Totals(
        window=window,
        output_reserve=reserve,
        safety_margin=0,
        available=available,
        used=used,
        tokenizer=counter.name,
    )
    return finish(
        prompt=prompt,
        messages=messages,
        decisions=decisions,
        partitions=sums.partitions(),
        totals=totals,
        must_keep_ids=[it.id for it in items if it.must_keep],
        warnings=[*(warnings or []), *warns],
        timer=timer,
    )


def _carry_on(
    carry: Carry,
    got: _Gathered,
    input: CapturedInput,
    counter: TokenCounter,
    sums: _Sums,
    messages: list[Message],
    prompt: str,
    replaced: list[Message],
) -> None:
    """Count the derivation and keep its prefix for the session's next call."""
    if got.prefix is not None:
        carry.resumed += 1
    else:
        carry.full += 1
    if got.task_at is None or replaced or not sums.cut_prompt:
        return
    pre = _prefix_of(got, input, counter, sums, messages, prompt)
    if pre is not None:
        carry.keep(pre)


__all__ = [
    "AFTER_QUERY",
    "FORMAT_ID",
    "FORMAT_TOKENS_PER_MESSAGE",
    "FORMAT_TOKENS_REPLY",
    "IMPORT_PARTITIONS",
    "NAME",
    "REPLACED",
    "TASK_ID",
    "TOOLS_ID",
    "RECORDED_BASED",
    "VERSION",
    "Carry",
    "Conversation",
    "Part",
    "carried_knobs",
    "conversation",
    "derive_result",
    "format_overhead",
    "history_ids",
    "render_prompt",
    "resolve",
    "run",
    "tools_text",
    "window_warnings",
]
