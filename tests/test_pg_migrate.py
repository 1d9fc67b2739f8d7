"""``ctxscope migrate --db URL|PATH`` (docs/design.md, "Store"): it runs the pending
migrations and prints what ran; until it has, a read-only open refuses the out-of-date schema.
Real parts: the throwaway cluster of ``tests/pg_cluster.py`` and real DuckDB files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import psycopg
import pytest

from ctxcore.cli import main
from ctxcore.errors import StoreError
from ctxcore.store import migrations, pgschema
from ctxcore.store.engines import open_store, read_store


def _ran(capsys: pytest.CaptureFixture[str], db: str) -> list[str]:
    assert main(["migrate", "--db", db]) == 0
    return capsys.readouterr().out.splitlines()


def test_migrate_a_team_store_then_readers_open_it(
    pg_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    url = str(pg_server.new_database())
    with psycopg.connect(url, autocommit=True) as con:
        assert pgschema.apply(con, upto=1) == [1]  # a store made by an older ctxscope
    with pytest.raises(StoreError, match=r"schema version 1, .* needs \d+; run `ctxscope migrate"):
        open_store(url, read_only=True)
    where = f"postgresql://ctxscope@127.0.0.1:{pg_server.port}/"
    lines = _ran(capsys, url)
    named = f"{where}{url.rsplit('/', 1)[1]}"
    assert lines == [
        *(f"{named}: ran migration {s.version} {s.name}" for s in pgschema.MIGRATIONS[1:]),
        f"{named}: role ctxscope_reader may read every table (SELECT only); the app reads as it",
    ]
    with read_store(url) as store:
        assert store.count() == 0
    assert _ran(capsys, url)[0].endswith(": up to date, no migration to run")


def test_migrate_a_new_team_store_runs_every_migration(
    pg_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    url = str(pg_server.new_database())
    with pytest.raises(StoreError, match="schema version 0"):
        open_store(url, read_only=True)
    lines = _ran(capsys, url)
    assert [line.split("ran migration ")[1] for line in lines if "ran migration" in line] == [
        f"{s.version} {s.name}" for s in pgschema.MIGRATIONS
    ]
    with psycopg.connect(url) as con:
        assert pgschema.applied(con) == pgschema.LATEST


def test_migrate_a_duckdb_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "old.duckdb"
    with duckdb.connect(str(path)) as con:
        migrations.apply(con, upto=5)
    with pytest.raises(StoreError, match="schema version 5"):
        open_store(path, read_only=True)
    lines = _ran(capsys, str(path))
    assert lines == [
        f"{path}: ran migration {s.version} {s.name}" for s in migrations.MIGRATIONS[5:]
    ]
    with open_store(path, read_only=True) as store:
        assert store.count() == 0
    assert _ran(capsys, str(path)) == [f"{path}: up to date, no migration to run"]


def test_migrate_names_a_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "none.duckdb"
    assert main(["migrate", "--db", str(missing)]) == 2
    assert f"{missing}: no such store" in capsys.readouterr().err
    assert not missing.exists()
