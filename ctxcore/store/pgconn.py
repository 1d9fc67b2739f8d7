"""The PostgreSQL engine's connections: the server a ``postgresql://`` URL names, shown
without its password; one connection pool per store; what a failure of the server means, in
one ``StoreError`` line (docs/design.md, "Store").

Only this engine's modules (``pgconn``, ``pginserts``, ``pgstore``, ``pgschema``) see a
connection.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass, field

import psycopg
from psycopg.conninfo import conninfo_to_dict

from ctxcore.errors import StoreError
from ctxcore.store.rows import TEXT_KEYS

# The pool's own warnings (a connection it discards, one it failed to make) are what the
# ``StoreError`` of the operation that failed says, in one line: not a second time on stderr.
logging.getLogger("psycopg.pool").setLevel(logging.ERROR)

#: seconds to wait for the server when connecting, and for a connection of the pool
CONNECT_TIMEOUT_S = 10
#: the pool's connections: the app's threads read at once, a writer holds one
POOL_MAX = 8


def shown(url: str) -> str:
    """The server a URL names, for messages: user, host, port and database, never the
    password (nor any other parameter)."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.Error:
        return "postgresql://… (a URL psycopg cannot read)"
    user = parts.get("user")
    host = parts.get("host") or "localhost"
    port = parts.get("port") or "5432"
    db = parts.get("dbname") or ""
    who = f"{user}@" if user else ""
    return f"postgresql://{who}{host}:{port}/{db}"


#: what to do with a store whose tables are not what its migrations made
CHANGED_BY_HAND = (
    "the store's tables are not what its migrations made (one was dropped or altered by "
    "hand): restore the database from a backup, or make a new one (`ctxscope migrate --db "
    "NEW_URL`) and ingest the trace files into it"
)


#: a URL's password, in libpq's words that quote a URL it could not read
_PASSWORD = re.compile(r"(://[^/?#@:\s\"]*):[^/?#@\s\"]*@")


def _first_line(exc: BaseException) -> str:
    """The first line of what the server or libpq said, any URL in it without its password
    (libpq quotes a URL it cannot parse whole)."""
    lines = str(exc).strip().splitlines()
    return _PASSWORD.sub(r"\1@", lines[0]) if lines else type(exc).__name__


def fault(url: str, exc: BaseException) -> StoreError:
    """A failure of the server or of a statement as one line: where, what, and what to do.
    Nothing of the transaction it interrupted was stored (the server rolls it back)."""
    where = shown(url)
    what = _first_line(exc)
    if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
        return StoreError(f"{where}: this role may only read ({what}); write with another")
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return StoreError(f"{where}: permission denied ({what}); ask the store's owner")
    if isinstance(exc, psycopg.errors.DiskFull):
        return StoreError(f"{where}: the server's disk is full ({what}); free some space")
    if isinstance(exc, psycopg.errors.LockNotAvailable):
        return StoreError(
            f"{where}: waited too long for a lock on the store's tables ({what}); another "
            "session holds them (a migration, say): nothing of the transaction was stored, run "
            "it again once that session has finished"
        )
    if isinstance(exc, psycopg.errors.UndefinedTable | psycopg.errors.UndefinedColumn):
        return StoreError(f"{where}: {what}; {CHANGED_BY_HAND}")
    if "ctxscope_reader" in what:  # the app's role (pgaccess.as_reader)
        return StoreError(
            f"{where}: cannot read as the role ctxscope_reader ({what}); run `ctxscope "
            "migrate --db …` as the store's owner (it makes the role), and read by a user "
            "that is a member of it"
        )
    if isinstance(exc, psycopg.OperationalError):
        return StoreError(
            f"{where}: the server is not reachable or went away ({what}); nothing of the "
            "interrupted transaction was stored: run it again once the server is up"
        )
    return StoreError(f"{where}: {what}")


#: what libpq says when it refused a login, and when the URL's database is not there
_LOGIN_REFUSED = (
    "password authentication failed",
    "no password supplied",
    "no pg_hba.conf entry",
    'role "',
)
_NO_DATABASE = 'database "'


def connect_fault(url: str, exc: BaseException) -> StoreError:
    """A connection that could not be made, as one line: no transaction was open, so what to
    do is fix the URL, the login or the server, by what the server (or libpq) said. libpq's
    failures carry no SQLSTATE: its words are all there is to go by."""
    where = shown(url)
    what = _first_line(exc)
    if "ctxscope_reader" in what or not isinstance(exc, psycopg.OperationalError):
        return fault(url, exc)  # the app's role (pgaccess.as_reader), or not a connection's
    if what.startswith(("connection is bad", "invalid connection option", 'missing "="')):
        why = "the URL is not one libpq takes"
        todo = "fix it: postgresql://user@host:port/database, options after ?name=value&…"
    elif any(w in what for w in _LOGIN_REFUSED):
        why = "the server refused the login"
        todo = (
            "check the user and password in the URL (or ~/.pgpass), and that the server "
            "lets this user in from this machine (pg_hba.conf)"
        )
    elif _NO_DATABASE in what and "does not exist" in what:
        why = "no such database"
        todo = "create it (createdb --owner USER NAME) or fix the URL's database"
    else:
        why = "the server is not reachable"
        todo = "check the host and port in the URL, and that the server is running"
    return StoreError(f"{where}: cannot connect: {why} ({what}); {todo}")


def connect(url: str, *, read_only: bool) -> psycopg.Connection:
    """One connection in autocommit (writes open their transactions themselves); read-only
    ones refuse writes in the server too."""
    try:
        con = psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.Error as exc:
        raise connect_fault(url, exc) from exc
    if read_only:
        con.execute("SET default_transaction_read_only = on")
    return con


@dataclass
class Texts:
    """digest -> cid of the packet texts this process committed to one database (the
    TEXT_KEYS to 2 x TEXT_KEYS most recently used, in two generations): a text one of them
    holds is named by its cid, not stored again. Other writers' texts are not known here;
    a text two processes store is stored twice, under two cids."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    texts: dict[bytes, int] = field(default_factory=dict)
    older: dict[bytes, int] = field(default_factory=dict)

    def get(self, key: bytes) -> int | None:
        # the lock guards a move between generations; a lookup is one dict read (atomic),
        # and a key a move hides for that instant is stored again, as another process's is
        cid = self.texts.get(key)
        if cid is not None or key not in self.older:
            return cid
        with self.lock:
            cid = self.texts.get(key)
            if cid is None:
                cid = self.older.pop(key, None)
                if cid is not None:
                    self._add({key: cid})
            return cid

    def remember(self, new: dict[bytes, int]) -> None:
        """The texts a commit stored (a rolled-back transaction's are never given here)."""
        with self.lock:
            self._add(new)

    def _add(self, new: dict[bytes, int]) -> None:
        self.texts.update(new)
        if len(self.texts) > TEXT_KEYS:
            self.older, self.texts = self.texts, {}


__all__ = [
    "CHANGED_BY_HAND",
    "CONNECT_TIMEOUT_S",
    "POOL_MAX",
    "Texts",
    "connect",
    "connect_fault",
    "fault",
    "shown",
]
