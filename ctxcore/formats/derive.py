"""Turn a captured input that some other system sent to a model into a ctxscope trace.

An imported prompt was not built by us: everything it holds was, by definition, kept.
This module derives the decisions that say so (status ``kept``, reason ``FITS``, tokens
counted with the real tokenizer), the partition usage and the totals, so an imported
request can be inspected, compared and re-run with another preset like any recorded
build. Shared by every importer (OpenAI-style requests, OTLP GenAI spans).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ctxcore import __version__ as _ctxcore_version
from ctxcore.models import (
    Builder,
    BuildResult,
    CapturedInput,
    Config,
    Decision,
    Message,
    Outcome,
    PartitionUsage,
    Reason,
    Status,
    TokenUsage,
    Totals,
    Trace,
)
from ctxcore.pipeline import resolve_config
from ctxcore.pipeline.common import INSTRUCTIONS_ID, Timer, finish, history_id
from ctxcore.tokens import TokenCounter, get_counter

TOOLS_ID = "builder:tools"
TASK_ID = "builder:task"
FORMAT_ID = "builder:format"
FORMAT_TOKENS_PER_MESSAGE = 3
FORMAT_TOKENS_REPLY = 3

#: The partitions of an imported prompt: what a chat request really holds, in prompt order
#: (not the six sections of a ctxscope build, which another system's prompt does not have).
IMPORT_PARTITIONS: tuple[str, ...] = (
    "system",
    "tool definitions",
    "history",
    "tool results",
    "current message",
    "format overhead",
)

#: Which tiktoken encoding a model family uses; anything unknown counts with cl100k_base.
_O200K_PREFIXES = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o")

#: A provider-reported prompt size this far from our count gets a warning.
USAGE_TOLERANCE = 0.10


#: Context windows of well-known model families (longest prefix wins), used when a request
#: does not say; an unknown model leaves the window unknown rather than guessing.
KNOWN_WINDOWS: dict[str, int] = {
    "gpt-5": 400_000,
    "gpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4-32k": 32_768,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "o3-mini": 200_000,
    "claude-3": 200_000,
    "claude-sonnet-4": 200_000,
    "claude-opus-4": 200_000,
    "claude-haiku-4": 200_000,
    "gemini-1.5-pro": 2_097_152,
    "gemini-1.5-flash": 1_048_576,
    "gemini-2.0-flash": 1_048_576,
    "gemini-2.5-pro": 1_048_576,
    "gemini-2.5-flash": 1_048_576,
}


def known_window(model: str | None) -> int | None:
    """The context window of a well-known model, or None."""
    name = (model or "").lower().rsplit("/", 1)[-1]
    best = max((k for k in KNOWN_WINDOWS if name.startswith(k)), key=len, default=None)
    return KNOWN_WINDOWS[best] if best else None


def tokenizer_for_model(model: str | None) -> str:
    """The encoding that counts a model's tokens best among the ones ctxscope ships."""
    name = (model or "").lower().rsplit("/", 1)[-1]
    return "o200k_base" if name.startswith(_O200K_PREFIXES) else "cl100k_base"


def tools_text(tools: list[Any]) -> str:
    """The tool definitions as the compact JSON a provider puts into the prompt."""
    return json.dumps(
        [t.model_dump(mode="json") for t in tools], ensure_ascii=False, separators=(",", ":")
    )


def stable_id(*parts: Any) -> str:
    """A deterministic trace id: re-importing the same request is a no-op in the store."""
    blob = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:32]


def import_config(input: CapturedInput, tokenizer: str) -> Config:
    """The ``ctxscope`` preset's config, resolved for this input."""
    return resolve_config(Config(preset="ctxscope", tokenizer=tokenizer), input)


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
            _Item(
                INSTRUCTIONS_ID,
                "instructions",
                input.system_instructions,
                "system",
                True,
            )
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
    for k, m in enumerate(input.history):
        items.append(_Item(history_id(k), "history", m.content, "history"))
    items.append(_Item(TASK_ID, "task", input.query, "current message", True))
    return items


def _replaced(messages: list[Message]) -> list[Message]:
    """The chat messages a compaction replaced (``norm``): the model never saw them."""
    return [m for m in messages if m.metadata.get("replaced_by")]


def _summarized(
    messages: list[Message], counter: TokenCounter, rank: int, left: int
) -> list[Decision]:
    """A decision per message a compaction replaced: summarized, no tokens left in the
    prompt (as a session log's compaction shows what it replaced, ``sessions.calls``)."""
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


def _format_item(input: CapturedInput, messages: list[Message]) -> tuple[_Item, int]:
    """The chat format's own tokens as an item: role markers around every message and the
    reply primer (3 + 3 in OpenAI's published accounting for its chat models). Providers
    differ a little; the reported usage, where the source has it, shows by how much."""
    n_messages = sum(
        1
        for m in messages
        if m.role not in ("system", "developer") and not m.metadata.get("replaced_by")
    ) + (1 if input.system_instructions else 0)
    item = _Item(
        FORMAT_ID,
        "format",
        "",
        "format overhead",
        notes=[
            f"{FORMAT_TOKENS_PER_MESSAGE} tokens of chat format per message × "
            f"{n_messages} + {FORMAT_TOKENS_REPLY} to prime the reply"
        ],
    )
    return item, FORMAT_TOKENS_PER_MESSAGE * n_messages + FORMAT_TOKENS_REPLY


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
        decisions.append(
            Decision(
                packet_id=it.id,
                kind=it.kind,
                status=Status.KEPT,
                reason=Reason.FITS,
                reason_text="present in the imported prompt (imports keep everything they saw)",
                partition=it.partition,
                rank=rank,
                tokens_before=n,
                tokens_after=n,
                budget_left=left,
                notes=it.notes,
            )
        )
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
        items = _items(input)
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


def reported_prompt_tokens(usage: dict[str, int]) -> int | None:
    """The whole prompt as the provider counted it. OpenAI's ``prompt_tokens`` (and Gemini's
    ``promptTokenCount``) include cached tokens; Anthropic's ``input_tokens`` excludes what
    was read from or written to the cache, so those are added back."""
    for key in ("prompt_tokens", "promptTokenCount", "prompt_token_count"):
        if isinstance(usage.get(key), int):
            return usage[key]
    if isinstance(usage.get("input_tokens"), int):
        cached = sum(
            int(usage.get(k, 0) or 0)
            for k in ("cache_read_input_tokens", "cache_creation_input_tokens")
        )
        return usage["input_tokens"] + cached
    if isinstance(usage.get("inputTokens"), int):  # Bedrock Converse
        return usage["inputTokens"]
    return None


def usage_warning(usage: dict[str, int], used: int, tokenizer: str) -> str | None:
    """A warning when the provider's prompt count and ours differ by more than 10%."""
    reported = reported_prompt_tokens(usage)
    if reported is None or reported <= 0:
        return None
    diff = (used - reported) / reported
    if abs(diff) <= USAGE_TOLERANCE:
        return None
    return (
        f"the provider reported {reported:,} prompt tokens; ctxscope counted {used:,} with "
        f"{tokenizer} ({diff:+.0%}); chat-format overhead, images or another tokenizer explain "
        "a gap"
    )


def make_trace(
    input: CapturedInput,
    messages: list[Message],
    *,
    builder: str,
    model: str | None,
    trace_id: str,
    session_id: str,
    turn: int,
    created_at: datetime,
    usage: dict[str, int] | None = None,
    output: str | None = None,
    metadata: dict[str, Any] | None = None,
    tags: list[str] | None = None,
    tokens: TokenUsage | None = None,
) -> Trace:
    """Wrap an imported input and its derived result in a ``ctxscope.trace/1`` trace.

    The model's window, when the request does not say it but the model is well known,
    goes into the captured input (so ``build``, the Playground and Compare budget against
    it, not a default); where it stays unknown the trace says so
    (``metadata.import.window_known = false``) and no detector measures against it."""
    tok = tokenizer_for_model(model)
    meta = dict(metadata or {})
    imp = dict(meta.get("import") or {}) if isinstance(meta.get("import"), dict) else {}
    if input.window is not None:
        imp.setdefault("window_source", "the request")
    elif known_window(model) is not None:
        input = input.model_copy(update={"window": known_window(model)})
        imp["window_source"] = f"the context window of {model} (ctxscope's model table)"
    else:
        imp["window_known"] = False
    cfg = import_config(input, tok)
    counter = get_counter(cfg.tokenizer or tok)
    result = derive_result(input, messages, counter)
    usage = dict(usage or {})
    reported = reported_prompt_tokens(usage)
    if reported is not None:
        imp["prompt_tokens"] = {
            "reported": reported,
            "counted": result.totals.used,
            "difference": result.totals.used - reported,
            "tokenizer": counter.name,
        }
    warn = usage_warning(usage, result.totals.used, counter.name)
    if warn is not None:
        result = result.model_copy(update={"warnings": [*result.warnings, warn]})
    outcome = (
        Outcome(output=output, usage=usage, tokens=tokens)
        if (usage or tokens is not None or output is not None)
        else None
    )
    if imp:
        meta["import"] = imp
    if model:
        meta.setdefault("model", model)
    return Trace(
        trace_id=trace_id,
        session_id=session_id,
        turn=turn,
        created_at=created_at,
        builder=Builder(name=builder, version=_ctxcore_version),
        tags=tags or ["imported"],
        metadata=meta,
        input=input,
        config=cfg,
        result=result,
        outcome=outcome,
    )


def with_window(trace: Trace, *, window: int | None = None, model: str | None = None) -> Trace:
    """The same imported trace re-derived with the window (or the model) the user knows,
    e.g. ``ctxscope import --window 200000`` or ``--model claude-sonnet-4``."""
    if trace.result is None:
        return trace
    meta = dict(trace.metadata)
    imp = dict(meta.get("import") or {}) if isinstance(meta.get("import"), dict) else {}
    imp.pop("window_known", None)
    imp.pop("window_source", None)
    inp = trace.input
    if window is not None:
        inp = inp.model_copy(update={"window": window})
        imp["window_source"] = "--window"
    elif model is not None:
        inp = inp.model_copy(update={"window": None})
    if model is not None:
        meta["model"] = model
    meta["import"] = imp
    outcome = trace.outcome
    return make_trace(
        inp,
        list(trace.result.messages or []),
        builder=trace.builder.name,
        model=model or (meta.get("model") if isinstance(meta.get("model"), str) else None),
        trace_id=trace.trace_id,
        session_id=trace.session_id,
        turn=trace.turn,
        created_at=trace.created_at,
        usage=dict(outcome.usage) if outcome is not None and outcome.usage else None,
        output=outcome.output if outcome is not None else None,
        metadata=meta,
        tags=list(trace.tags),
        tokens=outcome.tokens if outcome is not None else None,
    )
