"""TraceStore: the one owner of the DuckDB file; with its bulk writer, the only SQL.

The app, the watcher and the CLI all go through this class. What the UI filters, sorts
and charts on are real columns (``traces``, ``decisions``, ``partitions``, ``findings``),
so lists and charts are SQL with server-side paging; the full trace JSON is kept too,
zstd-compressed in pieces (``trace_parts``, its size in ``json_bytes``), and each packet
text once per batch that first brings it (``contents``, named by the decisions' ``cid``).

Concurrency: DuckDB lets one process open a file read-write. Inside that process every
thread gets its own cursor (``_cur``), and writes are serialised by one lock so that the
watcher thread and the app never race on the same ``trace_id``. A second process gets
``StoreLockedError`` naming the holder's PID.

Bulk loads (ingest) go through ``BulkWriter`` (``store/writer.py``, from
``TraceStore.bulk_writer``): it owns their transactions, dedupes trace ids and streams
decision rows into one INSERT while the caller prepares the next batch.

Faults of the file itself (damaged, truncated, a full disk, a read-only folder) come out
as one ``StoreError`` saying what happened and what to do (``store_fault``); only a live
lock held by another process is ``StoreLockedError``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ctxcore import settings
from ctxcore.errors import InputError, StoreError
from ctxcore.models import Finding, Trace
from ctxcore.settings import SortKey
from ctxcore.store import migrations
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
    SessionRow,
    TraceFilter,
    TracePage,
    TraceRow,
)
from ctxcore.store.rows import (
    _F64,
    _I64,
    _STR,
    _TS,
    TAIL_CHARS,
    TEXT_KEYS,
    RowBatch,
    RowTables,
    diagnose_trace,
    prepare,
    unpack_json,
    utc_naive,
)

if TYPE_CHECKING:
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
    "SessionRow",
    "TraceFilter",
    "TracePage",
    "TraceRow",
    "TraceStore",
    "insert_table",
    "store_fault",
]

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


# Ingest contract (ctxcore/store/ingest.py): ``ingest_paths(store, paths) -> IngestCounts``
# reads .jsonl/.json/.jsonl.gz files (or folders of them), idempotent, per-file offsets.

_ROW_FIELDS = (
    "trace_id", "session_id", "turn", "created_at", "preset", "builder", "budget", "used",
    "n_packets", "n_kept", "n_truncated", "n_summarized", "n_dropped", "n_filtered",
    "n_not_rendered", "n_warnings", "lost_must_keep", "verdict", "tags", "source_trace_id",
    "n_findings", "max_severity",
)  # fmt: skip


def _comparable(trace: Trace) -> str:
    """A trace's canonical JSON without its stage timings."""
    if trace.result is not None and trace.result.timings:
        trace = trace.model_copy(update={"result": trace.result.model_copy(update={"timings": {}})})
    return trace.to_json()


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


_OFFSET_SQL = (
    'SELECT file, "offset", line, size, mtime, fingerprint, inode, head, failed FROM file_offsets'
)


def _file_offset(row: Sequence[Any]) -> FileOffset:
    inode = None if row[6] is None else int(row[6])
    return FileOffset(
        row[0], int(row[1]), int(row[2]), int(row[3]), float(row[4]), row[5], inode, *row[7:]
    )


def _packed(cur: duckdb.DuckDBPyConnection, tseqs: Sequence[int]) -> dict[int, bytes]:
    """The compressed JSON (``rows.pack_json``) of the traces stored as these tseqs, from
    their pieces (one query per 1,000). The pieces are streamed out of DuckDB and put in
    order here: sorted in SQL, every piece of the 1,000 traces was held inside DuckDB under
    its memory limit, and a read whose pieces passed the limit failed ("Out of Memory")."""
    out: dict[int, bytes] = {}
    for i in range(0, len(tseqs), 1000):
        chunk = list(tseqs[i : i + 1000])
        res = cur.execute(
            "SELECT tseq, part, data FROM trace_parts WHERE tseq IN (SELECT unnest(?::BIGINT[]))",
            [chunk],
        )
        pieces: dict[int, list[tuple[int, bytes]]] = {}
        while rows := res.fetchmany(_STREAM_ROWS):
            for tseq, part, data in rows:
                pieces.setdefault(int(tseq), []).append((int(part), data))
        for t, ps in pieces.items():
            ps.sort(key=itemgetter(0))
            out[t] = b"".join(data for _, data in ps)
    return out


#: rows fetched at a time from a streamed result
_STREAM_ROWS = 2048


def _batch_blob(prep: RowTables, k: int) -> bytes:
    """Trace ``k`` of a prepared batch, compressed (its ``trace_parts`` pieces joined)."""
    parts = prep.tables["trace_parts"]
    rows = parts.filter(pc.equal(parts.column("tseq"), k))
    return b"".join(rows.column("data").to_pylist())


@dataclass
class _Shared:
    lock: threading.RLock = field(default_factory=threading.RLock)
    tseq: int | None = None
    #: the last ``cid`` given, and digest -> cid of texts committed by this process (the
    #: TEXT_KEYS to 2 x TEXT_KEYS most recently used)
    cid: int | None = None
    #: Two generations, newest first: a text found in the older one moves to the newer,
    #: and when the newer one passes TEXT_KEYS it becomes the older (the oldest texts let go
    #: at once; letting them go one by one from the front of a dict took quadratic time).
    texts: dict[bytes, int] = field(default_factory=dict)
    older: dict[bytes, int] = field(default_factory=dict)

    def text_cid(self, key: bytes) -> int | None:
        cid = self.texts.get(key)
        if cid is None:
            cid = self.older.pop(key, None)
            if cid is not None:
                self._add({key: cid})
        return cid

    def remember(self, new: dict[bytes, int]) -> None:
        """The texts a commit stored (a rolled-back transaction's are never given here)."""
        self._add(new)

    def _add(self, new: dict[bytes, int]) -> None:
        self.texts.update(new)
        if len(self.texts) > TEXT_KEYS:
            self.older, self.texts = self.texts, {}

    def forget(self) -> None:
        self.texts, self.older = {}, {}


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


_SHARED: dict[str, _Shared] = {}
_SHARED_LOCK = threading.Lock()


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
            # another process may have written since we last did (or replaced the file)
            self._shared.tseq = self._shared.cid = None
            self._shared.forget()
        self._write_lock = self._shared.lock
        if read_only and not self.path.exists():
            raise StoreError(f"{self.path}: no such store; run `ctxscope ingest` first")
        if not read_only:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise store_fault(self.path, exc) from exc
        self._con = self._connect()
        self._closed = False

    def _connect(self) -> duckdb.DuckDBPyConnection:
        """The connection to the file, its memory capped and its schema checked."""
        try:
            con = duckdb.connect(str(self.path), read_only=self.read_only)
        except duckdb.Error as exc:
            raise store_fault(self.path, exc) from exc
        # DuckDB would cache up to 80% of RAM; the store shares the machine with an app and
        # agents, so it spills to disk past this instead (CTXSCOPE_DB_MEMORY, e.g. "2GB").
        limit = settings.db_memory_limit()
        try:
            con.execute(f"SET memory_limit = '{limit}'")
        except duckdb.Error as exc:
            con.close()
            raise StoreError(
                f"CTXSCOPE_DB_MEMORY={limit!r} is not a memory size DuckDB understands "
                "(use e.g. 512MB or 2GB)"
            ) from exc
        self._con = con
        try:
            self._check_schema(self.read_only)
        except duckdb.Error as exc:
            con.close()
            raise store_fault(self.path, exc) from exc
        except BaseException:
            con.close()
            raise
        return con

    def reopen_if_invalidated(self) -> bool:
        """Open the file again if DuckDB has given up on this connection: after a fatal
        error (a checkpoint that failed on a full disk) it refuses every statement until the
        database is opened anew, and a long-lived owner (the app's watcher) would fail on
        every read and write until restarted. What was committed before is read back from
        the file and its log; the failed transaction is gone. True when it reopened."""
        if self._closed:
            return False
        with self._write_lock:
            try:
                self._con.execute("SELECT 1").fetchall()
                return False
            except duckdb.FatalException:
                pass
            except duckdb.Error as exc:
                # "closed": an earlier attempt to open it again failed (the disk still full)
                if not any(w in str(exc).lower() for w in ("invalidated", "closed")):
                    return False
            with self._cursors_lock:
                for cur in self._cursors:
                    with contextlib.suppress(duckdb.Error):
                        cur.close()
                self._cursors.clear()
            self._local = threading.local()
            with contextlib.suppress(duckdb.Error):
                self._con.close()
            self._shared.tseq = self._shared.cid = None
            self._shared.forget()
            self._con = self._connect()  # a StoreError leaves it closed: tried again later
            log.warning("%s: opened again after a fatal error of the store", self.path)
            return True

    def _check_schema(self, read_only: bool) -> None:
        """Bring the schema up to date (refuse an old one read-only), and read a table: a
        damaged file is found on open, not in the middle of the first ingest."""
        if read_only:
            have = migrations.applied_readonly(self._con)
            if have < migrations.LATEST:
                raise StoreError(
                    f"{self.path} is at schema version {have}, this ctxscope needs "
                    f"{migrations.LATEST}; open it once without read_only to upgrade it"
                )
        else:
            with self._write_lock:
                migrations.apply(self._con)
        self._con.execute("SELECT count(*) FROM file_offsets").fetchall()

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
        """One write transaction on this thread's cursor (writes are serialised). A DuckDB
        failure is rolled back and raised as one ``StoreError`` (``store_fault``)."""
        if self.read_only:
            raise StoreError(f"{self.path} was opened read-only; it cannot be written")
        with self._write_lock:
            cur = self._cur()
            try:
                cur.execute("BEGIN TRANSACTION")
                try:
                    yield cur
                except BaseException:
                    # the error on its way up says more than a failed rollback
                    with contextlib.suppress(duckdb.Error):
                        cur.execute("ROLLBACK")
                    raise
                cur.execute("COMMIT")
            except duckdb.Error as exc:
                raise store_fault(self.path, exc) from exc

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
        with self.transaction() as cur:
            res = self.insert(cur, items, source=source, texts=texts)
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
        self._shared.remember(texts)
        return res.added

    def insert(
        self,
        cur: duckdb.DuckDBPyConnection,
        items: Sequence[tuple[Trace, bytes]],
        *,
        source: str | None = None,
        sources: Sequence[str | None] | None = None,
        texts: dict[bytes, int] | None = None,
    ) -> InsertResult:
        """Bulk-insert (trace, its JSON) pairs inside the caller's transaction.

        Same ``trace_id`` and same JSON is skipped (idempotent); same id with different
        content is skipped too and returned in ``conflicts`` for the caller to report, as
        are traces whose rows could not be built (``rejected``). ``texts`` gets the packet
        texts stored (digest -> cid), for the caller to ``_Shared.remember`` once its
        transaction commits."""
        srcs = list(sources) if sources is not None else [source] * len(items)
        tables, res = self._plan_insert(
            cur, prepare(items, srcs, self.diagnose), texts=texts if texts is not None else {}
        )
        for name, table in tables.items():
            insert_table(cur, name, table)
        return res

    def bulk_writer(self) -> BulkWriter:
        """A writer for bulk loads of prepared rows (``rows.prepare``, possibly made in
        another process): see ``BulkWriter``."""
        from ctxcore.store.writer import BulkWriter

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
        texts: dict[bytes, int] | None = None,
    ) -> tuple[dict[str, pa.Table], InsertResult]:
        """Which traces of ``prep`` are new, and their rows with ``tseq`` and ``cid``
        assigned (a packet text the open transaction or this process already stored is
        named, not stored again).

        ``cur`` looks up the stored traces; ``pending`` (trace_id -> (digest, source)) holds
        the ones inserted in the open transaction when ``cur`` cannot see them (a read
        cursor), and ``texts`` (digest -> cid) the texts it stored: both are updated with
        the new ones."""
        if not prep.ids:
            return {}, InsertResult(0, 0, [], prep.rejected)
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
        sizes = prep.tables["traces"].column("json_bytes")
        for k, (tid, digest) in enumerate(zip(prep.ids, prep.digests, strict=True)):
            prev = known.get(tid)
            if prev is not None:
                if prev[0] == digest or self._same_as_stored(
                    cur, tid, unpack_json(_batch_blob(prep, k), sizes[k].as_py())
                ):
                    skipped += 1
                else:
                    where = prep.positions[k] if prep.positions else k
                    conflicts.append((where, tid, prev[1] or "an earlier insert"))
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
                if name == "contents":
                    continue
                tseq = mapping[table.column("tseq").to_numpy()]
                if len(keep) < len(prep.ids):
                    table = table.filter(pa.array(tseq >= 0))
                    tseq = tseq[tseq >= 0]
                col = table.schema.get_field_index("tseq")
                table = table.set_column(col, "tseq", pa.array(tseq, _I64))
                if table.num_rows:
                    out[name] = table
            self._assign_texts(cur, prep, out, texts if texts is not None else {})
        return out, InsertResult(len(keep), skipped, conflicts, prep.rejected)

    def _assign_texts(
        self,
        cur: duckdb.DuckDBPyConnection,
        prep: RowTables,
        out: dict[str, pa.Table],
        texts: dict[bytes, int],
    ) -> None:
        """The new decisions' ``cid``: a text ``texts`` (this transaction) or the process
        holds keeps its cid, any other gets the next one and its pieces join ``out``."""
        decisions = out.get("decisions")
        pieces = prep.tables.get("contents")
        if decisions is None or pieces is None:
            out.pop("contents", None)
            return
        shared = self._shared
        if shared.cid is None:
            row = _first(cur.execute("SELECT coalesce(max(cid), 0) FROM contents").fetchall())
            shared.cid = int(row[0]) if row else 0
        local = pc.fill_null(decisions.column("cid"), -1).to_numpy()
        cids = np.full(len(prep.text_digests), -1, dtype=np.int64)
        fresh = np.zeros(len(prep.text_digests), dtype=bool)
        for ix in np.unique(local[local >= 0]).tolist():
            key = prep.text_digests[ix]
            cid = texts.get(key)
            if cid is None:
                cid = shared.text_cid(key)
            if cid is None:
                shared.cid += 1
                cid = texts[key] = shared.cid
                fresh[ix] = True
            cids[ix] = cid
        named = np.where(local >= 0, cids[np.maximum(local, 0)], -1)
        col = decisions.schema.get_field_index("cid")
        out["decisions"] = decisions.set_column(col, "cid", pa.array(named, _I64, mask=named < 0))
        ix = pieces.column("cid").to_numpy()
        pieces = pieces.filter(pa.array(fresh[ix]))
        if pieces.num_rows:
            new = cids[pieces.column("cid").to_numpy()]
            out["contents"] = pieces.set_column(0, "cid", pa.array(new, _I64))

    @_reading
    def undiagnosed(self) -> int:
        """Traces stored with ``diagnose=False`` whose findings are not computed yet."""
        row = _first(
            self._cur().execute("SELECT count(*) FROM traces WHERE n_findings IS NULL").fetchall()
        )
        return int(row[0]) if row else 0

    @_reading
    def diagnose_pending(self, max_traces: int = 200) -> int:
        """Compute findings for traces stored with ``diagnose=False``; returns how many
        were diagnosed (0 when none wait)."""
        if self.read_only:
            return 0
        cur = self._cur()
        rows = cur.execute(
            "SELECT tseq, json_bytes FROM traces WHERE n_findings IS NULL ORDER BY tseq LIMIT ?",
            [int(max_traces)],
        ).fetchall()
        if not rows:
            return 0
        blobs = _packed(cur, [int(r[0]) for r in rows])
        batch = RowBatch()
        updates: list[tuple[int, int, str | None, str | None]] = []
        for tseq, size in rows:
            try:
                raw = unpack_json(blobs[int(tseq)], size)
                trace = Trace.model_validate_json(raw)
                found, by = diagnose_trace(trace, raw)
            except Exception:
                # One trace the detectors cannot take is left without findings (and not
                # tried again every idle moment); the rest go on.
                log.exception("diagnostics failed on the trace stored as tseq %s", tseq)
                updates.append((int(tseq), 0, None, None))
                continue
            sev = batch.add_findings(trace.trace_id, int(tseq), found) if found else None
            updates.append((int(tseq), len(found), sev, by))
        with self.transaction() as cur:
            table = batch.tables().get("findings")
            if table is not None:
                cur.execute(
                    'DELETE FROM findings WHERE tseq IN (SELECT DISTINCT tseq FROM "table")'
                )
                insert_table(cur, "findings", table)
            cur.executemany(
                "UPDATE traces SET n_findings = ?, max_severity = ?, diagnosed_with = ? "
                "WHERE tseq = ?",
                [[n, sev, by, tseq] for tseq, n, sev, by in updates],
            )
        return len(updates)

    def _same_as_stored(self, cur: duckdb.DuckDBPyConnection, trace_id: str, raw: bytes) -> bool:
        """Is ``raw`` the stored trace, written differently (spacing, key order, another
        codec's digest)? Compared as canonical JSON: model equality alone would call
        ``1`` and ``1.0`` (or ``true``) in metadata the same. The stage timings are left out:
        they are measurements, and building or importing the same input twice differs there."""
        stored = self._trace_json(cur, trace_id)
        if stored is None:  # added earlier in this very batch: compare is not worth it
            return False
        if stored == raw:
            return True
        try:
            new = Trace.model_validate_json(raw)
        except ValueError:
            return False
        return _comparable(Trace.model_validate_json(stored)) == _comparable(new)

    @staticmethod
    def _trace_json(cur: duckdb.DuckDBPyConnection, trace_id: str) -> bytes | None:
        """The stored JSON of a trace, as UTF-8 bytes."""
        row = _first(
            cur.execute(
                "SELECT tseq, json_bytes FROM traces WHERE trace_id = ?", [trace_id]
            ).fetchall()
        )
        if row is None:
            return None
        return unpack_json(_packed(cur, [int(row[0])])[int(row[0])], row[1])

    @_reading
    def traces_json(self, trace_ids: Sequence[str]) -> list[tuple[str, bytes]]:
        """The stored JSON (UTF-8) of each trace asked for that exists, in the order asked,
        read in one query per 1,000 ids (``replay --all`` hands it to worker processes)."""
        return [(tid, unpack_json(blob, size)) for tid, blob, size in self.traces_packed(trace_ids)]

    @_reading
    def traces_packed(self, trace_ids: Sequence[str]) -> list[tuple[str, bytes, int]]:
        """``traces_json`` as stored: each trace's compressed JSON and its size, for a
        reader elsewhere to unpack (``rows.unpack_json``): ``replay --all`` leaves that to
        its worker processes, in parallel, instead of the one process reading the store."""
        out: list[tuple[str, bytes, int]] = []
        cur = self._cur()
        for i in range(0, len(trace_ids), 1000):
            chunk = list(trace_ids[i : i + 1000])
            rows = cur.execute(
                "SELECT trace_id, tseq, json_bytes FROM traces "
                "WHERE trace_id IN (SELECT unnest(?::VARCHAR[]))",
                [chunk],
            ).fetchall()
            blobs = _packed(cur, [int(r[1]) for r in rows])
            found = {r[0]: (r[0], blobs[int(r[1])], int(r[2])) for r in rows}
            out += [found[tid] for tid in chunk if tid in found]
        return out

    @_reading
    def stored_findings(
        self, trace_ids: Sequence[str], fingerprint: str
    ) -> dict[str, list[Finding]]:
        """The stored findings of each of ``trace_ids`` that were computed by code with this
        ``fingerprint`` (``ctxcore.diagnostics.fingerprint``), in their order (a trace with
        none maps to an empty list); traces diagnosed by other code, or not yet, are left
        out. One query per 1,000 ids."""
        out: dict[str, list[Finding]] = {}
        cur = self._cur()
        for i in range(0, len(trace_ids), 1000):
            chunk = list(trace_ids[i : i + 1000])
            rows = cur.execute(
                "SELECT t.trace_id, f.detector, f.severity, f.packet_ids, f.message, "
                "f.evidence_json, f.fix_json FROM traces t LEFT JOIN findings f "
                "ON f.tseq = t.tseq WHERE t.diagnosed_with = ? AND t.n_findings IS NOT NULL "
                "AND t.trace_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY t.tseq, f.ord",
                [fingerprint, chunk],
            ).fetchall()
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

    @_reading
    def session_listing(self) -> list[tuple[str, list[tuple[str, tuple[str, ...]]]]]:
        """Every session with its traces' ids and tags in turn order (then insertion, as
        ``list_traces(sort="turn")``), sessions most recently active first (as ``sessions()``
        lists them): one query for the whole store (ids and tags only, never the traces)."""
        rows = (
            self._cur()
            .execute(
                "SELECT session_id, trace_id, tags, max(created_at) OVER (PARTITION BY "
                "session_id) AS last FROM traces "
                "ORDER BY last DESC, session_id, turn, tseq"
            )
            .fetchall()
        )
        out: list[tuple[str, list[tuple[str, tuple[str, ...]]]]] = []
        for sid, tid, tags, _ in rows:
            if not out or out[-1][0] != sid:
                out.append((sid, []))
            out[-1][1].append((tid, tuple(tags or ())))
        return out

    @_reading
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

    @_reading
    def file_offset(self, file: str) -> FileOffset | None:
        rows = self._cur().execute(f"{_OFFSET_SQL} WHERE file = ?", [file]).fetchall()
        row = _first(rows)
        return None if row is None else _file_offset(row)

    def file_offsets(self) -> dict[str, FileOffset]:
        try:
            rows = self._cur().execute(_OFFSET_SQL).fetchall()
        except duckdb.Error as exc:
            raise store_fault(self.path, exc) from exc
        return {r[0]: _file_offset(r) for r in rows}

    @_reading
    def failing_files(self, limit: int = 100) -> list[FailingFile]:
        """The files ingest (or the watcher) could not read, newest first, with why: for
        the app's banner. A file leaves the list once it is read after it changed."""
        rows = (
            self._cur()
            .execute(
                "SELECT file, failed, updated_at FROM file_offsets WHERE failed IS NOT NULL "
                "ORDER BY updated_at DESC, file LIMIT ?",
                [int(limit)],
            )
            .fetchall()
        )
        return [FailingFile(r[0], r[1], _aware(r[2])) for r in rows]

    def set_file_offset(self, cur: duckdb.DuckDBPyConnection, off: FileOffset) -> None:
        """Record how far a file was read, in the caller's transaction (with its traces)."""
        self.set_file_offsets(cur, [off])

    def set_file_offsets(self, cur: duckdb.DuckDBPyConnection, offs: Sequence[FileOffset]) -> None:
        """Record several files' offsets; a file given twice keeps its last one."""
        offs = list({o.file: o for o in offs}.values())
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
                "inode": pa.array([o.inode for o in offs], pa.uint64()),
                "head": pa.array([o.head for o in offs], _STR),
                "failed": pa.array([o.failed for o in offs], _STR),
            }
        )
        # ``table`` is scanned by name from this frame (see ``insert_table``)
        cols = '"offset", line, size, mtime, updated_at, fingerprint, inode, head, failed'
        cur.execute(
            f'INSERT OR REPLACE INTO file_offsets (file, {cols}) SELECT file, {cols} FROM "table"'
        )

    # ---- reading
    def _dicts(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        cur = self._cur().execute(sql, list(params))
        names = [d[0] for d in cur.description or []]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]

    @_reading
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
            # Every word must occur in some packet's text (or id) of the trace: in one
            # piece of the text, or across a cut (the piece's end and the next one's start,
            # ``tail``; a word longer than TAIL_CHARS + 1 joins the two pieces themselves).
            pat = "%" + term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            span = len(term) - 1
            if span <= TAIL_CHARS:
                across = (
                    "SELECT cid FROM contents WHERE tail IS NOT NULL AND "
                    f"(right(text, {span}) || tail) ILIKE ? ESCAPE '\\'"
                )
            else:
                across = (
                    "SELECT a.cid FROM contents a JOIN contents b ON b.cid = a.cid AND "
                    f"b.part = a.part + 1 WHERE (right(a.text, {span}) || left(b.text, {span})) "
                    "ILIKE ? ESCAPE '\\'"
                )
            conds.append(
                "tseq IN (SELECT tseq FROM decisions WHERE packet_id ILIKE ? ESCAPE '\\' "
                "OR cid IN (SELECT cid FROM contents WHERE text ILIKE ? ESCAPE '\\' "
                f"UNION ALL {across}))"
            )
            params += [pat, pat, pat]
        return (" WHERE " + " AND ".join(conds)) if conds else "", params

    @_reading
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

    @_reading
    def list_findings(
        self, flt: TraceFilter | None = None, *, limit: int = 50, offset: int = 0
    ) -> FindingPage:
        """The findings of the traces ``list_traces(flt)`` matches, newest trace first (then
        in each trace's own order, most severe first), each with its session and turn. With
        ``flt.finding`` set, only that detector's findings."""
        where, params = self._where(flt)
        only = ""
        if flt is not None and flt.finding:
            only = " WHERE f.detector = ?"
            params.append(flt.finding)
        body = (
            "FROM findings f JOIN (SELECT tseq, trace_id, session_id, turn, created_at, preset "
            f"FROM traces{where}) t ON f.tseq = t.tseq{only}"
        )
        cur = self._cur()
        rows = cur.execute(
            "SELECT t.trace_id, t.session_id, t.turn, t.created_at, t.preset, f.detector, "
            f"f.severity, f.message, f.packet_ids, count(*) OVER () {body} "
            "ORDER BY t.created_at DESC, t.tseq DESC, f.ord LIMIT ? OFFSET ?",
            [*params, int(limit), int(offset)],
        ).fetchall()
        if rows:
            total = int(rows[0][-1])
        else:
            row = _first(cur.execute(f"SELECT count(*) {body}", params).fetchall())
            total = int(row[0]) if row else 0
        out = [
            FindingRow(
                trace_id=r[0],
                session_id=r[1],
                turn=int(r[2]),
                created_at=_aware(r[3]),
                preset=r[4],
                detector=r[5],
                severity=r[6],
                message=r[7],
                packet_ids=tuple(r[8] or ()),
            )
            for r in rows
        ]
        return FindingPage(rows=out, total=total, offset=offset, limit=limit)

    @_reading
    def get_trace(self, trace_id: str) -> Trace | None:
        raw = self._trace_json(self._cur(), trace_id)
        return None if raw is None else Trace.model_validate_json(raw)

    @_reading
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

    @_reading
    def packet_content(self, trace_id: str, packet_id: str) -> str | None:
        cur = self._cur()
        row = _first(
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

    @_reading
    def session_statuses(self, session_id: str) -> list[dict[str, Any]]:
        """Rows: turn, trace_id, packet_id, kind, status, reason, tokens_after."""
        return self._dicts(
            "SELECT t.turn, d.trace_id, d.packet_id, d.kind, d.status, d.reason, "
            "d.tokens_after FROM decisions d JOIN traces t USING (tseq) "
            "WHERE t.session_id = ? ORDER BY t.turn, t.tseq, d.ord",
            [session_id],
        )

    @_reading
    def session_partitions(self, session_id: str) -> list[dict[str, Any]]:
        """Rows: turn, trace_id, partition, budget, used, items."""
        return self._dicts(
            "SELECT t.turn, p.trace_id, p.name AS partition, p.budget, p.used, p.items "
            "FROM partitions p JOIN traces t USING (tseq) "
            "WHERE t.session_id = ? ORDER BY t.turn, t.tseq, p.ord",
            [session_id],
        )

    @_reading
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

    @_reading
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

    @_reading
    def live_calls(self, since: datetime, limit: int = 5_000) -> LiveCalls:
        """Calls captured live (traces tagged ``live``) created at or after ``since``, newest
        first and at most ``limit`` of them, with their count in all and the newest one ever."""
        cur = self._cur()
        cols = (
            "created_at, session_id, turn, trace_id, "
            "coalesce(list_filter(tags, lambda t: starts_with(t, 'source:'))[1][8:], "
            "CASE WHEN list_contains(tags, 'otlp') THEN 'otlp' ELSE '' END)"
        )
        live = "list_contains(tags, 'live')"
        rows = cur.execute(
            f"SELECT {cols} FROM traces WHERE {live} AND created_at >= ? "
            "ORDER BY created_at DESC, tseq DESC LIMIT ?",
            [utc_naive(since), int(limit)],
        ).fetchall()
        recent = [LiveCall(_aware(r[0]), r[1], int(r[2]), r[3], r[4]) for r in rows]
        total = _first(cur.execute(f"SELECT count(*) FROM traces WHERE {live}").fetchall())
        last = recent[0] if recent else None
        if last is None and total and int(total[0]):
            row = _first(
                cur.execute(
                    f"SELECT {cols} FROM traces WHERE {live} "
                    "ORDER BY created_at DESC, tseq DESC LIMIT 1"
                ).fetchall()
            )
            if row:
                last = LiveCall(_aware(row[0]), row[1], int(row[2]), row[3], row[4])
        return LiveCalls(recent, int(total[0]) if total else 0, last)

    @_reading
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
