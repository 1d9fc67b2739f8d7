"""The ``auto-compact`` preset: an agent's automatic compaction at a share of the window, on
the recorded request (docs/design.md, "Presets", "auto-compact").

When the request reaches ``threshold`` × the model's window (counted as the recorded preset
counts it: system prompt, tool definitions, every message with the chat format's tokens),
the conversation is compacted as the ``agent`` compacts it:

- ``claude-code``: one summary replaces the conversation; the current message stays. (Claude
  Code's ``/compact`` and auto-compact leave the summary, a ``compact_boundary`` and the
  message that continues the session; its log marks the summary ``isCompactSummary``.)
- ``codex``: the most recent user messages, up to 20,000 tokens
  (``COMPACT_USER_MESSAGE_MAX_TOKENS`` in codex-rs ``core/src/codex/compact.rs``), are kept
  before the summary (its rollout's ``compacted`` item holds the replacement history).

The default thresholds are calibrated on the compactions in the fixtures' real logs
(``tests/fixtures/imports``): Claude Code's ``compact_boundary`` says it fired at
``preTokens`` 150,000 of a 200,000-token window (0.75); Codex's ``compacted`` item came after
a call of 209,950 input tokens in a 258,400-token window (0.81).

The summary: a compaction the log recorded is the log's real one, kept as sent (the parts
marked ``compaction_replaced`` or carrying a ``compaction`` packet); what this policy
compacts beyond it is summarized by ctxscope's deterministic summarizer, a STAND-IN for the
agent's summary model, said so in every decision.
"""

from __future__ import annotations

from dataclasses import dataclass

from ctxcore.errors import InputError
from ctxcore.knobs import preset_defaults, refused
from ctxcore.models import CapturedInput, Config
from ctxcore.pipeline.common import Summarizer
from ctxcore.pipeline.gather import HISTORY_SUMMARY_ID
from ctxcore.pipeline.langchain_build import Built, Outcome, runner
from ctxcore.pipeline.langchain_policies import (
    STAND_IN_LABEL,
    STAND_IN_TARGET_TOKENS,
    ChatMsg,
    Fate,
    MessageCounter,
    history_text,
    recorded_messages,
    refuse_unsupported,
)
from ctxcore.pipeline.recorded import (
    REPLACED,
    Conversation,
    Part,
    conversation,
    tools_text,
    with_tokenizer,
)
from ctxcore.summarize import default_summarizer
from ctxcore.tokens import TokenCounter

NAME = "auto-compact"
VERSION = "1"
POLICY = "auto-compact"
#: the share of the window each agent compacted at in the fixtures' logs (module docstring)
CALIBRATED: dict[str, float] = {"claude-code": 0.75, "codex": 0.81}
#: codex-rs ``COMPACT_USER_MESSAGE_MAX_TOKENS``: the user messages a compaction keeps
CODEX_USER_TOKENS = 20_000
SUMMARY_PREFIX = {
    "claude-code": "This session is being continued from a previous conversation that ran "
    "out of context. The conversation is summarized below:\n",
    "codex": "Another language model started to solve this problem and produced a summary of "
    "its thinking process.\n",
}

DEFAULTS: dict[str, object] = preset_defaults(NAME)
UNSUPPORTED = refused(NAME)


def resolve(config: Config, input: CapturedInput) -> Config:
    """Fill every unset knob (``threshold``: the agent's calibrated share); refuse the
    others."""
    del input
    refuse_unsupported(NAME, config, UNSUPPORTED)
    cfg = with_tokenizer(config, DEFAULTS)
    if cfg.threshold is None:
        assert cfg.agent is not None
        cfg = cfg.model_copy(update={"threshold": CALIBRATED[cfg.agent]})
    return cfg


def _recorded_summary(part: Part) -> bool:
    """A part of a compaction the log recorded (its summary or what it kept)."""
    meta = part.packet.metadata if part.packet is not None else part.message.metadata
    return bool(meta.get(REPLACED)) or "compaction" in meta


def _codex_kept(messages: list[ChatMsg], count: MessageCounter) -> set[int]:
    """The user messages codex keeps: the most recent first, up to ``CODEX_USER_TOKENS``."""
    kept: set[int] = set()
    left = CODEX_USER_TOKENS
    for k in range(len(messages) - 1, -1, -1):
        m = messages[k]
        if m.role != "user":
            continue
        n = count.one(m)
        if n > left:
            break
        kept.add(k)
        left -= n
    return kept


def _kept_parts(
    conv: Conversation, messages: list[ChatMsg], agent: str, count: MessageCounter
) -> dict[int, str]:
    """The messages a compaction leaves, by index, each with why."""
    kept: dict[int, str] = {}
    for k, p in enumerate(conv.parts):
        if p.kind == "task":
            kept[k] = "the current message: a compaction keeps it"
        elif _recorded_summary(p):
            kept[k] = "the log's own compaction (its real summary): kept as recorded"
    if agent == "codex":
        for k in _codex_kept(messages, count):
            kept.setdefault(
                k, f"codex keeps the most recent user messages (≤ {CODEX_USER_TOKENS:,} tokens)"
            )
    return kept


def _fixed_tokens(conv: Conversation, input: CapturedInput, counter: TokenCounter) -> int:
    """The request's tokens outside the conversation (system prompt, tools, reply primer)."""
    n = 3 + (counter.count(conv.system) + 3 if conv.system else 0)
    return n + (counter.count(tools_text(input.tools)) if input.tools else 0)


@dataclass(frozen=True, slots=True)
class Request:
    """The recorded request as the compaction sees it: its conversation, the model's window,
    the counter and the tokens it holds."""

    conv: Conversation
    window: int
    count: MessageCounter
    used: int


def compact(
    req: Request, messages: list[ChatMsg], config: Config, summarizer: Summarizer
) -> tuple[list[ChatMsg], dict[int, Fate]]:
    """The conversation after the compaction ``config`` describes: the summary where the
    first compacted message was, the kept ones around it, and each message's fate."""
    assert config.threshold is not None and config.agent is not None
    at = f"{req.used:,} tokens, {req.used / req.window:.0%} of the {req.window:,}-token window"
    limit = f"threshold={config.threshold:g}"
    if req.used < config.threshold * req.window:
        why = f"{at}, under {limit}: no compaction"
        return messages, {k: Fate("kept", why) for k in range(len(messages))}
    kept = _kept_parts(req.conv, messages, config.agent, req.count)
    gone = [k for k in range(len(messages)) if k not in kept]
    fates = {k: Fate("kept", f"{at}, at or over {limit}; {why}") for k, why in kept.items()}
    if not gone:
        return messages, fates
    text = summarizer("history", history_text([messages[k] for k in gone]), STAND_IN_TARGET_TOKENS)
    summary = ChatMsg("user", SUMMARY_PREFIX[config.agent] + text.strip(), HISTORY_SUMMARY_ID)
    out = [messages[k] for k in sorted(kept) if k < gone[0]]
    out += [summary, *(messages[k] for k in sorted(kept) if k > gone[0])]
    for k in gone:
        fates[k] = Fate(
            "summarized",
            f"{at}, at or over {limit}: compacted as {config.agent} compacts, into one summary "
            f"written by {STAND_IN_LABEL}",
        )
    return out, fates


def outcome(
    input: CapturedInput,
    config: Config,
    counter: TokenCounter,
    summarizer: Summarizer | None = None,
) -> Built:
    """What ``run`` sends, before it is counted and reported."""
    if not input.window:
        raise InputError(
            f"preset {NAME} compacts at a share of the model's window, and this input has "
            "none: pass --set window=N (or import with --window N or --model NAME)"
        )
    conv = conversation(input)
    system, rest = recorded_messages(conv)
    count = MessageCounter(counter)
    req = Request(conv, input.window, count, _fixed_tokens(conv, input, counter) + count(rest))
    done, fates = compact(req, rest, config, summarizer or default_summarizer())
    by_part = {rest[k].source: f for k, f in fates.items() if rest[k].source is not None}
    sent = ([system] if system is not None else []) + done
    return conv, Outcome(sent, by_part, POLICY)  # type: ignore[arg-type]


run = runner(outcome, "The recorded request, compacted when it reaches the threshold.")

__all__ = ["CALIBRATED", "NAME", "VERSION", "Request", "compact", "outcome", "resolve", "run"]
