"""TraceStore: the DuckDB engine's ``Store`` (``protocol.Store``), on one file.

The app, the watcher and the CLI all go through the protocol, and this class implements it on
DuckDB. What the UI filters, sorts and charts on are real columns (``traces``, ``decisions``,
``partitions``, ``findings``), so lists and charts are SQL with server-side paging; the full
trace JSON is kept too, packed in pieces (``trace_parts``, its size in ``json_bytes``), and
each packet text once per batch that first brings it (``contents``, named by the decisions'
``cid``).

The connection, its cursors and the write lock are ``duck.Database``'s; the inserts are
``inserts``' (shared with the bulk writer, ``store/writer.py``, which ``bulk_writer`` hands
out): this module holds the reads and ``add_traces``. No cursor leaves the engine's modules.

Faults of the file itself (damaged, truncated, a full disk, a read-only folder) come out
as one ``StoreError`` saying what happened and what to do (``store_fault``); only a live
lock held by another process is ``StoreLockedError``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import duckdb

from ctxcore import settings
from ctxcore.errors import InputError
from ctxcore.models import Trace
from ctxcore.store import inserts
from ctxcore.store.duck import Database, first, insert_table
from ctxcore.store.faults import store_fault
from ctxcore.store.records import (
    FailingFile,
    FileOffset,
    FindingPage,
    FindingRow,
    IngestCounts,
    IngestErrorRow,
    InsertResult,
    LiveCall,
    LiveCalls,
    PackedTrace,
    SessionRow,
    TraceFilter,
    TracePage,
    TraceRow,
    UsageRow,
)
from ctxcore.store.rows import (
    prepare,
    unpack_summary,
)
from ctxcore.store.sqlreads import SqlReads, diagnosed
from ctxcore.store.writer import BulkWriter

__all__ = [
    "FailingFile",
    "FileOffset",
    "FindingPage",
    "FindingRow",
    "IngestCounts",
    "IngestErrorRow",
    "InsertResult",
    "LiveCall",
    "LiveCalls",
    "PackedTrace",
    "SessionRow",
    "TraceFilter",
    "TracePage",
    "TraceRow",
    "TraceStore",
    "UsageRow",
]

log = logging.getLogger("ctxscope.store")


# Ingest contract (ctxcore/store/ingest.py): ``ingest_paths(store, paths) -> IngestCounts``
# reads .jsonl/.json/.jsonl.gz files (or folders of them), idempotent, per-file offsets.


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _reading(
    method: Callable[Concatenate[TraceStore, _P], _R],
) -> Callable[Concatenate[TraceStore, _P], _R]:
    """A read whose DuckDB failure is one ``StoreError`` (``store_fault``): a damaged block is
    found when it is read, not on open (docs/design.md, "Store", faults of the file)."""

    @functools.wraps(method)
    def read(self: TraceStore, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(self, *args, **kwargs)
        except duckdb.Error as exc:
            raise store_fault(self.path, exc) from exc

    return read


class TraceStore(SqlReads):
    """The DuckDB engine's ``Store``: one file, migrations applied on open, one cursor per
    thread (``duck.Database``)."""

    def __init__(
        self,
        path: str | Path = settings.DEFAULT_DB,
        *,
        read_only: bool = False,
        diagnose: bool = True,
    ) -> None:
        """``diagnose=False`` defers diagnostics: inserts are then several times faster, and
        ``diagnose_pending()`` (the watcher calls it when idle) fills the findings in."""
        self.path = Path(path)
        self.diagnose = diagnose
        self.read_only = read_only
        self._db = Database(self.path, read_only=read_only)
        # where ``_stale`` goes on from (below every tseq at first; 0 once none are left)
        self._stale_after = 2**62

    def reopen_if_invalidated(self) -> bool:
        """Open the file again if DuckDB has given up on this connection (after a fatal
        error: a checkpoint that failed on a full disk, ``Database.reopen_if_invalidated``):
        a long-lived owner (the app's watcher) would fail on every read and write until
        restarted. True when it reopened."""
        return self._db.reopen_if_invalidated()

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> TraceStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _cur(self) -> duckdb.DuckDBPyConnection:
        """This thread's cursor (for this engine's own code and its tests)."""
        return self._db.cursor()

    # ---- writing
    def add_traces(self, traces: Iterable[Trace], *, source: str | None = None) -> int:
        """Insert traces in one transaction; returns how many were new.

        A trace already stored with the same content is skipped; with different content it
        is an error (``InputError`` naming it) and nothing is stored: a stored trace is never
        overwritten, and an import does not half happen.

        Findings (``ctxcore.models.Finding``) are computed at insert time by
        ``ctxcore.diagnostics.diagnose(trace)`` (unless ``diagnose=False``) and stored in
        a ``findings`` table (trace_id, detector, severity, packet_ids, message), so the
        Traces page can filter on them (``TraceFilter.finding``)."""
        items: list[tuple[Trace, bytes]] = []
        for t in traces:
            try:
                items.append((t, t.to_json().encode("utf-8")))
            except (ValueError, UnicodeError) as exc:  # a trace built without validation
                raise InputError(
                    f"{source or 'import'}: trace_id {t.trace_id!r} cannot be written as JSON "
                    f"({str(exc).splitlines()[0]}); nothing was stored"
                ) from exc
        texts: dict[bytes, int] = {}
        with self._db.transaction() as cur:
            res = self._insert(cur, items, source, texts)
            problems = [
                f"trace_id {tid!r} is already stored (from {src}) with different content"
                for _, tid, src in res.conflicts
            ] + [f"trace_id {items[k][0].trace_id!r} {why}" for k, why in res.rejected]
            if problems:
                more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
                raise InputError(
                    f"{source or 'import'}: {problems[0]}{more}; nothing was stored: give "
                    "each trace its own trace_id"
                )
        self._db.shared.remember(texts)
        return res.added

    def _insert(
        self,
        cur: duckdb.DuckDBPyConnection,
        items: Sequence[tuple[Trace, bytes]],
        source: str | None,
        texts: dict[bytes, int],
    ) -> InsertResult:
        """Insert (trace, its JSON) pairs inside the caller's transaction.

        Same ``trace_id`` and same JSON is skipped (idempotent); same id with different
        content is skipped too and returned in ``conflicts`` for the caller to report, as
        are traces whose rows could not be built (``rejected``). ``texts`` gets the packet
        texts stored (digest -> cid), for the caller to ``Shared.remember`` once its
        transaction commits."""
        prep = prepare(items, [source] * len(items), self.diagnose)
        tables, res = inserts.plan_insert(cur, self._db.shared, prep, texts=texts)
        for name, table in tables.items():
            insert_table(cur, name, table)
        return res

    def bulk_writer(self, *, workers: int = 0) -> BulkWriter:
        """A writer for bulk loads of prepared rows (``rows.prepare``, possibly made in
        ``workers`` other processes): see ``BulkWriter``."""
        return BulkWriter(self._db, workers=workers)

    @_reading
    def diagnose_pending(self, max_traces: int = 200) -> int:
        """Compute findings for traces stored with ``diagnose=False``, then for traces
        whose findings and cost summaries other code made (``_stale``); returns how many
        were diagnosed (0 when none wait)."""
        if self.read_only:
            return 0
        cur = self._cur()
        rows = cur.execute(
            "SELECT tseq, json_bytes FROM traces WHERE n_findings IS NULL ORDER BY tseq LIMIT ?",
            [int(max_traces)],
        ).fetchall()
        if len(rows) < max_traces:
            rows += self._stale(cur, max_traces - len(rows))
        if not rows:
            return 0
        blobs = inserts.packed(cur, [int(r[0]) for r in rows])
        batch, updates = diagnosed(rows, blobs)
        with self._db.transaction() as cur:
            tables = batch.tables()
            for name in ("findings", "cost_parts"):  # and the deferred cost summaries
                table = tables.get(name)
                if table is not None:
                    cur.execute(
                        f'DELETE FROM {name} WHERE tseq IN (SELECT DISTINCT tseq FROM "table")'
                    )
                    insert_table(cur, name, table)
            cur.executemany(
                "UPDATE traces SET n_findings = ?, max_severity = ?, diagnosed_with = ? "
                "WHERE tseq = ?",
                [[n, sev, by, tseq] for tseq, n, sev, by in updates],
            )
        return len(updates)

    def _stale(self, cur: duckdb.DuckDBPyConnection, limit: int) -> list[tuple[Any, ...]]:
        """Up to ``limit`` traces diagnosed by other code than this process's (an upgrade),
        newest first: their findings and cost summaries are made again while the watcher
        idles, so that the pages read them instead of computing them on every fresh
        server's first open (docs/design.md, "Diagnostics"). Each trace is taken once per
        process (a cursor on ``tseq``); a trace whose diagnosis failed (``diagnosed_with``
        NULL) is not taken again."""
        if self._stale_after == 0:
            return []
        from ctxcore.diagnostics import fingerprint  # not at start: a deferring writer needs none

        rows = cur.execute(
            "SELECT tseq, json_bytes FROM traces WHERE diagnosed_with <> ? AND tseq < ? "
            "ORDER BY tseq DESC LIMIT ?",
            [fingerprint(), self._stale_after, int(limit)],
        ).fetchall()
        self._stale_after = int(rows[-1][0]) if len(rows) == limit else 0
        return rows

    @_reading
    def traces_json(self, trace_ids: Sequence[str]) -> list[tuple[str, bytes]]:
        """The stored JSON (UTF-8) of each trace asked for that exists, in the order asked,
        read in one query per 1,000 ids."""
        return [(p.trace_id, p.json()) for p in self.traces_packed(trace_ids)]

    @_reading
    def traces_packed(self, trace_ids: Sequence[str]) -> list[PackedTrace]:
        """``traces_json`` as stored: each trace's packed JSON, for a reader elsewhere to
        unpack (``PackedTrace.json``): ``replay --all`` leaves that to its worker processes,
        in parallel, instead of the one process reading the store."""
        out: list[PackedTrace] = []
        cur = self._cur()
        for i in range(0, len(trace_ids), 1000):
            chunk = list(trace_ids[i : i + 1000])
            rows = cur.execute(
                "SELECT trace_id, tseq, json_bytes FROM traces "
                "WHERE trace_id IN (SELECT unnest(?::VARCHAR[]))",
                [chunk],
            ).fetchall()
            blobs = inserts.packed(cur, [int(r[1]) for r in rows])
            found = {r[0]: PackedTrace(r[0], blobs[int(r[1])], int(r[2])) for r in rows}
            out += [found[tid] for tid in chunk if tid in found]
        return out

    @_reading
    def cost_summaries(self, trace_ids: Sequence[str]) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        cur = self._cur()
        for i in range(0, len(trace_ids), 1000):
            res = cur.execute(
                "SELECT t.trace_id, c.part, c.data FROM traces t JOIN cost_parts c "
                "ON c.tseq = t.tseq WHERE t.trace_id IN (SELECT unnest(?::VARCHAR[]))",
                [list(trace_ids[i : i + 1000])],
            )
            pieces: dict[str, dict[int, bytes]] = {}
            while rows := res.fetchmany(10_000):  # in order by hand: see inserts.packed
                for tid, part, data in rows:
                    pieces.setdefault(tid, {})[int(part)] = data
            for tid, got in pieces.items():
                out[tid] = unpack_summary(b"".join(got[k] for k in sorted(got)))
        return out

    def add_ingest_error(self, file: str, line: int, message: str) -> None:
        with self._db.transaction() as cur:
            inserts.insert_errors(cur, [(file, line, message)])

    # ---- reading
    PH = "?"
    TAGS_ALL = "list_has_all(tags, ?::VARCHAR[])"
    IN_LIST = "IN (SELECT unnest(?::VARCHAR[]))"
    LIVE_COLS = (
        "created_at, session_id, turn, trace_id, "
        "coalesce(list_filter(tags, lambda t: starts_with(t, 'source:'))[1][8:], "
        "CASE WHEN list_contains(tags, 'otlp') THEN 'otlp' ELSE '' END)"
    )
    LIVE = "list_contains(tags, 'live')"

    def _page(
        self, cols: str, body: str, order: str, params: list[Any], limit: int, offset: int
    ) -> tuple[list[tuple[Any, ...]], int]:
        """The page and the count in one query (a window count over the matches); a page
        past the end counts apart."""
        rows = self._rows(
            f"SELECT {cols}, count(*) OVER () {body} ORDER BY {order} LIMIT ? OFFSET ?",
            [*params, int(limit), int(offset)],
        )
        if rows:
            return [r[:-1] for r in rows], int(rows[0][-1])
        return [], self._one(f"SELECT count(*) {body}", params)

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            return self._cur().execute(sql, list(params)).fetchall()
        except duckdb.Error as exc:
            raise store_fault(self.path, exc) from exc

    def _dicts(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        try:
            cur = self._cur().execute(sql, list(params))
            names = [d[0] for d in cur.description or []]
            return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        except duckdb.Error as exc:
            raise store_fault(self.path, exc) from exc

    @_reading
    def get_trace(self, trace_id: str) -> Trace | None:
        raw = inserts.trace_json(self._cur(), trace_id)
        return None if raw is None else Trace.model_validate_json(raw)

    @_reading
    def packet_content(self, trace_id: str, packet_id: str) -> str | None:
        cur = self._cur()
        row = first(
            cur.execute(
                "SELECT cid FROM decisions WHERE tseq = (SELECT tseq FROM traces "
                "WHERE trace_id = ?) AND packet_id = ? ORDER BY ord LIMIT 1",
                [trace_id, packet_id],
            ).fetchall()
        )
        if row is None or row[0] is None:
            return None
        parts = cur.execute(
            "SELECT text FROM contents WHERE cid = ? ORDER BY part", [row[0]]
        ).fetchall()
        return "".join(p[0] for p in parts)

    @_reading
    def session_statuses(self, session_id: str) -> list[dict[str, Any]]:
        """Rows: turn, trace_id, packet_id, kind, status, reason, tokens_after."""
        return self._dicts(
            "SELECT t.turn, d.trace_id, d.packet_id, d.kind, d.status, d.reason, "
            "d.tokens_after FROM decisions d JOIN traces t USING (tseq) "
            "WHERE t.session_id = ? ORDER BY t.turn, t.tseq, d.ord",
            [session_id],
        )
