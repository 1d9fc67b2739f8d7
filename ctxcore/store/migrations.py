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

import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa

if TYPE_CHECKING:
    from ctxcore.store.splitting import Splitter

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
    from ctxcore.store.codec import pack_json

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


def m006_small_values(con: duckdb.DuckDBPyConnection) -> None:
    """No stored value longer than ``rows.PART_BYTES``: a checkpoint after an append read the
    long values of a table's whole last row group again (the trace JSON of up to 122,880
    traces), past DuckDB's memory limit. The compressed JSON moves into ``trace_parts``, in
    pieces; the decisions' packet texts into ``contents``, each distinct text once (then
    named by ``decisions.cid``), in pieces: a session's calls repeat their context's texts,
    so the decisions held them many times over (docs/design.md, "Store"). Moved in slices
    of traces, so a big store is never all in memory."""
    from ctxcore.store.rows import TAIL_CHARS, TEXT_KEYS, blob_parts, text_digest, text_parts

    con.execute(
        "CREATE TABLE trace_parts (tseq BIGINT NOT NULL, part INTEGER NOT NULL, "
        "data BLOB USING COMPRESSION uncompressed NOT NULL)"
    )
    con.execute(
        "CREATE TABLE contents (cid BIGINT NOT NULL, part INTEGER NOT NULL, "
        "text VARCHAR NOT NULL, tail VARCHAR)"
    )
    con.execute(
        """
        CREATE TABLE decisions_v6 (
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
            cid BIGINT
        )
        """
    )
    cols = ", ".join(
        f"d.{c}"
        for c in (
            "tseq", "trace_id", "ord", "packet_id", "kind", "tokens_before", "tokens_after",
            "relevance", "recency", "score", "rank", "status", "reason", "reason_text",
            "partition", "budget_left", "must_keep",
        )
    )  # fmt: skip
    row = con.execute(
        "SELECT least(min(lo), min(hi)), greatest(max(lo), max(hi)) FROM ("
        "SELECT min(tseq) AS lo, max(tseq) AS hi FROM traces UNION ALL "
        "SELECT min(tseq), max(tseq) FROM decisions)"
    ).fetchall()[0]
    lo, hi = (0, -1) if row[0] is None else (int(row[0]), int(row[1]))
    seen: OrderedDict[bytes, int] = OrderedDict()  # digest -> cid, the TEXT_KEYS latest
    last_cid = 0
    step = 200  # traces a slice: their texts and JSON are in memory together
    for start in range(lo, hi + 1, step):
        bounds = [start, start + step]
        got = con.sql(
            "SELECT tseq, trace_zst FROM traces WHERE tseq >= ? AND tseq < ? ORDER BY tseq",
            params=bounds,
        ).to_arrow_table()
        if got.num_rows:
            data, which, number = blob_parts(got.column("trace_zst").to_pylist())
            tseqs = got.column("tseq").to_numpy()[which]
            parts = pa.table(  # noqa: F841 - read by name by the SQL below (not registered:
                # a view dropped inside a transaction keeps its Arrow data to the commit)
                {"tseq": tseqs, "part": pa.array(number, pa.int32()), "data": data}
            )
            con.execute("INSERT INTO trace_parts SELECT tseq, part, data FROM parts")
        dec = con.sql(
            "SELECT tseq, ord, content FROM decisions WHERE tseq >= ? AND tseq < ?",
            params=bounds,
        ).to_arrow_table()
        if not dec.num_rows:
            continue
        cids: list[int | None] = []
        texts: dict[str, list[object]] = {"cid": [], "part": [], "text": [], "tail": []}
        for text in dec.column("content").to_pylist():
            if text is None:
                cids.append(None)
                continue
            key = text_digest(text)
            cid = seen.get(key)
            if cid is None:
                last_cid += 1
                cid = last_cid
                pieces = text_parts(text)
                texts["cid"] += [cid] * len(pieces)
                texts["part"] += range(len(pieces))
                texts["text"] += pieces
                texts["tail"] += [p[:TAIL_CHARS] for p in pieces[1:]] + [None]
            seen[key] = cid
            seen.move_to_end(key)
            if len(seen) > TEXT_KEYS:
                seen.popitem(last=False)
            cids.append(cid)
        named = pa.table(  # noqa: F841 - read by name by the SQL below
            {
                "tseq": dec.column("tseq"),
                "ord": dec.column("ord"),
                "cid": pa.array(cids, pa.int64()),
            }
        )
        con.execute(
            f"INSERT INTO decisions_v6 SELECT {cols}, n.cid FROM decisions d "
            "JOIN named n ON n.tseq = d.tseq AND n.ord = d.ord "
            "WHERE d.tseq >= ? AND d.tseq < ?",
            bounds,
        )
        if texts["cid"]:
            stored = pa.table(  # noqa: F841 - read by name by the SQL below
                {
                    "cid": pa.array(texts["cid"], pa.int64()),
                    "part": pa.array(texts["part"], pa.int32()),
                    "text": pa.array(texts["text"], pa.string()),
                    "tail": pa.array(texts["tail"], pa.string()),
                }
            )
            con.execute("INSERT INTO contents SELECT cid, part, text, tail FROM stored")
    con.execute("DROP TABLE decisions")
    con.execute("ALTER TABLE decisions_v6 RENAME TO decisions")
    con.execute("ALTER TABLE traces DROP COLUMN trace_zst")


#: what ``m007_usage`` adds to ``traces`` beside ``model``: the normalized usage
#: (``outcome.tokens``), NULL where the trace does not say, so the Traces page costs a page
#: of traces, and a session, without reading their JSON (docs/design.md, "Store")
M007_USAGE = (
    "input_tokens", "cache_read_tokens", "cache_write_tokens", "cache_write_5m_tokens",
    "cache_write_1h_tokens", "output_tokens", "reasoning_tokens",
)  # fmt: skip


def m007_usage(con: duckdb.DuckDBPyConnection) -> None:
    """The model (``metadata.model``) and the usage (``outcome.tokens``) of each trace as
    columns, filled in for the traces already stored (read in slices, so a big store is
    never all in memory)."""
    from ctxcore.store.codec import unpack_json
    from ctxcore.store.inserts import packed

    con.execute("ALTER TABLE traces ADD COLUMN model VARCHAR")
    for name in M007_USAGE:
        con.execute(f"ALTER TABLE traces ADD COLUMN {name} BIGINT")
    row = con.execute("SELECT coalesce(min(tseq), 0), coalesce(max(tseq), -1) FROM traces")
    lo, hi = row.fetchall()[0]
    step = 500
    for start in range(int(lo), int(hi) + 1, step):
        sizes = dict(
            con.execute(
                "SELECT tseq, json_bytes FROM traces WHERE tseq >= ? AND tseq < ?",
                [start, start + step],
            ).fetchall()
        )
        found: dict[str, list[object]] = {"tseq": [], "model": []}
        found.update({name: [] for name in M007_USAGE})
        for tseq, blob in packed(con, sorted(sizes)).items():
            data = json.loads(unpack_json(blob, sizes[tseq]))
            model = (data.get("metadata") or {}).get("model")
            tokens = (data.get("outcome") or {}).get("tokens") or {}
            if not isinstance(model, str) and not tokens:
                continue
            found["tseq"].append(tseq)
            found["model"].append(model if isinstance(model, str) else None)
            for name in M007_USAGE:
                found[name].append(tokens.get(name))
        if not found["tseq"]:
            continue
        usage = pa.table(  # noqa: F841 - read by name by the SQL below
            {
                "tseq": pa.array(found["tseq"], pa.int64()),
                "model": pa.array(found["model"], pa.string()),
                **{n: pa.array(found[n], pa.int64()) for n in M007_USAGE},
            }
        )
        sets = ", ".join(f"{c} = usage.{c}" for c in ("model", *M007_USAGE))
        con.execute(f"UPDATE traces SET {sets} FROM usage WHERE traces.tseq = usage.tseq")


def m008_shared_parts(con: duckdb.DuckDBPyConnection) -> None:
    """Traces in the shared form (docs/design.md, "Store"): each item and long text of a
    trace's input and result once (``shared_parts``: where it is; ``part_packs``: the parts
    an insert added, packed together), the trace's body in ``trace_parts`` naming them. The
    traces stored before are moved over, a session's in order (each names what its
    previous one split off), in slices of 200."""
    from ctxcore.store.splitting import Splitter

    con.execute(
        "CREATE TABLE shared_parts (pid VARCHAR NOT NULL, pack VARCHAR NOT NULL, "
        "start BIGINT NOT NULL, size BIGINT NOT NULL)"
    )
    con.execute(
        "CREATE TABLE part_packs (pack VARCHAR NOT NULL, part INTEGER NOT NULL, "
        "size BIGINT NOT NULL, data BLOB USING COMPRESSION uncompressed NOT NULL)"
    )
    order = con.execute(
        "SELECT tseq, session_id, json_bytes FROM traces ORDER BY session_id, turn, tseq"
    ).fetchall()
    stored: set[str] = set()
    splitter = Splitter()
    for start in range(0, len(order), 200):
        _m008_share(con, order[start : start + 200], stored, splitter)


def _m008_share(
    con: duckdb.DuckDBPyConnection,
    rows: list[tuple[int, str, int]],
    stored: set[str],
    splitter: Splitter,
) -> None:
    """Migration 8 on one slice of (tseq, session, JSON size): each trace that splits is
    stored shared, with the parts ``stored`` lacks (which it then holds)."""
    from ctxcore.store import codec
    from ctxcore.store.inserts import packed
    from ctxcore.store.rows import blob_parts, packed_parts

    blobs = packed(con, [r[0] for r in rows])
    tseqs: list[int] = []
    bodies: list[bytes] = []
    new: list[tuple[str, bytes]] = []
    for tseq, session, size in rows:
        split = splitter.split(codec.unpack_json(blobs[tseq], size), session)
        if split is None:
            continue
        tseqs.append(tseq)
        bodies.append(codec.pack_shared(split.body, list(split.parts)))
        new += [(p, d) for p, d in split.parts.items() if p not in stored]
        stored.update(split.parts)
    if not tseqs:
        return
    data, which, number = blob_parts(bodies)
    table = pa.table(  # noqa: F841 - read by name by the SQL below
        {
            "tseq": pa.array(tseqs, pa.int64()).take(pa.array(which)),
            "part": pa.array(number, pa.int32()),
            "data": data,
        }
    )
    con.execute("DELETE FROM trace_parts WHERE tseq IN (SELECT unnest(?::BIGINT[]))", [tseqs])
    con.execute('INSERT INTO trace_parts SELECT tseq, part, data FROM "table"')
    for name, rows_of in packed_parts(new).items():
        con.from_arrow(rows_of).insert_into(name)


def m009_cost_parts(con: duckdb.DuckDBPyConnection) -> None:
    """Each trace's cost summary (``rows.COST_PARTS``: ``costing.encode_summary``, packed,
    in pieces), written with the trace, so that a session is costed without reading its
    traces (docs/design.md, "Cost and prices"). A trace stored before has none: its
    reader summarizes it from its JSON."""
    con.execute(
        "CREATE TABLE cost_parts (tseq BIGINT NOT NULL, part INTEGER NOT NULL, "
        "data BLOB USING COMPRESSION uncompressed NOT NULL)"
    )


MIGRATIONS: tuple[Step, ...] = (
    Step(1, "base", m001_base),
    Step(2, "findings", m002_findings),
    Step(3, "compressed_json", m003_compressed_json),
    Step(4, "file_state", m004_file_state),
    Step(5, "diagnosed_with", m005_diagnosed_with),
    Step(6, "small_values", m006_small_values),
    Step(7, "usage", m007_usage),
    Step(8, "shared_parts", m008_shared_parts),
    Step(9, "cost_parts", m009_cost_parts),
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
