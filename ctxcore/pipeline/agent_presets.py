"""What the SWE-agent and OpenHands presets share (docs/design.md, "Presets", "Agent
policies"): their knobs checked, the recorded request handed to a policy of
``pipeline/agent_policies.py`` as messages (SWE-agent: the system prompt apart) or as events
(OpenHands: the system prompt the first event), and the policy's fates turned into the build
result every recorded-based preset returns (``langchain_build.result``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ctxcore.errors import InputError
from ctxcore.knobs import honoured
from ctxcore.models import CapturedInput, Config
from ctxcore.pipeline.langchain_build import Built, Outcome
from ctxcore.pipeline.langchain_policies import ChatMsg, Fate, recorded_messages
from ctxcore.pipeline.recorded import conversation, with_tokenizer

Policy = Callable[[list[ChatMsg]], tuple[list[ChatMsg], dict[int, Fate]]]


def resolve_knobs(
    preset: str, config: Config, defaults: dict[str, object], unsupported: Sequence[str]
) -> Config:
    """``config`` with every unset knob at the preset's default; a knob the preset does not
    have is an error naming it and the knobs it takes."""
    given = [k for k in unsupported if getattr(config, k) is not None]
    if given:
        raise InputError(
            f"preset {preset} has no {', '.join(given)} (it runs the agent's policy with its "
            f"own parameters); the knobs it takes: {', '.join(honoured(preset))}"
        )
    return with_tokenizer(config, defaults)


def messages_outcome(input: CapturedInput, policy: Policy, name: str) -> Built:
    """What a SWE-agent policy sends on the recorded conversation (the system prompt is sent
    as recorded: SWE-agent's processors never touch it)."""
    conv = conversation(input)
    system, rest = recorded_messages(conv)
    out, fates = policy(rest)
    by_part = {rest[k].source: f for k, f in fates.items() if rest[k].source is not None}
    head = [system] if system is not None else []
    return conv, Outcome(head + out, by_part, name)  # type: ignore[arg-type]


def events_outcome(input: CapturedInput, policy: Policy, name: str) -> Built:
    """What an OpenHands condenser sends on the recorded request as its events: the system
    prompt (a ``SystemMessageAction``) first, then every message."""
    conv = conversation(input)
    system, rest = recorded_messages(conv)
    events = ([system] if system is not None else []) + rest
    out, fates = policy(events)
    by_part: dict[int, Fate] = {}
    system_fate = None
    for k, fate in fates.items():
        source = events[k].source
        if source is not None:
            by_part[source] = fate
        elif system is not None and k == 0:
            system_fate = fate
    return conv, Outcome(out, by_part, name, system_fate)


__all__ = [
    "Policy",
    "events_outcome",
    "messages_outcome",
    "resolve_knobs",
]
