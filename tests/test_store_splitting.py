"""``Splitter.split_trace``: a trace model split into the store's shared form without
writing it whole first (docs/design.md, "Store"). The same bytes as ``Trace.to_json`` and the
same split as the bytes' own (``Splitter.split``), with a session's earlier items taken by
identity, never serialized again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ctxcore.formats.load import load_file
from ctxcore.models import Trace
from ctxcore.store import splitting
from ctxcore.store.splitting import SplitJSON, Splitter

ROOT = Path(__file__).resolve().parent.parent
CLAUDE_CODE = ROOT / "tests" / "fixtures" / "imports" / "claude-code"
SOURCES = [
    CLAUDE_CODE / "ccviewer-task-sidechain-session.jsonl",
    CLAUDE_CODE / "ccviewer-init-session.jsonl",
    ROOT / "ctxcore" / "data" / "demo" / "toolchat-ctxscope.jsonl",
]


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_split_from_the_model_is_the_bytes_and_split_of_its_json(source: Path) -> None:
    """Every trace: the whole JSON is ``to_json``'s, byte for byte, and the split (body and
    parts, in order) is the one the bytes themselves give."""
    traces = list(load_file(source))
    assert len(traces) >= 3
    by_bytes, by_model = Splitter(), Splitter()
    for trace in traces:
        raw = trace.to_json().encode("utf-8")
        assert trace.to_json_bytes() == raw
        expected = by_bytes.split(raw, trace.session_id)
        got = by_model.split_trace(trace)
        assert isinstance(got, SplitJSON) and bytes(got) == raw
        assert expected is not None and got.shared is not None
        assert got.shared.body == expected.body
        assert list(got.shared.parts.items()) == list(expected.parts.items())


def test_a_sessions_earlier_items_are_not_serialized_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A session log's calls share their items (the same objects): each is serialized by the
    first call that holds it only; an item replaced by an equal new object is serialized
    again and keeps its part id."""
    traces = list(load_file(SOURCES[0]))
    serialized: list[Any] = []
    real = splitting._items_json

    def counting(objs: list[Any]) -> list[bytes]:
        serialized.extend(objs)
        return real(objs)

    monkeypatch.setattr(splitting, "_items_json", counting)
    splitter = Splitter()
    total = 0
    for trace in traces:
        splitter.split_trace(trace)
        total += len(trace.input.history) + len(trace.input.packets)
        total += (
            len(trace.result.messages or []) + len(trace.result.decisions) if trace.result else 0
        )
    distinct = {id(o) for o in serialized}
    assert len(serialized) == len(distinct)  # none twice
    assert len(serialized) < total / 2  # the calls repeat most of what came before
    last = traces[-1]
    first_item = last.input.history[0]
    copy = first_item.model_copy()
    again = last.model_copy(
        update={"input": last.input.model_copy(update={"history": [copy, *last.input.history[1:]]})}
    )
    serialized.clear()
    before = splitter.split_trace(last)
    after = splitter.split_trace(again)
    assert serialized == [copy]
    assert bytes(after) == bytes(before) == last.to_json_bytes()
    assert after.shared is not None and before.shared is not None
    assert after.shared.parts == before.shared.parts


def test_a_trace_without_items_is_split_from_its_bytes() -> None:
    """No list to take by identity: the bytes are split as ``Splitter.split`` splits them
    (a long text is still shared)."""
    base = list(load_file(SOURCES[2]))[0]
    bare = base.model_copy(
        update={
            "input": base.input.model_copy(
                update={"history": [], "packets": [], "tools": [], "query": "q" * 900}
            ),
            "result": None,
        }
    )
    got = Splitter().split_trace(bare)
    raw = bare.to_json_bytes()
    assert bytes(got) == raw
    expected = Splitter().split(raw, bare.session_id)
    assert expected is not None and got.shared == expected


def test_the_import_stores_what_add_traces_stores(tmp_path: Path) -> None:
    """``ctxscope import --db`` (which splits from the model) and ``Store.add_traces`` of
    the same traces (which splits their bytes) leave the same rows: content hashes, sizes,
    parts; and the traces read back are the ones imported, byte for byte."""
    import duckdb

    from ctxcore.cli import main
    from ctxcore.store.engines import open_store

    source = SOURCES[0]
    cli_db, api_db = tmp_path / "cli.duckdb", tmp_path / "api.duckdb"
    assert main(["import", str(source), "--db", str(cli_db)]) == 0
    with duckdb.connect(str(cli_db), read_only=True) as con:
        ids = [r[0] for r in con.execute("SELECT trace_id FROM traces ORDER BY tseq").fetchall()]
    with open_store(cli_db) as store:
        imported = [raw for _, raw in store.traces_json(ids)]
    # the same traces (their stage timings are measured anew by each import)
    traces = [Trace.model_validate_json(raw) for raw in imported]
    assert [t.to_json_bytes() for t in traces] == imported
    with open_store(api_db) as store:
        store.add_traces(traces, source=str(source))

    def rows(db: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        with duckdb.connect(str(db), read_only=True) as con:
            traces = con.execute(
                "SELECT trace_id, content_hash, json_bytes FROM traces ORDER BY tseq"
            ).fetchall()
            parts = con.execute("SELECT DISTINCT pid FROM shared_parts ORDER BY pid").fetchall()
        return traces, parts

    cli, api = rows(cli_db), rows(api_db)
    assert len(cli[0]) == len(ids) == 20 and len(cli[1]) > 20
    assert cli == api


def test_bytes_split_as_json_are_taken_by_the_store_as_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``rows`` takes the split the bytes carry, not splitting them again."""
    from ctxcore.store import codec, rows

    def again(raw: bytes, session: str) -> None:
        raise AssertionError("split again")

    monkeypatch.setattr(rows._SPLITTER, "split", again)
    trace: Trace = list(load_file(SOURCES[0]))[1]
    raw = Splitter().split_trace(trace)
    batch = rows.RowBatch(diagnose=False)
    packed = rows._packed(batch, trace, raw)
    assert raw.shared is not None and codec.is_shared(packed)
    assert list(batch._parts) == list(raw.shared.parts)
