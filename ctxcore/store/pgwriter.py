"""The PostgreSQL engine's bulk writer: ingest's transactions, one after another, each on one
connection of the store's pool (docs/design.md, "Store").

Each ``add`` settles at once which traces of its batch are new and inserts their ``traces``
rows (``pginserts.plan_insert``: the ids are then this transaction's), and returns; a thread
of the writer copies the batch's other rows (``pginserts.copy_children``: most of the bytes
and of the server's work) while the caller prepares the next batch, and the next ``add`` or
the commit waits for it first (psycopg lets go of the GIL while the server works). Errors and
file offsets go in at the commit, with the traces they came with. Any failure rolls the
transaction back and is one ``StoreError``; a server that went away meanwhile leaves nothing
of the transaction stored, and running the ingest again stores what was lost, once (trace
ids are unique). Several writers, in several processes, write at once: the server orders
them. It implements ``protocol.BulkWriter``, through the loop both engines share
(``batching.TransactionLoop``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

import psycopg

from ctxcore.errors import StoreError
from ctxcore.store import pginserts
from ctxcore.store.batching import TransactionLoop
from ctxcore.store.pgconn import fault
from ctxcore.store.records import FileOffset, IngestErrorRow, InsertResult
from ctxcore.store.rows import RowTables

if TYPE_CHECKING:
    from ctxcore.store.pgstore import PgStore


class PgBulkWriter(TransactionLoop):
    """Bulk loads into a PostgreSQL store, one transaction at a time, from one thread (see
    ``protocol.BulkWriter``; the loop is ``batching.TransactionLoop``'s). ``workers`` is
    taken for the protocol's sake: the server's own processes do the writing, on its CPUs."""

    def __init__(self, store: PgStore, *, workers: int = 0) -> None:
        super().__init__()
        self._store = store
        self._workers = workers
        self._con: psycopg.Connection | None = None
        self._release: Callable[[], None] | None = None
        self._texts: dict[bytes, int] = {}
        #: the thread that copies a batch's rows, and the batch it is copying
        self._sender = ThreadPoolExecutor(1, thread_name_prefix="ctxscope-pg-copy")
        self._sending: Future[None] | None = None

    @property
    def in_transaction(self) -> bool:
        return self._con is not None

    def _tx_open(self) -> None:
        """BEGIN on a connection of the pool."""
        self._store.refuse_writes()
        con, release = self._store.checkout()
        try:
            con.execute("BEGIN")
        except BaseException:
            release()
            raise
        self._con, self._release = con, release

    def _open_con(self) -> psycopg.Connection:
        if self._con is None:
            raise RuntimeError("no transaction is open")
        return self._con

    def _sent(self) -> None:
        """Wait until the batch being copied is in; its failure is raised here."""
        sending, self._sending = self._sending, None
        if sending is not None:
            sending.result()

    def _tx_add(self, rows: RowTables) -> InsertResult:
        """The batch's ``traces`` rows now, its other rows by the sender's thread (see the
        module's docstring), after the previous batch's."""
        self._sent()
        con = self._open_con()
        memory, texts = self._store.texts, self._texts
        result, tables = pginserts.plan_insert(con, memory, rows, texts)
        if tables:  # the parts are packed there too (``texts`` is the sender's until it is done)
            send = pginserts.copy_children
            self._sending = self._sender.submit(send, con, memory, rows, tables, texts)
        return result

    def _tx_commit(
        self, errors: Sequence[tuple[str, int, str]], offsets: Sequence[FileOffset]
    ) -> list[IngestErrorRow]:
        self._sent()
        con = self._open_con()
        written = pginserts.insert_errors(con, errors)
        pginserts.set_file_offsets(con, offsets)
        con.execute("COMMIT")
        return written

    def _tx_stop(self) -> None:
        """Wait for the batch being copied: the rollback needs the connection (its failure
        is left unsaid: the error on its way up, if any, says more)."""
        with contextlib.suppress(Exception):
            self._sent()

    def _tx_rollback(self) -> None:
        with contextlib.suppress(psycopg.Error):
            self._open_con().execute("ROLLBACK")

    def _tx_end(self, committed: bool) -> None:
        if committed:
            self._store.texts.remember(self._texts)
        release, self._release, self._con = self._release, None, None
        self._texts = {}
        if release is not None:
            release()

    def close(self) -> None:
        """Abort what is not committed and stop the sender's thread."""
        try:
            super().close()
        finally:
            self._sender.shutdown()

    def _fault(self, exc: BaseException) -> StoreError | None:
        return fault(self._store.url, exc) if isinstance(exc, psycopg.Error) else None


__all__ = ["PgBulkWriter"]
