"""Replay: re-run recorded builds with other settings and report what would change, turn by turn.

Tuning on one turn is half the job: a change that rescues turn 15 may starve turns 30–40.
``replay(traces, settings, against=None)`` rebuilds every trace's captured input with the
recorded config patched by ``settings`` (and, with ``against``, by a second patch instead of
the recorded config) and compares the two sides per turn: tokens used and budget, the
packets whose fate flipped, the findings added and cleared; then over all turns: tokens saved
or spent, the turns where a must-keep packet or error evidence was lost, the first turn each
item was lost on either side, findings by detector. ``ctxcore.testing.assert_no_new_losses``
and ``ctxscope replay --fail-on`` judge the report.

A variant is a new trace (its own id, ``source_trace_id`` = the recorded one, tagged
``replay``); recorded traces are never changed. This package sits with ``testing`` (core,
pipeline, diagnostics; docs/design.md, "Parts and allowed imports"): the caller reads the
store and passes traces in, and worker processes get traces, never the store (DuckDB lets one
process at a time write a file).

The modules: ``report`` (what a replay reports), ``variants`` (the rebuilt traces),
``compare`` (the two sides of a turn), ``stored`` (stored JSON read where it is replayed),
``jobs`` (one session's replay), ``run`` (``replay``, ``replay_sessions``: sessions over worker
processes), ``pool`` and ``preload`` (the worker processes; the standard library only). Every
public name is imported from its module on first use, so ``ctxcore.replay.pool`` can start
the workers' server before anything heavy is imported (docs/design.md, "Diagnostics").
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxcore.replay.jobs import RECORDED_FINDINGS
    from ctxcore.replay.pool import default_workers
    from ctxcore.replay.report import (
        CHANGED_MEANS,
        FIRST_LOST_MEANS,
        LOSS_SEVERITIES,
        FirstLoss,
        Flip,
        ReplayReport,
        TurnError,
        TurnReport,
    )
    from ctxcore.replay.run import POOL_MIN_TRACES, replay, replay_sessions
    from ctxcore.replay.stored import TraceJson
    from ctxcore.replay.variants import (
        INPUT_FACTS,
        REPLAY_TAG,
        settings_label,
        variant,
        variant_id,
    )

#: every public name and the module that defines it, imported on first use
_LAZY = {
    **dict.fromkeys(
        (
            "CHANGED_MEANS",
            "FIRST_LOST_MEANS",
            "LOSS_SEVERITIES",
            "FirstLoss",
            "Flip",
            "ReplayReport",
            "TurnError",
            "TurnReport",
        ),
        "ctxcore.replay.report",
    ),
    **dict.fromkeys(
        ("INPUT_FACTS", "REPLAY_TAG", "settings_label", "variant", "variant_id"),
        "ctxcore.replay.variants",
    ),
    **dict.fromkeys(("POOL_MIN_TRACES", "replay", "replay_sessions"), "ctxcore.replay.run"),
    "RECORDED_FINDINGS": "ctxcore.replay.jobs",
    "TraceJson": "ctxcore.replay.stored",
    "default_workers": "ctxcore.replay.pool",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ctxcore.replay' has no attribute {name!r}")


__all__ = [
    "CHANGED_MEANS",
    "FIRST_LOST_MEANS",
    "INPUT_FACTS",
    "LOSS_SEVERITIES",
    "POOL_MIN_TRACES",
    "RECORDED_FINDINGS",
    "REPLAY_TAG",
    "FirstLoss",
    "Flip",
    "ReplayReport",
    "TraceJson",
    "TurnError",
    "TurnReport",
    "default_workers",
    "replay",
    "replay_sessions",
    "settings_label",
    "variant",
    "variant_id",
]
