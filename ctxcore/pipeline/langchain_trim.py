"""The ``langchain-trim`` preset: ``langchain_core.messages.trim_messages`` on the recorded
request (docs/design.md, "Presets", "langchain-trim").

Source: ``langchain-core==1.8.3``, ``langchain_core/messages/utils.py`` (``trim_messages``,
``_first_max_tokens``, ``_last_max_tokens``). The messages are the whole request, the system
prompt first, as a LangChain app passes them: ``strategy`` last keeps the newest messages
within ``max_tokens`` (the system prompt too with ``include_system``), first the oldest;
``allow_partial`` cuts the message that does not fit to the lines that do; ``start_on`` and
``end_on`` drop messages until the kept run starts or ends on that type. ``token_counter``
is the shared counter (``MessageCounter`` with the tokenizer knob's encoding) or ``len``.
``max_tokens`` defaults to the input's window less its output reserve (LangChain has no
default), so by default a request that fitted is sent whole.
"""

from __future__ import annotations

from typing import Literal, cast

from ctxcore.errors import InputError
from ctxcore.knobs import preset_defaults, refused
from ctxcore.models import CapturedInput, Config
from ctxcore.pipeline.common import INSTRUCTIONS_ID, Summarizer
from ctxcore.pipeline.langchain_build import Built, Outcome, runner
from ctxcore.pipeline.langchain_policies import (
    Fate,
    MessageCounter,
    Trim,
    recorded_messages,
    refuse_unsupported,
    trim,
    trim_fates,
)
from ctxcore.pipeline.recorded import conversation, with_tokenizer
from ctxcore.tokens import TokenCounter

NAME = "langchain-trim"
VERSION = "langchain-core==1.8.3"
POLICY = "trim_messages"
DEFAULT_WINDOW = 8000

DEFAULTS: dict[str, object] = preset_defaults(NAME)
UNSUPPORTED = refused(NAME)


def resolve(config: Config, input: CapturedInput) -> Config:
    """Fill every unset knob (``max_tokens``: the window less the output reserve); refuse
    the others, and what ``trim_messages`` refuses: start_on or include_system with
    strategy first."""
    refuse_unsupported(NAME, config, UNSUPPORTED)
    cfg = with_tokenizer(config, DEFAULTS)
    if cfg.max_tokens is None:
        window = input.window or DEFAULT_WINDOW
        cfg = cfg.model_copy(update={"max_tokens": max(window - (input.output_reserve or 0), 1)})
    if cfg.strategy == "first":
        for knob, off in (("start_on", "none"), ("include_system", False)):
            if getattr(cfg, knob) != off:
                raise InputError(
                    f"preset {NAME}: {knob} is only valid with strategy last (trim_messages "
                    "refuses it with strategy first)"
                )
    return cfg


def spec_of(config: Config) -> Trim:
    """The ``trim_messages`` call a resolved config describes."""
    assert config.max_tokens is not None
    return Trim(
        max_tokens=config.max_tokens,
        strategy=cast(Literal["first", "last"], config.strategy),
        allow_partial=bool(config.allow_partial),
        end_on=None if config.end_on in (None, "none") else config.end_on,
        start_on=None if config.start_on in (None, "none") else config.start_on,
        include_system=bool(config.include_system),
    )


def outcome(
    input: CapturedInput,
    config: Config,
    counter: TokenCounter,
    summarizer: Summarizer | None = None,
) -> Built:
    """What ``run`` sends, before it is counted and reported."""
    del summarizer
    conv = conversation(input)
    system, rest = recorded_messages(conv)
    given = ([system] if system is not None else []) + rest
    spec = spec_of(config)
    count = MessageCounter(None if config.token_counter == "len" else counter)
    kept = trim(given, spec, count)
    fates = trim_fates(given, kept, spec, count, count.name)
    by_part: dict[int, Fate] = {}
    system_fate = None
    for k, fate in fates.items():
        source = given[k].source
        if source is not None:
            by_part[source] = fate
        elif given[k].id == INSTRUCTIONS_ID:
            system_fate = fate
    return conv, Outcome(kept, by_part, POLICY, system_fate)


run = runner(outcome, "The recorded request trimmed.")

__all__ = ["NAME", "VERSION", "outcome", "resolve", "run", "spec_of"]
