"""The ``ctxscope`` preset's config resolved (``resolve``) without its stages.

Resolving a config reads the knobs' declarations only; the stages (``pipeline/ctxscope.py``
and what it imports: numpy, gather, select, degrade) are ~0.2 s of imports that an importer,
which resolves each call's config and never runs the preset, does not need
(docs/design.md, "Capture, import, export, redaction"). ``pipeline.ctxscope`` re-exports
all of it.
"""

from __future__ import annotations

from ctxcore.errors import InputError
from ctxcore.knobs import number, preset_defaults, refused, shares
from ctxcore.models import PARTITIONS, CapturedInput, Config
from ctxcore.tokens import TOKENIZERS

#: the degradation ladder's steps, in order (``pipeline.select`` applies them)
RUNGS: tuple[str, ...] = ("noise", "history", "tool_results", "files", "repo_map", "recent")

NAME = "ctxscope"
VERSION = "1.0.0"

DEFAULT_WINDOW = 8000
#: the fixed defaults, declared with each knob (docs/design.md, "Knobs"); ``resolve`` derives
#: ``max_tokens``, ``output_reserve``, ``safety_margin`` and ``degrade``
DEFAULTS: dict[str, object] = preset_defaults(NAME)
#: caps as a share of the available budget; they may sum to more than 1 (caps, not slices)
DEFAULT_PARTITION_BUDGETS: dict[str, float] = shares("partition_budgets", NAME)
DEFAULT_DEGRADE: list[str] = list(RUNGS)


def resolve(config: Config, input: CapturedInput) -> Config:
    """Fill every ``None`` knob with the ctxscope default; reject impossible values."""
    given = [k for k in refused(NAME) if getattr(config, k) is not None]
    if given:
        raise InputError(f"preset {NAME} has no {', '.join(given)} (another preset's knobs)")
    upd: dict[str, object] = {k: v for k, v in DEFAULTS.items() if getattr(config, k) is None}
    tokenizer = config.tokenizer or str(DEFAULTS["tokenizer"])
    if tokenizer not in TOKENIZERS:
        raise InputError(
            f"config.tokenizer: unknown tokenizer {tokenizer!r}; choose one of "
            f"{', '.join(TOKENIZERS)}"
        )
    max_tokens = config.max_tokens or input.window or DEFAULT_WINDOW
    upd["max_tokens"] = max_tokens
    ratio = (
        config.reserve_ratio if config.reserve_ratio is not None else number("reserve_ratio", NAME)
    )
    if config.output_reserve is None:
        upd["output_reserve"] = (
            input.output_reserve if input.output_reserve is not None else round(ratio * max_tokens)
        )
    if config.safety_margin is None:
        upd["safety_margin"] = round(0.02 * max_tokens)
    reserve = int(
        config.output_reserve if config.output_reserve is not None else upd["output_reserve"]
    )  # type: ignore[call-overload]
    safety = int(config.safety_margin if config.safety_margin is not None else upd["safety_margin"])  # type: ignore[call-overload]
    if reserve >= max_tokens:
        raise InputError(
            f"config.output_reserve {reserve} is not below max_tokens {max_tokens}; "
            "lower output_reserve (or reserve_ratio) or raise max_tokens"
        )
    if max_tokens - reserve - safety <= 0:
        raise InputError(
            f"config.safety_margin: max_tokens {max_tokens} − output_reserve {reserve} − "
            f"safety_margin {safety} leaves no room for the context; lower them"
        )
    budgets = dict(DEFAULT_PARTITION_BUDGETS)
    if config.partition_budgets is not None:
        budgets.update(config.partition_budgets)
    upd["partition_budgets"] = {p: budgets[p] for p in PARTITIONS}
    degrade = config.degrade if config.degrade is not None else DEFAULT_DEGRADE
    for rung in degrade:
        if rung not in RUNGS:
            raise InputError(
                f"config.degrade: unknown step {rung!r}; the ladder's steps are {', '.join(RUNGS)}"
            )
    if len(set(degrade)) != len(degrade):
        raise InputError("config.degrade: a step is listed twice; list each step once")
    upd["degrade"] = list(degrade)
    return config.model_copy(update=upd)


__all__ = [
    "DEFAULTS",
    "DEFAULT_DEGRADE",
    "DEFAULT_PARTITION_BUDGETS",
    "DEFAULT_WINDOW",
    "NAME",
    "RUNGS",
    "VERSION",
    "resolve",
]
