"""Versioned schema migrations of the DuckDB trace store.

Each migration is a named function in ``MIGRATIONS``; ``apply`` runs the ones a database
has not seen yet, each in its own transaction together with its row in
``schema_migrations``, so a crash between two migrations leaves a consistent, resumable
database. Shipped migrations are never edited: a schema change is a new function at the
end of the list (a test upgrades a store created at version 1 to the latest).

Timestamps are ``TIMESTAMP`` columns holding UTC (``TIMESTAMPTZ`` would need pytz to be
read back in Python, which ctxscope does not depend on); the store converts at the edge.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import duckdb
import pyarrow as pa

Migration = Callable[[duckdb.DuckDBPyConnection], None]


@dataclass(frozen=True)
class Step:
    version: int
    name: str
    fn: Migration


def m001_base(con: duckdb.DuckDBPyConnection) -> None:
    """Traces, per-packet decisions, partitions, ingest errors and per-file offsets."""
    con.execute(
        """
        CREATE TABLE traces (
            trace_id VARCHAR PRIMARY KEY,
            tseq BIGINT NOT NULL,
            session_id VARCHAR NOT NULL,
            turn INTEGER NOT NULL,
            created_at TIMESTAMP NOT NULL,
            preset VARCHAR NOT NULL,
            builder VARCHAR NOT NULL,
            builder_version VARCHAR NOT NULL,
            budget BIGINT NOT NULL,
            used BIGINT NOT NULL,
            n_packets INTEGER NOT NULL,
            n_kept INTEGER NOT NULL,
            n_truncated INTEGER NOT NULL,
            n_summarized INTEGER NOT NULL,
            n_dropped INTEGER NOT NULL,
            n_filtered INTEGER NOT NULL,
            n_not_rendered INTEGER NOT NULL,
            n_warnings INTEGER NOT NULL,
            lost_must_keep INTEGER NOT NULL,
            verdict VARCHAR NOT NULL,
            tags VARCHAR[] NOT NULL,
            source_trace_id VARCHAR,
            source_file VARCHAR,
            content_hash VARCHAR NOT NULL,
            ingested_at TIMESTAMP NOT NULL,
            trace_json VARCHAR NOT NULL
        )
        """
    )
    # tseq (insertion order) rather than trace_id keys the child tables: rows arrive in
    # tseq order, so DuckDB's min/max zone maps find one trace's rows without an index.
    con.execute(
        """
        CREATE TABLE decisions (
            tseq BIGINT NOT NULL,
            trace_id VARCHAR NOT NULL,
            ord INTEGER NOT NULL,
            packet_id VARCHAR NOT NULL,
            kind VARCHAR NOT NULL,
            tokens_before BIGINT,
            tokens_after BIGINT,
            relevance DOUBLE,
            recency DOUBLE,
            score DOUBLE,
            rank INTEGER,
            status VARCHAR,
            reason VARCHAR,
            reason_text VARCHAR,
            partition VARCHAR,
            budget_left BIGINT,
            must_keep BOOLEAN NOT NULL,
            content VARCHAR
        )
        """
    )
    con.execute(
        """
        CREATE TABLE partitions (
            tseq BIGINT NOT NULL,
            trace_id VARCHAR NOT NULL,
            ord INTEGER NOT NULL,
            name VARCHAR NOT NULL,
            budget BIGINT,
            used BIGINT NOT NULL,
            items INTEGER NOT NULL
        )
        """
    )
    con.execute(
        """
        CREATE TABLE ingest_errors (
            file VARCHAR NOT NULL,
            line BIGINT NOT NULL,
            message VARCHAR NOT NULL,
            "at" TIMESTAMP NOT NULL
        )
        """
    )
    con.execute(
        """
        CREATE TABLE file_offsets (
            file VARCHAR PRIMARY KEY,
            "offset" BIGINT NOT NULL,
            line BIGINT NOT NULL,
            size BIGINT NOT NULL,
            mtime DOUBLE NOT NULL,
            updated_at TIMESTAMP NOT NULL
        )
        """
    )


def m002_findings(con: duckdb.DuckDBPyConnection) -> None:
    """Diagnostics: one row per finding, and per-trace summary columns to filter on."""
    con.execute(
        """
        CREATE TABLE findings (
            tseq BIGINT NOT NULL,
            trace_id VARCHAR NOT NULL,
            ord INTEGER NOT NULL,
            detector VARCHAR NOT NULL,
            severity VARCHAR NOT NULL,
            packet_ids VARCHAR[] NOT NULL,
            message VARCHAR NOT NULL,
            evidence_json VARCHAR,
            fix_json VARCHAR
        )
        """
    )
    con.execute("ALTER TABLE traces ADD COLUMN n_findings INTEGER DEFAULT 0")
    con.execute("ALTER TABLE traces ADD COLUMN max_severity VARCHAR")
    # A hash of the bytes just before the offset: a file replaced by a different one of
    # at least the same size (rename over it) is then re-read from the start.
    con.execute("ALTER TABLE file_offsets ADD COLUMN fingerprint VARCHAR")


def m003_compressed_json(con: duckdb.DuckDBPyConnection) -> None:
    """The full trace JSON stored zstd-compressed (``trace_zst``, with its size in
    ``json_bytes``) instead of as text: bulk ingest spent more time having DuckDB store the
    text than compressing it costs. DuckDB cannot drop a column of a table with a primary
    key, so the table is rebuilt."""
    from ctxcore.store.rows import pack_json  # the codec lives with the code that writes rows

    cols = [
        r[0]
        for r in con.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_name = 'traces' ORDER BY ordinal_position"
        ).fetchall()
    ]
    kept = [c for c in cols if c != "trace_json"]
    con.execute(
        """
        CREATE TABLE traces_v3 (
            trace_id VARCHAR PRIMARY KEY,
            tseq BIGINT NOT NULL,
            session_id VARCHAR NOT NULL,
            turn INTEGER NOT NULL,
            created_at TIMESTAMP NOT NULL,
            preset VARCHAR NOT NULL,
            builder VARCHAR NOT NULL,
            builder_version VARCHAR NOT NULL,
            budget BIGINT NOT NULL,
            used BIGINT NOT NULL,
            n_packets INTEGER NOT NULL,
            n_kept INTEGER NOT NULL,
            n_truncated INTEGER NOT NULL,
            n_summarized INTEGER NOT NULL,
            n_dropped INTEGER NOT NULL,
            n_filtered INTEGER NOT NULL,
            n_not_rendered INTEGER NOT NULL,
            n_warnings INTEGER NOT NULL,
            lost_must_keep INTEGER NOT NULL,
            verdict VARCHAR NOT NULL,
            tags VARCHAR[] NOT NULL,
            source_trace_id VARCHAR,
            source_file VARCHAR,
            content_hash VARCHAR NOT NULL,
            ingested_at TIMESTAMP NOT NULL,
            n_findings INTEGER DEFAULT 0,
            max_severity VARCHAR,
            json_bytes BIGINT NOT NULL,
            -- already zstd: DuckDB's own compression would only spend time analysing it
            trace_zst BLOB USING COMPRESSION uncompressed NOT NULL
        )
        """
    )
    names = ", ".join(f'"{c}"' for c in kept)
    row = con.execute("SELECT coalesce(min(tseq), 0), coalesce(max(tseq), -1) FROM traces")
    lo, hi = row.fetchall()[0]
    step = 2000  # in slices, so a big store is never all in memory
    for start in range(int(lo), int(hi) + 1, step):
        part = con.sql(
            f"SELECT {names}, trace_json FROM traces WHERE tseq >= ? AND tseq < ?",
            params=[start, start + step],
        ).to_arrow_table()
        raws = [t.encode("utf-8", "surrogatepass") for t in part.column("trace_json").to_pylist()]
        part = part.drop_columns(["trace_json"])
        part = part.append_column("json_bytes", pa.array([len(r) for r in raws], pa.int64()))
        part = part.append_column("trace_zst", pa.array([pack_json(r) for r in raws], pa.binary()))
        con.register("_m003", part)
        con.execute(f"INSERT INTO traces_v3 ({names}, json_bytes, trace_zst) "
                    f"SELECT {names}, json_bytes, trace_zst FROM _m003")  # fmt: skip
        con.unregister("_m003")
    con.execute("DROP TABLE traces")
    con.execute("ALTER TABLE traces_v3 RENAME TO traces")


def m004_file_state(con: duckdb.DuckDBPyConnection) -> None:
    """What ingest needs to tell a file it read from another one at the same path, and to
    remember a file it could not read: the inode, a fingerprint of the file's first bytes
    (a replaced file whose bytes before the offset happen to match is still caught), and
    ``failed``, why it could not be read (it is not tried again until it changes)."""
    con.execute("ALTER TABLE file_offsets ADD COLUMN inode UBIGINT")
    con.execute("ALTER TABLE file_offsets ADD COLUMN head VARCHAR")
    con.execute("ALTER TABLE file_offsets ADD COLUMN failed VARCHAR")


def m005_diagnosed_with(con: duckdb.DuckDBPyConnection) -> None:
    """``diagnosed_with``: the ``ctxcore.diagnostics.fingerprint()`` of the code that computed
    a trace's stored findings (NULL: not recorded, or not diagnosed). Replay takes the
    recorded side's findings from the store only where it is its own fingerprint."""
    con.execute("ALTER TABLE traces ADD COLUMN diagnosed_with VARCHAR")


MIGRATIONS: tuple[Step, ...] = (
    Step(1, "base", m001_base),
    Step(2, "findings", m002_findings),
    Step(3, "compressed_json", m003_compressed_json),
    Step(4, "file_state", m004_file_state),
    Step(5, "diagnosed_with", m005_diagnosed_with),
)

LATEST = MIGRATIONS[-1].version


def applied(con: duckdb.DuckDBPyConnection) -> list[int]:
    """Versions already applied (empty for a brand-new file)."""
    con.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        "version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, applied_at TIMESTAMP NOT NULL)"
    )
    rows = con.execute("SELECT version FROM schema_migrations ORDER BY version").fetchall()
    return [int(r[0]) for r in rows]


def apply(con: duckdb.DuckDBPyConnection, upto: int | None = None) -> list[int]:
    """Run every pending migration (up to ``upto``); returns the versions just applied."""
    done = set(applied(con))
    ran: list[int] = []
    for step in MIGRATIONS:
        if step.version in done or (upto is not None and step.version > upto):
            continue
        con.execute("BEGIN TRANSACTION")
        try:
            step.fn(con)
            con.execute(
                "INSERT INTO schema_migrations VALUES (?, ?, ?)",
                [step.version, step.name, datetime.now(UTC).replace(tzinfo=None)],
            )
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        ran.append(step.version)
    return ran


def applied_readonly(con: duckdb.DuckDBPyConnection) -> int:
    """The latest applied version, without creating anything (0 for an empty file)."""
    try:
        rows = con.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchall()
    except duckdb.CatalogException:
        return 0
    return int(rows[0][0]) if rows else 0
