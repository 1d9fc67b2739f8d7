"""What both engines' bulk writers do the same way (docs/design.md, "Store"): the loop of an
ingest run's transactions, one after another from one thread, that ``protocol.BulkWriter``
describes. ``begin`` opens a transaction when none is open (``add``, ``add_errors`` and
``add_offsets`` open one too); errors and file offsets are held and written at the commit,
with the traces they came with; any failure of ``add`` or ``commit`` rolls the open
transaction back and is raised, an engine's own error worded as one ``StoreError``; as a
context manager it commits at the end, aborts on an exception, and closes.

An engine's writer (``writer.BulkWriter`` on DuckDB, ``pgwriter.PgBulkWriter`` on
PostgreSQL) subclasses ``TransactionLoop`` and gives only what touches its connections and
SQL: opening a transaction, inserting a batch, writing the held state and committing, rolling
back, and what its driver's errors mean.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import Self

from ctxcore.errors import StoreError
from ctxcore.store.records import FileOffset, IngestErrorRow, InsertResult
from ctxcore.store.rows import RowTables


class TransactionLoop(ABC):
    """An ingest run's transactions, one after another, from one thread (see the module's
    docstring); a subclass gives the engine's parts (the ``_tx_*`` methods and ``_fault``)."""

    def __init__(self) -> None:
        self._errors: list[tuple[str, int, str]] = []
        self._offsets: list[FileOffset] = []

    # ---- the engine's parts
    @property
    @abstractmethod
    def in_transaction(self) -> bool:
        """Is a transaction open?"""

    @abstractmethod
    def _tx_open(self) -> None:
        """Open a transaction (none is open)."""

    @abstractmethod
    def _tx_add(self, rows: RowTables) -> InsertResult:
        """Insert the new traces of ``rows`` in the open transaction."""

    @abstractmethod
    def _tx_commit(
        self, errors: Sequence[tuple[str, int, str]], offsets: Sequence[FileOffset]
    ) -> list[IngestErrorRow]:
        """Write what is held, ``errors`` and ``offsets``, and commit; the errors written."""

    @abstractmethod
    def _tx_rollback(self) -> None:
        """Roll the open transaction back (its own failure is left unsaid: the error on its
        way up, if any, says more)."""

    @abstractmethod
    def _tx_end(self, committed: bool) -> None:
        """Let go of what the transaction held (its connection, lock, held rows)."""

    @abstractmethod
    def _fault(self, exc: BaseException) -> StoreError | None:
        """The engine's error ``exc`` as one ``StoreError``; None for any other error."""

    @abstractmethod
    def _tx_stop(self) -> None:
        """Stop the work the open transaction has under way (before a rollback)."""

    # ---- the loop
    @contextlib.contextmanager
    def _failing(self) -> Iterator[None]:
        """Any failure inside aborts the open transaction; an engine's error is raised as
        its ``StoreError``."""
        try:
            yield
        except BaseException as exc:
            self.abort()
            worded = self._fault(exc)
            if worded is not None:
                raise worded from exc
            raise

    def begin(self) -> None:
        """Open a transaction unless one is open."""
        if not self.in_transaction:
            with self._failing():
                self._tx_open()

    def add(self, rows: RowTables) -> InsertResult:
        """Insert the new traces of ``rows`` in the open transaction (opening one); which
        were new, skipped or conflicting."""
        self.begin()
        with self._failing():
            return self._tx_add(rows)

    def add_errors(self, errors: Sequence[tuple[str, int, str]]) -> None:
        """(file, line, message) rows for ``ingest_errors``, written at the commit."""
        self.begin()
        self._errors += errors

    def add_offsets(self, offsets: Sequence[FileOffset]) -> None:
        """How far files were read, written at the commit: with the traces they held."""
        self.begin()
        self._offsets += offsets

    def commit(self) -> list[IngestErrorRow]:
        """Write what waits and commit; the errors written (none without an open
        transaction). On failure the transaction is rolled back and the error raised."""
        if not self.in_transaction:
            return []
        with self._failing():
            errors = self._tx_commit(self._errors, self._offsets)
        self._end(committed=True)
        return errors

    def abort(self) -> None:
        """Roll the open transaction back: nothing added since it began is stored."""
        self._tx_stop()
        if not self.in_transaction:
            return
        try:
            self._tx_rollback()
        finally:
            self._end(committed=False)

    def _end(self, *, committed: bool) -> None:
        self._errors, self._offsets = [], []
        self._tx_end(committed)

    def close(self) -> None:
        """Abort what is not committed (a subclass also lets go of what it holds)."""
        self.abort()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        try:
            if exc_type is None:
                self.commit()
        finally:
            self.close()


__all__ = ["TransactionLoop"]
