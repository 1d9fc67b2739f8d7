"""A LangChain policy's result as a build result (docs/design.md, "Presets", "LangChain
policies").

The policies (``pipeline/langchain_policies.py``) edit the recorded request's messages; this
module turns what they sent into what every preset returns: the chat messages, the flat
prompt, one decision per part of the recorded rebuild (``recorded.conversation``) with the
policy's reason, the partitions and the totals, counted as the recorded preset counts (each
part's content with the tokenizer, the chat format's own tokens per message), so a policy's
tokens compare with ``recorded``'s part for part.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ctxcore.models import (
    BuildResult,
    CapturedInput,
    Config,
    Decision,
    Message,
    PartitionUsage,
    Reason,
    Status,
    Totals,
)
from ctxcore.pipeline.common import INSTRUCTIONS_ID, RunFn, Summarizer, Timer, finish
from ctxcore.pipeline.gather import HISTORY_SUMMARY_ID
from ctxcore.pipeline.langchain_policies import (
    ChatMsg,
    Fate,
    Recorded,
    arguments,
    call_lines,
    known_messages,
    reply_text,
)
from ctxcore.pipeline.recorded import (
    FORMAT_ID,
    IMPORT_PARTITIONS,
    TOOLS_ID,
    Conversation,
    format_note,
    format_overhead,
    render_prompt,
    tools_text,
    window_warnings,
)
from ctxcore.tokens import TokenCounter

#: a fate's status and reason code
_CODES: dict[str, tuple[Status, Reason]] = {
    "kept": (Status.KEPT, Reason.FITS),
    "cleared": (Status.TRUNCATED, Reason.DEGRADED),
    "inputs_cleared": (Status.TRUNCATED, Reason.DEGRADED),
    "partial": (Status.TRUNCATED, Reason.NO_ROOM),
    "summarized": (Status.SUMMARIZED, Reason.DEGRADED),
    "trimmed": (Status.DROPPED, Reason.NO_ROOM),
}


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a policy sent: the messages (the system one first where it was kept) and the fate
    of each recorded part by its index (a part with none was left as recorded);
    ``system_fate`` for the system prompt (kept unless it says otherwise)."""

    messages: list[ChatMsg]
    fates: dict[int, Fate]
    policy: str
    system_fate: Fate | None = None


#: what a recorded-based preset's policy sends (``outcome`` of each policy preset): the
#: recorded request and the policy's outcome on it; ``result`` or ``used_tokens`` reads it
Built = tuple[Conversation, Outcome]


def _message(conv: Conversation, m: ChatMsg) -> Message:
    """The chat message ``m`` is, as a recorded message: the recorded one when the policy
    left it as it was, else a copy with the new content (an assistant's call lines rebuilt
    from its calls' arguments, as the importer writes them)."""
    if m.source is None:
        return Message(role=m.role, content=m.content, id=m.id)
    part = conv.parts[m.source]
    rec = part.message
    if m.role != "assistant":
        return rec if m.content == rec.content else rec.model_copy(update={"content": m.content})
    raw = rec.metadata.get("tool_calls")
    calls: list[dict[str, Any]] = (
        [c for c in raw if isinstance(c, dict)] if isinstance(raw, list) else []
    )
    args = {c.id: c.args for c in m.tool_calls}
    new_calls = [
        c
        if args.get(str(c.get("id") or "")) == arguments(c.get("arguments"))
        else {**c, "arguments": "{}"}
        for c in calls
    ]
    text = reply_text(rec)
    if m.content == text and new_calls == calls:
        return rec
    lines = call_lines(new_calls)
    content = m.content
    if text != rec.content:  # the importer wrote the calls after the text: write them anew
        content = f"{m.content}\n{lines}" if m.content else lines
    return rec.model_copy(
        update={"content": content, "metadata": {**rec.metadata, "tool_calls": new_calls}}
    )


def _sent(conv: Conversation, m: ChatMsg, shared: Recorded | None) -> Message:
    """``_message``, remembered for a shared recorded message the policy left as it was (a
    sweep's cells and a comparison's policies send most parts unchanged)."""
    if shared is None or m.source is None:
        return _message(conv, m)
    if m is shared.rest[m.source]:
        hit = shared.sent.get(m.source)
        if hit is None:
            hit = shared.sent[m.source] = _message(conv, m)
        return hit
    if m.role == "assistant":  # its calls' arguments may differ too
        return _message(conv, m)
    key = (m.source, m.content)
    hit = shared.edited.get(key)
    if hit is None:
        hit = shared.edited[key] = _message(conv, m)
    return hit


def messages_sent(
    conv: Conversation, out: Sequence[ChatMsg]
) -> tuple[list[Message], dict[int, Message]]:
    """The chat messages a policy sent (``result.messages``), the parts a compaction had
    replaced before the recording marked as the recorded preset marks them; and the message
    each recorded part was sent as, by the part's index."""
    head: list[Message] = []
    body: list[Message] = []
    by_part: dict[int, Message] = {}
    shared = known_messages(conv)
    for m in out:
        if m.id == INSTRUCTIONS_ID and m.source is None:
            head.append(Message(role="system", content=conv.system))
            continue
        body.append(_sent(conv, m, shared))
        if m.source is not None:
            by_part[m.source] = body[-1]
    replaced = [
        Message(
            role="tool" if rid.startswith("tool:") else "user",
            content="",
            id=rid,
            metadata={"replaced_by": "compaction"},
        )
        for rid in conv.replaced
    ]
    return [*head, *replaced, *body], by_part


def _partition(kind: str, part_id: str) -> str:
    if part_id == INSTRUCTIONS_ID or kind in ("instructions", "policy"):
        return "system"
    if kind == "tool_result":
        return "tool results"
    if kind == "task":
        return "current message"
    return "history"


@dataclass
class _Acc:
    """Decisions in prompt order (their fields: a ``Decision`` is made once the budget left
    after each is known) and the tokens they add up to."""

    policy: str
    rows: list[tuple[str, str, Fate | tuple[Status, Reason, str], str, tuple[int, int]]]
    used: int = 0

    def add(
        self,
        pid: str,
        kind: str,
        code: Fate | tuple[Status, Reason, str],
        partition: str,
        tokens: tuple[int, int],
    ) -> None:
        """A part's row: a fate is said (``said``) only when the decisions are made."""
        self.used += tokens[1]
        self.rows.append((pid, kind, code, partition, tokens))

    def decisions(self, available: int) -> list[Decision]:
        """The decisions, each with the budget left after it out of ``available``."""
        out: list[Decision] = []
        left = available
        for rank, (pid, kind, code, partition, tokens) in enumerate(self.rows):
            status, reason, text = self.said(code) if isinstance(code, Fate) else code
            left -= tokens[1]
            out.append(
                Decision(
                    packet_id=pid,
                    kind=kind,
                    status=status,
                    reason=reason,
                    reason_text=text,
                    partition=partition,
                    rank=rank,
                    tokens_before=tokens[0],
                    tokens_after=tokens[1],
                    budget_left=left,
                )
            )
        return out

    def said(self, fate: Fate) -> tuple[Status, Reason, str]:
        """A fate's status, reason code and sentence (naming the policy)."""
        status, reason = _CODES[fate.action]
        return status, reason, f"{self.policy}: {fate.why}"


def _head(
    acc: _Acc, input: CapturedInput, conv: Conversation, outcome: Outcome, counter: TokenCounter
) -> None:
    """The decisions before the conversation: the system prompt, the tool definitions, the
    messages a compaction replaced before the recording, the policy's summary."""
    if conv.system:
        sent = any(m.id == INSTRUCTIONS_ID for m in outcome.messages)
        n = counter.count(conv.system)
        fate = outcome.system_fate or Fate("kept", "the request's system prompt, sent as recorded")
        acc.add(INSTRUCTIONS_ID, "instructions", fate, "system", (n, n if sent else 0))
    if input.tools:
        n = counter.count(tools_text(input.tools))
        why = "tool definitions are sent as recorded (the policy edits messages only)"
        acc.add(TOOLS_ID, "tools", Fate("kept", why), "tool definitions", (n, n))
    for rid in conv.replaced:
        kind = "tool_result" if rid.startswith("tool:") else "history"
        why = "replaced by a compaction before the recording: the model saw its summary"
        code = (Status.SUMMARIZED, Reason.DEGRADED, why)
        acc.add(rid, kind, code, "tool results" if kind == "tool_result" else "history", (0, 0))
    for summary in outcome.messages:  # one summary, or several (pipeline/agent_policies.py)
        if summary.source is not None or not (summary.id or "").startswith(HISTORY_SUMMARY_ID):
            continue
        code = (Status.KEPT, Reason.DEGRADED, f"{acc.policy}: {SUMMARY_TEXT}")
        sid = summary.id or HISTORY_SUMMARY_ID
        acc.add(sid, "summary", code, "history", (0, counter.count(summary.content)))


SUMMARY_TEXT = "the summary message that replaces the summarized messages"


def _format_messages(messages: Sequence[Message]) -> int:
    """The messages the chat format charges, as the recorded preset counts them: every one
    but system and developer parts and replaced ones, and the system prompt once."""
    n = sum(
        1
        for m in messages
        if m.role not in ("system", "developer") and not m.metadata.get("replaced_by")
    )
    return n + (1 if any(m.role == "system" and m.id is None for m in messages[:1]) else 0)


def _tally(
    input: CapturedInput, conv: Conversation, outcome: Outcome, counter: TokenCounter
) -> tuple[_Acc, list[Message]]:
    """A row per part of ``conv`` in prompt order (its fate, its tokens before and as sent)
    and the chat messages sent."""
    messages, by_part = messages_sent(conv, outcome.messages)
    acc = _Acc(outcome.policy, [])
    _head(acc, input, conv, outcome, counter)
    untouched = Fate("kept", "left as recorded")
    for k, part in enumerate(conv.parts):
        sent = by_part.get(k)
        tokens = (
            counter.count(part.message.content),
            counter.count(sent.content) if sent is not None else 0,
        )
        fate = outcome.fates.get(k, untouched)
        acc.add(part.id, part.kind, fate, _partition(part.kind, part.id), tokens)
    n = _format_messages(messages)
    code = (Status.KEPT, Reason.FITS, format_note(n))
    overhead = format_overhead(n)
    acc.add(FORMAT_ID, "format", code, "format overhead", (overhead, overhead))
    return acc, messages


def used_tokens(
    input: CapturedInput, conv: Conversation, outcome: Outcome, counter: TokenCounter
) -> int:
    """``result(...).totals.used`` without the result (no decisions, no prompt): what a
    sweep over a session reads of each call (docs/design.md, "Agent policies", "Speed")."""
    return _tally(input, conv, outcome, counter)[0].used


def result(
    input: CapturedInput,
    conv: Conversation,
    outcome: Outcome,
    counter: TokenCounter,
) -> BuildResult:
    """The build result of a policy's outcome on the recorded request ``conv``: a decision
    per part in prompt order (a part without a fate left as recorded), counted as the
    recorded preset counts."""
    timer = Timer()
    with timer.stage("report"):
        acc, messages = _tally(input, conv, outcome, counter)
    reserve = input.output_reserve or 0
    window, available, warns = window_warnings(input.window, acc.used, reserve)
    decisions = acc.decisions(available)
    totals = Totals(
        window=window,
        output_reserve=reserve,
        safety_margin=0,
        available=available,
        used=acc.used,
        tokenizer=counter.name,
    )
    return finish(
        prompt=render_prompt(messages, tools_text(input.tools) if input.tools else ""),
        messages=messages,
        decisions=decisions,
        partitions=_partitions(decisions),
        totals=totals,
        must_keep_ids=[],
        warnings=warns,
        timer=timer,
    )


class OutcomeFn(Protocol):
    """A policy preset's ``outcome``: what it sends on the recorded request, uncounted."""

    def __call__(
        self,
        input: CapturedInput,
        config: Config,
        counter: TokenCounter,
        summarizer: Summarizer | None = None,
    ) -> Built: ...


def runner(outcome: OutcomeFn, doc: str) -> RunFn:
    """The ``run`` of a policy preset whose build is its ``outcome`` counted and reported
    (``result``): every recorded-based preset but ``recorded`` itself and
    ``anthropic-context-editing`` (whose thinking clearing follows the count). A sweep
    calls ``outcome`` alone (``pipeline/sweep.py``)."""

    def run(
        input: CapturedInput,
        config: Config,
        counter: TokenCounter,
        summarizer: Summarizer | None = None,
    ) -> BuildResult:
        return result(input, *outcome(input, config, counter, summarizer), counter)

    run.__doc__ = doc
    return run


def _partitions(decisions: Sequence[Decision]) -> list[PartitionUsage]:
    """The import partitions' tokens and the parts that reached the prompt in each."""
    used: dict[str, int] = {}
    items: dict[str, int] = {}
    for d in decisions:
        if d.partition is None:
            continue
        used[d.partition] = used.get(d.partition, 0) + (d.tokens_after or 0)
        if d.status in (Status.KEPT, Status.TRUNCATED):
            items[d.partition] = items.get(d.partition, 0) + 1
    return [
        PartitionUsage(name=n, budget=None, used=used[n], items=items.get(n, 0))
        for n in IMPORT_PARTITIONS
        if n in used
    ]


__all__ = [
    "Built",
    "Outcome",
    "OutcomeFn",
    "messages_sent",
    "result",
    "runner",
    "used_tokens",
]
