"""Which engine holds a store, from the ``--db`` value (``$CTXSCOPE_DB``): the one way the
command line and the app open a store (docs/design.md, "Store", how to add a store engine).

``ENGINES`` lists the engines in the order they are asked; the first whose ``claims`` takes
the value opens it. A file path is DuckDB's, a ``postgresql://`` URL PostgreSQL's (a team
store: ``pgstore``). A value no engine claims is one ``StoreError`` naming the engines there
are (a URL shown by its scheme only: it may hold a password). Each engine's modules are
imported when a store of it is opened, never before: ``ctxscope``'s start and replay's
worker processes load no database driver.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from ctxcore.errors import StoreError
from ctxcore.store.protocol import Store

#: What ``Engine.read`` tells when it reads something other than the store as it is
#: (DuckDB: a copy, while another process holds the file)
Note = Callable[[str], None]

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
#: a PostgreSQL URL mistyped (``postgresql:/user:pw@host/db``): a DuckDB path otherwise,
#: whose folders, named after the URL and its password, would be made
_MISTYPED = re.compile(r"^(postgres(?:ql)?):(?!//)", re.IGNORECASE)


@dataclass(frozen=True)
class Engine:
    """One kind of store: which ``--db`` values it takes, and how it opens them."""

    name: str
    #: the ``--db`` values it takes, in words (for the error when none claims a value)
    takes: str
    claims: Callable[[str], bool]
    #: open the store ``target`` names: (target, read_only, diagnose)
    open: Callable[[str, bool, bool], Store]
    #: open it to read even while another process writes it (docs/design.md, "Store",
    #: readers never need the lock), telling ``note`` what it reads when that is not the store
    read: Callable[[str, Note | None], AbstractContextManager[Store]]
    #: run the store's pending migrations; what ran, one "version name" each (``ctxscope
    #: migrate``)
    migrate: Callable[[str], list[str]]


def _is_path(target: str) -> bool:
    return bool(target) and _URL.match(target) is None


def _open_duckdb(target: str, read_only: bool, diagnose: bool) -> Store:
    from ctxcore.store.tracestore import TraceStore

    return TraceStore(target, read_only=read_only, diagnose=diagnose)


def _read_duckdb(target: str, note: Note | None) -> AbstractContextManager[Store]:
    from ctxcore.store.reading import read_duckdb

    return read_duckdb(target, note=note)


def _migrate_duckdb(target: str) -> list[str]:
    from ctxcore.store.duck import migrate_file

    return migrate_file(Path(target))


DUCKDB = Engine(
    name="duckdb",
    takes="a file path, e.g. traces/ctxscope.duckdb",
    claims=_is_path,
    open=_open_duckdb,
    read=_read_duckdb,
    migrate=_migrate_duckdb,
)


def _is_postgresql(target: str) -> bool:
    return target.startswith(("postgresql://", "postgres://"))


def _open_postgresql(target: str, read_only: bool, diagnose: bool) -> Store:
    from ctxcore.store.pgstore import PgStore

    return PgStore(target, read_only=read_only, diagnose=diagnose)


@contextmanager
def _read_postgresql(target: str, note: Note | None) -> Iterator[Store]:
    """A server's store is read as it is while others write it: nothing to tell."""
    from ctxcore.store.pgstore import PgStore

    with PgStore(target, read_only=True) as store:
        yield store


def _migrate_postgresql(target: str) -> list[str]:
    from ctxcore.store.pgstore import migrate_server

    return migrate_server(target)


POSTGRESQL = Engine(
    name="postgresql",
    takes="a postgresql://user@host:port/database URL (a team store on PostgreSQL)",
    claims=_is_postgresql,
    open=_open_postgresql,
    read=_read_postgresql,
    migrate=_migrate_postgresql,
)

#: every engine, asked in order
ENGINES: list[Engine] = [DUCKDB, POSTGRESQL]


def engine_for(target: str | Path) -> Engine:
    """The engine that takes ``target``; ``StoreError`` naming the known ones when none does."""
    value = str(target)
    typo = _MISTYPED.match(value)
    if typo:
        raise StoreError(
            f"--db {typo[1]}:…: not a URL (a team store's starts with postgresql://, two "
            "slashes, e.g. postgresql://user@host:5432/database), and not taken as a file "
            "path; fix --db (or CTXSCOPE_DB)"
        )
    for engine in ENGINES:
        if engine.claims(value):
            return engine
    known = "; ".join(f"{e.name}: {e.takes}" for e in ENGINES)
    shown = _URL.match(value)
    what = f"{shown[0]}… URL" if shown else repr(value)
    raise StoreError(
        f"--db {what}: no store engine for it (this ctxscope has {known}); "
        "point --db (or CTXSCOPE_DB) at one of those"
    )


def is_server(target: str | Path) -> bool:
    """Whether ``target`` names a store on a server (a team store, e.g. ``postgresql://…``)
    rather than a file of this machine."""
    return engine_for(target) is not DUCKDB


def shown(target: str | Path) -> str:
    """``target`` for a message or a page: a file's path as it is, a server's URL without its
    password (``pgconn.shown``)."""
    if not is_server(target):
        return str(target)
    from ctxcore.store.pgconn import shown as shown_url

    return shown_url(str(target))


def open_store(target: str | Path, *, read_only: bool = False, diagnose: bool = True) -> Store:
    """The store ``target`` (a ``--db`` value) names, opened by its engine. ``diagnose=False``
    defers findings to ``Store.diagnose_pending`` (inserts are several times faster)."""
    return engine_for(target).open(str(target), read_only, diagnose)


def migrate_store(target: str | Path) -> list[str]:
    """Run the pending migrations of the store ``target`` names (``ctxscope migrate``); what
    ran, one "version name" each, oldest first (empty when it was up to date)."""
    return engine_for(target).migrate(str(target))


@contextmanager
def read_store(target: str | Path, *, note: Note | None = None) -> Iterator[Store]:
    """The store ``target`` names, read-only, even while another process writes it (then
    what the engine reads instead, e.g. DuckDB's copy taken now, is told to ``note`` in one
    line). Any fault of the store is one ``StoreError``."""
    with engine_for(target).read(str(target), note) as store:
        yield store


__all__ = [
    "DUCKDB",
    "ENGINES",
    "POSTGRESQL",
    "Engine",
    "engine_for",
    "is_server",
    "migrate_store",
    "open_store",
    "read_store",
    "shown",
]
