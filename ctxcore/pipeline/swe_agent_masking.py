"""The ``swe-agent-masking`` preset: SWE-agent's ``LastNObservations`` history processor on
the recorded request (docs/design.md, "Presets", "swe-agent-masking").

Source: ``SWE-agent/SWE-agent`` at ``3ea751c087f32b16e039a2233dd6eefecef325d5``,
``sweagent/agent/history_processors.py`` (``LastNObservations``: ``n``, ``polling``). Every
observation but the instance template (the task) and the last ``n`` (between ``n`` and
``n + polling - 1`` with ``polling``) has its text replaced by ``Old environment output: (K
lines omitted)``, K its line count. The source has no default ``n``; 10 is the setting of
the Complexity Trap paper (arXiv 2508.21433, ``config/default_no_demo_N=1_M=10.yaml``). The
tags that force an observation in or out (``always_keep_output_for_tags``,
``always_remove_output_for_tags``) have no recorded counterpart.
"""

from __future__ import annotations

from ctxcore.errors import InputError
from ctxcore.knobs import preset_defaults, refused
from ctxcore.models import CapturedInput, Config
from ctxcore.pipeline.agent_policies import LastN, last_n_observations
from ctxcore.pipeline.agent_presets import messages_outcome, resolve_knobs
from ctxcore.pipeline.common import Summarizer
from ctxcore.pipeline.langchain_build import Built, runner
from ctxcore.tokens import TokenCounter

NAME = "swe-agent-masking"
VERSION = "SWE-agent@3ea751c0"

DEFAULTS: dict[str, object] = preset_defaults(NAME)
UNSUPPORTED = refused(NAME)


def resolve(config: Config, input: CapturedInput) -> Config:
    """Fill every unset knob; refuse the others (``n`` and ``polling`` are positive, as
    ``LastNObservations`` validates them)."""
    del input
    cfg = resolve_knobs(NAME, config, DEFAULTS, UNSUPPORTED)
    for knob in ("n", "polling"):
        if (getattr(cfg, knob) or 0) <= 0:
            raise InputError(f"preset {NAME}: {knob} must be a positive integer")
    return cfg


def spec_of(config: Config) -> LastN:
    assert config.n is not None and config.polling is not None
    return LastN(config.n, config.polling)


def outcome(
    input: CapturedInput,
    config: Config,
    counter: TokenCounter,
    summarizer: Summarizer | None = None,
) -> Built:
    """What ``run`` sends, before it is counted and reported."""
    del counter, summarizer
    spec = spec_of(config)
    return messages_outcome(input, lambda m: last_n_observations(m, spec), spec.label)


run = runner(outcome, "The recorded request with the observations before the last ``n`` elided.")

__all__ = ["NAME", "VERSION", "outcome", "resolve", "run", "spec_of"]
