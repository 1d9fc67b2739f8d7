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
        if p.kind in ("instructions", "policy"):
            part = "system"
        elif p.kind == "tool_result":
            part = "tool results"
        else:
            part = "history"
        items.append(_Item(p.id, p.kind, p.content, part, p.must_keep))
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


def _kept(
    items: list[_Item], counts: list[int], available: int
) -> tuple[list[Decision], list[PartitionUsage]]:
    """Every item kept, in order (what the source builder thought is unknown: it simply
    fit), and the partitions they fill."""
    decisions: list[Decision] = []
    p_used: dict[str, int] = {}
    p_items: dict[str, int] = {}
    left = available
    for rank, (it, n) in enumerate(zip(items, counts, strict=True)):
        left -= n
        p_used[it.partition] = p_used.get(it.partition, 0) + n
        p_items[it.partition] = p_items.get(it.partition, 0) + 1
        decisions.append(_kept_decision(it, rank, n, left))
    partitions = [
        PartitionUsage(name=n, budget=None, used=p_used[n], items=p_items[n])
        for n in IMPORT_PARTITIONS
        if n in p_items
    ]
    return decisions, partitions


def derive_result(
    input: CapturedInput,
    messages: list[Message],
    counter: TokenCounter,
    *,
    warnings: list[str] | None = None,
) -> BuildResult:
    """Decisions, partitions and totals for a prompt that was sent as it is."""
    timer = Timer()
    with timer.stage("gather"):
        items = _in_prompt_order(_items(input), conversation(input))
        counts = counter.count_many([it.content for it in items])
        item, overhead = _format_item(input, messages)
        items.append(item)
        counts.append(overhead)
    used = sum(counts)
    reserve = input.output_reserve or 0
    window, available, warns = window_warnings(input.window, used, reserve)
    with timer.stage("select"):
        decisions, partitions = _kept(items, counts, available)
        if _replaced(messages):
            # after the instructions and the tools, as a session log's compaction shows them
            head = sum(1 for it in items if it.id in (INSTRUCTIONS_ID, TOOLS_ID))
            before = decisions[head - 1].budget_left if head else available
            gone = _summarized(messages, counter, head, before or 0)
            rest = [
                d.model_copy(update={"rank": (d.rank or 0) + len(gone)}) for d in decisions[head:]
            ]
            decisions = [*decisions[:head], *gone, *rest]
    totals = Totals(
        window=window,
        output_reserve=reserve,
        safety_margin=0,
        available=available,
        used=used,
        tokenizer=counter.name,
    )
    return finish(
        prompt=render_prompt(messages, tools_text(input.tools) if input.tools else ""),
        messages=messages,
        decisions=decisions,
        partitions=partitions,
        totals=totals,
        must_keep_ids=[it.id for it in items if it.must_keep],
        warnings=[*(warnings or []), *warns],
        timer=timer,
    )


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
