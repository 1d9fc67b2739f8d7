"""The store: traces behind one interface, its engines, ingest of trace files and the watcher.

``Store`` and ``BulkWriter`` (``protocol``) are the interface the app, the command line,
ingest, the watcher and replay use; ``open_store`` / ``read_store`` (``engines``) open the
store a ``--db`` value names with its engine. The DuckDB engine is ``TraceStore``
(``tracestore``, on ``duck``'s connection, with ``inserts`` and its bulk writer ``writer``;
``reading`` reads a file another process holds, ``migrations`` holds its schema). ``rows``
turns validated traces into the Arrow rows every engine inserts; ``ingest`` reads trace files
into a store through its bulk writer (``readers`` finds the files and their new lines,
``workers`` parses them, in worker processes for big runs); ``watch`` runs ingest on a
folder's changes. See docs/design.md, "Store".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxcore.store.engines import open_store, read_store
    from ctxcore.store.protocol import BulkWriter, Store
    from ctxcore.store.records import TraceFilter
    from ctxcore.store.tracestore import TraceStore


def __getattr__(name: str) -> Any:
    # on first use: a process that only reads trace JSON with ``fastdecode`` (a replay
    # worker) does not load DuckDB and Arrow (40 MB each)
    if name in ("BulkWriter", "Store"):
        from ctxcore.store import protocol

        return getattr(protocol, name)
    if name in ("open_store", "read_store"):
        from ctxcore.store import engines

        return getattr(engines, name)
    if name == "TraceFilter":
        from ctxcore.store import records

        return records.TraceFilter
    if name == "TraceStore":
        from ctxcore.store import tracestore

        return tracestore.TraceStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BulkWriter", "Store", "TraceFilter", "TraceStore", "open_store", "read_store"]
