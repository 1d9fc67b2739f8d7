"""The DuckDB engine's connection: one file opened by this process, a cursor per thread, and
the write lock and counters every ``Database`` on that file shares.

``TraceStore`` (the engine's ``Store``) reads through it and its bulk writer writes through
it; both keep their SQL to themselves and to ``inserts``. Nothing outside the engine's modules
(``duck``, ``inserts``, ``tracestore``, ``writer``, ``reading``, ``migrations``) sees a
cursor (docs/design.md, "Store").

Concurrency: DuckDB lets one process open a file read-write. Inside that process every
thread gets its own cursor (``cursor``), and writes are serialised by one lock so that the
watcher thread and the app never race on the same ``trace_id``. A second process gets
``StoreLockedError`` naming the holder's PID.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from ctxcore import settings
from ctxcore.errors import StoreError
from ctxcore.store import migrations
from ctxcore.store.faults import store_fault
from ctxcore.store.rows import TEXT_KEYS

log = logging.getLogger("ctxscope.store")

#: rows fetched at a time from a streamed result
STREAM_ROWS = 2048


def first(rows: list[Any]) -> Any:
    """The first row of a fetched result, or None. Results are always fetched to the end:
    DuckDB 2.0 refuses other work on a cursor with a half-read result (fetchone), e.g. the
    next statement of a transaction."""
    return rows[0] if rows else None


def insert_table(
    cur: duckdb.DuckDBPyConnection, name: str, rows: pa.Table | pa.RecordBatchReader
) -> None:
    """Append Arrow rows (a table, or a stream of batches) to a store table, by name."""
    cols = ", ".join(f'"{c}"' for c in rows.schema.names)
    # Scanned by name from this frame (DuckDB's replacement scan), not registered: a view
    # dropped inside a transaction lives on until the commit, and with it its Arrow data.
    cur.execute(f"INSERT INTO {name} ({cols}) SELECT {cols} FROM rows")


@dataclass
class Shared:
    """What every ``Database`` of this process on one file shares: the write lock, the last
    ``tseq`` and ``cid`` given, and digest -> cid of the packet texts committed by this
    process (the TEXT_KEYS to 2 x TEXT_KEYS most recently used)."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    tseq: int | None = None
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
        """Another process may have written since: the counters and texts are read anew."""
        self.tseq = self.cid = None
        self.texts, self.older = {}, {}


_SHARED: dict[str, Shared] = {}
_SHARED_LOCK = threading.Lock()


def migrate_file(path: Path) -> list[str]:
    """Run the pending migrations of the DuckDB store at ``path`` (``ctxscope migrate``);
    what ran, one "version name" each. A missing file is an error, not a new store."""
    if not path.is_file():
        raise StoreError(f"{path}: no such store; run `ctxscope ingest` first")
    try:
        con = duckdb.connect(str(path))
    except duckdb.Error as exc:
        raise store_fault(path, exc) from exc
    try:
        ran = set(migrations.apply(con))
    except duckdb.Error as exc:
        raise store_fault(path, exc) from exc
    finally:
        con.close()
    return [f"{s.version} {s.name}" for s in migrations.MIGRATIONS if s.version in ran]


class Database:
    """One DuckDB file opened by this process: migrations applied on open (an out-of-date
    file refused read-only), memory capped, one cursor per thread, writes serialised."""

    def __init__(self, path: Path, *, read_only: bool) -> None:
        self.path = path
        self.read_only = read_only
        self._local = threading.local()
        self._cursors: list[duckdb.DuckDBPyConnection] = []
        self._cursors_lock = threading.Lock()
        # Two stores on one file in one process share DuckDB's database instance; they
        # must share the write lock and the tseq counter too.
        with _SHARED_LOCK:
            self.shared = _SHARED.setdefault(str(path.resolve()), Shared())
        with self.shared.lock:
            self.shared.forget()  # another process may have written since we last did
        self.write_lock = self.shared.lock
        if read_only and not path.exists():
            raise StoreError(f"{path}: no such store; run `ctxscope ingest` first")
        if not read_only:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise store_fault(path, exc) from exc
        self._con = self._connect()
        self.closed = False

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
        try:
            self._check_schema(con)
        except duckdb.Error as exc:
            con.close()
            raise store_fault(self.path, exc) from exc
        except BaseException:
            con.close()
            raise
        return con

    def _check_schema(self, con: duckdb.DuckDBPyConnection) -> None:
        """Bring the schema up to date (refuse an old one read-only), and read a table: a
        damaged file is found on open, not in the middle of the first ingest."""
        if self.read_only:
            have = migrations.applied_readonly(con)
            if have < migrations.LATEST:
                raise StoreError(
                    f"{self.path} is at schema version {have}, this ctxscope needs "
                    f"{migrations.LATEST}; open it once without read_only to upgrade it"
                )
        else:
            with self.write_lock:
                migrations.apply(con)
        con.execute("SELECT count(*) FROM file_offsets").fetchall()

    def reopen_if_invalidated(self) -> bool:
        """Open the file again if DuckDB has given up on this connection: after a fatal
        error (a checkpoint that failed on a full disk) it refuses every statement until the
        database is opened anew. What was committed before is read back from the file and its
        log; the failed transaction is gone. True when it reopened."""
        if self.closed:
            return False
        with self.write_lock:
            try:
                self._con.execute("SELECT 1").fetchall()
                return False
            except duckdb.FatalException:
                pass
            except duckdb.Error as exc:
                # "closed": an earlier attempt to open it again failed (the disk still full)
                if not any(w in str(exc).lower() for w in ("invalidated", "closed")):
                    return False
            self._close_cursors()
            self._local = threading.local()
            with contextlib.suppress(duckdb.Error):
                self._con.close()
            self.shared.forget()
            self._con = self._connect()  # a StoreError leaves it closed: tried again later
            log.warning("%s: opened again after a fatal error of the store", self.path)
            return True

    def _close_cursors(self) -> None:
        with self._cursors_lock:
            for cur in self._cursors:
                with contextlib.suppress(duckdb.Error):
                    cur.close()
            self._cursors.clear()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._close_cursors()
        self._con.close()

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """This thread's cursor on the owning connection."""
        if self.closed:
            raise StoreError(f"{self.path}: the store is closed")
        cur: duckdb.DuckDBPyConnection | None = getattr(self._local, "cur", None)
        if cur is None:
            cur = self._con.cursor()
            self._local.cur = cur
            with self._cursors_lock:
                self._cursors.append(cur)
        return cur

    def read_cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor of its own (its own transaction: it sees committed rows only), for
        reading while another thread's statement holds this thread's cursor."""
        if self.closed:
            raise StoreError(f"{self.path}: the store is closed")
        return self._con.cursor()

    def refuse_writes(self) -> None:
        """``StoreError`` when the file was opened read-only."""
        if self.read_only:
            raise StoreError(f"{self.path} was opened read-only; it cannot be written")

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One write transaction on this thread's cursor (writes are serialised). A DuckDB
        failure is rolled back and raised as one ``StoreError`` (``store_fault``)."""
        self.refuse_writes()
        with self.write_lock:
            cur = self.cursor()
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

    @contextmanager
    def threads(self, n: int) -> Iterator[None]:
        """DuckDB's thread count set to ``n`` for a while (it is database-wide): a bulk
        ingest whose worker processes use every CPU measured faster with DuckDB on one
        thread than with DuckDB's threads competing with them for the CPUs."""
        cur = self.cursor()
        row = first(cur.execute("SELECT current_setting('threads')").fetchall())
        before = int(row[0]) if row else 0
        cur.execute(f"SET threads = {int(n)}")
        try:
            yield
        finally:
            if before > 0 and not self.closed:
                self.cursor().execute(f"SET threads = {before}")


__all__ = ["STREAM_ROWS", "Database", "Shared", "first", "insert_table", "migrate_file"]
