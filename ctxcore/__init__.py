"""ctxcore: the library behind ctxscope.

The trace contract (``ctxscope.trace/1``), exact token counting, the GSSC pipeline with its
three presets, replay of recorded sessions with new settings, diagnostics, the DuckDB trace
store, capture, import and export. ctxcore never imports Streamlit. Heavier parts (the store,
capture, diagnostics, sweep) load on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

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
from ctxcore.replay import ReplayReport, replay
from ctxcore.tokens import TokenCounter, get_counter

__version__ = "0.1.0"

_LAZY = {
    "Recorder": "ctxcore.capture.recorder",
    "TraceFilter": "ctxcore.store",
    "TraceStore": "ctxcore.store",
    "diagnose": "ctxcore.diagnostics",
    "diagnose_session": "ctxcore.diagnostics",
    "ingest_paths": "ctxcore.store.ingest",
    "sweep": "ctxcore.pipeline.sweep",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
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
    "replay",
    "resolve_config",
    "sweep",
]
