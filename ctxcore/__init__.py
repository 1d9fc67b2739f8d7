"""ctxcore: the library behind ctxscope.

The trace contract (``ctxscope.trace/1``), exact token counting, the GSSC pipeline with its
presets, replay of recorded sessions with new settings, diagnostics, the DuckDB trace
store, capture, import and export. ctxcore never imports Streamlit. Every public name loads on
first use.

``ctxcore.replay`` is the replay package (``ctxcore/replay/``), not a function: a package and a
function cannot share a name (importing the package binds it on the root), so the function is
``ctxcore.replay.replay`` (docs/design.md, "Parts and allowed imports").
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxcore.capture.recorder import Recorder
    from ctxcore.diagnostics import diagnose, diagnose_session
    from ctxcore.errors import (
        BudgetError,
        CtxscopeError,
        ImportFormatError,
        InputError,
        StoreError,
        StoreLockedError,
        TokenizerError,
    )
    from ctxcore.models import (
        SCHEMA,
        BuildResult,
        CapturedInput,
        Config,
        Decision,
        Finding,
        Message,
        Packet,
        Reason,
        Status,
        ToolDef,
        Trace,
    )
    from ctxcore.pipeline import PRESET_NAMES, build, build_trace, resolve_config
    from ctxcore.pipeline.sweep import sweep
    from ctxcore.replay.report import ReplayReport
    from ctxcore.store import Store, TraceFilter, TraceStore, open_store
    from ctxcore.store.ingest import ingest_paths
    from ctxcore.tokens import TokenCounter, get_counter

__version__ = "0.1.0"

#: every public name and the module that defines it, imported on first use: ``import
#: ctxcore`` (and every ``ctxscope`` command, which imports ``ctxcore.cli``) costs almost
#: nothing until a name is read
_LAZY = {
    **dict.fromkeys(
        (
            "BudgetError",
            "CtxscopeError",
            "ImportFormatError",
            "InputError",
            "StoreError",
            "StoreLockedError",
            "TokenizerError",
        ),
        "ctxcore.errors",
    ),
    **dict.fromkeys(
        (
            "SCHEMA",
            "BuildResult",
            "CapturedInput",
            "Config",
            "Decision",
            "Finding",
            "Message",
            "Packet",
            "Reason",
            "Status",
            "ToolDef",
            "Trace",
        ),
        "ctxcore.models",
    ),
    **dict.fromkeys(("PRESET_NAMES", "build", "build_trace", "resolve_config"), "ctxcore.pipeline"),
    "ReplayReport": "ctxcore.replay.report",
    **dict.fromkeys(("TokenCounter", "get_counter"), "ctxcore.tokens"),
    "Recorder": "ctxcore.capture.recorder",
    "Store": "ctxcore.store",
    "TraceFilter": "ctxcore.store",
    "TraceStore": "ctxcore.store",
    "open_store": "ctxcore.store",
    "diagnose": "ctxcore.diagnostics",
    "diagnose_session": "ctxcore.diagnostics",
    "ingest_paths": "ctxcore.store.ingest",
    "sweep": "ctxcore.pipeline.sweep",
}
#: public subpackages, imported on first use as the names above
_SUBPACKAGES = frozenset({"replay"})


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name in _SUBPACKAGES:
        return import_module(f"ctxcore.{name}")  # which binds it here
    raise AttributeError(f"module 'ctxcore' has no attribute {name!r}")


__all__ = [
    "PRESET_NAMES",
    "SCHEMA",
    "BudgetError",
    "BuildResult",
    "CapturedInput",
    "Config",
    "CtxscopeError",
    "Decision",
    "Finding",
    "ImportFormatError",
    "InputError",
    "Message",
    "Packet",
    "Reason",
    "Recorder",
    "ReplayReport",
    "Status",
    "Store",
    "StoreError",
    "StoreLockedError",
    "TokenCounter",
    "TokenizerError",
    "ToolDef",
    "Trace",
    "TraceFilter",
    "TraceStore",
    "build",
    "build_trace",
    "diagnose",
    "diagnose_session",
    "get_counter",
    "ingest_paths",
    "open_store",
    "replay",
    "resolve_config",
    "sweep",
]
