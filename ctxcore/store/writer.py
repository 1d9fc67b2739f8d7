"""The DuckDB engine's bulk writer: ingest's transactions, one after another, from one thread.

Kept apart from ``tracestore`` because only bulk loads use it: ``TraceStore.bulk_writer``
hands one out, on the store's ``duck.Database``. It owns the transactions of an ingest run,
dedupes trace ids against the store and within the open transaction (and packet texts
against the texts it and the process stored: ``inserts.plan_insert``), and streams decision
rows into one INSERT while the caller prepares the next batch. What it holds for the other
tables is written each time it reaches ``HELD_BYTES``. A DuckDB failure (a full disk, a
damaged file) comes out as one ``StoreError`` saying what happened and what to do, with the
open transaction rolled back. It implements ``protocol.BulkWriter``, through the loop both
engines share (``batching.TransactionLoop``); see docs/design.md, "Store".
"""

from __future__ import annotations

import contextlib
import queue
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import duckdb
import pyarrow as pa

from ctxcore.errors import StoreError
from ctxcore.store import inserts
from ctxcore.store.batching import TransactionLoop
from ctxcore.store.duck import Database, insert_table
from ctxcore.store.faults import store_fault
from ctxcore.store.records import FileOffset, IngestErrorRow, InsertResult
from ctxcore.store.rows import _SCHEMAS, RowTables

#: Arrow bytes of the other tables' rows (traces and their JSON, texts, partitions, findings)
#: held for the open transaction before they are inserted (docs/design.md, "Store").
HELD_BYTES = 16 * 1024 * 1024


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


class BulkWriter(TransactionLoop):
    """Bulk loads into the store, one transaction at a time: the ingest of many files.

    ``begin()`` opens a transaction (``add``, ``add_errors`` and ``add_offsets`` open one
    when none is open); ``commit()`` makes everything added since durable at once and
    ``abort()`` drops it. Trace ids are deduped against the store and within the open
    transaction: a trace already stored with the same content is skipped, with different
    content it is skipped and reported (``InsertResult.conflicts``).

    Decision rows stream into one INSERT on a thread of the writer's own while the caller
    prepares the next batch; the rows of the other tables are held until they reach
    HELD_BYTES (then that INSERT ends, they are inserted, and the next batch starts
    another) or the commit, with the errors and file offsets. Because that INSERT holds the
    transaction's cursor, the ids already stored are looked up through a read cursor (it
    sees committed rows) plus the ids this transaction added; a packet text this
    transaction or an earlier commit of this process stored is named by its cid.

    One writer serves a whole run, transaction after transaction, from one thread (the one
    that holds the write lock). As a context manager it commits at the end, aborts on an
    exception, and ``close()``s: ``close`` aborts what is not committed and ends the
    writer's thread and read cursor. Any failure of ``add`` or ``commit`` aborts the open
    transaction; a DuckDB one is raised as ``StoreError`` (``store_fault``).

    With ``workers`` (processes preparing its rows meanwhile), DuckDB keeps to one thread
    until ``close`` (``Database.threads``): it measured faster than DuckDB's threads
    competing with the workers for the CPUs.
    """

    def __init__(self, db: Database, *, workers: int = 0) -> None:
        super().__init__()
        self._db = db
        self._settings = contextlib.ExitStack()
        if workers and not db.read_only:
            self._settings.enter_context(db.threads(1))
        self._cur: duckdb.DuckDBPyConnection | None = None  # the open transaction's
        self._read_cur: duckdb.DuckDBPyConnection | None = None
        self._thread: ThreadPoolExecutor | None = None
        self._stream: _DecisionStream | None = None
        #: trace_id -> (digest, source) of the traces the open transaction added
        self._added: dict[str, tuple[str, str | None]] = {}
        #: digest -> cid of the packet texts the open transaction stored
        self._texts: dict[bytes, int] = {}
        self._tables: dict[str, list[pa.Table]] = {}
        self._held = 0  # Arrow bytes in _tables

    @property
    def in_transaction(self) -> bool:
        return self._cur is not None

    def _tx_open(self) -> None:
        """BEGIN, holding the store's write lock until the transaction ends."""
        db = self._db
        db.refuse_writes()
        db.write_lock.acquire()
        try:
            cur = db.cursor()
            cur.execute("BEGIN TRANSACTION")
        except BaseException:
            db.write_lock.release()
            raise
        self._cur = cur

    def _open_cur(self) -> duckdb.DuckDBPyConnection:
        if self._cur is None:
            raise RuntimeError("no transaction is open")
        return self._cur

    def _tx_add(self, rows: RowTables) -> InsertResult:
        """The batch's decision rows into the streaming INSERT, the rest held (written once
        they reach HELD_BYTES)."""
        cur = self._open_cur()
        if self._read_cur is None:
            self._read_cur = self._db.read_cursor()
        tables, res = inserts.plan_insert(
            self._read_cur, self._db.shared, rows, self._added, self._texts
        )
        decisions = tables.pop("decisions", None)
        if decisions is not None:
            if self._stream is None:
                if self._thread is None:
                    self._thread = ThreadPoolExecutor(1, thread_name_prefix="ctxscope-ingest")
                self._stream = _DecisionStream(cur, self._thread)
            self._stream.put(decisions)
        for name, table in tables.items():
            self._tables.setdefault(name, []).append(table)
            self._held += table.nbytes
        if self._held >= HELD_BYTES:
            self._write_held(cur)
        return res

    def _write_held(self, cur: duckdb.DuckDBPyConnection) -> None:
        """End the decisions INSERT (it has every row once this returns) and insert the rows
        held for the other tables."""
        if self._stream is not None:
            stream, self._stream = self._stream, None
            stream.close()
        held = (
            "traces",
            "trace_parts",
            "contents",
            "shared_parts",
            "part_packs",
            "partitions",
            "findings",
            "cost_parts",
        )
        for name in held:
            parts = self._tables.pop(name, [])
            if parts:
                insert_table(cur, name, pa.concat_tables(parts))
        self._held = 0

    def _tx_commit(
        self, errors: Sequence[tuple[str, int, str]], offsets: Sequence[FileOffset]
    ) -> list[IngestErrorRow]:
        cur = self._open_cur()
        self._write_held(cur)
        written = inserts.insert_errors(cur, errors)
        inserts.set_file_offsets(cur, offsets)
        cur.execute("COMMIT")
        return written

    def _tx_stop(self) -> None:
        """End the decisions INSERT, whatever it holds."""
        if self._stream is not None:
            stream, self._stream = self._stream, None
            stream.abort()

    def _tx_rollback(self) -> None:
        with contextlib.suppress(duckdb.Error):
            self._open_cur().execute("ROLLBACK")

    def _tx_end(self, committed: bool) -> None:
        if committed:
            self._db.shared.remember(self._texts)
        self._cur = None
        self._added, self._tables = {}, {}
        self._texts, self._held = {}, 0
        self._db.write_lock.release()

    def _fault(self, exc: BaseException) -> StoreError | None:
        return store_fault(self._db.path, exc) if isinstance(exc, duckdb.Error) else None

    def close(self) -> None:
        """Abort what is not committed, end the writer's thread and close its read cursor
        (the watcher ingests often: nothing is left open); DuckDB's threads as they were."""
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
            self._settings.close()
