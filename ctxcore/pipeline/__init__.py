"""The GSSC pipeline and its presets.

``build(input, config)`` runs one preset over a captured input and returns a
``BuildResult`` with a decision for every candidate. Each preset module exposes the same
two functions:

- ``resolve(config, input) -> Config``: fill every ``None`` knob with the preset default
  and validate preset-specific rules (e.g. weights that must sum to 1);
- ``run(input, config, counter, summarizer) -> BuildResult``: the stages
  (gather → score → select → degrade → structure → compress → report), each a pure function.

Same input + same config + same tokenizer ⇒ byte-identical result (``timings`` aside).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from datetime import datetime
from importlib import import_module
from typing import Any, Protocol, cast

from ctxcore.knobs import honoured
from ctxcore.models import SCHEMA, Builder, BuildResult, CapturedInput, Config, Trace
from ctxcore.pipeline.common import RunFn, Summarizer
from ctxcore.settings import PRESET_NAMES
from ctxcore.tokens import TokenCounter, get_counter

_MODULES = {
    "ctxscope": "ctxcore.pipeline.ctxscope",
    "hello-agents": "ctxcore.pipeline.hello_agents",
    "hello-agents-book": "ctxcore.pipeline.hello_agents_book",
    "recorded": "ctxcore.pipeline.recorded",
    "langchain-context-editing": "ctxcore.pipeline.langchain_context_editing",
    "langchain-summarization": "ctxcore.pipeline.langchain_summarization",
    "langchain-trim": "ctxcore.pipeline.langchain_trim",
    "swe-agent-masking": "ctxcore.pipeline.swe_agent_masking",
    "openhands-observation-masking": "ctxcore.pipeline.openhands_observation_masking",
    "openhands-recent-events": "ctxcore.pipeline.openhands_recent_events",
    "openhands-conversation-window": "ctxcore.pipeline.openhands_conversation_window",
    "openhands-summarizing": "ctxcore.pipeline.openhands_summarizing",
    "masking-summary-hybrid": "ctxcore.pipeline.masking_summary_hybrid",
    "anthropic-context-editing": "ctxcore.pipeline.anthropic_context_editing",
    "auto-compact": "ctxcore.pipeline.auto_compact",
}


class PresetModule(Protocol):
    NAME: str
    VERSION: str

    run: RunFn

    def resolve(self, config: Config, input: CapturedInput) -> Config: ...


#: The facts of the captured input a preset reads besides its content (``--set window=N`` and
#: ``output_reserve=N`` change the input): the hello-agents packages size the prompt from
#: their own ``max_tokens`` and ``reserve_ratio`` alone.
_READS_INPUT: dict[str, tuple[str, ...]] = {
    "ctxscope": ("window", "output_reserve"),
    "hello-agents": (),
    "hello-agents-book": (),
    "recorded": ("window", "output_reserve"),
    "langchain-context-editing": ("window", "output_reserve"),
    "langchain-summarization": ("window", "output_reserve"),
    "langchain-trim": ("window", "output_reserve"),
    "swe-agent-masking": ("window", "output_reserve"),
    "openhands-observation-masking": ("window", "output_reserve"),
    "openhands-recent-events": ("window", "output_reserve"),
    "openhands-conversation-window": ("window", "output_reserve"),
    "openhands-summarizing": ("window", "output_reserve"),
    "masking-summary-hybrid": ("window", "output_reserve"),
    "anthropic-context-editing": ("window", "output_reserve"),
    "auto-compact": ("window", "output_reserve"),
}


def preset(name: str) -> PresetModule:
    from ctxcore.errors import InputError

    if name not in _MODULES:
        raise InputError(f"unknown preset {name!r}; choose one of {', '.join(PRESET_NAMES)}")
    return cast(PresetModule, import_module(_MODULES[name]))


def knobs(name: str) -> list[str]:
    """The config knobs preset ``name`` takes, in the order of ``ctxcore.knobs`` (it refuses
    the others)."""
    preset(name)  # an unknown preset is an error naming the presets
    return honoured(name)


def check_input_facts(name: str, facts: Iterable[str], where: str) -> None:
    """Refuse a change of the input's ``window``/``output_reserve`` preset ``name`` never
    reads: taken, it would change nothing, and the user would think it had."""
    from ctxcore.errors import InputError

    ignored = [f for f in facts if f not in _READS_INPUT[name]]
    if ignored:
        raise InputError(
            f"{where}: preset {name} does not read {' or '.join(ignored)} (it would be "
            f"ignored); the knobs it takes: {', '.join(knobs(name))}"
        )


def resolve_config(config: Config | None, input: CapturedInput) -> Config:
    config = config or Config()
    return preset(config.preset).resolve(config, input)


def build(
    input: CapturedInput,
    config: Config | None = None,
    *,
    summarizer: Summarizer | None = None,
    counter: TokenCounter | None = None,
) -> BuildResult:
    """Run the configured preset on ``input``."""
    cfg = resolve_config(config, input)
    mod = preset(cfg.preset)
    assert cfg.tokenizer is not None
    return mod.run(input, cfg, counter or get_counter(cfg.tokenizer), summarizer)


def build_trace(
    input: CapturedInput,
    config: Config | None = None,
    *,
    trace_id: str | None = None,
    session_id: str = "default",
    turn: int = 0,
    created_at: datetime | None = None,
    tags: list[str] | None = None,
    metadata: dict[str, Any] | None = None,
    source_trace_id: str | None = None,
    summarizer: Summarizer | None = None,
    id_factory: Callable[[], str] = lambda: uuid.uuid4().hex,
) -> Trace:
    """Build and wrap the result in a ``ctxscope.trace/1`` trace."""
    cfg = resolve_config(config, input)
    result = build(input, cfg, summarizer=summarizer)
    mod = preset(cfg.preset)
    return Trace(
        schema_=SCHEMA,
        trace_id=trace_id or id_factory(),
        session_id=session_id,
        turn=turn,
        created_at=created_at or input.now,
        builder=Builder(name=f"ctxcore/{mod.NAME}", version=mod.VERSION),
        tags=tags or [],
        metadata=metadata or {},
        source_trace_id=source_trace_id,
        input=input,
        config=cfg,
        result=result,
    )


__all__ = ["PRESET_NAMES", "build", "build_trace", "preset", "resolve_config"]
