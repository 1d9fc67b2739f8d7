"""The ``openhands-observation-masking`` preset: OpenHands' ``ObservationMaskingCondenser``
on the recorded request (docs/design.md, "Presets", "openhands-observation-masking").

Source: ``All-Hands-AI/OpenHands`` at ``156d0686c46aafb0fa9d291da6421fb6f64dddc0``,
``openhands/memory/condenser/impl/observation_masking_condenser.py``; the default
``attention_window`` is ``ObservationMaskingCondenserConfig``'s, 100
(``openhands/core/config/condenser_config.py``; the class itself defaults to 5). The request
is a list of events, the system prompt first; every observation (a tool result) more than
``attention_window`` events from the end becomes ``<MASKED>``. OpenHands sends the masked
event as a condensation observation; here it stays the tool result of its call, so the call
keeps its answer.
"""

from __future__ import annotations

from ctxcore.knobs import preset_defaults, refused
from ctxcore.models import CapturedInput, Config
from ctxcore.pipeline.agent_policies import observation_masking
from ctxcore.pipeline.agent_presets import events_outcome, resolve_knobs
from ctxcore.pipeline.common import Summarizer
from ctxcore.pipeline.langchain_build import Built, runner
from ctxcore.tokens import TokenCounter

NAME = "openhands-observation-masking"
VERSION = "OpenHands@156d0686"

DEFAULTS: dict[str, object] = preset_defaults(NAME)
UNSUPPORTED = refused(NAME)


def resolve(config: Config, input: CapturedInput) -> Config:
    """Fill every unset knob; refuse the others."""
    del input
    return resolve_knobs(NAME, config, DEFAULTS, UNSUPPORTED)


def outcome(
    input: CapturedInput,
    config: Config,
    counter: TokenCounter,
    summarizer: Summarizer | None = None,
) -> Built:
    """What ``run`` sends, before it is counted and reported."""
    del counter, summarizer
    window = config.attention_window
    assert window is not None
    label = f"ObservationMaskingCondenser(attention_window={window})"
    return events_outcome(input, lambda e: observation_masking(e, window), label)


run = runner(
    outcome,
    "The recorded request with the observations outside the attention window masked.",
)

__all__ = ["NAME", "VERSION", "outcome", "resolve", "run"]
