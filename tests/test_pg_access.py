"""Access to a team store (docs/design.md, "Store", access): the people's tokens
(``ctxscope token add/revoke/list``), the app's login on a team store, its read-only role
``ctxscope_reader`` (made by ``ctxscope migrate``), and redaction on ingest by default.
Real parts: the throwaway cluster of ``tests/pg_cluster.py``, real builds, the real app
through AppTest, the real redactor."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import app_support as data
import psycopg
import pytest
from app_support import APP, rerun

from ctxcore.cli import main
from ctxcore.errors import StoreError
from ctxcore.models import Packet, Trace
from ctxcore.store import pgaccess
from ctxcore.store.engines import open_store, read_store

SECRET = "sk-proj-" + "Q7x2Lm9Pz4Kd8Rt1Vb6Nc3Hj5Wf0Ys2Ue7Ga9Io4" * 2


@pytest.fixture
def team(pg_server: Any, capsys: pytest.CaptureFixture[str]) -> str:
    """A new database of the test cluster, migrated by ``ctxscope migrate``."""
    url = str(pg_server.new_database())
    assert main(["migrate", "--db", url]) == 0
    assert "role ctxscope_reader may read every table" in capsys.readouterr().out
    return url


def _token(capsys: pytest.CaptureFixture[str], url: str, name: str) -> str:
    assert main(["token", "add", name, "--db", url]) == 0
    out = capsys.readouterr()
    assert "shown this once" in out.err
    return out.out.strip()


def test_tokens_are_added_once_listed_and_revoked(
    team: str, capsys: pytest.CaptureFixture[str]
) -> None:
    alice = _token(capsys, team, "alice")
    bob = _token(capsys, team, "bob")
    assert alice.startswith(pgaccess.TOKEN_PREFIX) and alice != bob and len(alice) > 40
    with psycopg.connect(team) as con:
        stored = con.execute("SELECT name, digest FROM ctxscope_tokens ORDER BY name").fetchall()
    assert stored == [("alice", pgaccess.digest(alice)), ("bob", pgaccess.digest(bob))]
    assert pgaccess.token_holder(team, alice) == "alice"
    assert main(["token", "add", "alice", "--db", team]) == 2
    assert "'alice' has a token already" in capsys.readouterr().err
    assert main(["token", "revoke", "alice", "--db", team]) == 0
    capsys.readouterr()
    assert pgaccess.token_holder(team, alice) is None
    assert pgaccess.token_holder(team, bob) == "bob"
    assert main(["token", "list", "--db", team]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [(r[0], r[2].split()[0]) for r in rows] == [("alice", "revoked"), ("bob", "live")]
    assert main(["token", "revoke", "alice", "--db", team]) == 2
    assert "no live token named 'alice'" in capsys.readouterr().err


def test_tokens_need_a_team_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["token", "list", "--db", str(tmp_path / "x.duckdb")]) == 2
    assert "tokens belong to a team store" in capsys.readouterr().err


def test_the_reader_role_reads_and_writes_nothing(team: str, pg_server: Any) -> None:
    with psycopg.connect(team, autocommit=True) as con:
        con.execute("DROP ROLE IF EXISTS reader_login")
        con.execute("DROP ROLE IF EXISTS outsider")
        con.execute("CREATE ROLE reader_login LOGIN IN ROLE ctxscope_reader")
        con.execute("CREATE ROLE outsider LOGIN")
    dbname = team.rsplit("/", 1)[1]
    as_reader = pgaccess.as_reader(pg_server.url(dbname, user="reader_login"))
    with open_store(team) as store:
        store.add_traces(data.session("role", 2), source="tests")
    with psycopg.connect(as_reader, autocommit=True) as con:
        assert con.execute("SELECT current_user").fetchone() == ("ctxscope_reader",)
        assert con.execute("SELECT count(*) FROM traces").fetchone() == (2,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            con.execute("DELETE FROM traces")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            con.execute("INSERT INTO ctxscope_tokens VALUES ('x', 'y', now(), NULL)")
    # even the owner's URL, as the reader, may not write
    with psycopg.connect(pgaccess.as_reader(team), autocommit=True) as con:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            con.execute("DELETE FROM traces")
    with read_store(as_reader) as store:
        assert store.count() == 2
    outsider = pgaccess.as_reader(pg_server.url(dbname, user="outsider"))
    with pytest.raises(StoreError, match="cannot read as the role ctxscope_reader.*migrate"):
        open_store(outsider, read_only=True)


def _app(team: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("CTXSCOPE_DB", team)
    return AppTest.from_file(APP, default_timeout=60)


def test_the_app_asks_for_a_token_and_refuses_a_revoked_one(
    team: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_store(team) as store:
        store.add_traces(data.session("gate", 2), source="tests")
    token = _token(capsys, team, "carol")
    at = rerun(_app(team, monkeypatch))
    assert not at.dataframe and not at.title  # nothing of the store before a token
    assert "give your token" in at.info[0].value
    at.text_input(key="login_token").input("ctxs_not-a-token")
    at.button[0].click()
    rerun(at)
    assert "not one of this store's" in at.error[0].value and not at.dataframe
    at.text_input(key="login_token").input(token)
    at.button[0].click()
    rerun(at)
    assert not at.error, [e.value for e in at.error]
    assert set(at.dataframe[0].value["trace_id"]) == {"gate-t0", "gate-t1"}
    assert main(["token", "revoke", "carol", "--db", team]) == 0
    time.sleep(5.5)  # the app asks the store again at least every 5 s
    rerun(at)
    assert not at.dataframe
    assert any("revoked" in e.value for e in at.error), [e.value for e in at.error]


def test_ctxscope_token_opens_the_app_for_scripts(
    team: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CTXSCOPE_TOKEN", _token(capsys, team, "ci-screenshots"))
    at = rerun(_app(team, monkeypatch))
    assert at.title[0].value == "Traces" and not at.error
    monkeypatch.setenv("CTXSCOPE_TOKEN", "ctxs_made-up")
    at = rerun(_app(team, monkeypatch))
    assert not at.title and "not one of this store's" in at.error[0].value


def _secret_trace(tmp_path: Path) -> Path:
    [t] = data.session("secret", 1)
    t = t.model_copy(
        update={
            "input": t.input.model_copy(
                update={
                    "packets": [
                        *t.input.packets,
                        Packet(id="env", kind="file", content=f"OPENAI_API_KEY={SECRET}"),
                    ]
                }  # noqa: E501
            )
        }
    )
    path = tmp_path / "secret.jsonl"
    path.write_text(t.to_json() + "\n", encoding="utf-8")
    return path


def _stored_packet(url: str) -> str:
    with read_store(url) as store:
        got = store.get_trace("secret-t0")
    assert isinstance(got, Trace)
    return next(p.content for p in got.input.packets if p.id == "env")


def test_ingest_into_a_team_store_redacts_unless_no_redact(pg_server: Any, tmp_path: Path) -> None:
    path = _secret_trace(tmp_path)
    redacted, kept = pg_server.new_database(), pg_server.new_database()
    assert main(["ingest", str(path), "--db", redacted]) == 0
    assert SECRET not in _stored_packet(redacted)
    assert "OPENAI_API_KEY=" in _stored_packet(redacted)
    assert main(["ingest", str(path), "--db", kept, "--no-redact"]) == 0
    assert SECRET in _stored_packet(kept)
    # a DuckDB file keeps its default (off), and the environment is as it was
    db = tmp_path / "file.duckdb"
    assert main(["ingest", str(path), "--db", str(db)]) == 0
    with open_store(db, read_only=True) as store:
        t = store.get_trace("secret-t0")
    assert t is not None and any(SECRET in p.content for p in t.input.packets)
