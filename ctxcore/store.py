"""TraceStore: the one owner of the DuckDB file and the only module with SQL.

CONTRACT STUB — the method names, arguments and return shapes below are what the app
(`app.py`, `pages/`) and the CLI code against. The implementation replaces the bodies; it
may add methods and fields but must not rename or remove these.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from .models import Trace

DEFAULT_DB = Path("traces") / "ctxscope.duckdb"

SortKey = Literal["created_at", "turn", "used", "budget", "dropped", "summarized", "session_id"]


@dataclass(frozen=True)
class TraceFilter:
    """Everything the Traces page can filter on; all optional (None = no filter)."""

    session_id: str | None = None
    preset: str | None = None
    tags: tuple[str, ...] = ()  # every tag must be present
    verdict: str | None = None  # good | bad | unknown
    since: datetime | None = None
    until: datetime | None = None
    has_warnings: bool | None = None
    lost_must_keep: bool | None = None  # a must_keep packet dropped/filtered/summarized
    search: str | None = None  # full-text over packet content
    finding: str | None = None  # a diagnostics detector id (issue 5)


@dataclass(frozen=True)
class TraceRow:
    """One row of the traces list (all real columns)."""

    trace_id: str
    session_id: str
    turn: int
    created_at: datetime
    preset: str
    builder: str
    budget: int
    used: int
    n_packets: int
    n_kept: int
    n_truncated: int
    n_summarized: int
    n_dropped: int
    n_filtered: int
    n_not_rendered: int
    n_warnings: int
    lost_must_keep: int
    verdict: str
    tags: tuple[str, ...] = ()
    source_trace_id: str | None = None


@dataclass(frozen=True)
class TracePage:
    rows: list[TraceRow]
    total: int  # rows matching the filter, across all pages
    offset: int
    limit: int


@dataclass(frozen=True)
class IngestErrorRow:
    file: str
    line: int
    message: str
    at: datetime


@dataclass(frozen=True)
class SessionRow:
    session_id: str
    traces: int
    first_turn: int
    last_turn: int
    first_at: datetime
    last_at: datetime


@dataclass
class IngestCounts:
    files: int = 0
    traces_added: int = 0
    traces_skipped: int = 0  # already present (idempotent on trace_id)
    errors: int = 0
    error_rows: list[IngestErrorRow] = field(default_factory=list)


# Ingest contract (ctxcore/ingest.py): ``ingest_paths(store, paths) -> IngestCounts`` reads
# .jsonl/.json/.jsonl.gz files (or folders of them), idempotent, per-file offsets.


class TraceStore:
    """Owns one DuckDB file; applies migrations on open; one cursor per thread."""

    def __init__(self, path: str | Path = DEFAULT_DB, *, read_only: bool = False) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> TraceStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- writing
    def add_traces(self, traces: Iterable[Trace], *, source: str | None = None) -> int:
        """Insert traces in one transaction; returns how many were new.

        Findings (``ctxcore.models.Finding``) are computed at insert time by
        ``ctxcore.diagnostics.diagnose(trace)`` when that module is importable and stored in
        a ``findings`` table (trace_id, detector, severity, packet_ids, message), so the
        Traces page can filter on them (``TraceFilter.finding``)."""
        raise NotImplementedError

    def findings(self, trace_id: str) -> list[dict[str, Any]]:
        """Rows: detector, severity, packet_ids, message."""
        raise NotImplementedError

    def add_ingest_error(self, file: str, line: int, message: str) -> None:
        raise NotImplementedError

    # ---- reading
    def count(self) -> int:
        raise NotImplementedError

    def list_traces(
        self,
        flt: TraceFilter | None = None,
        *,
        sort: SortKey = "created_at",
        descending: bool = True,
        limit: int = 50,
        offset: int = 0,
    ) -> TracePage:
        raise NotImplementedError

    def get_trace(self, trace_id: str) -> Trace | None:
        raise NotImplementedError

    def decisions(self, trace_id: str) -> list[dict[str, Any]]:
        """Per-packet rows: packet_id, kind, tokens_before, tokens_after, relevance, recency,
        score, rank, status, reason, reason_text, partition, budget_left, must_keep."""
        raise NotImplementedError

    def sessions(self) -> list[SessionRow]:
        raise NotImplementedError

    def session_statuses(self, session_id: str) -> list[dict[str, Any]]:
        """Rows: turn, trace_id, packet_id, kind, status, reason, tokens_after."""
        raise NotImplementedError

    def session_partitions(self, session_id: str) -> list[dict[str, Any]]:
        """Rows: turn, trace_id, partition, budget, used, items."""
        raise NotImplementedError

    def facets(self) -> dict[str, list[str]]:
        """Distinct values for filter widgets: session_id, preset, tags, verdict."""
        raise NotImplementedError

    def ingest_errors(self, limit: int = 200) -> list[IngestErrorRow]:
        raise NotImplementedError

    def latest_change(self) -> int:
        """A number that grows whenever traces are added (for live refresh)."""
        raise NotImplementedError
