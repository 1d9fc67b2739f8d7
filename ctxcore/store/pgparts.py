"""The PostgreSQL engine's partitions by time (docs/design.md, "Store", the PostgreSQL
engine): ``traces`` and ``decisions`` are range-partitioned by the month of the trace's
``created_at`` (a decision row carries its trace's ``created_at`` for that), one partition a
month, named ``traces_YYYY_MM`` and ``decisions_YYYY_MM``.

A writer makes the months a batch needs before it copies the batch in (``place``). It makes
them on a connection of its own, in a short transaction of their own: ``CREATE TABLE`` then
``ATTACH PARTITION``, which takes only a SHARE UPDATE EXCLUSIVE lock on the parent, so that
neither the readers nor the other writers' open transactions (which hold ROW EXCLUSIVE on the
parents) wait for it, and the writer's own open transaction does not wait on itself
(``CREATE TABLE … PARTITION OF`` would take ACCESS EXCLUSIVE, and wait for every open
transaction on the table). Writers making the same month at once take turns on an advisory
lock, and the second finds it made. The partition key must be in a unique index of a
partitioned table, so the trace id's uniqueness is kept by the table ``trace_ids`` instead
(``pginserts``).
"""

from __future__ import annotations

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg.conninfo import make_conninfo

#: the partitioned tables, each partitioned by the month of its trace's ``created_at``
PARTITIONED = ("traces", "decisions")
#: pg_advisory_xact_lock key of making partitions ("ctxparts" in ASCII, as a number)
LOCK_KEY = 0x6374787061727473
#: how long making a month's partitions waits for a lock before failing (a migration that
#: holds the tables, say) rather than waiting for ever
LOCK_TIMEOUT = "60s"
#: seconds to wait for the server when connecting
CONNECT_TIMEOUT_S = 10


def month_key(month: np.datetime64) -> tuple[int, int]:
    """(year, month) of a ``datetime64[M]``."""
    n = int(month.astype(np.int64))  # months since 1970-01
    return 1970 + n // 12, n % 12 + 1


def bounds(year: int, month: int) -> tuple[str, str]:
    """The range of a month's partition: from its first instant to the next month's."""
    nxt = (year + 1, 1) if month == 12 else (year, month + 1)
    return f"{year:04d}-{month:02d}-01", f"{nxt[0]:04d}-{nxt[1]:02d}-01"


def partition_name(table: str, year: int, month: int) -> str:
    return f"{table}_{year:04d}_{month:02d}"


def months_of(created_at: pa.ChunkedArray | pa.Array) -> list[tuple[int, int]]:
    """The (year, month) of every distinct month of a ``created_at`` column, ascending."""
    ts = pc.cast(created_at, pa.timestamp("us")).to_numpy(zero_copy_only=False)
    return [month_key(m) for m in np.unique(ts.astype("datetime64[M]"))]


def create_month(con: psycopg.Connection, year: int, month: int) -> bool:
    """Make one month's partitions of every partitioned table that lacks it, on ``con`` in
    the caller's transaction; whether any was made."""
    made = False
    start, end = bounds(year, month)
    for table in PARTITIONED:
        name = partition_name(table, year, month)
        row = con.execute("SELECT to_regclass(%s) IS NULL", [name]).fetchone()
        if row is None or not row[0]:
            continue
        con.execute(f"CREATE TABLE {name} (LIKE {table} INCLUDING DEFAULTS)")
        con.execute(
            f"ALTER TABLE {table} ATTACH PARTITION {name} FOR VALUES FROM ('{start}') TO ('{end}')"
        )
        made = True
    return made


def missing(con: psycopg.Connection, months: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The months of ``months`` some partitioned table has no partition for."""
    names = [partition_name(t, y, m) for y, m in months for t in PARTITIONED]
    rows = con.execute(
        "SELECT n FROM unnest(%s::text[]) n WHERE to_regclass(n) IS NULL", [names]
    ).fetchall()
    absent = {r[0] for r in rows}
    return [
        (y, m) for y, m in months if any(partition_name(t, y, m) in absent for t in PARTITIONED)
    ]


def _side_connection(con: psycopg.Connection) -> psycopg.Connection:
    """A new connection to ``con``'s database as ``con``'s user, in autocommit."""
    info = con.info
    return psycopg.connect(
        make_conninfo(info.dsn, password=info.password or None),
        autocommit=True,
        connect_timeout=CONNECT_TIMEOUT_S,
    )


def ensure_months(con: psycopg.Connection, months: list[tuple[int, int]]) -> None:
    """Make the partitions of ``months`` that do not exist yet, committed at once on a
    connection of their own (see the module's docstring), whatever ``con``'s transaction
    does after; ``con`` only asks which exist."""
    todo = missing(con, months) if months else []
    if not todo:
        return
    with _side_connection(con) as side, side.transaction():
        side.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        side.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])
        for year, month in todo:
            create_month(side, year, month)


def with_trace_time(decisions: pa.Table, traces: pa.Table) -> pa.Table:
    """``decisions`` with a ``created_at`` column: each row's trace's, from ``traces`` (the
    same batch, numbered alike), the partition key of ``decisions``."""
    at = pc.index_in(decisions.column("tseq"), value_set=traces.column("tseq"))
    if at.null_count:
        raise ValueError("a decision row of a batch names a trace the batch does not hold")
    created = pc.take(traces.column("created_at"), at)
    return decisions.append_column(pa.field("created_at", traces.schema.field("created_at").type),
                                   created)  # fmt: skip


def place(con: psycopg.Connection, tables: dict[str, pa.Table]) -> None:
    """Ready a numbered batch (``pginserts``) for the partitioned tables: every month its
    traces fall in has its partitions, and its decision rows carry their trace's time."""
    traces = tables.get("traces")
    if traces is None or not traces.num_rows:
        return
    ensure_months(con, months_of(traces.column("created_at")))
    decisions = tables.get("decisions")
    if decisions is not None and "created_at" not in decisions.schema.names:
        tables["decisions"] = with_trace_time(decisions, traces)


__all__ = [
    "PARTITIONED",
    "bounds",
    "create_month",
    "ensure_months",
    "missing",
    "months_of",
    "partition_name",
    "place",
    "with_trace_time",
]
