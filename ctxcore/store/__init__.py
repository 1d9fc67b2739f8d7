"""The store: the one DuckDB file, its migrations, ingest of trace files and the watcher.

``TraceStore`` (``tracestore``) owns the connection and every SQL statement; ``rows`` turns
validated traces into the Arrow rows it inserts; ``ingest`` reads trace files into it through
its bulk writer (``readers`` finds the files and their new lines, ``workers`` parses them,
in worker processes for big runs); ``watch`` runs ingest on a folder's changes. See
docs/design.md, "Store".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxcore.store.tracestore import TraceFilter, TraceStore


def __getattr__(name: str) -> Any:
    # on first use: a process that only reads trace JSON with ``fastdecode`` (a replay
    # worker) does not load DuckDB and Arrow (40 MB each)
    if name in __all__:
        from ctxcore.store import tracestore

        return getattr(tracestore, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["TraceFilter", "TraceStore"]
