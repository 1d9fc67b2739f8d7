"""The ``langchain-summarization`` preset: LangChain v1's ``SummarizationMiddleware`` on the
recorded request, its summary model replaced by a stand-in (docs/design.md, "Presets",
"langchain-summarization").

Source: ``langchain==1.5.2``, ``langchain/agents/middleware/summarization.py``. As its
``before_model`` does on the state's messages (the system prompt apart): at ``trigger``
tokens or messages (``trigger_kind``), everything before the cutoff that ``keep`` messages or
tokens (``keep_kind``) set (moved back so that no tool result loses its call) becomes one
user message, "Here is a summary of the conversation to date:" and the summary. The summary
model is replaced by ctxscope's deterministic summarizer (``ctxcore.summarize``, the history
summary: the user's constraints, what was done, open issues, decisions, evidence ids), a
STAND-IN, said so in every decision it makes; it reads the messages the package would send
its model (trimmed to 4,000 tokens as ``trim_tokens_to_summarize`` does). Tokens are counted
with the shared counter (``MessageCounter``). LangChain has no default trigger (it never
summarizes without one); this preset's is 4,000 tokens, the example of LangChain's own
context-engineering guide.
"""

from __future__ import annotations

from dataclasses import replace

from ctxcore.errors import InputError
from ctxcore.knobs import preset_defaults, refused
from ctxcore.models import CapturedInput, Config
from ctxcore.pipeline.common import Summarizer
from ctxcore.pipeline.gather import HISTORY_SUMMARY_ID
from ctxcore.pipeline.langchain_build import Built, Outcome, runner
from ctxcore.pipeline.langchain_policies import (
    MessageCounter,
    Summarization,
    recorded_messages,
    refuse_unsupported,
    summarize,
)
from ctxcore.pipeline.recorded import conversation, with_tokenizer
from ctxcore.summarize import default_summarizer
from ctxcore.tokens import TokenCounter

NAME = "langchain-summarization"
VERSION = "langchain==1.5.2"
POLICY = "SummarizationMiddleware (summary by a deterministic stand-in)"

DEFAULTS: dict[str, object] = preset_defaults(NAME)
UNSUPPORTED = refused(NAME)


def resolve(config: Config, input: CapturedInput) -> Config:
    """Fill every unset knob with the middleware's default; refuse the others, and a
    threshold of 0 (the package refuses it: "thresholds must be greater than 0")."""
    del input
    refuse_unsupported(NAME, config, UNSUPPORTED)
    cfg = with_tokenizer(config, DEFAULTS)
    for knob in ("trigger", "keep"):
        if getattr(cfg, knob) == 0:
            raise InputError(
                f"preset {NAME}: {knob} must be greater than 0 (SummarizationMiddleware "
                f"refuses a {knob} of 0)"
            )
    return cfg


def spec_of(config: Config) -> Summarization:
    """The middleware's ``trigger`` and ``keep`` a resolved config describes."""
    assert config.trigger is not None and config.keep is not None
    assert config.trigger_kind is not None and config.keep_kind is not None
    return Summarization((config.trigger_kind, config.trigger), (config.keep_kind, config.keep))


def outcome(
    input: CapturedInput,
    config: Config,
    counter: TokenCounter,
    summarizer: Summarizer | None = None,
) -> Built:
    """What ``run`` sends, before it is counted and reported."""
    conv = conversation(input)
    system, rest = recorded_messages(conv)
    done = summarize(
        rest, spec_of(config), MessageCounter(counter), summarizer or default_summarizer()
    )
    sent = [replace(m, id=HISTORY_SUMMARY_ID) if m.source is None else m for m in done.messages]
    by_part = {rest[k].source: f for k, f in done.fates.items() if rest[k].source is not None}
    head = [system] if system is not None else []
    return conv, Outcome(head + sent, by_part, POLICY)  # type: ignore[arg-type]


run = runner(outcome, "The recorded request with its older messages summarized past the trigger.")

__all__ = ["NAME", "VERSION", "outcome", "resolve", "run", "spec_of"]
