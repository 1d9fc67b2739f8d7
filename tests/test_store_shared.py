"""Traces kept in the shared form (docs/design.md, "Store"): each item and piece of text of a
session once in ``shared_parts``, every reader handed the traces byte for byte as given, on
both engines; the round trip import -> store -> export -> import; a store written before
migration 8 read the same after it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import psycopg
import pytest
from test_store_contract import _PG_DATABASES, engine  # noqa: F401 - the engines' fixture

from ctxcore.cli import main
from ctxcore.formats.load import load_file
from ctxcore.models import Trace
from ctxcore.sharing import PartTable
from ctxcore.store import codec, migrations, rows
from ctxcore.store.engines import open_store
from ctxcore.store.protocol import Store
from ctxcore.store.splitting import Splitter, part_id

ROOT = Path(__file__).resolve().parent.parent
CLAUDE_CODE = ROOT / "tests" / "fixtures" / "imports" / "claude-code"
SESSION_LOG = CLAUDE_CODE / "ccviewer-task-sidechain-session.jsonl"
DEMO = ROOT / "ctxcore" / "data" / "demo" / "toolchat-ctxscope.jsonl"


@pytest.fixture(scope="module")
def session() -> list[Trace]:
    """A real Claude Code session log's calls (20, in 3 sessions): each call repeats the
    context of the ones before it."""
    return list(load_file(SESSION_LOG))


def _query(
    kind: str, where: Path, sql: str, args: list[object] | None = None
) -> list[tuple[Any, ...]]:
    """Rows of a query on the store of a test's engine, read with the engine's own client
    (DuckDB's placeholder ``?`` becomes PostgreSQL's ``%s``)."""
    if kind == "duckdb":
        with duckdb.connect(str(where / "contract.duckdb"), read_only=True) as con:
            return con.execute(sql, args or []).fetchall()
    with psycopg.connect(_PG_DATABASES[where]) as pg:
        return pg.execute(sql.replace("?", "%s"), args or []).fetchall()


def _stored_bytes(kind: str, where: Path) -> tuple[int, int, int]:
    """(bytes of trace_parts, bytes of part_packs, traces whose JSON is shared)."""
    body = _query(kind, where, "SELECT sum(octet_length(data)) FROM trace_parts")[0][0]
    parts = _query(kind, where, "SELECT sum(octet_length(data)) FROM part_packs")[0][0]
    firsts = _query(kind, where, "SELECT data FROM trace_parts WHERE part = 0")
    return int(body), int(parts or 0), sum(codec.is_shared(bytes(r[0])) for r in firsts)


def test_a_session_is_stored_once_and_read_back_byte_for_byte(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    session: list[Trace],
    engine: Callable[..., Store],  # noqa: F811 - the fixture imported above
) -> None:
    kind = request.node.callspec.params["engine"]
    opened = engine
    raws = [t.to_json().encode() for t in session]
    with opened() as store:
        store.add_traces(session[:7], source="first")  # a session split over two inserts
        store.add_traces(session, source="again")
        got = store.traces_json([t.trace_id for t in session])
        assert [r for _, r in got] == raws
        assert store.get_trace(session[-1].trace_id) == session[-1]
        packed = store.traces_packed([session[-1].trace_id])
        assert packed[0].json() == raws[-1]  # self-contained: read without the store
    whole = sum(len(codec.pack_json(r)) for r in raws)
    body, parts, shared = _stored_bytes(kind, tmp_path)
    assert shared == len(session)
    # Whole, the 20 calls took 128 KB packed; each item and text once (packed together),
    # about 60 % of that, most of it what each call alone holds (its output, its report).
    assert body + parts < whole * 0.7, (body, parts, whole)


def test_an_item_every_later_call_repeats_is_one_part(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    session: list[Trace],
    engine: Callable[..., Store],  # noqa: F811 - the fixture imported above
) -> None:
    kind = request.node.callspec.params["engine"]
    opened = engine
    last = session[-1]
    first_item = last.input.history[0]
    holders = [t for t in session if t.input.history and t.input.history[0] == first_item]
    assert len(holders) > 5
    pid = part_id(first_item.model_dump_json().encode())
    with opened() as store:
        store.add_traces(session)
    [(places,)] = _query(kind, tmp_path, "SELECT count(*) FROM shared_parts WHERE pid = ?", [pid])
    assert places == 1


def test_bytes_not_as_ctxscope_writes_them_are_kept_whole(tmp_path: Path) -> None:
    """A line with spaces between its tokens cannot be rebuilt from parts: it is stored
    whole and read back as it was; a line as ctxscope writes it is shared."""
    lines = DEMO.read_text(encoding="utf-8").splitlines()[:3]
    spaced = json.dumps(json.loads(lines[0]))  # ", " and ": " between tokens
    src = tmp_path / "in.jsonl"
    src.write_text(spaced + "\n" + "\n".join(lines[1:]) + "\n", encoding="utf-8")
    db = tmp_path / "s.duckdb"
    assert main(["ingest", str(src), "--db", str(db)]) == 0
    ids = [json.loads(line)["trace_id"] for line in lines]
    with open_store(db) as store:
        got = dict(store.traces_json(ids))
    assert got[ids[0]] == spaced.encode()
    assert [got[i] for i in ids[1:]] == [line.encode() for line in lines[1:]]
    with duckdb.connect(str(db), read_only=True) as con:
        firsts = dict(
            con.execute(
                "SELECT t.trace_id, p.data FROM trace_parts p JOIN traces t USING (tseq) "
                "WHERE p.part = 0"
            ).fetchall()
        )
    assert not codec.is_shared(firsts[ids[0]])
    assert all(codec.is_shared(firsts[i]) for i in ids[1:])


def _export_import(db: Path, out: Path, *flags: str) -> dict[str, bytes]:
    """``ctxscope export`` of each session of a store to a file of its own, those files
    imported into a new store: its traces' stored JSON by id."""
    with duckdb.connect(str(db), read_only=True) as con:
        sessions = [r[0] for r in con.execute("SELECT DISTINCT session_id FROM traces").fetchall()]
    out.mkdir()
    for k, sid in enumerate(sorted(sessions)):
        name = f"{k}.jsonl" if "--shared" in flags else f"{k}.json"  # lines, or a snapshot
        args = ["export", "--db", str(db), "--session", sid, "-o", str(out / name)]
        assert main([*args, "--no-redact", *flags]) == 0
    again = out.with_suffix(".duckdb")
    assert main(["import", str(out), "--db", str(again)]) == 0
    ids = _ids(again)
    with open_store(again) as store:
        return dict(store.traces_json(ids))


def _untimed(trace: Trace) -> str:
    """A trace's JSON without its stage timings (a measurement, not the build)."""
    if trace.result is not None:
        trace = trace.model_copy(update={"result": trace.result.model_copy(update={"timings": {}})})
    return trace.to_json()


def _ids(db: Path) -> list[str]:
    with duckdb.connect(str(db), read_only=True) as con:
        return [r[0] for r in con.execute("SELECT trace_id FROM traces ORDER BY tseq").fetchall()]


@pytest.mark.parametrize("source", [SESSION_LOG, DEMO], ids=["session-log", "trace-file"])
def test_round_trip_import_store_export_import_is_identical(tmp_path: Path, source: Path) -> None:
    """import -> store -> export (whole, and shared) -> import: the same traces byte for
    byte, from a session log and from a file of whole ``ctxscope.trace/1`` lines (the
    same builds as a plain load of the file: its stage timings aside, measured anew)."""
    expected = {t.trace_id: _untimed(t) for t in load_file(source)}
    db = tmp_path / "first.duckdb"
    assert main(["import", str(source), "--db", str(db)]) == 0
    ids = _ids(db)
    with open_store(db) as store:
        first = dict(store.traces_json(ids))
    assert {i: _untimed(Trace.model_validate_json(r)) for i, r in first.items()} == expected
    whole = _export_import(db, tmp_path / "whole", "--format", "json")
    shared = _export_import(db, tmp_path / "shared", "--format", "json", "--shared")
    assert whole == shared == first
    text = (tmp_path / "shared" / "0.jsonl").read_text(encoding="utf-8")
    assert text.startswith('{"share":')  # the shared file format went through the store


def test_a_store_written_before_migration_8_reads_the_same_after(
    tmp_path: Path, session: list[Trace], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "v7.duckdb"
    with monkeypatch.context() as m:  # traces stored whole, as every version before 8 did
        m.setattr(rows, "_SPLITTER", _Whole())
        with open_store(db) as store:
            store.add_traces(session)
    con = duckdb.connect(str(db))
    assert con.execute("SELECT count(*) FROM shared_parts").fetchall()[0][0] == 0
    con.execute("DROP TABLE shared_parts")  # the store as version 7 left it
    con.execute("DROP TABLE part_packs")
    con.execute("DELETE FROM schema_migrations WHERE version = 8")
    con.close()
    with open_store(db) as store:  # migration 8 runs
        got = store.traces_json([t.trace_id for t in session])
    assert [r for _, r in got] == [t.to_json().encode() for t in session]
    with duckdb.connect(str(db), read_only=True) as con:
        firsts = con.execute("SELECT data FROM trace_parts WHERE part = 0").fetchall()
        n_parts = con.execute("SELECT count(DISTINCT pid) FROM shared_parts").fetchall()[0][0]
    assert len(firsts) == len(session) and all(codec.is_shared(r[0]) for r in firsts)
    assert n_parts > 0
    assert 8 in {s.version for s in migrations.MIGRATIONS}


class _Whole(Splitter):
    """A splitter that never splits: the rows of the store before the shared form."""

    def split(self, raw: bytes, session: str) -> None:
        return None


def test_a_growing_text_names_the_last_calls_pieces() -> None:
    """A prompt that grows each call is its previous call's pieces and one new one, and
    each trace expands back to its exact bytes."""
    first = {"schema": "x", "input": {"query": "q" * 600}, "result": {"prompt": "p" * 700}}
    second = {"schema": "x", "input": {"query": "q" * 600}, "result": {"prompt": "p" * 900}}
    splitter = Splitter()
    raws = [json.dumps(o, separators=(",", ":")).encode() for o in (first, second)]
    one, two = (splitter.split(r, "s") for r in raws)
    assert one is not None and two is not None
    assert set(one.parts) < set(two.parts) and len(two.parts) == len(one.parts) + 1
    for split, raw in ((one, raws[0]), (two, raws[1])):
        table = PartTable()  # the body names the k-th part "k"
        table.parts = {str(k): data for k, data in enumerate(split.parts.values())}
        assert table.expand(b'{"share":"ctxscope.share/1","trace":' + split.body + b"}") == raw
