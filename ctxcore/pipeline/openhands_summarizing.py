"""The ``openhands-summarizing`` preset: OpenHands' ``LLMSummarizingCondenser`` on the
recorded request, its summary model replaced by a stand-in (docs/design.md, "Presets",
"openhands-summarizing").

Source: ``All-Hands-AI/OpenHands`` at ``156d0686c46aafb0fa9d291da6421fb6f64dddc0``,
``openhands/memory/condenser/impl/llm_summarizing_condenser.py``; the defaults are
``LLMSummarizingCondenserConfig``'s (``max_size`` 100, ``keep_first`` 1). A rolling condenser:
replayed over the request's steps (one per recorded model call), whenever the view holds more
than ``max_size`` events, the events after the first ``keep_first`` and before the
``max_size // 2 - keep_first - 1`` most recent are forgotten into one summary event (a user
message) after the head, the previous summary folded in. The summary model is ctxscope's
deterministic summarizer, a STAND-IN said so in every decision; it reads the previous summary
and the forgotten events (``max_event_length``'s cut of each event is not applied).
"""

from __future__ import annotations

from ctxcore.errors import InputError
from ctxcore.knobs import preset_defaults, refused
from ctxcore.models import CapturedInput, Config
from ctxcore.pipeline.agent_policies import Summarizing, llm_summarizing
from ctxcore.pipeline.agent_presets import events_outcome, resolve_knobs
from ctxcore.pipeline.common import Summarizer
from ctxcore.pipeline.langchain_build import Built, runner
from ctxcore.summarize import default_summarizer
from ctxcore.tokens import TokenCounter

NAME = "openhands-summarizing"
VERSION = "OpenHands@156d0686"

DEFAULTS: dict[str, object] = preset_defaults(NAME)
UNSUPPORTED = refused(NAME)


def resolve(config: Config, input: CapturedInput) -> Config:
    """Fill every unset knob; refuse the others and what the condenser refuses (keep_first
    at least half of max_size), and a tail of no event (``max_size // 2 - keep_first - 1``
    of 0, where the source's slice would forget nothing and fail)."""
    del input
    cfg = resolve_knobs(NAME, config, DEFAULTS, UNSUPPORTED)
    spec = spec_of(cfg)
    if spec.keep_first >= spec.max_size // 2:
        raise InputError(
            f"preset {NAME}: keep_first ({spec.keep_first}) must be less than half of "
            f"max_size ({spec.max_size}), as LLMSummarizingCondenser requires"
        )
    if spec.max_size // 2 - spec.keep_first - 1 < 1:
        raise InputError(
            f"preset {NAME}: max_size // 2 - keep_first - 1 must be at least 1 (the events "
            f"kept from the tail); raise max_size ({spec.max_size}) or lower keep_first "
            f"({spec.keep_first})"
        )
    return cfg


def spec_of(config: Config) -> Summarizing:
    assert config.max_size is not None and config.keep_first is not None
    return Summarizing(config.max_size, config.keep_first)


def outcome(
    input: CapturedInput,
    config: Config,
    counter: TokenCounter,
    summarizer: Summarizer | None = None,
) -> Built:
    """What ``run`` sends, before it is counted and reported."""
    del counter
    spec = spec_of(config)
    write = summarizer or default_summarizer()
    return events_outcome(input, lambda e: llm_summarizing(e, spec, write), spec.label)


run = runner(outcome, "The recorded request with its forgotten events summarized by the stand-in.")

__all__ = ["NAME", "VERSION", "outcome", "resolve", "run", "spec_of"]
