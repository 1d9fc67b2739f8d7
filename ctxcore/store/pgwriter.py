"""The PostgreSQL engine's bulk writer: ingest's transactions, one after another, each on one
connection of the store's pool (docs/design.md, "Store").

Each ``add`` sends its batch at once (``pginserts.plan_and_insert``: ``COPY`` of every
table), inside the open transaction; errors and file offsets go in at the commit, with the
traces they came with. Any failure rolls the transaction back and is one ``StoreError``; a
server that went away meanwhile leaves nothing of the transaction stored, and running the
ingest again stores what was lost, once (trace ids are unique). Several writers, in several
processes, write at once: the server orders them. It implements ``protocol.BulkWriter``,
through the loop both engines share (``batching.TransactionLoop``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
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

    def _tx_add(self, rows: RowTables) -> InsertResult:
        """Every table of the batch at once (``pginserts.plan_and_insert``)."""
        return pginserts.plan_and_insert(self._open_con(), self._store.texts, rows, self._texts)

    def _tx_commit(
        self, errors: Sequence[tuple[str, int, str]], offsets: Sequence[FileOffset]
    ) -> list[IngestErrorRow]:
        con = self._open_con()
        written = pginserts.insert_errors(con, errors)
        pginserts.set_file_offsets(con, offsets)
        con.execute("COMMIT")
        return written

    def _tx_stop(self) -> None:
        """Nothing runs beside the transaction: each ``add`` is sent whole."""

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

    def _fault(self, exc: BaseException) -> StoreError | None:
        return fault(self._store.url, exc) if isinstance(exc, psycopg.Error) else None


__all__ = ["PgBulkWriter"]
