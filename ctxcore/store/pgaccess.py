"""Access to a team store (docs/design.md, "Store", access): the people's tokens and the
app's read-only role.

Tokens live in ``ctxscope_tokens`` (migration 2): one per person, by name, stored as the
SHA-256 digest of the token, which is shown once when it is made (``ctxscope token add``);
revoking one sets its ``revoked_at`` and the app refuses it from its next check on. The app
reads as the role ``ctxscope_reader`` (``SELECT`` on the store's tables and nothing else),
which ``ctxscope migrate`` makes: it connects with that role set at the connection's start
(``as_reader``), as the user of its ``--db`` URL, or of ``--reader-url`` for a login that
may only read.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote

import psycopg
from psycopg import sql

from ctxcore.errors import InputError, StoreError
from ctxcore.store import pgschema
from ctxcore.store.pgconn import connect, fault, shown

#: the app's role: SELECT on the store's tables only
READER_ROLE = "ctxscope_reader"
#: a token's prefix (what it is, when it turns up in a log or a shell history)
TOKEN_PREFIX = "ctxs_"


def digest(token: str) -> str:
    """The digest stored for ``token`` (hex SHA-256)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def as_reader(url: str) -> str:
    """``url`` with the reader role set at each connection's start (libpq's ``options``): the
    user of the URL must be a member of ``ctxscope_reader``."""
    option = quote(f"-c role={READER_ROLE}", safe="")
    return f"{url}{'&' if '?' in url else '?'}options={option}"


def grant_reader(con: psycopg.Connection) -> None:
    """Make the role ``ctxscope_reader`` when missing, let it read every table of the store
    (those later migrations make too) and nothing else, and make the connecting user a member
    (so its URL may read as it). ``con`` is the store owner's, in autocommit. Owners doing
    this at once (two ``ctxscope migrate``) take turns on the migrations' advisory lock:
    the server refuses grants on one object from two transactions at once ("tuple
    concurrently updated"); the role, one for the whole server, is made by whichever of two
    stores' owners comes first (the other's attempt, in a savepoint, finds it there)."""
    role = sql.Identifier(READER_ROLE)
    with con.transaction():
        con.execute("SELECT pg_advisory_xact_lock(%s)", [pgschema.LOCK_KEY])
        exists = con.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [READER_ROLE])
        if exists.fetchone() is None:
            try:
                with con.transaction():
                    con.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(role))
            except (psycopg.errors.DuplicateObject, psycopg.errors.UniqueViolation):
                pass  # another database's owner made it meanwhile
        db = con.execute("SELECT current_database()").fetchone()
        assert db is not None
        con.execute(
            sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(db[0]), role)
        )
        con.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(role))
        con.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {}").format(role))
        con.execute(
            sql.SQL(
                "ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO {}"
            ).format(role)
        )
        member = con.execute("SELECT pg_has_role(current_user, %s, 'MEMBER')", [READER_ROLE])
        row = member.fetchone()
        if not (row and row[0]):
            con.execute(sql.SQL("GRANT {} TO CURRENT_USER").format(role))


@dataclass(frozen=True)
class TokenRow:
    """One person's token as ``ctxscope token list`` shows it (never the token)."""

    name: str
    created_at: datetime
    revoked_at: datetime | None


def _owner(url: str) -> psycopg.Connection:
    """A connection of the store's owner to a store at the latest schema."""
    con = connect(url, read_only=False)
    try:
        have = pgschema.known(con, shown(url))
    except psycopg.Error as exc:
        con.close()
        raise fault(url, exc) from exc
    except StoreError:
        con.close()
        raise
    if have < pgschema.LATEST:
        con.close()
        raise StoreError(
            f"{shown(url)} is at schema version {have}, this ctxscope needs "
            f"{pgschema.LATEST}; run `ctxscope migrate --db …` first"
        )
    return con


def add_token(url: str, name: str) -> str:
    """A new token for ``name`` (shown once: only its digest is stored); an error when
    ``name`` has one already, revoked or not."""
    if not name.strip():
        raise InputError("ctxscope token add: the name is empty; give the person's name")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    now = datetime.now(UTC).replace(tzinfo=None)
    with _owner(url) as con:
        try:
            con.execute(
                "INSERT INTO ctxscope_tokens (name, digest, created_at) VALUES (%s, %s, %s)",
                [name, digest(token), now],
            )
        except psycopg.errors.UniqueViolation as exc:
            raise InputError(
                f"{shown(url)}: {name!r} has a token already (revoked or not); revoke it "
                "and add another name, e.g. "
                f"{name}-2"
            ) from exc
        except psycopg.Error as exc:
            raise fault(url, exc) from exc
    return token


def revoke_token(url: str, name: str) -> None:
    """Revoke ``name``'s token (the app refuses it from its next check); an error naming
    the names there are when ``name`` has none, or was revoked already."""
    now = datetime.now(UTC).replace(tzinfo=None)
    with _owner(url) as con:
        try:
            done = con.execute(
                "UPDATE ctxscope_tokens SET revoked_at = %s WHERE name = %s AND revoked_at IS NULL",
                [now, name],
            ).rowcount
        except psycopg.Error as exc:
            raise fault(url, exc) from exc
    if not done:
        raise InputError(f"{shown(url)}: no live token named {name!r} (ctxscope token list)")


def list_tokens(url: str) -> list[TokenRow]:
    """Every token, by name: when it was made and revoked."""
    with _owner(url) as con:
        try:
            rows = con.execute(
                "SELECT name, created_at, revoked_at FROM ctxscope_tokens ORDER BY name"
            ).fetchall()
        except psycopg.Error as exc:
            raise fault(url, exc) from exc
    return [TokenRow(r[0], r[1], r[2]) for r in rows]


def token_holder(url: str, token: str) -> str | None:
    """The name whose live (unrevoked) token ``token`` is; None for any other. ``url`` may
    be the reader's."""
    if not token.startswith(TOKEN_PREFIX):
        return None
    con = connect(url, read_only=True)
    try:
        row = con.execute(
            "SELECT name, digest FROM ctxscope_tokens WHERE digest = %s AND revoked_at IS NULL",
            [digest(token)],
        ).fetchone()
    except psycopg.Error as exc:
        raise fault(url, exc) from exc
    finally:
        con.close()
    if row is None or not hmac.compare_digest(row[1], digest(token)):
        return None
    return str(row[0])


__all__ = [
    "READER_ROLE",
    "TOKEN_PREFIX",
    "TokenRow",
    "add_token",
    "as_reader",
    "digest",
    "grant_reader",
    "list_tokens",
    "revoke_token",
    "token_holder",
]
