"""The store's interface: what the app, the command line, ingest, the watcher and replay use.

``Store`` is every operation they need of a trace store, and ``BulkWriter`` the writer ingest
and ``ctxscope import`` load through. Both take and return ctxcore types only: the models,
the Arrow rows of ``rows.prepare`` and the plain dataclasses of ``records``, never a
driver's cursor or connection. An engine (DuckDB today: ``tracestore.TraceStore``) implements
both; ``engines.open_store`` opens the one a ``--db`` value names, and
tests/test_store_contract.py checks every member on every engine (docs/design.md, "Store").

Nothing here imports an engine, DuckDB or Arrow: callers type against these protocols.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from ctxcore.models import Finding, Trace
from ctxcore.settings import SortKey
from ctxcore.store.records import (
    FailingFile,
    FileOffset,
    FindingPage,
    IngestErrorRow,
    InsertResult,
    LiveCalls,
    PackedTrace,
    SessionRow,
    TraceFilter,
    TracePage,
    UsageRow,
)

if TYPE_CHECKING:
    from ctxcore.store.rows import RowTables


class BulkWriter(Protocol):
    """Bulk loads into a store, one transaction at a time, from one thread: an ingest run.

    ``begin()`` opens a transaction (``add``, ``add_errors`` and ``add_offsets`` open one when
    none is open); ``commit()`` makes everything added since durable at once and ``abort()``
    drops it. Trace ids are deduped against the store and within the open transaction: a
    trace already stored with the same content is skipped, with different content it is
    skipped and reported (``InsertResult.conflicts``), as are rows that could not be built
    (``InsertResult.rejected``). As a context manager it commits at the end, aborts on an
    exception, and closes. Any failure of ``add`` or ``commit`` aborts the open transaction; a
    failure of the store is one ``StoreError``. The thread that drives a writer does not read
    the store while a transaction is open (DuckDB's holds that thread's cursor); other
    threads read what was committed."""

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open."""
        ...

    def begin(self) -> None:
        """Open a transaction unless one is open."""
        ...

    def add(self, rows: RowTables) -> InsertResult:
        """Insert the new traces of ``rows`` (``rows.prepare``) in the open transaction."""
        ...

    def add_errors(self, errors: Sequence[tuple[str, int, str]]) -> None:
        """(file, line, message) rows for the ingest errors, written at the commit (one
        already recorded, same file, line and message, is not repeated)."""
        ...

    def add_offsets(self, offsets: Sequence[FileOffset]) -> None:
        """How far files were read, written at the commit with the traces they held (a file
        given twice keeps its last offset)."""
        ...

    def commit(self) -> list[IngestErrorRow]:
        """Commit what was added; the errors written (none without an open transaction)."""
        ...

    def abort(self) -> None:
        """Roll the open transaction back: nothing added since it began is stored."""
        ...

    def close(self) -> None:
        """Abort what is not committed and let go of what the writer holds."""
        ...

    def __enter__(self) -> BulkWriter: ...

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None: ...


class Store(Protocol):
    """A trace store: traces with their decisions, findings, packet texts and the state of
    ingest (errors, file offsets). Opened by ``engines.open_store``; closed by ``close`` or as
    a context manager. Faults of the store are one ``StoreError``; a store another process
    holds is ``StoreLockedError``. A stored trace is never overwritten."""

    @property
    def read_only(self) -> bool:
        """Opened read-only: every write raises ``StoreError``."""
        ...

    @property
    def diagnose(self) -> bool:
        """Findings are computed at insert (else later, by ``diagnose_pending``)."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Store: ...

    def __exit__(self, *exc: object) -> None: ...

    def reopen_if_invalidated(self) -> bool:
        """Open the store again if the engine gave up on it after a fatal error (a checkpoint
        that filled the disk); True when it did. The watcher calls it after a failure."""
        ...

    # ---- writing
    def add_traces(self, traces: Iterable[Trace], *, source: str | None = None) -> int:
        """Store traces in one transaction; how many were new. The same id with other
        content (or a trace that cannot be stored) is ``InputError`` and stores nothing."""
        ...

    def bulk_writer(self, *, workers: int = 0) -> BulkWriter:
        """A writer for an ingest run; ``workers``: how many processes prepare its rows
        meanwhile (an engine in this process may leave them the CPUs)."""
        ...

    def add_ingest_error(self, file: str, line: int, message: str) -> None:
        """Record one ingest error (not again when the same one is recorded)."""
        ...

    def diagnose_pending(self, max_traces: int = 200) -> int:
        """Compute the findings of up to ``max_traces`` traces stored without them; how many
        were diagnosed (0 when none wait, or the store is read-only)."""
        ...

    # ---- reading: lists
    def count(self) -> int:
        """How many traces are stored."""
        ...

    def list_traces(
        self,
        flt: TraceFilter | None = None,
        *,
        sort: SortKey = "created_at",
        descending: bool = True,
        limit: int = 50,
        offset: int = 0,
    ) -> TracePage:
        """One page of the traces ``flt`` matches, sorted (then by insertion order)."""
        ...

    def list_findings(
        self, flt: TraceFilter | None = None, *, limit: int = 50, offset: int = 0
    ) -> FindingPage:
        """One page of the findings of the traces ``list_traces(flt)`` matches, newest
        trace first (then in each trace's order); only ``flt.finding``'s when it is set."""
        ...

    def facets(self) -> dict[str, list[str]]:
        """Distinct values for the filters: session_id, preset, verdict, tags, finding."""
        ...

    def sessions(self) -> list[SessionRow]:
        """Every session, most recently active first."""
        ...

    def session_listing(self) -> list[tuple[str, list[tuple[str, tuple[str, ...]]]]]:
        """Every session (as ``sessions`` orders them) with its traces' ids and tags in turn
        order: ids and tags only, never the traces."""
        ...

    def session_statuses(self, session_id: str) -> list[dict[str, Any]]:
        """Rows: turn, trace_id, packet_id, kind, status, reason, tokens_after."""
        ...

    def session_partitions(self, session_id: str) -> list[dict[str, Any]]:
        """Rows: turn, trace_id, partition, budget, used, items."""
        ...

    def session_usage(self, session_ids: Sequence[str]) -> list[UsageRow]:
        """The model and usage of every call of these sessions, by session then turn."""
        ...

    def live_calls(self, since: datetime, limit: int = 5_000) -> LiveCalls:
        """Calls captured live (tagged ``live``) since ``since``, newest first."""
        ...

    def latest_change(self) -> int:
        """A number that grows whenever traces or ingest errors are added."""
        ...

    # ---- reading: one trace
    def get_trace(self, trace_id: str) -> Trace | None:
        """The stored trace, or None."""
        ...

    def decisions(self, trace_id: str) -> list[dict[str, Any]]:
        """Per-packet rows: packet_id, kind, tokens_before, tokens_after, relevance, recency,
        score, rank, status, reason, reason_text, partition, budget_left, must_keep."""
        ...

    def packet_content(self, trace_id: str, packet_id: str) -> str | None:
        """A packet's text as stored, or None."""
        ...

    def findings(self, trace_id: str) -> list[dict[str, Any]]:
        """Rows: detector, severity, packet_ids, message, evidence, fix."""
        ...

    # ---- reading: many traces (replay)
    def traces_json(self, trace_ids: Sequence[str]) -> list[tuple[str, bytes]]:
        """The stored JSON (UTF-8) of each trace asked for that exists, in the order asked."""
        ...

    def traces_packed(self, trace_ids: Sequence[str]) -> list[PackedTrace]:
        """``traces_json`` as stored (packed): each unpacks itself where it is read
        (``PackedTrace.json``, in replay's worker processes)."""
        ...

    def stored_findings(
        self, trace_ids: Sequence[str], fingerprint: str
    ) -> dict[str, list[Finding]]:
        """The findings of each of ``trace_ids`` that code with ``fingerprint`` computed, in
        their order; traces diagnosed by other code, or not yet, are left out."""
        ...

    def undiagnosed(self) -> int:
        """How many traces wait for their findings (``diagnose_pending``)."""
        ...

    def cost_summaries(self, trace_ids: Sequence[str]) -> dict[str, bytes]:
        """The cost summary stored with each of ``trace_ids`` (``costing.encode_summary``'s
        JSON); a trace stored without one (before migration 9, or decoded without pydantic
        and not diagnosed) is left out."""
        ...

    # ---- ingest's state
    def ingest_errors(self, limit: int = 200) -> list[IngestErrorRow]:
        """The errors ingest recorded, newest first."""
        ...

    def failing_files(self, limit: int = 100) -> list[FailingFile]:
        """The files ingest could not read, newest first, with why."""
        ...

    def file_offset(self, file: str) -> FileOffset | None:
        """How far ingest has read ``file`` (its resolved path), or None."""
        ...

    def file_offsets(self) -> dict[str, FileOffset]:
        """Every file's offset, by file."""
        ...


__all__ = ["BulkWriter", "Store"]
