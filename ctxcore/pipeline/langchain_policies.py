"""LangChain v1's context policies over a recorded message list (docs/design.md, "Presets",
"LangChain policies").

Three policies of ``langchain==1.5.2`` / ``langchain-core==1.8.3``, each ported line for line
from the package's source and checked against the real package on every multi-turn corpus
session (``tests/test_oracle_langchain.py`` with ``scripts/lc_oracle.py``):

- ``clear_tool_uses``: ``ClearToolUsesEdit.apply`` as ``ContextEditingMiddleware`` runs it
  (``langchain/agents/middleware/context_editing.py``);
- ``summarize``: ``SummarizationMiddleware.before_model`` with a token or message trigger
  and keep (``langchain/agents/middleware/summarization.py``); the summary model is replaced
  by ctxscope's deterministic summarizer, a stand-in labelled as such;
- ``trim``: ``langchain_core.messages.trim_messages`` with its ``_first_max_tokens`` and
  ``_last_max_tokens`` (``langchain_core/messages/utils.py``).

Messages are ``ChatMsg`` values, the fields LangChain's messages carry that these policies
read: role (system/user/assistant/tool), content, id, tool calls (id, name, args) and a tool
message's call id and name. Tokens are counted by ``MessageCounter``, the same function the
oracle gives the package (3 per message, the content, each tool call's name and its
arguments as compact JSON, in a tiktoken encoding; or ``len``: one per message).

Every function returns the new list and a ``Fate`` per input message: what the policy did
with it and why, naming the policy and the knob that decided.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ctxcore.errors import InputError
from ctxcore.knobs import honoured
from ctxcore.models import Config, Message
from ctxcore.pipeline.common import INSTRUCTIONS_ID, Summarizer
from ctxcore.pipeline.recorded import Conversation, Part
from ctxcore.tokens import TokenCounter

#: LangChain's ``DEFAULT_TOOL_PLACEHOLDER`` (context_editing.py)
DEFAULT_PLACEHOLDER = "[cleared]"
#: ``SummarizationMiddleware``'s ``_DEFAULT_TRIM_TOKEN_LIMIT`` (``trim_tokens_to_summarize``)
SUMMARY_TRIM_TOKENS = 4000
#: the summary message ``SummarizationMiddleware._build_new_messages`` makes
SUMMARY_PREFIX = "Here is a summary of the conversation to date:\n\n"
#: the size the stand-in summary aims at (the real model writes what it writes)
STAND_IN_TARGET_TOKENS = 800
STAND_IN_LABEL = "ctxscope's deterministic summarizer, a stand-in for the summary model"
#: tokens of chat format per message in the shared counter (OpenAI's published accounting)
PER_MESSAGE = 3

Role = Literal["system", "user", "assistant", "tool"]
#: LangChain's message ``type`` for each role (``start_on``/``end_on`` name these)
LC_TYPES: dict[str, str] = {"system": "system", "user": "human", "assistant": "ai", "tool": "tool"}
_ROLES: dict[str, Role] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ChatMsg:
    """A message as LangChain holds it (the fields these policies read)."""

    role: Role
    content: str
    id: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    #: the position of the recorded message it comes from (None: the policy made it)
    source: int | None = None

    @property
    def type(self) -> str:
        return LC_TYPES[self.role]

    def as_json(self) -> dict[str, Any]:
        """The message as the oracle takes and gives it (``scripts/lc_oracle.py``)."""
        out: dict[str, Any] = {"role": self.role, "content": self.content, "id": self.id}
        if self.role == "assistant":
            out["tool_calls"] = [
                {"id": c.id, "name": c.name, "args": c.args} for c in self.tool_calls
            ]
        if self.role == "tool":
            out["tool_call_id"] = self.tool_call_id or ""
            out["name"] = self.name
        return out


Action = Literal["kept", "cleared", "inputs_cleared", "summarized", "trimmed", "partial"]


@dataclass(frozen=True, slots=True)
class Fate:
    """What a policy did with one recorded message, and the sentence that says why."""

    action: Action
    why: str


def arguments(raw: Any) -> dict[str, Any]:
    """A recorded call's arguments as LangChain's ``args`` dict: its JSON object; any other
    text (a free-form tool's input, e.g. Codex's apply_patch) as ``{"input": text}``."""
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            return {"input": raw}
        if isinstance(value, dict):
            return value
    return {"input": raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)}


def _raw_calls(m: Message) -> list[dict[str, Any]]:
    raw = m.metadata.get("tool_calls")
    return [c for c in (raw if isinstance(raw, list) else []) if isinstance(c, dict)]


def call_lines(calls: Sequence[dict[str, Any]]) -> str:
    """The ``name(arguments)`` lines an importer appends to a reply's text for its calls
    (``formats/norm.py``, ``formats/request.call_line``)."""
    return "\n".join(
        f"{c.get('name')}("
        + (a if isinstance(a := c.get("arguments"), str) else json.dumps(a, ensure_ascii=False))
        + ")"
        for c in calls
    )


def reply_text(m: Message) -> str:
    """An assistant message's own text: its content without the call lines the importer
    appended (LangChain holds the calls in ``tool_calls``, not in the text)."""
    calls = _raw_calls(m)
    if not calls:
        return m.content
    lines = call_lines(calls)
    if m.content == lines:
        return ""
    if m.content.endswith("\n" + lines):
        return m.content[: -len(lines) - 1]
    return m.content


def chat_message(k: int, part_id: str, m: Message, tool_name: Any) -> ChatMsg:
    role = _ROLES.get(m.role, "user")
    calls: tuple[ToolCall, ...] = ()
    content = m.content
    if role == "assistant":
        calls = tuple(
            ToolCall(
                str(c.get("id") or ""), str(c.get("name") or ""), arguments(c.get("arguments"))
            )
            for c in _raw_calls(m)
        )
        content = reply_text(m)
    call_id = m.metadata.get("tool_call_id") if role == "tool" else None
    return ChatMsg(
        role=role,
        content=content,
        id=part_id,
        tool_calls=calls,
        tool_call_id=str(call_id) if call_id is not None else ("" if role == "tool" else None),
        name=tool_name if role == "tool" and isinstance(tool_name, str) else None,
        source=k,
    )


def from_parts(parts: Sequence[Part]) -> list[ChatMsg]:
    """The recorded conversation (``recorded.conversation``) as LangChain messages, each
    named by its part's decision id: developer parts are system messages, an assistant's
    ``metadata.tool_calls`` its tool calls, a tool result its call id and tool name."""
    return [
        chat_message(k, p.id, p.message, p.packet.metadata.get("name") if p.packet else None)
        for k, p in enumerate(parts)
    ]


@dataclass(slots=True)
class Recorded:
    """A recorded request's messages, shared by every policy run on it (``recorded_messages``):
    the system prompt, the conversation's messages, and the chat message each part is sent
    as while a policy leaves it as it was (filled by ``langchain_build`` as it meets them)."""

    conv: Conversation
    system: ChatMsg | None
    rest: tuple[ChatMsg, ...]
    sent: dict[int, Message] = field(default_factory=dict)
    #: the message a part other than an assistant's is sent as with new content, by (part,
    #: content): a sweep's cells clear or elide the same parts again
    edited: dict[tuple[int, str], Message] = field(default_factory=dict)


#: the messages of the rebuilds seen last, by rebuild object (``recorded.conversation``
#: shares one rebuild per input)
_RECORDED: dict[int, Recorded] = {}
_RECORDED_MAX = 1024


def shared_messages(conv: Conversation) -> Recorded:
    """``conv`` as LangChain messages, made once per rebuild object."""
    hit = _RECORDED.get(id(conv))
    if hit is not None and hit.conv is conv:
        return hit
    system = ChatMsg("system", conv.system, INSTRUCTIONS_ID) if conv.system else None
    made = Recorded(conv, system, tuple(from_parts(conv.parts)))
    if len(_RECORDED) >= _RECORDED_MAX:
        _RECORDED.clear()
    _RECORDED[id(conv)] = made
    return made


def known_messages(conv: Conversation) -> Recorded | None:
    """``conv``'s shared messages if ``shared_messages`` made them, else None."""
    hit = _RECORDED.get(id(conv))
    return hit if hit is not None and hit.conv is conv else None


def recorded_messages(conv: Conversation) -> tuple[ChatMsg | None, list[ChatMsg]]:
    """The recorded request as LangChain holds it: the system prompt (the request's
    ``system_message``, named ``builder:instructions``) and the conversation's messages (a
    new list of the shared messages: a policy may edit the list, never a message)."""
    shared = shared_messages(conv)
    return shared.system, list(shared.rest)


def refuse_unsupported(preset: str, config: Config, unsupported: Sequence[str]) -> None:
    """A knob the preset does not have is an error naming it and the knobs it takes."""
    given = [k for k in unsupported if getattr(config, k) is not None]
    if given:
        raise InputError(
            f"preset {preset} has no {', '.join(given)} (it runs LangChain's policy with its "
            f"own parameters); the knobs it takes: {', '.join(honoured(preset))}"
        )


class MessageCounter:
    """The token counter both ctxscope and the oracle give LangChain's policies: per message
    3 + its content + per tool call its name and its arguments as compact JSON (``counter``'s
    encoding); or, with no counter, one per message (LangChain's ``token_counter=len``)."""

    def __init__(self, counter: TokenCounter | None) -> None:
        self.counter = counter

    @property
    def name(self) -> str:
        return self.counter.name if self.counter is not None else "len"

    def one(self, m: ChatMsg) -> int:
        if self.counter is None:
            return 1
        n = PER_MESSAGE + self.counter.count(m.content)
        for c in m.tool_calls:
            args = json.dumps(c.args, ensure_ascii=False, separators=(",", ":"))
            n += self.counter.count(c.name) + self.counter.count(args)
        return n

    def __call__(self, messages: Sequence[ChatMsg]) -> int:
        return sum(self.one(m) for m in messages)


Count = Callable[[Sequence[ChatMsg]], int]


# --------------------------------------------------------------------------- ClearToolUsesEdit


@dataclass(frozen=True, slots=True)
class ClearToolUses:
    """``ClearToolUsesEdit``'s parameters, with its defaults."""

    trigger: int = 100_000
    clear_at_least: int = 0
    keep: int = 3
    clear_tool_inputs: bool = False
    exclude_tools: tuple[str, ...] = ()
    placeholder: str = DEFAULT_PLACEHOLDER


def _calling_ai(messages: list[ChatMsg], idx: int) -> int | None:
    """The nearest assistant message before ``idx`` (the package's ``reversed(messages[:idx])``)."""
    for j in range(idx - 1, -1, -1):
        if messages[j].role == "assistant":
            return j
    return None


def _clear_inputs(message: ChatMsg, call_id: str | None) -> ChatMsg:
    """``_build_cleared_tool_input_message``: that call's args become ``{}``."""
    calls = tuple(replace(c, args={}) if c.id == call_id else c for c in message.tool_calls)
    return replace(message, tool_calls=calls)


def clear_tool_uses(
    messages: list[ChatMsg], edit: ClearToolUses, count: Count
) -> tuple[list[ChatMsg], dict[int, Fate]]:
    """``ClearToolUsesEdit.apply`` on the request's messages (the system message apart).
    Returns the edited list and the fate of each message it touched or passed over."""
    out = list(messages)
    fates: dict[int, Fate] = {}
    tokens = count(out)
    if tokens <= edit.trigger:
        why = f"the messages held {tokens:,} tokens, not over trigger={edit.trigger:,}"
        return out, _rest(fates, len(out), Fate("kept", why))
    candidates = [k for k, m in enumerate(out) if m.role == "tool"]
    if edit.keep >= len(candidates):
        kept_recent, candidates = candidates, []
    elif edit.keep:
        kept_recent, candidates = candidates[-edit.keep :], candidates[: -edit.keep]
    else:
        kept_recent = []
    for k in kept_recent:
        fates[k] = Fate("kept", f"one of the keep={edit.keep} most recent tool results")
    excluded = set(edit.exclude_tools)
    for k in candidates:
        tool = out[k]
        ai = _calling_ai(out, k)
        call = (
            next((c for c in out[ai].tool_calls if c.id == tool.tool_call_id), None)
            if ai is not None
            else None
        )
        if ai is None or call is None:
            fates[k] = Fate("kept", "no assistant message before it calls it, so it is not cleared")
            continue
        if (tool.name or call.name) in excluded:
            fates[k] = Fate("kept", f"tool {tool.name or call.name} is in exclude_tools")
            continue
        out[k] = replace(tool, content=edit.placeholder)
        fates[k] = Fate(
            "cleared",
            f"the messages held {tokens:,} tokens, over trigger={edit.trigger:,}; older than "
            f"the keep={edit.keep} most recent tool results: replaced by "
            f"placeholder={edit.placeholder!r}",
        )
        if edit.clear_tool_inputs:
            out[ai] = _clear_inputs(out[ai], tool.tool_call_id)
            fates[ai] = Fate(
                "inputs_cleared", f"clear_tool_inputs: the arguments of call {call.id} became {{}}"
            )
        if edit.clear_at_least > 0 and max(0, tokens - count(out)) >= edit.clear_at_least:
            enough = f"clear_at_least={edit.clear_at_least:,} tokens were reclaimed before it"
            for j in candidates:
                fates.setdefault(j, Fate("kept", enough))
            break
    not_tool = Fate("kept", "not a tool result (ClearToolUsesEdit clears tool results)")
    return out, _rest(fates, len(out), not_tool)


def _rest(fates: dict[int, Fate], n: int, fate: Fate) -> dict[int, Fate]:
    """``fates`` with ``fate`` for each of the ``n`` messages that has none yet."""
    for k in range(n):
        fates.setdefault(k, fate)
    return fates


# --------------------------------------------------------------------------- trim_messages


@dataclass(frozen=True, slots=True)
class Trim:
    """``trim_messages``' parameters (``token_counter`` is the ``Count`` given with them)."""

    max_tokens: int
    strategy: Literal["first", "last"] = "last"
    allow_partial: bool = False
    end_on: str | None = None
    start_on: str | None = None
    include_system: bool = False


def _split(text: str) -> list[str]:
    """``_default_text_splitter``: lines, each keeping its newline."""
    parts = text.split("\n")
    return [s + "\n" for s in parts[:-1]] + parts[-1:]


def _partial(
    messages: list[ChatMsg], idx: int, max_tokens: int, count: Count, last: bool
) -> list[ChatMsg] | None:
    """The message at ``idx`` cut to the lines that fit (its first lines, or its last ones
    for ``last``), appended to the ``idx`` before it; None when no line fits."""
    excluded = messages[idx]
    if not excluded.content:
        return None
    splits = _split(excluded.content)
    base = count(messages[:idx])
    if last:
        splits = list(reversed(splits))
    left, right = 0, len(splits)
    for _ in range(len(splits).bit_length()):
        if left >= right:
            break
        mid = (left + right + 1) // 2
        trial = replace(excluded, content="".join(splits[:mid]))
        if base + count([trial]) <= max_tokens:
            left = mid
        else:
            right = mid - 1
    if left <= 0:
        return None
    kept = splits[:left]
    if last:
        kept = list(reversed(kept))
    return [*messages[:idx], replace(excluded, content="".join(kept))]


def _first_max_tokens(
    messages: list[ChatMsg],
    max_tokens: int,
    count: Count,
    partial: Literal["first", "last"] | None,
    end_on: str | None,
) -> list[ChatMsg]:
    """``_first_max_tokens``: the most leading messages within ``max_tokens`` (a binary
    search, as the package does), the next one cut by lines with ``partial``, then the
    trailing messages that are not of type ``end_on`` dropped."""
    messages = list(messages)
    if not messages:
        return messages
    if count(messages) <= max_tokens:
        if end_on:
            while messages and messages[-1].type != end_on:
                messages.pop()
        return messages
    left, right = 0, len(messages)
    for _ in range(len(messages).bit_length()):
        if left >= right:
            break
        mid = (left + right + 1) // 2
        if count(messages[:mid]) <= max_tokens:
            left = mid
        else:
            right = mid - 1
    idx = left
    if partial and idx < len(messages):
        cut = _partial(messages, idx, max_tokens, count, partial == "last")
        if cut is not None:
            messages, idx = cut, idx + 1
    if end_on:
        while idx > 0 and messages[idx - 1].type != end_on:
            idx -= 1
    return messages[:idx]


def trim(messages: list[ChatMsg], spec: Trim, count: Count) -> list[ChatMsg]:
    """``trim_messages`` (its argument checks are the preset's ``resolve``)."""
    if spec.strategy == "first":
        return _first_max_tokens(
            messages, spec.max_tokens, count, "first" if spec.allow_partial else None, spec.end_on
        )
    messages = list(messages)
    if not messages:
        return []
    if spec.end_on:
        while messages and messages[-1].type != spec.end_on:
            messages.pop()
    system = None
    if spec.include_system and messages and messages[0].role == "system":
        system, messages = messages[0], messages[1:]
    remaining = spec.max_tokens
    if system is not None:
        remaining = max(0, spec.max_tokens - count([system]))
    kept = _first_max_tokens(
        messages[::-1], remaining, count, "last" if spec.allow_partial else None, spec.start_on
    )[::-1]
    return [system, *kept] if system is not None else kept


def trim_fates(
    before: list[ChatMsg], after: list[ChatMsg], spec: Trim, count: Count, counter: str
) -> dict[int, Fate]:
    """The fate of each message ``trim`` was given: kept, cut by lines, or left out (and
    whether ``start_on`` or ``end_on`` left it out: kept by the same trim without them)."""
    given = {id(m) for m in before}
    kept = {id(m) for m in after if id(m) in given}
    cut = {m.source for m in after if id(m) not in given}
    loose: set[int] = set()
    if spec.start_on or spec.end_on:
        loose = {id(m) for m in trim(before, replace(spec, start_on=None, end_on=None), count)}
    fates: dict[int, Fate] = {}
    budget = f"max_tokens={spec.max_tokens:,} ({counter}, strategy={spec.strategy})"
    for k, m in enumerate(before):
        if id(m) in kept:
            fates[k] = Fate("kept", f"within {budget}")
        elif m.source is not None and m.source in cut:
            side = "last" if spec.strategy == "last" else "first"
            fates[k] = Fate("partial", f"allow_partial: cut to its {side} lines that fit {budget}")
        elif id(m) in loose:
            which = [
                f"{n}={v!r}" for n, v in (("start_on", spec.start_on), ("end_on", spec.end_on)) if v
            ]
            fates[k] = Fate(
                "trimmed", f"fits {budget}, but the kept run must obey {' and '.join(which)}"
            )
        else:
            side = "older than" if spec.strategy == "last" else "past"
            fates[k] = Fate("trimmed", f"{side} what fits {budget}")
    return fates


# ------------------------------------------------------------------- SummarizationMiddleware


@dataclass(frozen=True, slots=True)
class Summarization:
    """``SummarizationMiddleware``'s ``trigger`` and ``keep`` as ``(kind, value)``."""

    trigger: tuple[Literal["tokens", "messages"], int] = ("tokens", 4000)
    keep: tuple[Literal["tokens", "messages"], int] = ("messages", 20)


@dataclass
class SummaryRun:
    """What one summarization did: the new list, the cutoff, what the stand-in read and wrote."""

    messages: list[ChatMsg]
    total_tokens: int
    triggered: bool
    cutoff: int = 0
    summary_input: list[ChatMsg] | None = None
    stand_in_text: str | None = None
    fates: dict[int, Fate] = field(default_factory=dict)


def _safe_cutoff_point(messages: list[ChatMsg], cutoff: int) -> int:
    """``_find_safe_cutoff_point``: never separate a tool result from the call it answers."""
    if cutoff >= len(messages) or messages[cutoff].role != "tool":
        return cutoff
    ids: set[str] = set()
    idx = cutoff
    while idx < len(messages) and messages[idx].role == "tool":
        if messages[idx].tool_call_id:
            ids.add(messages[idx].tool_call_id or "")
        idx += 1
    for i in range(cutoff - 1, -1, -1):
        m = messages[i]
        if m.role == "assistant" and m.tool_calls and ids & {c.id for c in m.tool_calls if c.id}:
            return i
    return idx


def _token_cutoff(messages: list[ChatMsg], target: int, count: Count) -> int:
    """``_find_token_based_cutoff`` for ``keep=("tokens", target)``."""
    if not messages:
        return 0
    target = max(target, 1)
    if count(messages) <= target:
        return 0
    left, right = 0, len(messages)
    candidate = len(messages)
    for _ in range(len(messages).bit_length() + 1):
        if left >= right:
            break
        mid = (left + right) // 2
        if count(messages[mid:]) <= target:
            candidate, right = mid, mid
        else:
            left = mid + 1
    if candidate == len(messages):
        candidate = left
    if candidate >= len(messages):
        if len(messages) == 1:
            return 0
        candidate = len(messages) - 1
    return _safe_cutoff_point(messages, candidate)


def _cutoff(messages: list[ChatMsg], keep: tuple[str, int], count: Count) -> int:
    """``_determine_cutoff_index``."""
    kind, value = keep
    if kind == "tokens":
        return _token_cutoff(messages, value, count)
    if len(messages) <= value:
        return 0
    return _safe_cutoff_point(messages, len(messages) - value)


def history_text(messages: Sequence[ChatMsg]) -> str:
    """Messages as the history summarizer reads them: ``[id] role: text`` per message, a
    tool call as ``name(args)`` after its message's text."""
    lines = []
    for k, m in enumerate(messages):
        if m.id:
            lines.append(_history_line(m))
            continue
        lines.append(f"[message:{k}] {m.role}: {_with_calls(m)}")
    return "\n".join(lines)


def _with_calls(m: ChatMsg) -> str:
    text = m.content
    for c in m.tool_calls:
        text += f"\n{c.name}({json.dumps(c.args, ensure_ascii=False)})"
    return text


#: ``history_text``'s line of a message with an id, by message object (a rolling policy
#: replayed at every turn, or every cell of a sweep, reads the same messages again)
_LINES: dict[int, tuple[ChatMsg, str]] = {}
_LINES_MAX = 16384


def _history_line(m: ChatMsg) -> str:
    hit = _LINES.get(id(m))
    if hit is not None and hit[0] is m:
        return hit[1]
    line = f"[{m.id}] {m.role}: {_with_calls(m)}"
    if len(_LINES) >= _LINES_MAX:
        _LINES.clear()
    _LINES[id(m)] = (m, line)
    return line


def _stand_in(
    messages: list[ChatMsg], count: Count, summarizer: Summarizer
) -> tuple[list[ChatMsg], str]:
    """``_create_summary`` with the stand-in as the summary model: the messages trimmed to
    ``trim_tokens_to_summarize`` (4,000) as the package trims them, then summarized."""
    spec = Trim(
        SUMMARY_TRIM_TOKENS, "last", allow_partial=True, start_on="human", include_system=True
    )
    trimmed = trim(messages, spec, count)
    if not trimmed:
        return [], "Previous conversation was too long to summarize."
    return trimmed, summarizer("history", history_text(trimmed), STAND_IN_TARGET_TOKENS)


def summarize(
    messages: list[ChatMsg], spec: Summarization, count: Count, summarizer: Summarizer
) -> SummaryRun:
    """``SummarizationMiddleware.before_model`` on the state's messages (the system prompt
    apart): past the trigger, everything before the cutoff ``keep`` sets becomes one summary
    message written by the stand-in."""
    total = count(messages)
    kind, value = spec.trigger
    met = total >= value if kind == "tokens" else len(messages) >= value
    run = SummaryRun(messages=list(messages), total_tokens=total, triggered=met)
    said = f"{len(messages)} messages" if kind == "messages" else f"{total:,} tokens"
    trigger = f"trigger=({kind!r}, {value:,})"
    keep = f"keep=({spec.keep[0]!r}, {spec.keep[1]:,})"
    if not met:
        _rest(run.fates, len(messages), Fate("kept", f"the messages held {said}, under {trigger}"))
        return run
    cutoff = _cutoff(messages, spec.keep, count)
    if cutoff <= 0:
        _rest(run.fates, len(messages), Fate("kept", f"{keep} keeps every message"))
        return run
    summary_input, text = _stand_in(messages[:cutoff], count, summarizer)
    run.cutoff = cutoff
    run.summary_input = summary_input or None
    run.stand_in_text = text
    head = ChatMsg(role="user", content=SUMMARY_PREFIX + text.strip())
    run.messages = [head, *messages[cutoff:]]
    for k in range(cutoff):
        run.fates[k] = Fate(
            "summarized",
            f"the messages held {said}, at or over {trigger}; before the cutoff {keep} sets: "
            f"replaced by one summary written by {STAND_IN_LABEL}",
        )
    _rest(run.fates, len(messages), Fate("kept", f"after the cutoff {keep} sets"))
    return run


__all__ = [
    "arguments",
    "call_lines",
    "chat_message",
    "reply_text",
    "DEFAULT_PLACEHOLDER",
    "STAND_IN_LABEL",
    "ChatMsg",
    "ClearToolUses",
    "Fate",
    "MessageCounter",
    "Recorded",
    "Summarization",
    "SummaryRun",
    "ToolCall",
    "Trim",
    "clear_tool_uses",
    "from_parts",
    "known_messages",
    "recorded_messages",
    "refuse_unsupported",
    "shared_messages",
    "history_text",
    "summarize",
    "trim",
    "trim_fates",
]
