"""The ``masking-summary-hybrid`` preset: the Complexity Trap's hybrid of a summary every
so many turns and observation masking, on the recorded request (docs/design.md, "Presets",
"masking-summary-hybrid").

Source: Lindenbauer et al., "The Complexity Trap" (NeurIPS 2025 DL4Code workshop, arXiv
2508.21433), whose released code is a SWE-agent fork (JetBrains Research, mirrored as
``Recursive-Safeguarding/the-complexity-trap`` at
``adfaa1a18b8b3500abb7537101b2bdcefa31f22a``): its hybrid configuration
``config/default_no_demo_checkpoint_same_model_openhands_N=43_M=10_masking_M=10.yaml`` runs
the history processors ``summarize_every_n_turns`` (``n: 43``, ``keep_last_m_turns: 10``,
``enable_static_checkpointing: true``) then ``last_n_observations`` (``n: 10``), both in
``sweagent/agent/history_processors.py``. ``SummarizeEveryNTurns`` is replayed over the
request's steps: once ``summarize_every_n_turns + keep_last_m_turns`` turns are unsummarized,
the oldest ``summarize_every_n_turns`` become one checkpoint (the previous one folded in);
then the observations before the last ``n`` are elided. The summary model is ctxscope's
deterministic summarizer, a STAND-IN said so in every decision.
"""

from __future__ import annotations

from ctxcore.errors import InputError
from ctxcore.knobs import preset_defaults, refused
from ctxcore.models import CapturedInput, Config
from ctxcore.pipeline.agent_policies import (
    EveryNTurns,
    LastN,
    last_n_observations,
    summarize_every_n_turns,
)
from ctxcore.pipeline.agent_presets import messages_outcome, resolve_knobs
from ctxcore.pipeline.common import Summarizer
from ctxcore.pipeline.langchain_build import Built, runner
from ctxcore.pipeline.langchain_policies import ChatMsg, Fate
from ctxcore.summarize import default_summarizer
from ctxcore.tokens import TokenCounter

NAME = "masking-summary-hybrid"
VERSION = "the-complexity-trap@adfaa1a1"

DEFAULTS: dict[str, object] = preset_defaults(NAME)
UNSUPPORTED = refused(NAME)


def resolve(config: Config, input: CapturedInput) -> Config:
    """Fill every unset knob; refuse the others, and what the processors refuse (n,
    polling and summarize_every_n_turns positive)."""
    del input
    cfg = resolve_knobs(NAME, config, DEFAULTS, UNSUPPORTED)
    for knob in ("n", "polling", "summarize_every_n_turns"):
        if (getattr(cfg, knob) or 0) <= 0:
            raise InputError(f"preset {NAME}: {knob} must be a positive integer")
    return cfg


def hybrid(
    messages: list[ChatMsg], every: EveryNTurns, last: LastN, summarizer: Summarizer
) -> tuple[list[ChatMsg], dict[int, Fate]]:
    """The two processors in the configuration's order, with a fate per recorded message:
    the summary's where it summarized or dropped it, else the masking's."""
    summarized, fates = summarize_every_n_turns(messages, every, summarizer)
    masked, mask_fates = last_n_observations(summarized, last)
    position = {m.source: k for k, m in enumerate(messages)}
    for k, m in enumerate(summarized):
        if m.source is None:
            continue
        at = position[m.source]
        if mask_fates[k].action != "kept":
            fates[at] = mask_fates[k]
        elif fates[at].action == "kept":
            fates[at] = Fate("kept", f"{fates[at].why}; {mask_fates[k].why}")
    return masked, fates


def outcome(
    input: CapturedInput,
    config: Config,
    counter: TokenCounter,
    summarizer: Summarizer | None = None,
) -> Built:
    """What ``run`` sends, before it is counted and reported."""
    del counter
    assert config.summarize_every_n_turns is not None and config.keep_last_m_turns is not None
    assert config.n is not None and config.polling is not None
    every = EveryNTurns(config.summarize_every_n_turns, config.keep_last_m_turns)
    last = LastN(config.n, config.polling)
    write = summarizer or default_summarizer()
    return messages_outcome(
        input, lambda m: hybrid(m, every, last, write), f"{every.label} + {last.label}"
    )


run = runner(
    outcome,
    "The recorded request with its older turns checkpointed and old observations elided.",
)

__all__ = ["NAME", "VERSION", "hybrid", "outcome", "resolve", "run"]
