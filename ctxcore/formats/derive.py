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
from datetime import datetime
from json.encoder import encode_basestring as _json_str  # json.dumps' own, ensure_ascii=False
from typing import Any

from ctxcore import __version__ as _ctxcore_version
from ctxcore.models import (
    Builder,
    CapturedInput,
    Config,
    Message,
    Outcome,
    TokenUsage,
    Trace,
)
from ctxcore.pipeline.ctxscope_config import resolve as resolve_ctxscope

# the derivation is the recorded preset's (docs/design.md, "recorded"); re-exported here
from ctxcore.pipeline.recorded import (
    FORMAT_ID,
    FORMAT_TOKENS_PER_MESSAGE,
    FORMAT_TOKENS_REPLY,
    IMPORT_PARTITIONS,
    TASK_ID,
    TOOLS_ID,
    Carry,
    derive_result,
    render_prompt,
    tools_text,
    window_warnings,
)
from ctxcore.tokens import get_counter

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


def stable_id(*parts: Any) -> str:
    """A deterministic trace id: re-importing the same request is a no-op in the store.
    The hash of ``parts``' JSON; strings only (an importer's call: builder, session, key)
    are written as ``json.dumps`` writes them without its encoder's set-up."""
    if all(type(p) is str for p in parts):
        blob = "[" + ", ".join(map(_json_str, parts)) + "]"
    else:
        blob = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:32]


def import_config(input: CapturedInput, tokenizer: str) -> Config:
    """The ``ctxscope`` preset's config, resolved for this input (without importing the
    preset's stages: an import never runs them)."""
    return resolve_ctxscope(Config(preset="ctxscope", tokenizer=tokenizer), input)


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
    carry: Carry | None = None,
) -> Trace:
    """Wrap an imported input and its derived result in a ``ctxscope.trace/1`` trace
    (``carry``: what the session's earlier calls derived, ``recorded.derive_result``).

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
    result = derive_result(input, messages, counter, carry=carry)
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


__all__ = [
    "FORMAT_ID",
    "FORMAT_TOKENS_PER_MESSAGE",
    "FORMAT_TOKENS_REPLY",
    "IMPORT_PARTITIONS",
    "KNOWN_WINDOWS",
    "TASK_ID",
    "TOOLS_ID",
    "USAGE_TOLERANCE",
    "derive_result",
    "import_config",
    "known_window",
    "make_trace",
    "render_prompt",
    "reported_prompt_tokens",
    "stable_id",
    "tokenizer_for_model",
    "tools_text",
    "usage_warning",
    "window_warnings",
    "with_window",
]
