"""The ``openhands-conversation-window`` preset: OpenHands' ``ConversationWindowCondenser``
on the recorded request (docs/design.md, "Presets", "openhands-conversation-window").

Source: ``All-Hands-AI/OpenHands`` at ``156d0686c46aafb0fa9d291da6421fb6f64dddc0``,
``openhands/memory/condenser/impl/conversation_window_condenser.py``. The condenser has no
parameter: it acts on a condensation request, which OpenHands raises when the provider
refuses a request as longer than the model's window. Here that is a request (counted as the
recorded preset counts it) over ``max_tokens``, the window less the output reserve by
default. It then keeps the essential events (the system prompt, the first user message) and
roughly the later half of the others, dropping the observations that would lead that half
without their action. Each turn is judged on its own request.
"""

from __future__ import annotations

from ctxcore.knobs import preset_defaults, refused
from ctxcore.models import CapturedInput, Config
from ctxcore.pipeline.agent_policies import conversation_window
from ctxcore.pipeline.agent_presets import events_outcome, resolve_knobs
from ctxcore.pipeline.common import Summarizer
from ctxcore.pipeline.langchain_build import Built, runner
from ctxcore.pipeline.recorded import conversation, derive_result
from ctxcore.tokens import TokenCounter

NAME = "openhands-conversation-window"
VERSION = "OpenHands@156d0686"
DEFAULT_WINDOW = 8000

DEFAULTS: dict[str, object] = preset_defaults(NAME)
UNSUPPORTED = refused(NAME)


def resolve(config: Config, input: CapturedInput) -> Config:
    """Fill every unset knob (``max_tokens``: the window less the output reserve); refuse the
    others."""
    cfg = resolve_knobs(NAME, config, DEFAULTS, UNSUPPORTED)
    if cfg.max_tokens is None:
        window = input.window or DEFAULT_WINDOW
        cfg = cfg.model_copy(update={"max_tokens": max(window - (input.output_reserve or 0), 1)})
    return cfg


def outcome(
    input: CapturedInput,
    config: Config,
    counter: TokenCounter,
    summarizer: Summarizer | None = None,
) -> Built:
    """What ``run`` sends, before it is counted and reported."""
    del summarizer
    limit = config.max_tokens
    assert limit is not None
    used = derive_result(input, conversation(input).messages(), counter).totals.used
    over = used > limit
    why = (
        f"the request's {used:,} tokens are over max_tokens={limit:,} (the provider's "
        "context-length error requests a condensation)"
        if over
        else f"the request's {used:,} tokens fit max_tokens={limit:,}: no condensation requested"
    )
    return events_outcome(
        input,
        lambda e: conversation_window(e, over, why),
        f"ConversationWindowCondenser (max_tokens={limit:,})",
    )


run = runner(outcome, "The recorded request, halved when it is over ``max_tokens``.")

__all__ = ["NAME", "VERSION", "outcome", "resolve", "run"]
