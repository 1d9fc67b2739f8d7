"""Versioned schema migrations of the PostgreSQL trace store (docs/design.md, "Store").

The same tables as the DuckDB engine's (``store/migrations.py``), so that the Arrow rows of
``rows.prepare`` go in as they are; what differs is what many writers and a big store need:
``tseq`` and ``cid`` come from sequences (several processes insert at once), ``trace_id`` is
unique (two writers racing on one id: the second waits for the first and then skips or
reports it), ingest errors are unique by file, line and message, and the app's queries have
their indexes. Identifiers and the columns the app sorts on compare byte by byte
(``COLLATE "C"``), as DuckDB's do, whatever the database's locale.

Each migration runs in its own transaction with its ``schema_migrations`` row, under an
advisory lock: several writers starting at once on a new database migrate it once. A shipped
migration is never edited; a change is a new one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import psycopg

from ctxcore.errors import StoreError
from ctxcore.store import pgparts

Migration = Callable[[psycopg.Connection], None]

#: pg_advisory_xact_lock key of the migrations ("ctxscope" in ASCII, as a number)
LOCK_KEY = 0x63747873636F7065

_ID = 'TEXT COLLATE "C"'
_IDS = 'TEXT[] COLLATE "C"'


@dataclass(frozen=True)
class Step:
    version: int
    name: str
    fn: Migration


def m001_base(con: psycopg.Connection) -> None:
    """Traces, their JSON in pieces, decisions, packet texts, partitions, findings, ingest
    errors and file offsets, with the indexes of the app's lists, a session's timeline and
    one trace."""
    _m001_traces(con)
    _m001_children(con)
    _m001_ingest_state(con)


def _m001_traces(con: psycopg.Connection) -> None:
    """Migration 1: the sequences, the ``traces`` rows and their indexes."""
    con.execute("CREATE SEQUENCE trace_tseq")
    con.execute("CREATE SEQUENCE content_cid")
    counts = ", ".join(
        f"{c} INTEGER NOT NULL"
        for c in (
            "n_packets", "n_kept", "n_truncated", "n_summarized", "n_dropped", "n_filtered",
            "n_not_rendered", "n_warnings", "lost_must_keep",
        )
    )  # fmt: skip
    con.execute(
        f"""
        CREATE TABLE traces (
            tseq BIGINT PRIMARY KEY,
            trace_id {_ID} NOT NULL UNIQUE,
            session_id {_ID} NOT NULL,
            turn INTEGER NOT NULL,
            created_at TIMESTAMP NOT NULL,
            preset {_ID} NOT NULL,
            builder {_ID} NOT NULL,
            builder_version {_ID} NOT NULL,
            budget BIGINT NOT NULL,
            used BIGINT NOT NULL,
            {counts},
            verdict {_ID} NOT NULL,
            tags {_IDS} NOT NULL,
            source_trace_id {_ID},
            source_file TEXT,
            content_hash TEXT NOT NULL,
            ingested_at TIMESTAMP NOT NULL,
            n_findings INTEGER,
            max_severity TEXT,
            json_bytes BIGINT NOT NULL,
            diagnosed_with TEXT,
            model TEXT,
            input_tokens BIGINT,
            cache_read_tokens BIGINT,
            cache_write_tokens BIGINT,
            cache_write_5m_tokens BIGINT,
            cache_write_1h_tokens BIGINT,
            output_tokens BIGINT,
            reasoning_tokens BIGINT
        )
        """
    )
    con.execute("CREATE INDEX traces_created ON traces (created_at, tseq)")
    con.execute("CREATE INDEX traces_session ON traces (session_id, turn, tseq)")
    con.execute("CREATE INDEX traces_tags ON traces USING gin (tags)")
    con.execute("CREATE INDEX traces_undiagnosed ON traces (tseq) WHERE n_findings IS NULL")


def _m001_children(con: psycopg.Connection) -> None:
    """Migration 1: each trace's JSON in pieces, decisions, packet texts, partitions and
    findings, keyed by ``tseq``."""
    con.execute(
        "CREATE TABLE trace_parts (tseq BIGINT NOT NULL, part INTEGER NOT NULL, "
        "data BYTEA NOT NULL, PRIMARY KEY (tseq, part))"
    )
    con.execute(
        f"""
        CREATE TABLE decisions (
            tseq BIGINT NOT NULL,
            trace_id {_ID} NOT NULL,
            ord INTEGER NOT NULL,
            packet_id {_ID} NOT NULL,
            kind {_ID} NOT NULL,
            tokens_before BIGINT,
            tokens_after BIGINT,
            relevance DOUBLE PRECISION,
            recency DOUBLE PRECISION,
            score DOUBLE PRECISION,
            rank INTEGER,
            status {_ID},
            reason {_ID},
            reason_text TEXT,
            partition {_ID},
            budget_left BIGINT,
            must_keep BOOLEAN NOT NULL,
            cid BIGINT
        )
        """
    )
    con.execute("CREATE INDEX decisions_tseq ON decisions (tseq, ord)")
    con.execute(
        "CREATE TABLE contents (cid BIGINT NOT NULL, part INTEGER NOT NULL, "
        "text TEXT NOT NULL, tail TEXT, PRIMARY KEY (cid, part))"
    )
    con.execute(
        f"CREATE TABLE partitions (tseq BIGINT NOT NULL, trace_id {_ID} NOT NULL, "
        f"ord INTEGER NOT NULL, name {_ID} NOT NULL, budget BIGINT, used BIGINT NOT NULL, "
        "items INTEGER NOT NULL)"
    )
    con.execute("CREATE INDEX partitions_tseq ON partitions (tseq, ord)")
    con.execute(
        f"""
        CREATE TABLE findings (
            tseq BIGINT NOT NULL,
            trace_id {_ID} NOT NULL,
            ord INTEGER NOT NULL,
            detector {_ID} NOT NULL,
            severity {_ID} NOT NULL,
            packet_ids {_IDS} NOT NULL,
            message TEXT NOT NULL,
            evidence_json TEXT,
            fix_json TEXT
        )
        """
    )
    con.execute("CREATE INDEX findings_tseq ON findings (tseq, ord)")
    con.execute("CREATE INDEX findings_detector ON findings (detector, tseq)")


def _m001_ingest_state(con: psycopg.Connection) -> None:
    """Migration 1: ingest's errors and how far it read each file."""
    con.execute(
        "CREATE TABLE ingest_errors (file TEXT NOT NULL, line BIGINT NOT NULL, "
        'message TEXT NOT NULL, "at" TIMESTAMP NOT NULL)'
    )
    # unique by file, line and message (digests: a message may pass a btree entry's size)
    con.execute(
        "CREATE UNIQUE INDEX ingest_errors_once ON ingest_errors (md5(file), line, md5(message))"
    )
    con.execute('CREATE INDEX ingest_errors_at ON ingest_errors ("at")')
    con.execute(
        """
        CREATE TABLE file_offsets (
            file TEXT PRIMARY KEY,
            "offset" BIGINT NOT NULL,
            line BIGINT NOT NULL,
            size BIGINT NOT NULL,
            mtime DOUBLE PRECISION NOT NULL,
            updated_at TIMESTAMP NOT NULL,
            fingerprint TEXT,
            inode NUMERIC(20, 0),
            head TEXT,
            failed TEXT
        )
        """
    )


def m002_tokens(con: psycopg.Connection) -> None:
    """The app's access tokens on a team store: one per person, by name, stored as a digest
    (the token itself is shown once, when it is made), revoked by a time."""
    con.execute(
        f"CREATE TABLE ctxscope_tokens (name {_ID} PRIMARY KEY, digest TEXT NOT NULL UNIQUE, "
        "created_at TIMESTAMP NOT NULL, revoked_at TIMESTAMP)"
    )


def m003_partitions(con: psycopg.Connection) -> None:
    """``traces`` and ``decisions`` partitioned by the month of the trace's ``created_at``
    (``pgparts``; a decision row gets its trace's ``created_at``), the stored rows moved into
    them; the trace id's uniqueness kept by ``trace_ids`` (a unique index of a partitioned
    table must hold the partition key)."""
    con.execute(f"CREATE TABLE trace_ids (trace_id {_ID} PRIMARY KEY, tseq BIGINT NOT NULL)")
    con.execute("INSERT INTO trace_ids SELECT trace_id, tseq FROM traces")
    con.execute(
        "CREATE TABLE traces_by_month (LIKE traces INCLUDING DEFAULTS) "
        "PARTITION BY RANGE (created_at)"
    )
    con.execute(
        "CREATE TABLE decisions_by_month (LIKE decisions INCLUDING DEFAULTS, "
        "created_at TIMESTAMP NOT NULL) PARTITION BY RANGE (created_at)"
    )
    months = con.execute(
        "SELECT DISTINCT date_trunc('month', created_at) FROM traces ORDER BY 1"
    ).fetchall()
    for (month,) in months:
        start, end = pgparts.bounds(month.year, month.month)
        for table in pgparts.PARTITIONED:
            con.execute(
                f"CREATE TABLE {pgparts.partition_name(table, month.year, month.month)} "
                f"PARTITION OF {table}_by_month FOR VALUES FROM ('{start}') TO ('{end}')"
            )
    _m003_move_rows(con)
    _m003_indexes(con)


def _m003_move_rows(con: psycopg.Connection) -> None:
    """Migration 3: the stored rows into the partitioned tables, which take the old names."""
    con.execute("INSERT INTO traces_by_month SELECT * FROM traces")
    cols = ", ".join(
        r[0]
        for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = "
            "'decisions' AND table_schema = current_schema() ORDER BY ordinal_position"
        ).fetchall()
    )
    con.execute(
        f"INSERT INTO decisions_by_month ({cols}, created_at) "
        f"SELECT {', '.join('d.' + c for c in cols.split(', '))}, t.created_at "
        "FROM decisions d JOIN traces t USING (tseq)"
    )
    con.execute("DROP TABLE decisions")
    con.execute("DROP TABLE traces")
    con.execute("ALTER TABLE traces_by_month RENAME TO traces")
    con.execute("ALTER TABLE decisions_by_month RENAME TO decisions")


def _m003_indexes(con: psycopg.Connection) -> None:
    """Migration 3: the indexes of migration 1 on the partitioned tables (each partition
    gets its own), the primary key holding the partition key, and one on ``trace_id``
    (unique through ``trace_ids``) for the reads of one trace."""
    con.execute("ALTER TABLE traces ADD CONSTRAINT traces_pkey PRIMARY KEY (tseq, created_at)")
    con.execute("CREATE INDEX traces_id ON traces (trace_id)")
    con.execute("CREATE INDEX traces_created ON traces (created_at, tseq)")
    con.execute("CREATE INDEX traces_session ON traces (session_id, turn, tseq)")
    con.execute("CREATE INDEX traces_tags ON traces USING gin (tags)")
    con.execute("CREATE INDEX traces_undiagnosed ON traces (tseq) WHERE n_findings IS NULL")
    con.execute("CREATE INDEX decisions_tseq ON decisions (tseq, ord)")


def m004_shared_parts(con: psycopg.Connection) -> None:
    """Traces in the shared form (docs/design.md, "Store"): each item and long text of a
    trace's input and result once (``shared_parts``: where it is; ``part_packs``: the parts
    an insert added, packed together; a pack two writers stored at once is there twice and
    read once), the trace's body in ``trace_parts`` naming them. The traces stored before
    stay whole, as they are read."""
    con.execute(
        f"CREATE TABLE shared_parts (pid {_ID} NOT NULL, pack {_ID} NOT NULL, "
        "start BIGINT NOT NULL, size BIGINT NOT NULL)"
    )
    con.execute(
        f"CREATE TABLE part_packs (pack {_ID} NOT NULL, part INTEGER NOT NULL, "
        "size BIGINT NOT NULL, data BYTEA NOT NULL)"
    )
    con.execute("CREATE INDEX shared_parts_pid ON shared_parts (pid)")
    con.execute("CREATE INDEX part_packs_pack ON part_packs (pack, part)")


def m005_cost_parts(con: psycopg.Connection) -> None:
    """Each trace's cost summary in pieces, as DuckDB's migration 9 keeps it
    (``rows.COST_PARTS``); a trace stored before has none."""
    con.execute(
        "CREATE TABLE cost_parts (tseq BIGINT NOT NULL, part INTEGER NOT NULL, "
        "data BYTEA NOT NULL, PRIMARY KEY (tseq, part))"
    )


MIGRATIONS: tuple[Step, ...] = (
    Step(1, "base", m001_base),
    Step(2, "tokens", m002_tokens),
    Step(3, "partitions", m003_partitions),
    Step(4, "shared_parts", m004_shared_parts),
    Step(5, "cost_parts", m005_cost_parts),
)

LATEST = MIGRATIONS[-1].version

#: the tables and sequences the migrations up to LATEST leave (not the months' partitions)
RELATIONS = (
    "content_cid", "contents", "cost_parts", "ctxscope_tokens", "decisions", "file_offsets",
    "findings", "ingest_errors", "part_packs", "partitions", "schema_migrations",
    "shared_parts", "trace_ids", "trace_parts", "trace_tseq", "traces",
)  # fmt: skip

_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
    "name TEXT NOT NULL, applied_at TIMESTAMP NOT NULL)"
)


def applied(con: psycopg.Connection) -> int:
    """The latest version applied (0 for an empty database), creating nothing."""
    row = con.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()
    if not row or not row[0]:
        return 0
    got = con.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()
    return int(got[0]) if got else 0


def missing(con: psycopg.Connection) -> list[str]:
    """The tables and sequences of ``RELATIONS`` the database lacks (dropped by hand: the
    migrations that made them are recorded as run, so none makes them again)."""
    rows = con.execute(
        "SELECT r FROM unnest(%s::text[]) AS r WHERE to_regclass(quote_ident(r)) IS NULL",
        [list(RELATIONS)],
    ).fetchall()
    return [str(r[0]) for r in rows]


def known(con: psycopg.Connection, where: str) -> int:
    """The latest version applied (``applied``); a ``StoreError`` when a newer ctxscope
    migrated the store past what this one knows: its writes and reads would not be what that
    schema holds (``where`` names the store in the message)."""
    have = applied(con)
    if have > LATEST:
        raise StoreError(
            f"{where} is at schema version {have}, made by a newer ctxscope; this one knows "
            f"versions up to {LATEST}, so it neither reads nor writes it: upgrade ctxscope on "
            "this machine (pip install -U ctxscope)"
        )
    return have


def apply(con: psycopg.Connection, upto: int | None = None) -> list[int]:
    """Run every pending migration (up to ``upto``), each in its own transaction under the
    migrations' advisory lock; the versions this call applied. ``con`` is in autocommit."""
    ran: list[int] = []
    for step in MIGRATIONS:
        if upto is not None and step.version > upto:
            break
        with con.transaction():
            con.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])
            con.execute(_TABLE)
            done = con.execute(
                "SELECT 1 FROM schema_migrations WHERE version = %s", [step.version]
            ).fetchone()
            if done:
                continue
            step.fn(con)
            con.execute(
                "INSERT INTO schema_migrations VALUES (%s, %s, %s)",
                [step.version, step.name, datetime.now(UTC).replace(tzinfo=None)],
            )
        ran.append(step.version)
    return ran


__all__ = ["LATEST", "MIGRATIONS", "RELATIONS", "Step", "applied", "apply", "known", "missing"]
