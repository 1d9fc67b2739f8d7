"""The ``openhands-recent-events`` preset: OpenHands' ``RecentEventsCondenser`` on the
recorded request (docs/design.md, "Presets", "openhands-recent-events").

Source: ``All-Hands-AI/OpenHands`` at ``156d0686c46aafb0fa9d291da6421fb6f64dddc0``,
``openhands/memory/condenser/impl/recent_events_condenser.py``; the defaults are
``RecentEventsCondenserConfig``'s (``keep_first`` 1, ``max_events`` 100; the class itself
defaults ``max_events`` to 10). The request is a list of events, the system prompt first:
the first ``keep_first`` events and the most recent ones, ``max_events`` in all, are sent,
the others dropped. Each kept event is sent once: the source's slices repeat the head when
the view holds fewer than ``max_events`` events.
"""

from __future__ import annotations

from ctxcore.knobs import preset_defaults, refused
from ctxcore.models import CapturedInput, Config
from ctxcore.pipeline.agent_policies import recent_events
from ctxcore.pipeline.agent_presets import events_outcome, resolve_knobs
from ctxcore.pipeline.common import Summarizer
from ctxcore.pipeline.langchain_build import Built, runner
from ctxcore.tokens import TokenCounter

NAME = "openhands-recent-events"
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
    first, most = config.keep_first, config.max_events
    assert first is not None and most is not None
    label = f"RecentEventsCondenser(keep_first={first}, max_events={most})"
    return events_outcome(input, lambda e: recent_events(e, first, most), label)


run = runner(outcome, "The recorded request cut to its first and most recent events.")

__all__ = ["NAME", "VERSION", "outcome", "resolve", "run"]
