"""The team store tried as a new user and as an attacker would (docs/design.md, "Store"): what
a wrong URL, a store changed by hand or by a newer ctxscope, two owners migrating at once and
secrets in moved traces give. Each message names what, where and what to do. Real parts: the
throwaway cluster of ``tests/pg_cluster.py``, ``ctxscope`` commands, real traces."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import app_support as data
import psycopg
import pytest
from helpers_store import make_trace

from ctxcore.cli import main
from ctxcore.models import Packet, Trace
from ctxcore.store import pgaccess, pgschema
from ctxcore.store.engines import read_store

PASSWORD_USER = "newuser_pw"
SECRET = "sk-proj-" + "Q7x2Lm9Pz4Kd8Rt1Vb6Nc3Hj5Wf0Ys2Ue7Ga9Io4" * 2


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """The one line of stderr a command that failed (exit 2) printed."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.fixture(scope="module")
def password_user(pg_server: Any) -> str:
    """A user that logs in by password over TCP (the cluster trusts everyone else)."""
    with pg_server.admin() as con:
        con.execute(f"CREATE ROLE {PASSWORD_USER} LOGIN PASSWORD 'right'")
        row = con.execute("SHOW hba_file").fetchone()
        assert row is not None
        hba = Path(row[0])
        rule = f"host all {PASSWORD_USER} 127.0.0.1/32 scram-sha-256\n"
        hba.write_text(rule + hba.read_text())
        con.execute("SELECT pg_reload_conf()")
    return PASSWORD_USER


def test_a_wrong_password_says_to_check_it_not_that_the_server_went_away(
    pg_server: Any, password_user: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = pg_server.url(user=password_user, password="wrong")
    line = _error(capsys, ["migrate", "--db", url])
    assert line.startswith(f"ctxscope migrate: error: postgresql://{password_user}@127.0.0.1:")
    assert "password authentication failed" in line
    assert "check the user and password" in line
    assert "went away" not in line and "wrong" not in line.split("error:", 1)[1]
    # no password at all (none in the URL, no ~/.pgpass entry): the same advice
    line = _error(capsys, ["migrate", "--db", pg_server.url(user=password_user)])
    assert "no password supplied" in line and "check the user and password" in line


def test_a_missing_database_or_a_closed_port_says_what_to_do(
    pg_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _error(capsys, ["migrate", "--db", pg_server.url("no_such_db")])
    assert 'database "no_such_db" does not exist' in line
    assert "createdb" in line and "went away" not in line
    closed = pg_server.url().replace(f":{pg_server.port}/", ":1/")
    line = _error(capsys, ["ingest", "/nonexistent", "--db", closed])
    assert "127.0.0.1:1/postgres" in line and "Connection refused" in line
    assert "check the host and port" in line and "went away" not in line


def _migrated(pg_server: Any) -> str:
    """A new database of the test server, migrated: its URL."""
    url = str(pg_server.new_database())
    assert main(["migrate", "--db", url]) == 0
    return url


def _trace_file(tmp_path: Path, secret: str = "") -> Path:
    """One real trace in a .jsonl file; with ``secret``, a packet holding it."""
    [t] = data.session("newuser", 1)
    if secret:
        env = Packet(id="env", kind="file", content=f"OPENAI_API_KEY={secret}")
        t = t.model_copy(
            update={"input": t.input.model_copy(update={"packets": [*t.input.packets, env]})}
        )
    path = tmp_path / "one.jsonl"
    path.write_text(t.to_json() + "\n", encoding="utf-8")
    return path


def test_a_store_a_newer_ctxscope_migrated_is_neither_written_nor_read(
    pg_server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _migrated(pg_server)
    with psycopg.connect(url, autocommit=True) as con:
        con.execute(
            "INSERT INTO schema_migrations VALUES (%s, 'from the future', now())",
            [pgschema.LATEST + 1],
        )
    capsys.readouterr()
    path = _trace_file(tmp_path)
    for argv in (
        ["ingest", str(path), "--db", url],
        ["export", "--session", "newuser", "--db", url],
        ["migrate", "--db", url],
        ["token", "add", "eve", "--db", url],
    ):
        line = _error(capsys, argv)
        assert f"schema version {pgschema.LATEST + 1}, made by a newer ctxscope" in line, line
        assert "upgrade ctxscope" in line
    with psycopg.connect(url) as con:
        row = con.execute("SELECT count(*) FROM trace_ids").fetchone()
    assert row == (0,)


def _stored_packet(url: str, trace_id: str) -> str:
    with read_store(url) as store:
        got = store.get_trace(trace_id)
    assert got is not None
    return next(p.content for p in got.input.packets if p.id == "env")


def test_a_move_into_a_team_store_redacts_unless_no_redact(
    pg_server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A DuckDB file keeps secrets by default; moving it into a team store redacts them as
    ingest into it does, every table included (the packet texts of ``contents`` are plain)."""
    path = _trace_file(tmp_path, secret=SECRET)
    file = tmp_path / "local.duckdb"
    assert main(["ingest", str(path), "--db", str(file)]) == 0
    [tid] = [t for t in read_trace_ids(file)]
    redacted, kept = pg_server.new_database(), pg_server.new_database()
    assert main(["migrate", "--db", redacted, "--move", str(file)]) == 0
    assert SECRET not in _stored_packet(redacted, tid)
    assert "OPENAI_API_KEY=" in _stored_packet(redacted, tid)
    with psycopg.connect(redacted) as con:
        texts = con.execute("SELECT string_agg(text, '') FROM contents").fetchone()
    assert texts is not None and SECRET[:20] not in (texts[0] or "")
    assert main(["migrate", "--db", kept, "--move", str(file), "--no-redact"]) == 0
    assert SECRET in _stored_packet(kept, tid)
    capsys.readouterr()


def read_trace_ids(file: Path) -> list[str]:
    with read_store(file) as store:
        return [tid for _, traces in store.session_listing() for tid, _ in traces]


def test_every_relation_a_new_store_has_is_the_one_migrate_checks(pg_server: Any) -> None:
    url = _migrated(pg_server)
    with psycopg.connect(url) as con:
        rows = con.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'S') "
            "AND NOT c.relispartition"
        ).fetchall()
        assert sorted(r[0] for r in rows) == sorted(pgschema.RELATIONS)
        assert pgschema.missing(con) == []


def test_a_table_dropped_by_hand_is_named_with_what_to_do(
    pg_server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _migrated(pg_server)
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("DROP TABLE decisions CASCADE")
    capsys.readouterr()
    line = _error(capsys, ["migrate", "--db", url])
    assert "recorded as up to date but lacks decisions" in line
    assert "restore the database from a backup" in line
    line = _error(capsys, ["ingest", str(_trace_file(tmp_path)), "--db", url])
    assert 'relation "decisions" does not exist' in line and "dropped or altered by hand" in line


def _grant_at_once(urls: list[str]) -> list[str]:
    """``grant_reader`` on a connection to each of ``urls``, all released at once; the
    errors they raised."""
    cons = [psycopg.connect(url, autocommit=True) for url in urls]
    start = threading.Barrier(len(cons))
    failed: list[str] = []

    def grant(con: psycopg.Connection) -> None:
        start.wait()
        try:
            pgaccess.grant_reader(con)
        except psycopg.Error as exc:
            failed.append(str(exc))

    threads = [threading.Thread(target=grant, args=(c,)) for c in cons]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in cons:
        c.close()
    return failed


def test_owners_making_the_reader_role_at_once_take_turns(pg_server: Any) -> None:
    """Two `ctxscope migrate` at once (two services starting, say): their grants to the
    reader role ran together and one failed 'tuple concurrently updated' (40 of 90 here)."""
    url = _migrated(pg_server)
    failed: list[str] = []
    for _ in range(5):
        failed += _grant_at_once([url] * 6)
    assert failed == []


def test_owners_of_two_stores_making_the_server_s_reader_role_at_once(pg_server: Any) -> None:
    """The role is one for the whole server: owners of two stores migrating at once both
    found it missing and one failed (role "ctxscope_reader" already exists, or the unique
    index of pg_authid). The role is dropped for the test and granted again after it."""

    def every_database() -> list[str]:
        with pg_server.admin() as con:
            rows = con.execute(
                "SELECT datname FROM pg_database WHERE datallowconn AND NOT datistemplate"
            ).fetchall()
        return [pg_server.url(r[0]) for r in rows]

    stores = [str(pg_server.new_database()) for _ in range(4)]
    for url in stores:
        assert main(["migrate", "--db", url]) == 0
    failed: list[str] = []
    try:
        for _ in range(3):
            for url in every_database():
                with psycopg.connect(url, autocommit=True) as con:
                    con.execute(f"DROP OWNED BY {pgaccess.READER_ROLE}")
            with pg_server.admin() as con:
                con.execute(f"DROP ROLE {pgaccess.READER_ROLE}")
            failed += _grant_at_once(stores)
    finally:
        for url in every_database():
            with psycopg.connect(url, autocommit=True) as con:
                pgaccess.grant_reader(con)
    assert failed == []


@pytest.mark.parametrize("command", ["ingest", "export", "proxy", "app", "migrate"])
def test_help_shows_ctxscope_db_without_its_password(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CTXSCOPE_DB", "postgresql://ann:s3cret@dbhost:5432/team?password=s3cret")
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "postgresql://ann@dbhost:5432/team" in out and "s3cret" not in out


def test_a_url_with_one_slash_is_refused_not_made_a_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``postgresql:/ann:s3cret@host/db`` was a DuckDB path: ingest made the folders
    ``postgresql:/ann:s3cret@host`` and its error quoted the password."""
    monkeypatch.chdir(tmp_path)
    path = _trace_file(tmp_path)
    line = _error(capsys, ["ingest", str(path), "--db", "postgresql:/ann:s3cret@dbhost/team"])
    assert "s3cret" not in line and "postgresql://" in line and "two slashes" in line
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("postgres")]


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("postgresql://ann:s3cret@[::1/team", "IPv6 host address"),
        ("postgresql://ann:s3cret@127.0.0.1:notaport/team", "the URL is not one libpq takes"),
        ("postgresql://ann:s3cret@127.0.0.1:5432/team?sslmode=bogus", "fix it: postgresql://"),
    ],
)
def test_a_url_libpq_cannot_read_is_said_without_its_password(
    url: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _error(capsys, ["migrate", "--db", url])
    assert said in line and "s3cret" not in line, line


def test_a_team_app_on_the_network_refuses_one_token_for_every_browser(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """CTXSCOPE_TOKEN opens every session of a team store's app (for scripts): with a host
    the network reaches, every browser got in as that token's holder, asked for nothing."""
    url = "postgresql://ann@127.0.0.1:1/team"
    monkeypatch.setenv("CTXSCOPE_TOKEN", "ctxs_alices")
    line = _error(capsys, ["app", "--db", url, "--host", "0.0.0.0", "--port", "1"])
    assert "every browser on the network" in line and "unset CTXSCOPE_TOKEN" in line
    monkeypatch.delenv("CTXSCOPE_TOKEN")
    line = _error(capsys, ["app", "--db", url, "--host", "0.0.0.0", "--token", "ctxs_x"])
    assert "every browser on the network" in line


def _with_query(t: Trace, query: str) -> Trace:
    return t.model_copy(update={"input": t.input.model_copy(update={"query": query})})


def test_hostile_lines_into_a_team_store_cost_their_line_only(
    pg_server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With redaction on (a team store's default) every hostile line is its own error and
    the good lines around it, one holding a secret, are stored (redacted)."""
    good = [make_trace(i).to_json() for i in range(4)]
    secret = make_trace(9).to_json().replace('"metadata":{}', f'"metadata":{{"k":"{SECRET}"}}', 1)
    hostile = [
        make_trace(5).to_json().replace('"metadata":{}', '"metadata":{"x":"cut \\ud83d"}', 1),
        make_trace(6).to_json().replace('"session_id":"', '"session_id":"a\\u0000', 1),
        _with_query(make_trace(7), "y" * 11_000_000).to_json(),  # past the field's limit
    ]
    path = tmp_path / "hostile.jsonl"
    lines = [good[0], hostile[0], good[1], hostile[1], secret, hostile[2], good[2], good[3]]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    url = str(pg_server.new_database())
    assert main(["ingest", str(path), "--db", url]) == 1
    out = capsys.readouterr().out
    assert "ingested 5 new traces" in out and "3 errors" in out, out
    for n in (2, 4, 6):
        assert f"{path}:{n}: " in out
    with read_store(url) as store:
        assert store.count() == 5 and len(store.ingest_errors()) == 3
        kept = store.get_trace(make_trace(9).trace_id)
    assert kept is not None and SECRET not in kept.to_json()


def test_an_owner_without_createrole_is_told_what_ran_and_what_to_do(
    pg_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's first owner was made without CREATEROLE: migrate ran every migration,
    then failed on the reader role, and its line did not say the migrations had run."""
    with pg_server.admin() as con:
        con.execute("CREATE ROLE plain_owner LOGIN")
        con.execute("CREATE DATABASE plain_owned OWNER plain_owner")
    url = pg_server.url("plain_owned", user="plain_owner")
    line = _error(capsys, ["migrate", "--db", url])
    assert "ran migrations 1 base, 2 tokens" in line, line
    assert "a user with CREATEROLE" in line
