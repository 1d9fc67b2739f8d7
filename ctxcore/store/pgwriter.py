"""The PostgreSQL engine's bulk writer: ingest's transactions, one after another, each on one
connection of the store's pool (docs/design.md, "Store").

Each ``add`` sends its batch at once (``pginserts.plan_and_insert``: ``COPY`` of every
table), inside the open transaction; errors and file offsets go in at the commit, with the
traces they came with. Any failure rolls the transaction back and is one ``StoreError``; a
server that went away meanwhile leaves nothing of the transaction stored, and running the
ingest again stores what was lost, once (trace ids are unique). Several writers, in several
processes, write at once: the server orders them. It implements ``protocol.BulkWriter``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import psycopg

from ctxcore.store import pginserts
from ctxcore.store.pgconn import fault
from ctxcore.store.records import FileOffset, IngestErrorRow, InsertResult
from ctxcore.store.rows import RowTables

if TYPE_CHECKING:
    from ctxcore.store.pgstore import PgStore


class PgBulkWriter:
    """Bulk loads into a PostgreSQL store, one transaction at a time, from one thread (see
    ``protocol.BulkWriter``). ``workers`` is taken for the protocol's sake: the server's own
    processes do the writing, on its CPUs."""

    def __init__(self, store: PgStore, *, workers: int = 0) -> None:
        self._store = store
        self._workers = workers
        self._con: psycopg.Connection | None = None
        self._release: Callable[[], None] | None = None
        self._texts: dict[bytes, int] = {}
        self._errors: list[tuple[str, int, str]] = []
        self._offsets: list[FileOffset] = []

    @property
    def in_transaction(self) -> bool:
        return self._con is not None

    def begin(self) -> None:
        """Open a transaction (on a connection of the pool) unless one is open."""
        self._open()

    def _open(self) -> psycopg.Connection:
        if self._con is not None:
            return self._con
        self._store.refuse_writes()
        con, release = self._store.checkout()
        try:
            con.execute("BEGIN")
        except psycopg.Error as exc:
            release()
            raise fault(self._store.url, exc) from exc
        self._con, self._release = con, release
        return con

    def add(self, rows: RowTables) -> InsertResult:
        """Insert the new traces of ``rows`` in the open transaction; which were new,
        skipped or conflicting."""
        con = self._open()
        try:
            return pginserts.plan_and_insert(con, self._store.texts, rows, self._texts)
        except BaseException as exc:
            self.abort()
            if isinstance(exc, psycopg.Error):
                raise fault(self._store.url, exc) from exc
            raise

    def add_errors(self, errors: Sequence[tuple[str, int, str]]) -> None:
        """(file, line, message) rows for ``ingest_errors``, written at the commit."""
        self.begin()
        self._errors += errors

    def add_offsets(self, offsets: Sequence[FileOffset]) -> None:
        """How far files were read, written at the commit: with the traces they held."""
        self.begin()
        self._offsets += offsets

    def commit(self) -> list[IngestErrorRow]:
        """Write the errors and offsets and commit; the errors written (none without an open
        transaction). On failure the transaction is rolled back and the error raised."""
        con = self._con
        if con is None:
            return []
        try:
            errors = pginserts.insert_errors(con, self._errors)
            pginserts.set_file_offsets(con, self._offsets)
            con.execute("COMMIT")
        except BaseException as exc:
            self.abort()
            if isinstance(exc, psycopg.Error):
                raise fault(self._store.url, exc) from exc
            raise
        self._store.texts.remember(self._texts)
        self._end()
        return errors

    def abort(self) -> None:
        """Roll the open transaction back: nothing added since it began is stored."""
        con = self._con
        if con is None:
            return
        try:
            # the error on its way up (if any) says more than a failed rollback
            with contextlib.suppress(psycopg.Error):
                con.execute("ROLLBACK")
        finally:
            self._end()

    def _end(self) -> None:
        release, self._release, self._con = self._release, None, None
        self._texts, self._errors, self._offsets = {}, [], []
        if release is not None:
            release()

    def close(self) -> None:
        """Abort what is not committed and give the connection back to the pool."""
        self.abort()

    def __enter__(self) -> PgBulkWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        try:
            if exc_type is None:
                self.commit()
        finally:
            self.close()


__all__ = ["PgBulkWriter"]
