"""The ``anthropic-context-editing`` preset: Anthropic's server-side context editing on the
recorded request (docs/design.md, "Presets", "anthropic-context-editing").

Source: Anthropic's context-editing page,
https://platform.claude.com/docs/en/build-with-claude/context-editing (beta header
``context-management-2025-06-27``). Two edits, applied before the prompt reaches the model:

- ``clear_tool_uses_20250919``: when the request's input tokens exceed ``trigger`` (default
  ``{"type": "input_tokens", "value": 100000}``), the oldest tool results are cleared in
  chronological order, all but the ``keep`` most recent tool uses (default
  ``{"type": "tool_uses", "value": 3}``), each replaced by a placeholder; the results of
  ``exclude_tools`` are never cleared; with ``clear_tool_inputs`` (default false) the call's
  parameters are cleared too. ``clear_at_least`` (default none) is the least a clearing must
  reclaim: "if the API can't clear at least the specified amount, the strategy will not be
  applied" (it exists for the prompt cache: a clearing breaks the cached prefix).
- ``clear_thinking_20251015``: the thinking of all but the ``keep`` most recent assistant
  turns with thinking is cleared (default ``{"type": "thinking_turns", "value": 1}``, the
  API's behaviour with extended thinking and no such edit); knob ``thinking_keep``, since
  ``keep`` is the tool edit's.

What the page does not say, this preset decides and says in its reasons: the trigger counts
the whole request as the recorded preset counts it (system prompt, tool definitions, every
message with the chat format's tokens per message); the placeholder text is ctxscope's
(``PLACEHOLDER``); only a trigger in ``input_tokens`` is modelled (not ``tool_uses``).
ctxscope's counts hold no thinking text (an import keeps only each thinking part's size),
so clearing thinking changes the messages sent, not the token totals.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ctxcore.knobs import preset_defaults, refused
from ctxcore.models import BuildResult, CapturedInput, Config, Message
from ctxcore.pipeline.common import Summarizer
from ctxcore.pipeline.langchain_build import Built, Outcome, result
from ctxcore.pipeline.langchain_policies import (
    ChatMsg,
    Count,
    Fate,
    MessageCounter,
    recorded_messages,
    refuse_unsupported,
)
from ctxcore.pipeline.recorded import Conversation, conversation, tools_text, with_tokenizer
from ctxcore.tokens import TokenCounter

NAME = "anthropic-context-editing"
VERSION = "context-management-2025-06-27"
POLICY = "context editing"
SOURCE = "https://platform.claude.com/docs/en/build-with-claude/context-editing"
#: what a cleared tool result reads (the page names no text: this one is ctxscope's)
PLACEHOLDER = "[tool result cleared by context editing]"

DEFAULTS: dict[str, object] = preset_defaults(NAME)
UNSUPPORTED = refused(NAME)


def resolve(config: Config, input: CapturedInput) -> Config:
    """Fill every unset knob with the API's default; refuse the others."""
    del input
    refuse_unsupported(NAME, config, UNSUPPORTED)
    return with_tokenizer(config, DEFAULTS)


@dataclass(frozen=True, slots=True)
class ClearToolUses:
    """``clear_tool_uses_20250919``'s parameters (``clear_at_least`` 0: none)."""

    trigger: int = 100_000
    keep: int = 3
    clear_at_least: int = 0
    exclude_tools: tuple[str, ...] = ()
    clear_tool_inputs: bool = False


def edit_of(config: Config) -> ClearToolUses:
    """The tool-clearing edit a resolved config describes."""
    assert config.trigger is not None and config.keep is not None
    return ClearToolUses(
        trigger=config.trigger,
        keep=config.keep,
        clear_at_least=config.clear_at_least or 0,
        exclude_tools=tuple(config.exclude_tools or ()),
        clear_tool_inputs=bool(config.clear_tool_inputs),
    )


def _call_of(messages: list[ChatMsg], k: int) -> tuple[int, str] | None:
    """The assistant message before result ``k`` that made its call, and the tool's name."""
    tool = messages[k]
    for j in range(k - 1, -1, -1):
        m = messages[j]
        call = next((c for c in m.tool_calls if c.id == tool.tool_call_id), None)
        if call is not None:
            return j, tool.name or call.name
    return None


def clear_tool_uses(
    messages: list[ChatMsg], edit: ClearToolUses, count: Count, fixed: int
) -> tuple[list[ChatMsg], dict[int, Fate], int]:
    """``clear_tool_uses_20250919`` on the conversation; ``fixed`` is the request's tokens
    outside it (system prompt, tool definitions, the reply primer). Returns the edited list,
    the fate of each message, and the tokens it reclaimed (0 when it did not apply)."""
    tokens = fixed + count(messages)
    trig = f"input_tokens={tokens:,}"
    if tokens <= edit.trigger:
        return (
            messages,
            {
                k: Fate("kept", f"{trig}, not over trigger={edit.trigger:,}")
                for k in range(len(messages))
            },
            0,
        )
    results = [k for k, m in enumerate(messages) if m.role == "tool"]
    recent = set(results[len(results) - edit.keep :] if edit.keep else [])
    out = list(messages)
    fates: dict[int, Fate] = {}
    for k in results:
        if k in recent:
            fates[k] = Fate("kept", f"one of the keep={edit.keep} most recent tool uses")
            continue
        found = _call_of(out, k)
        if found is not None and found[1] in edit.exclude_tools:
            fates[k] = Fate("kept", f"tool {found[1]} is in exclude_tools")
            continue
        out[k] = replace(out[k], content=PLACEHOLDER)
        fates[k] = Fate(
            "cleared",
            f"{trig}, over trigger={edit.trigger:,}; older than the keep={edit.keep} most "
            "recent tool uses: its result replaced by a placeholder",
        )
        if edit.clear_tool_inputs and found is not None:
            ai = found[0]
            calls = tuple(
                replace(c, args={}) if c.id == out[k].tool_call_id else c
                for c in out[ai].tool_calls
            )
            out[ai] = replace(out[ai], tool_calls=calls)
            fates[ai] = Fate(
                "inputs_cleared",
                f"clear_tool_inputs: the input of call {out[k].tool_call_id} cleared",
            )
    reclaimed = tokens - fixed - count(out)
    if reclaimed < edit.clear_at_least or not any(f.action == "cleared" for f in fates.values()):
        why = (
            f"{trig}, over trigger={edit.trigger:,}, but clearing would reclaim "
            f"{reclaimed:,} tokens, less than clear_at_least={edit.clear_at_least:,}: the "
            "strategy is not applied"
            if reclaimed < edit.clear_at_least
            else f"{trig}, over trigger={edit.trigger:,}, but no tool use is old enough to clear"
        )
        return messages, {k: Fate("kept", why) for k in range(len(messages))}, 0
    for k in range(len(out)):
        fates.setdefault(k, Fate("kept", "not a tool result (the edit clears tool uses)"))
    return out, fates, reclaimed


def _thinking_turns(conv: Conversation) -> list[int]:
    """The conversation parts that are assistant turns with thinking, in order."""
    return [
        k
        for k, p in enumerate(conv.parts)
        if p.message.role == "assistant" and p.message.metadata.get("thinking")
    ]


def clear_thinking(conv: Conversation, keep: int) -> dict[int, Fate]:
    """``clear_thinking_20251015``: the assistant turns whose thinking is cleared (all but
    the ``keep`` most recent turns with thinking), each with its fate."""
    turns = _thinking_turns(conv)
    cleared = turns[: max(len(turns) - keep, 0)]
    return {
        k: Fate(
            "kept",
            f"clear_thinking_20251015: its {len(conv.parts[k].message.metadata['thinking'])} "
            f"thinking part(s) cleared, older than the keep={keep} most recent thinking turns "
            "(ctxscope counts no thinking text, so its tokens do not change)",
        )
        for k in cleared
    }


def _without_thinking(messages: list[Message], ids: set[str]) -> list[Message]:
    """The messages sent, the thinking of the parts ``ids`` removed."""
    return [
        m.model_copy(update={"metadata": {k: v for k, v in m.metadata.items() if k != "thinking"}})
        if m.id in ids and m.metadata.get("thinking")
        else m
        for m in messages
    ]


def _fixed_tokens(conv: Conversation, input: CapturedInput, counter: TokenCounter) -> int:
    """The request's tokens outside the conversation: the system prompt (and its format
    tokens), the tool definitions, the reply primer."""
    n = 3
    if conv.system:
        n += counter.count(conv.system) + 3
    if input.tools:
        n += counter.count(tools_text(input.tools))
    return n


def run(
    input: CapturedInput,
    config: Config,
    counter: TokenCounter,
    summarizer: Summarizer | None = None,
) -> BuildResult:
    """The recorded request with the tool results and the thinking the edits clear."""
    conv, out = outcome(input, config, counter, summarizer)
    built = result(input, conv, out, counter)
    assert config.thinking_keep is not None
    thought = clear_thinking(conv, config.thinking_keep)
    if not thought:
        return built
    ids = {i for k in thought if (i := conv.parts[k].message.id)}
    return built.model_copy(update={"messages": _without_thinking(built.messages or [], ids)})


def outcome(
    input: CapturedInput,
    config: Config,
    counter: TokenCounter,
    summarizer: Summarizer | None = None,
) -> Built:
    """What ``run`` sends, before it is counted and reported (the thinking cleared is taken
    off the messages by ``run``: ctxscope's counts hold no thinking text)."""
    del summarizer
    conv = conversation(input)
    system, rest = recorded_messages(conv)
    count = MessageCounter(counter)
    edited, fates, _ = clear_tool_uses(
        rest, edit_of(config), count, _fixed_tokens(conv, input, counter)
    )
    assert config.thinking_keep is not None
    thought = clear_thinking(conv, config.thinking_keep)
    by_part = {rest[k].source: f for k, f in fates.items() if rest[k].source is not None}
    for k, f in thought.items():
        before = by_part.get(k)
        by_part[k] = f if before is None or before.action == "kept" else before
    sent = ([system] if system is not None else []) + edited
    return conv, Outcome(sent, by_part, POLICY)  # type: ignore[arg-type]


__all__ = [
    "NAME",
    "PLACEHOLDER",
    "SOURCE",
    "VERSION",
    "ClearToolUses",
    "clear_thinking",
    "clear_tool_uses",
    "edit_of",
    "outcome",
    "resolve",
    "run",
]
