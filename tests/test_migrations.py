"""The store's schema: exact on a fresh file, and reached by upgrading a version-1 file."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest

from ctxcore.models import Trace
from ctxcore.store import TraceFilter, TraceStore, migrations

ROOT = Path(__file__).resolve().parent.parent
ALL_VERSIONS = [
    (1, "base"),
    (2, "findings"),
    (3, "compressed_json"),
    (4, "file_state"),
    (5, "diagnosed_with"),
    (6, "small_values"),
    (7, "usage"),
    (8, "shared_parts"),
    (9, "cost_parts"),
]

# The schema the app and the charts are written against (docs/design.md, "Store").
FRESH_SCHEMA: dict[str, list[tuple[str, str]]] = {
    "contents": [
        ("cid", "BIGINT"), ("part", "INTEGER"), ("text", "VARCHAR"), ("tail", "VARCHAR"),
    ],
    "cost_parts": [("tseq", "BIGINT"), ("part", "INTEGER"), ("data", "BLOB")],
    "decisions": [
        ("tseq", "BIGINT"), ("trace_id", "VARCHAR"), ("ord", "INTEGER"),
        ("packet_id", "VARCHAR"), ("kind", "VARCHAR"), ("tokens_before", "BIGINT"),
        ("tokens_after", "BIGINT"), ("relevance", "DOUBLE"), ("recency", "DOUBLE"),
        ("score", "DOUBLE"), ("rank", "INTEGER"), ("status", "VARCHAR"),
        ("reason", "VARCHAR"), ("reason_text", "VARCHAR"), ("partition", "VARCHAR"),
        ("budget_left", "BIGINT"), ("must_keep", "BOOLEAN"), ("cid", "BIGINT"),
    ],
    "file_offsets": [
        ("file", "VARCHAR"), ("offset", "BIGINT"), ("line", "BIGINT"), ("size", "BIGINT"),
        ("mtime", "DOUBLE"), ("updated_at", "TIMESTAMP"), ("fingerprint", "VARCHAR"),
        ("inode", "UBIGINT"), ("head", "VARCHAR"), ("failed", "VARCHAR"),
    ],
    "findings": [
        ("tseq", "BIGINT"), ("trace_id", "VARCHAR"), ("ord", "INTEGER"),
        ("detector", "VARCHAR"), ("severity", "VARCHAR"), ("packet_ids", "VARCHAR[]"),
        ("message", "VARCHAR"), ("evidence_json", "VARCHAR"), ("fix_json", "VARCHAR"),
    ],
    "ingest_errors": [
        ("file", "VARCHAR"), ("line", "BIGINT"), ("message", "VARCHAR"), ("at", "TIMESTAMP"),
    ],
    "part_packs": [
        ("pack", "VARCHAR"), ("part", "INTEGER"), ("size", "BIGINT"), ("data", "BLOB"),
    ],
    "partitions": [
        ("tseq", "BIGINT"), ("trace_id", "VARCHAR"), ("ord", "INTEGER"), ("name", "VARCHAR"),
        ("budget", "BIGINT"), ("used", "BIGINT"), ("items", "INTEGER"),
    ],
    "schema_migrations": [
        ("version", "INTEGER"), ("name", "VARCHAR"), ("applied_at", "TIMESTAMP"),
    ],
    "shared_parts": [
        ("pid", "VARCHAR"), ("pack", "VARCHAR"), ("start", "BIGINT"), ("size", "BIGINT"),
    ],
    "trace_parts": [("tseq", "BIGINT"), ("part", "INTEGER"), ("data", "BLOB")],
    "traces": [
        ("trace_id", "VARCHAR"), ("tseq", "BIGINT"), ("session_id", "VARCHAR"),
        ("turn", "INTEGER"), ("created_at", "TIMESTAMP"), ("preset", "VARCHAR"),
        ("builder", "VARCHAR"), ("builder_version", "VARCHAR"), ("budget", "BIGINT"),
        ("used", "BIGINT"), ("n_packets", "INTEGER"), ("n_kept", "INTEGER"),
        ("n_truncated", "INTEGER"), ("n_summarized", "INTEGER"), ("n_dropped", "INTEGER"),
        ("n_filtered", "INTEGER"), ("n_not_rendered", "INTEGER"), ("n_warnings", "INTEGER"),
        ("lost_must_keep", "INTEGER"), ("verdict", "VARCHAR"), ("tags", "VARCHAR[]"),
        ("source_trace_id", "VARCHAR"), ("source_file", "VARCHAR"),
        ("content_hash", "VARCHAR"), ("ingested_at", "TIMESTAMP"), ("n_findings", "INTEGER"),
        ("max_severity", "VARCHAR"), ("json_bytes", "BIGINT"), ("diagnosed_with", "VARCHAR"),
        ("model", "VARCHAR"), ("input_tokens", "BIGINT"), ("cache_read_tokens", "BIGINT"),
        ("cache_write_tokens", "BIGINT"), ("cache_write_5m_tokens", "BIGINT"),
        ("cache_write_1h_tokens", "BIGINT"), ("output_tokens", "BIGINT"),
        ("reasoning_tokens", "BIGINT"),
    ],
}  # fmt: skip


def schema_of(path: Path) -> dict[str, list[tuple[str, str]]]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        rows = con.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "ORDER BY table_name, ordinal_position"
        ).fetchall()
    finally:
        con.close()
    out: dict[str, list[tuple[str, str]]] = {}
    for table, col, typ in rows:
        out.setdefault(table, []).append((col, typ))
    return out


def versions(path: Path) -> list[tuple[int, str]]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return [
            (int(v), n)
            for v, n in con.execute(
                "SELECT version, name FROM schema_migrations ORDER BY version"
            ).fetchall()
        ]
    finally:
        con.close()


def test_fresh_store_has_exactly_the_latest_schema(tmp_path: Path) -> None:
    db = tmp_path / "fresh.duckdb"
    TraceStore(db).close()
    assert schema_of(db) == FRESH_SCHEMA
    assert versions(db) == ALL_VERSIONS


def test_reopening_applies_nothing_twice(tmp_path: Path) -> None:
    db = tmp_path / "again.duckdb"
    TraceStore(db).close()
    TraceStore(db).close()
    assert versions(db) == ALL_VERSIONS


def test_upgrade_from_version_1_keeps_the_data(tmp_path: Path) -> None:
    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))
    assert migrations.apply(con, upto=1) == [1]
    created = datetime(2025, 6, 1, 9, 30)
    # A real trace's JSON (non-ASCII included): version 3 moves it into trace_zst.
    demo = next(iter(sorted((ROOT / "ctxcore" / "data" / "demo").glob("*.jsonl"))))
    text = demo.read_text(encoding="utf-8").splitlines()[0]
    original = Trace.model_validate_json(text)
    con.execute(
        "INSERT INTO traces VALUES (?, 1, 'sess', 3, ?, 'ctxscope', 'b', '1', 1000, 400,"
        " 2, 1, 0, 0, 1, 0, 0, 0, 0, 'bad', ['x'], NULL, 'f.jsonl', 'h', ?, ?)",
        [original.trace_id, created, created, text],
    )
    con.execute("INSERT INTO file_offsets VALUES ('f.jsonl', 10, 1, 10, 1.0, ?)", [created])
    # Packet texts in the decisions, one long (version 6 stores it in pieces), one held by
    # two decisions (stored once), one missing
    long_text = "début " * 2_000 + "needle"
    for ord_, pid, content in ((0, "a", long_text), (1, "b", long_text), (2, "c", None)):
        con.execute(
            "INSERT INTO decisions VALUES (1, ?, ?, ?, 'file', 5, 5, NULL, NULL, NULL, NULL,"
            " 'kept', 'FITS', 'fits', NULL, NULL, false, ?)",
            [original.trace_id, ord_, pid, content],
        )
    con.close()
    assert [v for v, _ in versions(db)] == [1]

    with TraceStore(db) as store:
        page = store.list_traces(TraceFilter(verdict="bad"))
        assert [r.trace_id for r in page.rows] == [original.trace_id]
        assert store.get_trace(original.trace_id) == original
        row = page.rows[0]
        assert (row.turn, row.used, row.n_dropped, row.tags) == (3, 400, 1, ("x",))
        assert row.created_at == created.replace(tzinfo=UTC)
        assert row.n_findings == 0 and row.max_severity is None
        off = store.file_offset("f.jsonl")
        assert off is not None and off.offset == 10 and off.fingerprint is None
        assert (off.inode, off.head, off.failed) == (None, None, None)
        assert store.packet_content(original.trace_id, "a") == long_text
        assert store.packet_content(original.trace_id, "b") == long_text
        assert store.packet_content(original.trace_id, "c") is None
        assert store.list_traces(TraceFilter(search="DÉBUT needle")).total == 1
        cur = store._cur()
        [(texts, longest)] = cur.execute(
            "SELECT count(DISTINCT cid), max(strlen(text)) FROM contents"
        ).fetchall()
        assert texts == 1 and longest <= 4000
        assert [d["packet_id"] for d in store.decisions(original.trace_id)] == ["a", "b", "c"]
    assert schema_of(db) == FRESH_SCHEMA
    assert versions(db) == ALL_VERSIONS


def test_upgrade_to_version_7_fills_in_the_usage_of_stored_calls(tmp_path: Path) -> None:
    from ctxcore.formats.load import load_file

    claude_code = ROOT / "tests" / "fixtures" / "imports" / "claude-code"
    logged = list(load_file(claude_code / "ccviewer-init-session.jsonl"))
    demo = next(iter(sorted((ROOT / "ctxcore" / "data" / "demo").glob("*.jsonl"))))
    plain = Trace.model_validate_json(demo.read_text(encoding="utf-8").splitlines()[0])
    db = tmp_path / "v6.duckdb"
    with TraceStore(db) as store:
        store.add_traces([*logged, plain])
    # the store as version 6 left it: no usage columns, no row for version 7
    con = duckdb.connect(str(db))
    for col in ("model", *migrations.M007_USAGE):
        con.execute(f"ALTER TABLE traces DROP COLUMN {col}")
    con.execute("DELETE FROM schema_migrations WHERE version = 7")
    con.close()
    with TraceStore(db) as store:
        rows = store.session_usage([logged[0].session_id, plain.session_id])
    assert versions(db) == ALL_VERSIONS
    by_id = {r.trace_id: r for r in rows}
    assert len(by_id) == len(logged) + 1
    for t in logged:
        tokens = t.outcome.tokens if t.outcome is not None else None
        assert tokens is not None
        r = by_id[t.trace_id]
        assert r.model == t.metadata["model"]
        assert (r.input_tokens, r.cache_read_tokens, r.cache_write_tokens, r.output_tokens) == (
            tokens.input_tokens,
            tokens.cache_read_tokens,
            tokens.cache_write_tokens,
            tokens.output_tokens,
        )
    assert by_id[plain.trace_id].input_tokens is None and by_id[plain.trace_id].model is None


def test_failed_migration_leaves_no_trace_of_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(con: duckdb.DuckDBPyConnection) -> None:
        con.execute("CREATE TABLE half_done (a INTEGER)")
        raise RuntimeError("disk full")

    db = tmp_path / "broken.duckdb"
    TraceStore(db).close()
    steps = (*migrations.MIGRATIONS, migrations.Step(migrations.LATEST + 1, "broken", broken))
    monkeypatch.setattr(migrations, "MIGRATIONS", steps)
    con = duckdb.connect(str(db))
    with pytest.raises(RuntimeError, match="disk full"):
        migrations.apply(con)
    con.close()
    assert "half_done" not in schema_of(db)
    assert versions(db) == ALL_VERSIONS


def test_read_only_open_of_an_old_store_says_how_to_upgrade(tmp_path: Path) -> None:
    from ctxcore.errors import StoreError

    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))
    migrations.apply(con, upto=1)
    con.close()
    with pytest.raises(
        StoreError, match=f"version 1.*needs {migrations.LATEST}.*without read_only"
    ):
        TraceStore(db, read_only=True)
