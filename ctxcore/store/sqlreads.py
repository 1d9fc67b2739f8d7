"""The reads both engines answer with the same SQL (docs/design.md, "Store", "One store
interface, two engines").

DuckDB and PostgreSQL hold the same tables (``migrations``, ``pgschema``), so most of the
``Store`` protocol's reads are one query text on either: what differs is the parameter
placeholder (``?`` against ``%s``), how a tag list is tested, and how a live call's source is
picked out of its tags. ``SqlReads`` holds those reads once; each engine subclasses it with
its dialect and its two primitives, ``_rows`` and ``_dicts``, which run one statement on the
engine's connection and turn the engine's failure into one ``StoreError``. What an engine
plans differently stays in the engine's module: how a page of a list and the count of all
its matches are read (``_page``), ``session_statuses`` on PostgreSQL's partitions,
``findings`` and ``session_usage``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar

from ctxcore.errors import StoreError
from ctxcore.models import Finding, Trace
from ctxcore.settings import SortKey
from ctxcore.store.codec import unpack_json
from ctxcore.store.records import (
    FailingFile,
    FileOffset,
    FindingPage,
    FindingRow,
    IngestErrorRow,
    LiveCall,
    LiveCalls,
    SessionRow,
    TraceFilter,
    TracePage,
    TraceRow,
    UsageRow,
)
from ctxcore.store.rows import TAIL_CHARS, RowBatch, diagnose_trace, utc_naive

log = logging.getLogger("ctxscope.store")

#: the sort keys ``list_traces`` takes, and their column
SORT_SQL: dict[str, str] = {
    "created_at": "created_at",
    "turn": "turn",
    "used": "used",
    "budget": "budget",
    "dropped": "n_dropped",
    "summarized": "n_summarized",
    "session_id": "session_id",
}

#: the columns of a ``TraceRow``, in its order
ROW_FIELDS = (
    "trace_id", "session_id", "turn", "created_at", "preset", "builder", "budget", "used",
    "n_packets", "n_kept", "n_truncated", "n_summarized", "n_dropped", "n_filtered",
    "n_not_rendered", "n_warnings", "lost_must_keep", "verdict", "tags", "source_trace_id",
    "n_findings", "max_severity", "model", "input_tokens", "cache_read_tokens",
    "cache_write_tokens", "cache_write_5m_tokens", "cache_write_1h_tokens", "output_tokens",
    "reasoning_tokens",
)  # fmt: skip

_OFFSET_SQL = (
    'SELECT file, "offset", line, size, mtime, fingerprint, inode, head, failed FROM file_offsets'
)


def aware(dt: datetime) -> datetime:
    """A stored time (UTC, naive) as an aware one."""
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt


def _file_offset(row: Sequence[Any]) -> FileOffset:
    inode = None if row[6] is None else int(row[6])
    return FileOffset(
        row[0], int(row[1]), int(row[2]), int(row[3]), float(row[4]), row[5], inode, *row[7:]
    )


def like(term: str) -> str:
    """An ILIKE pattern (escape ``\\``) matching ``term`` anywhere."""
    return "%" + term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _trace_row(values: Sequence[Any]) -> TraceRow:
    """A ``TraceRow`` from the ``ROW_FIELDS`` columns of one trace."""
    d = dict(zip(ROW_FIELDS, values, strict=True))
    d["created_at"] = aware(d["created_at"])
    d["tags"] = tuple(d["tags"] or ())
    d["n_findings"] = int(d["n_findings"] or 0)
    return TraceRow(**d)


#: the columns ``finding_row`` reads, from ``findings f`` joined to ``traces t``
_FINDING_COLS = (
    "t.trace_id, t.session_id, t.turn, t.created_at, t.preset, f.detector, f.severity, "
    "f.message, f.packet_ids"
)


def _finding_row(r: Sequence[Any]) -> FindingRow:
    """A ``FindingRow`` from the ``_FINDING_COLS`` columns."""
    return FindingRow(
        trace_id=r[0],
        session_id=r[1],
        turn=int(r[2]),
        created_at=aware(r[3]),
        preset=r[4],
        detector=r[5],
        severity=r[6],
        message=r[7],
        packet_ids=tuple(r[8] or ()),
    )


#: a stored trace's diagnosis: tseq, how many findings, the worst severity, the code's
#: fingerprint (None, None for a trace the detectors could not take)
Diagnosis = tuple[int, int, str | None, str | None]


def diagnosed(
    rows: Sequence[tuple[Any, ...]], blobs: dict[int, bytes]
) -> tuple[RowBatch, list[Diagnosis]]:
    """The findings and cost summaries of stored traces (``tseq, json_bytes`` rows, their
    packed JSON by tseq) as rows to store, and each one's diagnosis: what both engines'
    ``diagnose_pending`` computes between reading the traces and writing the rows."""
    batch = RowBatch()
    updates: list[Diagnosis] = []
    for tseq, size in rows:
        try:
            raw = unpack_json(blobs[int(tseq)], int(size))
            trace = Trace.model_validate_json(raw)
            found, by = diagnose_trace(trace, raw)
            batch.add_summary(trace, int(tseq))
        except Exception:
            # One trace the detectors cannot take is left without findings (and not tried
            # again every idle moment); the rest go on.
            log.exception("diagnostics failed on the trace stored as tseq %s", tseq)
            updates.append((int(tseq), 0, None, None))
            continue
        sev = batch.add_findings(trace.trace_id, int(tseq), found) if found else None
        updates.append((int(tseq), len(found), sev, by))
    return batch, updates


class SqlReads:
    """The reads whose SQL both engines share; a subclass names its dialect and runs
    statements (``_rows``, ``_dicts``: the engine's failure as one ``StoreError``)."""

    #: the parameter placeholder
    PH: ClassVar[str]
    #: the condition "the trace has every tag of the list parameter"
    TAGS_ALL: ClassVar[str]
    #: the condition "the column before it is one of the list parameter"
    IN_LIST: ClassVar[str]
    #: a live call's columns: when, session, turn, id, its source (its ``source:`` tag, or
    #: ``otlp``); and the condition "captured live"
    LIVE_COLS: ClassVar[str]
    LIVE: ClassVar[str]

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _dicts(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        raise NotImplementedError

    def _page(
        self, cols: str, body: str, order: str, params: list[Any], limit: int, offset: int
    ) -> tuple[list[tuple[Any, ...]], int]:
        """``SELECT cols body ORDER BY order`` from ``offset``, at most ``limit`` rows, and
        the count of every row ``body`` matches."""
        raise NotImplementedError

    def _one(self, sql: str, params: Sequence[Any] = ()) -> int:
        rows = self._rows(sql, params)
        return int(rows[0][0]) if rows and rows[0][0] is not None else 0

    def count(self) -> int:
        return self._one("SELECT count(*) FROM traces")

    # ---- sessions
    def session_listing(self) -> list[tuple[str, list[tuple[str, tuple[str, ...]]]]]:
        """Every session with its traces' ids and tags in turn order (then insertion, as
        ``list_traces(sort="turn")``), sessions most recently active first (as ``sessions()``
        lists them): one query for the whole store (ids and tags only, never the traces)."""
        rows = self._rows(
            "SELECT session_id, trace_id, tags, max(created_at) OVER (PARTITION BY "
            "session_id) AS last FROM traces ORDER BY last DESC, session_id, turn, tseq"
        )
        out: list[tuple[str, list[tuple[str, tuple[str, ...]]]]] = []
        for sid, tid, tags, _ in rows:
            if not out or out[-1][0] != sid:
                out.append((sid, []))
            out[-1][1].append((tid, tuple(tags or ())))
        return out

    def sessions(self) -> list[SessionRow]:
        rows = self._rows(
            "SELECT session_id, count(*), min(turn), max(turn), min(created_at), "
            "max(created_at) FROM traces GROUP BY session_id ORDER BY max(created_at) DESC"
        )
        return [
            SessionRow(r[0], int(r[1]), int(r[2]), int(r[3]), aware(r[4]), aware(r[5]))
            for r in rows
        ]

    def session_partitions(self, session_id: str) -> list[dict[str, Any]]:
        """Rows: turn, trace_id, partition, budget, used, items."""
        return self._dicts(
            "SELECT t.turn, p.trace_id, p.name AS partition, p.budget, p.used, p.items "
            "FROM traces t JOIN partitions p ON p.tseq = t.tseq "
            f"WHERE t.session_id = {self.PH} ORDER BY t.turn, t.tseq, p.ord",
            [session_id],
        )

    def session_usage(self, session_ids: Sequence[str]) -> list[UsageRow]:
        """The model and usage of every call of these sessions, by session then turn."""
        fields = ", ".join(f.name for f in dataclasses.fields(UsageRow))
        rows = self._rows(
            f"SELECT {fields} FROM traces WHERE session_id {self.IN_LIST} "
            "ORDER BY session_id, turn, tseq",
            [list(session_ids)],
        )
        return [UsageRow(*r) for r in rows]

    # ---- findings
    def undiagnosed(self) -> int:
        """Traces stored with ``diagnose=False`` whose findings are not computed yet."""
        return self._one("SELECT count(*) FROM traces WHERE n_findings IS NULL")

    def findings(self, trace_id: str) -> list[dict[str, Any]]:
        """Rows: detector, severity, packet_ids, message (plus evidence and fix)."""
        rows = self._dicts(
            "SELECT detector, severity, packet_ids, message, evidence_json, fix_json "
            f"FROM findings WHERE tseq = (SELECT tseq FROM traces WHERE trace_id = {self.PH}) "
            "ORDER BY ord",
            [trace_id],
        )
        for r in rows:
            ev, fx = r.pop("evidence_json"), r.pop("fix_json")
            r["evidence"] = json.loads(ev) if ev else {}
            r["fix"] = json.loads(fx) if fx else None
        return rows

    def stored_findings(
        self, trace_ids: Sequence[str], fingerprint: str
    ) -> dict[str, list[Finding]]:
        """The stored findings of each of ``trace_ids`` that were computed by code with this
        ``fingerprint`` (``ctxcore.diagnostics.fingerprint``), in their order (a trace with
        none maps to an empty list); traces diagnosed by other code, or not yet, are left
        out. One query per 1,000 ids."""
        out: dict[str, list[Finding]] = {}
        for i in range(0, len(trace_ids), 1000):
            rows = self._rows(
                "SELECT t.trace_id, f.detector, f.severity, f.packet_ids, f.message, "
                "f.evidence_json, f.fix_json FROM traces t LEFT JOIN findings f "
                f"ON f.tseq = t.tseq WHERE t.diagnosed_with = {self.PH} "
                f"AND t.n_findings IS NOT NULL AND t.trace_id {self.IN_LIST} "
                "ORDER BY t.tseq, f.ord",
                [fingerprint, list(trace_ids[i : i + 1000])],
            )
            for tid, det, sev, ids, msg, ev, fix in rows:
                found = out.setdefault(tid, [])
                if det is not None:
                    found.append(
                        Finding(
                            detector=det,
                            severity=sev,
                            packet_ids=list(ids or ()),
                            message=msg,
                            evidence=json.loads(ev) if ev else {},
                            fix=json.loads(fix) if fix else None,
                        )
                    )
        return out

    # ---- one trace
    def decisions(self, trace_id: str) -> list[dict[str, Any]]:
        """Per-packet rows: packet_id, kind, tokens_before, tokens_after, relevance, recency,
        score, rank, status, reason, reason_text, partition, budget_left, must_keep."""
        return self._dicts(
            "SELECT packet_id, kind, tokens_before, tokens_after, relevance, recency, score, "
            "rank, status, reason, reason_text, partition, budget_left, must_keep "
            f"FROM decisions WHERE tseq = (SELECT tseq FROM traces WHERE trace_id = {self.PH}) "
            "ORDER BY ord",
            [trace_id],
        )

    # ---- ingest's state
    def file_offset(self, file: str) -> FileOffset | None:
        rows = self._rows(f"{_OFFSET_SQL} WHERE file = {self.PH}", [file])
        return _file_offset(rows[0]) if rows else None

    def file_offsets(self) -> dict[str, FileOffset]:
        return {r[0]: _file_offset(r) for r in self._rows(_OFFSET_SQL)}

    def failing_files(self, limit: int = 100) -> list[FailingFile]:
        """The files ingest (or the watcher) could not read, newest first, with why: for
        the app's banner. A file leaves the list once it is read after it changed."""
        rows = self._rows(
            "SELECT file, failed, updated_at FROM file_offsets WHERE failed IS NOT NULL "
            f"ORDER BY updated_at DESC, file LIMIT {self.PH}",
            [int(limit)],
        )
        return [FailingFile(r[0], r[1], aware(r[2])) for r in rows]

    def ingest_errors(self, limit: int = 200) -> list[IngestErrorRow]:
        rows = self._rows(
            'SELECT file, line, message, "at" FROM ingest_errors '
            f'ORDER BY "at" DESC, file, line LIMIT {self.PH}',
            [int(limit)],
        )
        return [IngestErrorRow(r[0], int(r[1]), r[2], aware(r[3])) for r in rows]

    # ---- lists
    def list_traces(
        self,
        flt: TraceFilter | None = None,
        *,
        sort: SortKey = "created_at",
        descending: bool = True,
        limit: int = 50,
        offset: int = 0,
    ) -> TracePage:
        if sort not in SORT_SQL:
            raise StoreError(f"cannot sort by {sort!r}; choose one of {', '.join(SORT_SQL)}")
        where, params = self._where(flt)
        order = "DESC" if descending else "ASC"
        rows, total = self._page(
            ", ".join(ROW_FIELDS),
            f"FROM traces{where}",
            f"{SORT_SQL[sort]} {order}, tseq {order}",
            params,
            limit,
            offset,
        )
        return TracePage(
            rows=[_trace_row(r) for r in rows], total=total, offset=offset, limit=limit
        )

    def list_findings(
        self, flt: TraceFilter | None = None, *, limit: int = 50, offset: int = 0
    ) -> FindingPage:
        """The findings of the traces ``list_traces(flt)`` matches, newest trace first (then
        in each trace's own order, most severe first), each with its session and turn. With
        ``flt.finding`` set, only that detector's findings."""
        where, params = self._where(flt)
        only = ""
        if flt is not None and flt.finding:
            only = f" WHERE f.detector = {self.PH}"
            params.append(flt.finding)
        body = (
            "FROM findings f JOIN (SELECT tseq, trace_id, session_id, turn, created_at, preset "
            f"FROM traces{where}) t ON f.tseq = t.tseq{only}"
        )
        order = "t.created_at DESC, t.tseq DESC, f.ord"
        rows, total = self._page(_FINDING_COLS, body, order, params, limit, offset)
        return FindingPage(
            rows=[_finding_row(r) for r in rows], total=total, offset=offset, limit=limit
        )

    def _where(self, flt: TraceFilter | None) -> tuple[str, list[Any]]:
        """The WHERE clause of a filter, and its parameters."""
        if flt is None:
            return "", []
        ph = self.PH
        conds: list[str] = []
        params: list[Any] = []
        for col in ("session_id", "preset", "verdict"):
            val = getattr(flt, col)
            if val is not None:
                conds.append(f"{col} = {ph}")
                params.append(val)
        if flt.tags:
            conds.append(self.TAGS_ALL)
            params.append(list(flt.tags))
        for op, when in ((">=", flt.since), ("<=", flt.until)):
            if when is not None:
                conds.append(f"created_at {op} {ph}")
                params.append(utc_naive(when))
        for col, want in (("n_warnings", flt.has_warnings), ("lost_must_keep", flt.lost_must_keep)):
            if want is not None:
                conds.append(f"{col} > 0" if want else f"{col} = 0")
        if flt.finding:
            conds.append(
                "EXISTS (SELECT 1 FROM findings f WHERE f.tseq = traces.tseq AND "
                f"f.detector = {ph})"
            )
            params.append(flt.finding)
        for term in (flt.search or "").split():
            conds.append(self._search(term))
            params += [like(term)] * 3
        return (" WHERE " + " AND ".join(conds)) if conds else "", params

    def _search(self, term: str) -> str:
        """Every word must occur in some packet's text (or id) of the trace: in one piece of
        the text, or across a cut (the piece's end and the next one's start, ``tail``; a word
        longer than TAIL_CHARS + 1 joins the two pieces themselves)."""
        ph, span = self.PH, len(term) - 1
        if span <= TAIL_CHARS:
            across = (
                "SELECT cid FROM contents WHERE tail IS NOT NULL AND "
                f"(right(text, {span}) || tail) ILIKE {ph} ESCAPE '\\'"
            )
        else:
            across = (
                "SELECT a.cid FROM contents a JOIN contents b ON b.cid = a.cid AND "
                f"b.part = a.part + 1 WHERE (right(a.text, {span}) || left(b.text, {span})) "
                f"ILIKE {ph} ESCAPE '\\'"
            )
        return (
            f"tseq IN (SELECT tseq FROM decisions WHERE packet_id ILIKE {ph} ESCAPE '\\' "
            f"OR cid IN (SELECT cid FROM contents WHERE text ILIKE {ph} ESCAPE '\\' "
            f"UNION ALL {across}))"
        )

    def facets(self) -> dict[str, list[str]]:
        """Distinct values for filter widgets: session_id, preset, verdict, tags, finding."""
        out: dict[str, list[str]] = {}
        for col in ("session_id", "preset", "verdict"):
            out[col] = [r[0] for r in self._rows(f"SELECT DISTINCT {col} FROM traces ORDER BY 1")]
        out["tags"] = [
            r[0] for r in self._rows("SELECT DISTINCT unnest(tags) AS tag FROM traces ORDER BY 1")
        ]
        out["finding"] = [
            r[0] for r in self._rows("SELECT DISTINCT detector FROM findings ORDER BY 1")
        ]
        return out

    # ---- live
    def live_calls(self, since: datetime, limit: int = 5_000) -> LiveCalls:
        """Calls captured live (traces tagged ``live``) created at or after ``since``, from
        every writer, newest first and at most ``limit`` of them, with their count in all and
        the newest one ever."""
        ph, cols, live = self.PH, self.LIVE_COLS, self.LIVE
        rows = self._rows(
            f"SELECT {cols} FROM traces WHERE {live} AND created_at >= {ph} "
            f"ORDER BY created_at DESC, tseq DESC LIMIT {ph}",
            [utc_naive(since), int(limit)],
        )
        recent = [LiveCall(aware(r[0]), r[1], int(r[2]), r[3], r[4]) for r in rows]
        total = self._one(f"SELECT count(*) FROM traces WHERE {live}")
        last = recent[0] if recent else None
        if last is None and total:
            got = self._rows(
                f"SELECT {cols} FROM traces WHERE {live} "
                "ORDER BY created_at DESC, tseq DESC LIMIT 1"
            )
            if got:
                r = got[0]
                last = LiveCall(aware(r[0]), r[1], int(r[2]), r[3], r[4])
        return LiveCalls(recent, total, last)

    def latest_change(self) -> int:
        """A number that grows whenever traces or ingest errors are added (by any writer):
        for live refresh."""
        return self._one(
            "SELECT (SELECT coalesce(max(tseq), 0) FROM traces) "
            "+ (SELECT count(*) FROM ingest_errors)"
        )


__all__ = ["ROW_FIELDS", "SORT_SQL", "Diagnosis", "SqlReads", "aware", "diagnosed", "like"]
