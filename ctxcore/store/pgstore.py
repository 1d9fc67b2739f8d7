"""PgStore: the PostgreSQL engine's ``Store`` (``protocol.Store``), for a team's traces in one
place: many writer processes on many machines, many readers (docs/design.md, "Store").

The tables are the DuckDB engine's (``pgschema``), so the Arrow rows of ``rows.prepare`` go
in as they are (``pginserts``, with ``COPY``) and the trace JSON stays packed. Reads take a
connection of the store's pool (autocommit: each statement sees what was committed when it
began); writes open a transaction on one. Migrations run on open under an advisory lock; a
read-only open refuses an out-of-date schema and reads through a read-only session. A fault
of the server is one ``StoreError`` naming it without its password (``pgconn.fault``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

import psycopg
from psycopg_pool import ConnectionPool

from ctxcore.errors import InputError, StoreError
from ctxcore.models import Trace
from ctxcore.store import pginserts, pgschema
from ctxcore.store.pgconn import (
    CHANGED_BY_HAND,
    CONNECT_TIMEOUT_S,
    POOL_MAX,
    Texts,
    connect,
    fault,
    shown,
)
from ctxcore.store.pgwriter import PgBulkWriter
from ctxcore.store.records import (
    PackedTrace,
)
from ctxcore.store.rows import (
    prepare,
    unpack_summary,
)
from ctxcore.store.sqlreads import SqlReads, diagnosed

log = logging.getLogger("ctxscope.store")


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _reading(
    method: Callable[Concatenate[PgStore, _P], _R],
) -> Callable[Concatenate[PgStore, _P], _R]:
    """A read whose failure of the server is one ``StoreError`` (``pgconn.fault``)."""

    @functools.wraps(method)
    def read(self: PgStore, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(self, *args, **kwargs)
        except psycopg.Error as exc:
            raise fault(self.url, exc) from exc

    return read


class PgStore(SqlReads):
    """The PostgreSQL engine's ``Store``: one database, a pool of connections, migrations
    applied on open."""

    def __init__(self, url: str, *, read_only: bool = False, diagnose: bool = True) -> None:
        self.url = url
        self.read_only = read_only
        self.diagnose = diagnose
        #: the packet texts this store committed (digest -> cid)
        self.texts = Texts()
        self._closed = False
        con = connect(url, read_only=read_only)
        try:
            self._check_schema(con)
        except psycopg.Error as exc:
            raise fault(url, exc) from exc
        finally:
            con.close()
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=POOL_MAX,
            kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S},
            configure=self._configure,
            check=ConnectionPool.check_connection,
            timeout=CONNECT_TIMEOUT_S,
            name=shown(url),
            open=True,
        )

    def _configure(self, con: psycopg.Connection) -> None:
        if self.read_only:
            con.execute("SET default_transaction_read_only = on")

    def _check_schema(self, con: psycopg.Connection) -> None:
        """Bring the schema up to date; read-only, refuse an out-of-date one."""
        have = pgschema.known(con, shown(self.url))
        if self.read_only:
            if have < pgschema.LATEST:
                raise StoreError(
                    f"{shown(self.url)} is at schema version {have}, this ctxscope needs "
                    f"{pgschema.LATEST}; run `ctxscope migrate --db …` with a role that may "
                    "write it"
                )
        else:
            pgschema.apply(con)

    def checkout(self) -> tuple[psycopg.Connection, Callable[[], None]]:
        """A connection of the pool, held until the function returned with it is called (the
        bulk writer's, for a transaction)."""
        if self._closed:
            raise StoreError(f"{shown(self.url)}: the store is closed")
        try:
            con = self._pool.getconn()
        except psycopg.Error as exc:
            raise fault(self.url, exc) from exc
        return con, functools.partial(self._pool.putconn, con)

    PH = "%s"
    TAGS_ALL = "tags @> %s::text[]"
    IN_LIST = "= ANY(%s)"
    LIVE_COLS = (
        "created_at, session_id, turn, trace_id, coalesce((SELECT substr(t, 8) FROM unnest(tags) "
        "AS t WHERE starts_with(t, 'source:') LIMIT 1), "
        "CASE WHEN 'otlp' = ANY(tags) THEN 'otlp' ELSE '' END)"
    )
    LIVE = "tags @> ARRAY['live']::text[]"

    def _page(
        self, cols: str, body: str, order: str, params: list[Any], limit: int, offset: int
    ) -> tuple[list[tuple[Any, ...]], int]:
        """One page, then the count of every match: two queries, so that the page is read
        through the sort's index rather than after counting (and sorting) every match; both
        in one snapshot (REPEATABLE READ), so a commit between them cannot make the count
        disagree with the page."""
        con, release = self.checkout()
        try:
            with con.transaction():
                con.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                rows = con.execute(
                    f"SELECT {cols} {body} ORDER BY {order} LIMIT %s OFFSET %s",
                    [*params, int(limit), int(offset)],
                ).fetchall()
                if rows and offset == 0 and len(rows) < limit:
                    return rows, len(rows)
                got = con.execute(f"SELECT count(*) {body}", params).fetchone()
                return rows, int(got[0]) if got else 0
        except psycopg.Error as exc:
            raise fault(self.url, exc) from exc
        finally:
            release()

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        con, release = self.checkout()
        try:
            return con.execute(sql, list(params)).fetchall()
        except psycopg.Error as exc:
            raise fault(self.url, exc) from exc
        finally:
            release()

    def _dicts(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        con, release = self.checkout()
        try:
            cur = con.execute(sql, list(params))
            names = [d[0] for d in cur.description or []]
            return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        except psycopg.Error as exc:
            raise fault(self.url, exc) from exc
        finally:
            release()

    def refuse_writes(self) -> None:
        """``StoreError`` when the store was opened read-only."""
        if self.read_only:
            raise StoreError(f"{shown(self.url)} was opened read-only; it cannot be written")

    def reopen_if_invalidated(self) -> bool:
        """Never needed here: the pool checks each connection before handing it out and
        replaces one the server dropped."""
        return False

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.close()

    def __enter__(self) -> PgStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- writing
    def add_traces(self, traces: Iterable[Trace], *, source: str | None = None) -> int:
        """Store traces in one transaction; how many were new. The same id with other
        content (or a trace that cannot be stored) is ``InputError`` and stores nothing."""
        self.refuse_writes()
        items: list[tuple[Trace, bytes]] = []
        for t in traces:
            try:
                items.append((t, t.to_json().encode("utf-8")))
            except (ValueError, UnicodeError) as exc:
                raise InputError(
                    f"{source or 'import'}: trace_id {t.trace_id!r} cannot be written as JSON "
                    f"({str(exc).splitlines()[0]}); nothing was stored"
                ) from exc
        prep = prepare(items, [source] * len(items), self.diagnose)
        with self.bulk_writer() as w:
            res = w.add(prep)
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
        return res.added

    def bulk_writer(self, *, workers: int = 0) -> PgBulkWriter:
        """A writer for an ingest run (see ``protocol.BulkWriter``)."""
        return PgBulkWriter(self, workers=workers)

    def add_ingest_error(self, file: str, line: int, message: str) -> None:
        self.refuse_writes()
        with self.bulk_writer() as w:
            w.add_errors([(file, line, message)])

    @_reading
    def diagnose_pending(self, max_traces: int = 200) -> int:
        """Compute the findings of up to ``max_traces`` traces stored without them. Several
        processes may do this at once: each takes its traces ``FOR UPDATE SKIP LOCKED``."""
        if self.read_only:
            return 0
        con, release = self.checkout()
        try:
            with con.transaction():
                rows = con.execute(
                    "SELECT tseq, json_bytes FROM traces WHERE n_findings IS NULL "
                    "ORDER BY tseq LIMIT %s FOR UPDATE SKIP LOCKED",
                    [int(max_traces)],
                ).fetchall()
                blobs = pginserts.packed(con, [int(r[0]) for r in rows])
                batch, updates = diagnosed(rows, blobs)
                tables = batch.tables()
                for name in ("findings", "cost_parts"):  # and the deferred cost summaries
                    table = tables.get(name)
                    if table is not None:
                        con.execute(
                            f"DELETE FROM {name} WHERE tseq = ANY(%s)",
                            [sorted(set(table.column("tseq").to_pylist()))],
                        )
                        pginserts.copy_table(con, name, table)
                con.cursor().executemany(
                    "UPDATE traces SET n_findings = %s, max_severity = %s, diagnosed_with = %s "
                    "WHERE tseq = %s",
                    [(n, sev, by, tseq) for tseq, n, sev, by in updates],
                )
        finally:
            release()
        return len(updates)

    # ---- reading: many traces
    @_reading
    def traces_json(self, trace_ids: Sequence[str]) -> list[tuple[str, bytes]]:
        return [(p.trace_id, p.json()) for p in self.traces_packed(trace_ids)]

    @_reading
    def traces_packed(self, trace_ids: Sequence[str]) -> list[PackedTrace]:
        out: list[PackedTrace] = []
        con, release = self.checkout()
        try:
            for i in range(0, len(trace_ids), 1000):
                chunk = list(trace_ids[i : i + 1000])
                rows = con.execute(
                    "SELECT trace_id, tseq, json_bytes FROM traces WHERE trace_id = ANY(%s)",
                    [chunk],
                ).fetchall()
                blobs = pginserts.packed(con, [int(r[1]) for r in rows])
                found = {r[0]: PackedTrace(r[0], blobs[int(r[1])], int(r[2])) for r in rows}
                out += [found[tid] for tid in chunk if tid in found]
        finally:
            release()
        return out

    @_reading
    def cost_summaries(self, trace_ids: Sequence[str]) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for i in range(0, len(trace_ids), 1000):
            rows = self._rows(
                "SELECT t.trace_id, string_agg(c.data, ''::bytea ORDER BY c.part) "
                "FROM traces t JOIN cost_parts c ON c.tseq = t.tseq "
                "WHERE t.trace_id = ANY(%s) GROUP BY t.trace_id",
                [list(trace_ids[i : i + 1000])],
            )
            out.update({tid: unpack_summary(bytes(b)) for tid, b in rows})
        return out

    # ---- reading: sessions
    @_reading
    def session_statuses(self, session_id: str) -> list[dict[str, Any]]:
        """Rows: turn, trace_id, packet_id, kind, status, reason, tokens_after. The session's
        tseqs are named to ``decisions`` as an array, so each of its partitions (by month:
        ``pgparts``) is read through its index; a plain join was planned as a hash join over
        every decision (1 s on 750,000 traces, against 8 ms)."""
        return self._dicts(
            "SELECT t.turn, d.trace_id, d.packet_id, d.kind, d.status, d.reason, "
            "d.tokens_after FROM traces t JOIN decisions d ON d.tseq = t.tseq "
            "WHERE t.session_id = %s "
            "AND d.tseq = ANY(ARRAY(SELECT tseq FROM traces WHERE session_id = %s)) "
            "ORDER BY t.turn, t.tseq, d.ord",
            [session_id, session_id],
        )

    # ---- reading: one trace
    @_reading
    def get_trace(self, trace_id: str) -> Trace | None:
        con, release = self.checkout()
        try:
            raw = pginserts.trace_json(con, trace_id)
        finally:
            release()
        return None if raw is None else Trace.model_validate_json(raw)

    @_reading
    def packet_content(self, trace_id: str, packet_id: str) -> str | None:
        rows = self._rows(
            "SELECT string_agg(c.text, '' ORDER BY c.part), bool_or(d.cid IS NOT NULL) FROM "
            "(SELECT cid FROM decisions WHERE tseq = (SELECT tseq FROM traces "
            "WHERE trace_id = %s) AND packet_id = %s ORDER BY ord LIMIT 1) d "
            "LEFT JOIN contents c ON c.cid = d.cid",
            [trace_id, packet_id],
        )
        if not rows or not rows[0][1]:
            return None
        return str(rows[0][0] or "")

    # ---- ingest's state
    # ---- reading: lists


def migrate_server(url: str) -> list[str]:
    """Run the pending migrations of the team store ``url`` names (``ctxscope migrate``);
    what ran, one "version name" each. It also makes the app's read-only role
    (``pgaccess.grant_reader``)."""
    from ctxcore.store.pgaccess import READER_ROLE, grant_reader

    con = connect(url, read_only=False)
    try:
        pgschema.known(con, shown(url))
        ran = set(pgschema.apply(con))
        gone = pgschema.missing(con)
        if gone:
            raise StoreError(
                f"{shown(url)}: the schema is recorded as up to date but lacks "
                f"{', '.join(gone)}; {CHANGED_BY_HAND}"
            )
        try:
            grant_reader(con)
        except psycopg.errors.InsufficientPrivilege as exc:
            done = ", ".join(
                f"{s.version} {s.name}" for s in pgschema.MIGRATIONS if s.version in ran
            )
            said = f"ran migrations {done}" if done else "no migration was pending"
            raise StoreError(
                f"{shown(url)}: the schema is up to date ({said}), but this user may not "
                f"make the app's read-only role {READER_ROLE} "
                f"({str(exc).strip().splitlines()[0]}); run `ctxscope migrate` once as a user "
                "with CREATEROLE"
            ) from exc
    except psycopg.Error as exc:
        raise fault(url, exc) from exc
    finally:
        con.close()
    return [f"{s.version} {s.name}" for s in pgschema.MIGRATIONS if s.version in ran]


__all__ = ["PgStore", "migrate_server"]
