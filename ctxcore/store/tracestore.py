"""TraceStore: the one owner of the DuckDB file and the only module with SQL.

The app, the watcher and the CLI all go through this class. What the UI filters, sorts
and charts on are real columns (``traces``, ``decisions``, ``partitions``, ``findings``),
so lists and charts are SQL with server-side paging; the full trace JSON is kept too,
zstd-compressed (``trace_zst``, its size in ``json_bytes``).

Concurrency: DuckDB lets one process open a file read-write. Inside that process every
thread gets its own cursor (``_cur``), and writes are serialised by one lock so that the
watcher thread and the app never race on the same ``trace_id``. A second process gets
``StoreLockedError`` naming the holder's PID.

Bulk loads (ingest) go through ``BulkWriter`` (``TraceStore.bulk_writer``): it owns their
transactions, dedupes trace ids and streams decision rows into one INSERT while the caller
prepares the next batch.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from ctxcore import settings
from ctxcore.errors import StoreError, StoreLockedError
from ctxcore.models import Trace
from ctxcore.settings import SortKey
from ctxcore.store import migrations
from ctxcore.store.rows import (
    _F64,
    _I64,
    _SCHEMAS,
    _STR,
    _TS,
    RowBatch,
    RowTables,
    diagnose_trace,
    prepare,
    unpack_json,
    utc_naive,
)

log = logging.getLogger("ctxscope.store")


_SORT_SQL: dict[str, str] = {
    "created_at": "created_at",
    "turn": "turn",
    "used": "used",
    "budget": "budget",
    "dropped": "n_dropped",
    "summarized": "n_summarized",
    "session_id": "session_id",
}


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
    n_findings: int = 0
    max_severity: str | None = None


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
    #: (file, line) of last lines without their newline yet: read when the writer ends them.
    pending: list[tuple[str, int]] = field(default_factory=list)


@dataclass(frozen=True)
class FileOffset:
    """How far ingest has read one file (bytes and lines), and what the file looked like."""

    file: str
    offset: int
    line: int
    size: int
    mtime: float
    fingerprint: str | None = None


@dataclass(frozen=True)
class InsertResult:
    added: int
    skipped: int
    #: (index in the batch, trace_id, where the stored one came from) for ids already
    #: stored with different content: the caller reports them, nothing is overwritten.
    conflicts: list[tuple[int, str, str]]


# Ingest contract (ctxcore/store/ingest.py): ``ingest_paths(store, paths) -> IngestCounts``
# reads .jsonl/.json/.jsonl.gz files (or folders of them), idempotent, per-file offsets.

_ROW_FIELDS = (
    "trace_id", "session_id", "turn", "created_at", "preset", "builder", "budget", "used",
    "n_packets", "n_kept", "n_truncated", "n_summarized", "n_dropped", "n_filtered",
    "n_not_rendered", "n_warnings", "lost_must_keep", "verdict", "tags", "source_trace_id",
    "n_findings", "max_severity",
)  # fmt: skip


def _first(rows: list[Any]) -> Any:
    # Results are always fetched to the end: DuckDB 2.0 refuses other work on a cursor
    # with a half-read result (fetchone), e.g. the next statement of a transaction.
    return rows[0] if rows else None


def insert_table(
    cur: duckdb.DuckDBPyConnection, name: str, rows: pa.Table | pa.RecordBatchReader
) -> None:
    """Append Arrow rows (a table, or a stream of batches) to a store table, by name."""
    cols = ", ".join(f'"{c}"' for c in rows.schema.names)
    # Scanned by name from this frame (DuckDB's replacement scan), not registered: a view
    # dropped inside a transaction lives on until the commit, and with it its Arrow data.
    cur.execute(f"INSERT INTO {name} ({cols}) SELECT {cols} FROM rows")


def _aware(dt: datetime) -> datetime:
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt


@dataclass
class _Shared:
    lock: threading.RLock = field(default_factory=threading.RLock)
    tseq: int | None = None


_SHARED: dict[str, _Shared] = {}
_SHARED_LOCK = threading.Lock()

_LOCK_RE = re.compile(r"held in (?P<prog>.+?) \(PID (?P<pid>\d+)\)")


def _open_error(path: Path, exc: duckdb.Error) -> StoreError:
    msg = str(exc)
    if "lock" in msg.lower():
        m = _LOCK_RE.search(msg)
        holder = f"PID {m['pid']} ({Path(m['prog']).name})" if m else "another process"
        return StoreLockedError(
            f"{path} is in use by {holder}; only one process can write the store: drop your "
            f"trace files into the folder that process watches (e.g. {path.parent}/) instead"
        )
    return StoreError(f"{path}: cannot open the trace store ({msg.splitlines()[0]})")


class TraceStore:
    """Owns one DuckDB file; applies migrations on open; one cursor per thread."""

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
        self._local = threading.local()
        self._cursors: list[duckdb.DuckDBPyConnection] = []
        self._cursors_lock = threading.Lock()
        # Two TraceStores on one file in one process share DuckDB's database instance;
        # they must share the write lock and the tseq counter too.
        with _SHARED_LOCK:
            self._shared = _SHARED.setdefault(str(self.path.resolve()), _Shared())
        with self._shared.lock:
            self._shared.tseq = None  # another process may have written since we last did
        self._write_lock = self._shared.lock
        if read_only and not self.path.exists():
            raise StoreError(f"{self.path}: no such store; run `ctxscope ingest` first")
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._con = duckdb.connect(str(self.path), read_only=read_only)
        except duckdb.Error as exc:
            raise _open_error(self.path, exc) from exc
        # DuckDB would cache up to 80% of RAM; the store shares the machine with an app and
        # agents, so it spills to disk past this instead (CTXSCOPE_DB_MEMORY, e.g. "2GB").
        limit = settings.db_memory_limit()
        try:
            self._con.execute(f"SET memory_limit = '{limit}'")
        except duckdb.Error as exc:
            self._con.close()
            raise StoreError(
                f"CTXSCOPE_DB_MEMORY={limit!r} is not a memory size DuckDB understands "
                "(use e.g. 512MB or 2GB)"
            ) from exc
        if read_only:
            have = migrations.applied_readonly(self._con)
            if have < migrations.LATEST:
                self._con.close()
                raise StoreError(
                    f"{self.path} is at schema version {have}, this ctxscope needs "
                    f"{migrations.LATEST}; open it once without read_only to upgrade it"
                )
        else:
            with self._write_lock:
                migrations.apply(self._con)
        self._closed = False

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._cursors_lock:
            for cur in self._cursors:
                try:
                    cur.close()
                except duckdb.Error:
                    pass
            self._cursors.clear()
        self._con.close()

    def __enter__(self) -> TraceStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _cur(self) -> duckdb.DuckDBPyConnection:
        """This thread's cursor on the owning connection."""
        if self._closed:
            raise StoreError(f"{self.path}: the store is closed")
        cur: duckdb.DuckDBPyConnection | None = getattr(self._local, "cur", None)
        if cur is None:
            cur = self._con.cursor()
            self._local.cur = cur
            with self._cursors_lock:
                self._cursors.append(cur)
        return cur

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One write transaction on this thread's cursor (writes are serialised)."""
        if self.read_only:
            raise StoreError(f"{self.path} was opened read-only; it cannot be written")
        with self._write_lock:
            cur = self._cur()
            cur.execute("BEGIN TRANSACTION")
            try:
                yield cur
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            cur.execute("COMMIT")

    # ---- writing
    def add_traces(self, traces: Iterable[Trace], *, source: str | None = None) -> int:
        """Insert traces in one transaction; returns how many were new.

        Findings (``ctxcore.models.Finding``) are computed at insert time by
        ``ctxcore.diagnostics.diagnose(trace)`` (unless ``diagnose=False``) and stored in
        a ``findings`` table (trace_id, detector, severity, packet_ids, message), so the
        Traces page can filter on them (``TraceFilter.finding``)."""
        items = [(t, t.to_json().encode("utf-8", "surrogatepass")) for t in traces]
        with self.transaction() as cur:
            res = self.insert(cur, items, source=source)
        return res.added

    def insert(
        self,
        cur: duckdb.DuckDBPyConnection,
        items: Sequence[tuple[Trace, bytes]],
        *,
        source: str | None = None,
        sources: Sequence[str | None] | None = None,
    ) -> InsertResult:
        """Bulk-insert (trace, its JSON) pairs inside the caller's transaction.

        Same ``trace_id`` and same JSON is skipped (idempotent); same id with different
        content is skipped too and returned in ``conflicts`` for the caller to report."""
        srcs = list(sources) if sources is not None else [source] * len(items)
        tables, res = self._plan_insert(cur, prepare(items, srcs, self.diagnose))
        for name, table in tables.items():
            insert_table(cur, name, table)
        return res

    def bulk_writer(self) -> BulkWriter:
        """A writer for bulk loads of prepared rows (``rows.prepare``, possibly made in
        another process): see ``BulkWriter``."""
        return BulkWriter(self)

    @contextmanager
    def threads(self, n: int) -> Iterator[None]:
        """DuckDB's thread count set to ``n`` for a while (it is database-wide): a bulk
        ingest whose worker processes use every CPU measured faster with DuckDB on one
        thread than with DuckDB's threads competing with them for the CPUs."""
        cur = self._cur()
        row = _first(cur.execute("SELECT current_setting('threads')").fetchall())
        before = int(row[0]) if row else 0
        cur.execute(f"SET threads = {int(n)}")
        try:
            yield
        finally:
            if before > 0 and not self._closed:
                self._cur().execute(f"SET threads = {before}")

    def read_cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor of its own (its own transaction: it sees committed rows only), for
        reading while another thread's statement holds this thread's cursor."""
        if self._closed:
            raise StoreError(f"{self.path}: the store is closed")
        return self._con.cursor()

    def _plan_insert(
        self,
        cur: duckdb.DuckDBPyConnection,
        prep: RowTables,
        pending: dict[str, tuple[str, str | None]] | None = None,
    ) -> tuple[dict[str, pa.Table], InsertResult]:
        """Which traces of ``prep`` are new, and their rows with ``tseq`` assigned.

        ``cur`` looks up the stored traces; ``pending`` (trace_id -> (digest, source)) holds
        the ones inserted in the open transaction when ``cur`` cannot see them (a read
        cursor); it is updated with the new ones."""
        if not prep.ids:
            return {}, InsertResult(0, 0, [])
        known: dict[str, tuple[str, str | None]] = {}
        for chunk in range(0, len(prep.ids), 2000):
            part = list(dict.fromkeys(prep.ids[chunk : chunk + 2000]))
            rows = cur.execute(
                "SELECT trace_id, content_hash, source_file FROM traces "
                "WHERE trace_id IN (SELECT unnest(?::VARCHAR[]))",
                [part],
            ).fetchall()
            known.update({r[0]: (r[1], r[2]) for r in rows})
        if pending is not None:
            known.update({t: pending[t] for t in prep.ids if t in pending})
        shared = self._shared
        if shared.tseq is None:  # then kept in memory: writes are serialised by the lock
            row = _first(cur.execute("SELECT coalesce(max(tseq), 0) FROM traces").fetchall())
            shared.tseq = int(row[0]) if row else 0
        base = shared.tseq
        keep: list[int] = []
        skipped = 0
        conflicts: list[tuple[int, str, str]] = []
        blobs = prep.tables["traces"].column("trace_zst")
        sizes = prep.tables["traces"].column("json_bytes")
        for k, (tid, digest) in enumerate(zip(prep.ids, prep.digests, strict=True)):
            prev = known.get(tid)
            if prev is not None:
                if prev[0] == digest or self._same_as_stored(
                    cur, tid, unpack_json(blobs[k].as_py(), sizes[k].as_py())
                ):
                    skipped += 1
                else:
                    conflicts.append((k, tid, prev[1] or "an earlier insert"))
                continue
            keep.append(k)
            known[tid] = (digest, prep.sources[k])
            if pending is not None:
                pending[tid] = known[tid]
        shared.tseq = base + len(keep)  # a rolled-back insert leaves a gap: harmless
        out: dict[str, pa.Table] = {}
        if keep:
            # Row k of the batch becomes tseq base+1.. in order; skipped rows map to -1.
            mapping = np.full(len(prep.ids), -1, dtype=np.int64)
            mapping[np.asarray(keep, dtype=np.int64)] = np.arange(
                base + 1, base + 1 + len(keep), dtype=np.int64
            )
            for name, table in prep.tables.items():
                tseq = mapping[table.column("tseq").to_numpy()]
                if len(keep) < len(prep.ids):
                    table = table.filter(pa.array(tseq >= 0))
                    tseq = tseq[tseq >= 0]
                col = table.schema.get_field_index("tseq")
                table = table.set_column(col, "tseq", pa.array(tseq, _I64))
                if table.num_rows:
                    out[name] = table
        return out, InsertResult(len(keep), skipped, conflicts)

    def undiagnosed(self) -> int:
        """Traces stored with ``diagnose=False`` whose findings are not computed yet."""
        row = _first(
            self._cur().execute("SELECT count(*) FROM traces WHERE n_findings IS NULL").fetchall()
        )
        return int(row[0]) if row else 0

    def diagnose_pending(self, max_traces: int = 200) -> int:
        """Compute findings for traces stored with ``diagnose=False``; returns how many
        were diagnosed (0 when none wait)."""
        if self.read_only:
            return 0
        rows = (
            self._cur()
            .execute(
                "SELECT tseq, json_bytes, trace_zst FROM traces WHERE n_findings IS NULL "
                "ORDER BY tseq LIMIT ?",
                [int(max_traces)],
            )
            .fetchall()
        )
        if not rows:
            return 0
        batch = RowBatch()
        updates: list[tuple[int, int, str | None]] = []
        for tseq, size, blob in rows:
            raw = unpack_json(blob, size)
            trace = Trace.model_validate_json(raw)
            found = diagnose_trace(trace, raw)
            sev = batch.add_findings(trace.trace_id, int(tseq), found) if found else None
            updates.append((int(tseq), len(found), sev))
        with self.transaction() as cur:
            table = batch.tables().get("findings")
            if table is not None:
                cur.execute(
                    'DELETE FROM findings WHERE tseq IN (SELECT DISTINCT tseq FROM "table")'
                )
                insert_table(cur, "findings", table)
            cur.executemany(
                "UPDATE traces SET n_findings = ?, max_severity = ? WHERE tseq = ?",
                [[n, sev, tseq] for tseq, n, sev in updates],
            )
        return len(updates)

    def _same_as_stored(self, cur: duckdb.DuckDBPyConnection, trace_id: str, raw: bytes) -> bool:
        stored = self._trace_json(cur, trace_id)
        if stored is None:  # added earlier in this very batch: compare is not worth it
            return False
        return bool(Trace.model_validate_json(stored) == Trace.model_validate_json(raw))

    @staticmethod
    def _trace_json(cur: duckdb.DuckDBPyConnection, trace_id: str) -> bytes | None:
        """The stored JSON of a trace, as UTF-8 bytes."""
        row = _first(
            cur.execute(
                "SELECT json_bytes, trace_zst FROM traces WHERE trace_id = ?", [trace_id]
            ).fetchall()
        )
        return None if row is None else unpack_json(row[1], row[0])

    def findings(self, trace_id: str) -> list[dict[str, Any]]:
        """Rows: detector, severity, packet_ids, message (plus evidence and fix)."""
        rows = self._dicts(
            "SELECT detector, severity, packet_ids, message, evidence_json, fix_json "
            "FROM findings WHERE trace_id = ? ORDER BY ord",
            [trace_id],
        )
        for r in rows:
            ev, fx = r.pop("evidence_json"), r.pop("fix_json")
            r["evidence"] = json.loads(ev) if ev else {}
            r["fix"] = json.loads(fx) if fx else None
        return rows

    def add_ingest_error(self, file: str, line: int, message: str) -> None:
        with self.transaction() as cur:
            self.insert_errors(cur, [(file, line, message)])

    def insert_errors(
        self, cur: duckdb.DuckDBPyConnection, errors: Sequence[tuple[str, int, str]]
    ) -> list[IngestErrorRow]:
        """Add errors not already recorded (same file, line and message) in the caller's
        transaction; re-reading a changed .json file does not repeat its errors."""
        if not errors:
            return []
        now = utc_naive(datetime.now(UTC))
        table = pa.table(  # noqa: F841 - read by name by the SQL below
            {
                "file": [e[0] for e in errors],
                "line": [e[1] for e in errors],
                "message": [e[2] for e in errors],
                "at": pa.array([now] * len(errors), _TS),
            }
        )
        # ``table`` is scanned by name from this frame (see ``insert_table``)
        cur.execute(
            'INSERT INTO ingest_errors (file, line, message, "at") '
            'SELECT DISTINCT e.file, e.line, e.message, e."at" FROM "table" e '
            "WHERE NOT EXISTS (SELECT 1 FROM ingest_errors x WHERE x.file = e.file "
            "AND x.line = e.line AND x.message = e.message)"
        )
        return [IngestErrorRow(f, ln, m, now.replace(tzinfo=UTC)) for f, ln, m in errors]

    def file_offset(self, file: str) -> FileOffset | None:
        row = (
            self._cur()
            .execute(
                'SELECT file, "offset", line, size, mtime, fingerprint FROM file_offsets '
                "WHERE file = ?",
                [file],
            )
            .fetchall()
        )
        row = _first(row)
        if row is None:
            return None
        return FileOffset(row[0], int(row[1]), int(row[2]), int(row[3]), float(row[4]), row[5])

    def file_offsets(self) -> dict[str, FileOffset]:
        rows = (
            self._cur()
            .execute('SELECT file, "offset", line, size, mtime, fingerprint FROM file_offsets')
            .fetchall()
        )
        return {
            r[0]: FileOffset(r[0], int(r[1]), int(r[2]), int(r[3]), float(r[4]), r[5]) for r in rows
        }

    def set_file_offset(self, cur: duckdb.DuckDBPyConnection, off: FileOffset) -> None:
        """Record how far a file was read, in the caller's transaction (with its traces)."""
        self.set_file_offsets(cur, [off])

    def set_file_offsets(self, cur: duckdb.DuckDBPyConnection, offs: Sequence[FileOffset]) -> None:
        if not offs:
            return
        now = utc_naive(datetime.now(UTC))
        table = pa.table(  # noqa: F841 - read by name by the SQL below
            {
                "file": [o.file for o in offs],
                "offset": pa.array([o.offset for o in offs], _I64),
                "line": pa.array([o.line for o in offs], _I64),
                "size": pa.array([o.size for o in offs], _I64),
                "mtime": pa.array([o.mtime for o in offs], _F64),
                "updated_at": pa.array([now] * len(offs), _TS),
                "fingerprint": pa.array([o.fingerprint for o in offs], _STR),
            }
        )
        # ``table`` is scanned by name from this frame (see ``insert_table``)
        cur.execute(
            'INSERT OR REPLACE INTO file_offsets (file, "offset", line, size, mtime, '
            'updated_at, fingerprint) SELECT file, "offset", line, size, mtime, '
            'updated_at, fingerprint FROM "table"'
        )

    # ---- reading
    def _dicts(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        cur = self._cur().execute(sql, list(params))
        names = [d[0] for d in cur.description or []]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]

    def count(self) -> int:
        row = self._cur().execute("SELECT count(*) FROM traces").fetchall()
        row = _first(row)
        return int(row[0]) if row else 0

    def _where(self, flt: TraceFilter | None) -> tuple[str, list[Any]]:
        if flt is None:
            return "", []
        conds: list[str] = []
        params: list[Any] = []
        for col in ("session_id", "preset", "verdict"):
            val = getattr(flt, col)
            if val is not None:
                conds.append(f"{col} = ?")
                params.append(val)
        if flt.tags:
            conds.append("list_has_all(tags, ?::VARCHAR[])")
            params.append(list(flt.tags))
        if flt.since is not None:
            conds.append("created_at >= ?")
            params.append(utc_naive(flt.since))
        if flt.until is not None:
            conds.append("created_at <= ?")
            params.append(utc_naive(flt.until))
        if flt.has_warnings is not None:
            conds.append("n_warnings > 0" if flt.has_warnings else "n_warnings = 0")
        if flt.lost_must_keep is not None:
            conds.append("lost_must_keep > 0" if flt.lost_must_keep else "lost_must_keep = 0")
        if flt.finding:
            conds.append(
                "EXISTS (SELECT 1 FROM findings f WHERE f.tseq = traces.tseq AND f.detector = ?)"
            )
            params.append(flt.finding)
        for term in (flt.search or "").split():
            # Every word must occur in some packet's content (or id) of the trace.
            pat = "%" + term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            conds.append(
                "tseq IN (SELECT tseq FROM decisions WHERE content ILIKE ? ESCAPE '\\' "
                "OR packet_id ILIKE ? ESCAPE '\\')"
            )
            params += [pat, pat]
        return (" WHERE " + " AND ".join(conds)) if conds else "", params

    def list_traces(
        self,
        flt: TraceFilter | None = None,
        *,
        sort: SortKey = "created_at",
        descending: bool = True,
        limit: int = 50,
        offset: int = 0,
    ) -> TracePage:
        if sort not in _SORT_SQL:
            raise StoreError(f"cannot sort by {sort!r}; choose one of {', '.join(_SORT_SQL)}")
        where, params = self._where(flt)
        order = "DESC" if descending else "ASC"
        cols = ", ".join(_ROW_FIELDS)
        cur = self._cur()
        rows = cur.execute(
            f"SELECT {cols}, count(*) OVER () FROM traces{where} "
            f"ORDER BY {_SORT_SQL[sort]} {order}, tseq {order} LIMIT ? OFFSET ?",
            [*params, int(limit), int(offset)],
        ).fetchall()
        if rows:
            total = int(rows[0][-1])
        else:
            row = cur.execute(f"SELECT count(*) FROM traces{where}", params).fetchall()
            row = _first(row)
            total = int(row[0]) if row else 0
        out = []
        for r in rows:
            d = dict(zip(_ROW_FIELDS, r[:-1], strict=True))
            d["created_at"] = _aware(d["created_at"])
            d["tags"] = tuple(d["tags"] or ())
            d["n_findings"] = int(d["n_findings"] or 0)
            out.append(TraceRow(**d))
        return TracePage(rows=out, total=total, offset=offset, limit=limit)

    def get_trace(self, trace_id: str) -> Trace | None:
        raw = self._trace_json(self._cur(), trace_id)
        return None if raw is None else Trace.model_validate_json(raw)

    def decisions(self, trace_id: str) -> list[dict[str, Any]]:
        """Per-packet rows: packet_id, kind, tokens_before, tokens_after, relevance, recency,
        score, rank, status, reason, reason_text, partition, budget_left, must_keep."""
        return self._dicts(
            "SELECT packet_id, kind, tokens_before, tokens_after, relevance, recency, score, "
            "rank, status, reason, reason_text, partition, budget_left, must_keep "
            "FROM decisions WHERE tseq = (SELECT tseq FROM traces WHERE trace_id = ?) "
            "ORDER BY ord",
            [trace_id],
        )

    def packet_content(self, trace_id: str, packet_id: str) -> str | None:
        row = (
            self._cur()
            .execute(
                "SELECT content FROM decisions WHERE tseq = (SELECT tseq FROM traces "
                "WHERE trace_id = ?) AND packet_id = ?",
                [trace_id, packet_id],
            )
            .fetchall()
        )
        row = _first(row)
        return None if row is None else row[0]

    def sessions(self) -> list[SessionRow]:
        rows = (
            self._cur()
            .execute(
                "SELECT session_id, count(*), min(turn), max(turn), min(created_at), "
                "max(created_at) FROM traces GROUP BY session_id ORDER BY max(created_at) DESC"
            )
            .fetchall()
        )
        return [
            SessionRow(r[0], int(r[1]), int(r[2]), int(r[3]), _aware(r[4]), _aware(r[5]))
            for r in rows
        ]

    def session_statuses(self, session_id: str) -> list[dict[str, Any]]:
        """Rows: turn, trace_id, packet_id, kind, status, reason, tokens_after."""
        return self._dicts(
            "SELECT t.turn, d.trace_id, d.packet_id, d.kind, d.status, d.reason, "
            "d.tokens_after FROM decisions d JOIN traces t USING (tseq) "
            "WHERE t.session_id = ? ORDER BY t.turn, t.tseq, d.ord",
            [session_id],
        )

    def session_partitions(self, session_id: str) -> list[dict[str, Any]]:
        """Rows: turn, trace_id, partition, budget, used, items."""
        return self._dicts(
            "SELECT t.turn, p.trace_id, p.name AS partition, p.budget, p.used, p.items "
            "FROM partitions p JOIN traces t USING (tseq) "
            "WHERE t.session_id = ? ORDER BY t.turn, t.tseq, p.ord",
            [session_id],
        )

    def facets(self) -> dict[str, list[str]]:
        """Distinct values for filter widgets: session_id, preset, tags, verdict."""
        cur = self._cur()
        out: dict[str, list[str]] = {}
        for col in ("session_id", "preset", "verdict"):
            rows = cur.execute(f"SELECT DISTINCT {col} FROM traces ORDER BY 1").fetchall()
            out[col] = [r[0] for r in rows]
        rows = cur.execute("SELECT DISTINCT unnest(tags) AS tag FROM traces ORDER BY 1").fetchall()
        out["tags"] = [r[0] for r in rows]
        rows = cur.execute("SELECT DISTINCT detector FROM findings ORDER BY 1").fetchall()
        out["finding"] = [r[0] for r in rows]
        return out

    def ingest_errors(self, limit: int = 200) -> list[IngestErrorRow]:
        rows = (
            self._cur()
            .execute(
                'SELECT file, line, message, "at" FROM ingest_errors '
                'ORDER BY "at" DESC, file, line LIMIT ?',
                [int(limit)],
            )
            .fetchall()
        )
        return [IngestErrorRow(r[0], int(r[1]), r[2], _aware(r[3])) for r in rows]

    def latest_change(self) -> int:
        """A number that grows whenever traces are added (for live refresh)."""
        row = (
            self._cur()
            .execute(
                "SELECT (SELECT coalesce(max(tseq), 0) FROM traces) "
                "+ (SELECT count(*) FROM ingest_errors)"
            )
            .fetchall()
        )
        row = _first(row)
        return int(row[0]) if row else 0


class _DecisionStream:
    """One ``INSERT INTO decisions`` per transaction, fed batch by batch while the caller
    prepares the next ones. DuckDB pulls the rows from a queue (without holding the GIL while
    it writes), and one append this size goes to disk once: separate inserts of a few hundred
    thousand rows each left DuckDB a rewrite of about a second at its next checkpoint."""

    def __init__(self, cur: duckdb.DuckDBPyConnection, thread: ThreadPoolExecutor) -> None:
        self._q: queue.Queue[pa.Table | None] = queue.Queue(maxsize=8)
        schema = _SCHEMAS["decisions"]

        def batches() -> Iterator[pa.RecordBatch]:
            while True:
                table = self._q.get()
                if table is None:
                    return
                yield from table.cast(schema).to_batches()

        def run() -> None:
            insert_table(cur, "decisions", pa.RecordBatchReader.from_batches(schema, batches()))

        self._job: Future[None] = thread.submit(run)

    def put(self, table: pa.Table | None) -> None:
        while True:
            if self._job.done():  # the INSERT failed: raise its error here
                self._job.result()
                raise RuntimeError("the decisions insert stopped before its input ended")
            try:
                self._q.put(table, timeout=0.1)
                return
            except queue.Full:
                continue

    def close(self) -> None:
        """End the input; returns once the INSERT has every row (raising what it raised)."""
        self.put(None)
        self._job.result()

    def abort(self) -> None:
        """End the INSERT, whatever it holds (the transaction is rolled back after)."""
        with contextlib.suppress(Exception):
            self.put(None)
        with contextlib.suppress(Exception):
            self._job.result()


class BulkWriter:
    """Bulk loads into the store, one transaction at a time: the ingest of many files.

    ``begin()`` opens a transaction (``add``, ``add_errors`` and ``add_offsets`` open one
    when none is open); ``commit()`` makes everything added since durable at once and
    ``abort()`` drops it. Trace ids are deduped against the store and within the open
    transaction: a trace already stored with the same content is skipped, with different
    content it is skipped and reported (``InsertResult.conflicts``).

    Decision rows (most of the bytes) stream into one INSERT on a thread of the writer's
    own while the caller prepares the next batch; the other tables and the errors and file
    offsets are inserted at the commit (they are small). Because that INSERT holds the
    transaction's cursor, the ids already stored are looked up through a read cursor (it
    sees committed rows) plus the ids this transaction added.

    One writer serves a whole run, transaction after transaction, from one thread (the one
    that holds the write lock). As a context manager it commits at the end, aborts on an
    exception, and ``close()``s: ``close`` aborts what is not committed and ends the
    writer's thread and read cursor.
    """

    def __init__(self, store: TraceStore) -> None:
        self._store = store
        self._cur: duckdb.DuckDBPyConnection | None = None  # the open transaction's
        self._read_cur: duckdb.DuckDBPyConnection | None = None
        self._thread: ThreadPoolExecutor | None = None
        self._stream: _DecisionStream | None = None
        #: trace_id -> (digest, source) of the traces the open transaction added
        self._added: dict[str, tuple[str, str | None]] = {}
        self._tables: dict[str, list[pa.Table]] = {}
        self._errors: list[tuple[str, int, str]] = []
        self._offsets: list[FileOffset] = []

    @property
    def in_transaction(self) -> bool:
        return self._cur is not None

    def begin(self) -> None:
        """Open a transaction (taking the store's write lock) unless one is open."""
        self._open()

    def _open(self) -> duckdb.DuckDBPyConnection:
        """The open transaction's cursor, after opening one if none is open."""
        if self._cur is not None:
            return self._cur
        store = self._store
        if store.read_only:
            raise StoreError(f"{store.path} was opened read-only; it cannot be written")
        store._write_lock.acquire()
        try:
            cur = store._cur()
            cur.execute("BEGIN TRANSACTION")
        except BaseException:
            store._write_lock.release()
            raise
        self._cur = cur
        return cur

    def add(self, rows: RowTables) -> InsertResult:
        """Insert the new traces of ``rows`` in the open transaction (their decision rows
        at once, the rest at the commit); which were new, skipped or conflicting."""
        cur = self._open()
        if self._read_cur is None:
            self._read_cur = self._store.read_cursor()
        tables, res = self._store._plan_insert(self._read_cur, rows, self._added)
        decisions = tables.pop("decisions", None)
        if decisions is not None:
            if self._stream is None:
                if self._thread is None:
                    self._thread = ThreadPoolExecutor(1, thread_name_prefix="ctxscope-ingest")
                self._stream = _DecisionStream(cur, self._thread)
            self._stream.put(decisions)
        for name, table in tables.items():
            self._tables.setdefault(name, []).append(table)
        return res

    def add_errors(self, errors: Sequence[tuple[str, int, str]]) -> None:
        """(file, line, message) rows for ``ingest_errors``, written at the commit."""
        self.begin()
        self._errors += errors

    def add_offsets(self, offsets: Sequence[FileOffset]) -> None:
        """How far files were read, written at the commit: with the traces they held."""
        self.begin()
        self._offsets += offsets

    def commit(self) -> list[IngestErrorRow]:
        """Write what waits and commit; returns the errors written (none without an open
        transaction). On failure the transaction is rolled back and the error raised."""
        cur = self._cur
        if cur is None:
            return []
        try:
            if self._stream is not None:
                stream, self._stream = self._stream, None
                stream.close()  # the decisions INSERT has every row once this returns
            for name in ("traces", "partitions", "findings"):
                parts = self._tables.pop(name, [])
                if parts:
                    insert_table(cur, name, pa.concat_tables(parts))
            errors = self._store.insert_errors(cur, self._errors)
            self._store.set_file_offsets(cur, self._offsets)
            cur.execute("COMMIT")
        except BaseException:
            self.abort()
            raise
        self._end()
        return errors

    def abort(self) -> None:
        """Roll the open transaction back: nothing added since it began is stored."""
        if self._stream is not None:
            stream, self._stream = self._stream, None
            stream.abort()
        cur = self._cur
        if cur is None:
            return
        try:
            # the error on its way up (if any) says more than a failed rollback
            with contextlib.suppress(duckdb.Error):
                cur.execute("ROLLBACK")
        finally:
            self._end()

    def _end(self) -> None:
        self._cur = None
        self._added, self._tables, self._errors, self._offsets = {}, {}, [], []
        self._store._write_lock.release()

    def close(self) -> None:
        """Abort what is not committed, end the writer's thread and close its read cursor
        (the watcher ingests often: nothing is left open)."""
        try:
            self.abort()
        finally:
            if self._thread is not None:
                self._thread.shutdown()
                self._thread = None
            if self._read_cur is not None:
                with contextlib.suppress(duckdb.Error):
                    self._read_cur.close()
                self._read_cur = None

    def __enter__(self) -> BulkWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        try:
            if exc_type is None:
                self.commit()
        finally:
            self.close()
