"""The store: the one DuckDB file, its migrations, ingest of trace files and the watcher.

``TraceStore`` (``tracestore``) owns the connection and every SQL statement; ``rows`` turns
validated traces into the Arrow rows it inserts; ``ingest`` reads trace files into it through
its bulk writer (``readers`` finds the files and their new lines, ``workers`` parses them,
in worker processes for big runs); ``watch`` runs ingest on a folder's changes. See
docs/design.md, "Store".
"""

from ctxcore.store.tracestore import TraceFilter, TraceStore

__all__ = ["TraceFilter", "TraceStore"]
