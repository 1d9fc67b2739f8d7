"""NUL characters on a team store (docs/design.md, "Store"): PostgreSQL's text refuses
U+0000, so a trace holding one in a text the store keeps as a column is refused on its own,
with an error naming where, and the rest of the file (or batch) is stored; a NUL only the
trace's JSON holds is stored and read back as it was. Real parts: the throwaway cluster of
``tests/pg_cluster.py``, real builds of the pipeline, ``ctxscope ingest``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from app_support import corpus_input

from ctxcore.cli import main
from ctxcore.errors import InputError
from ctxcore.models import Config, Packet, Trace
from ctxcore.pipeline import build_trace
from ctxcore.store.engines import open_store, read_store


def _build(trace_id: str, *, session: str = "nul", extra: Packet | None = None) -> Trace:
    inp = corpus_input(12, seed=0)
    if extra is not None:
        inp = inp.model_copy(update={"packets": [*inp.packets, extra]})
    return build_trace(inp, Config(), trace_id=trace_id, session_id=session, turn=0)


@pytest.fixture(scope="module")
def traces() -> dict[str, Trace]:
    return {
        "plain": _build("plain"),
        # the packet is kept: its text goes to the decisions' texts (contents.text)
        "content": _build(
            "content", extra=Packet(id="f", kind="file", content="a\x00b", must_keep=True)
        ),  # noqa: E501
        "session": _build("session", session="team\x00a"),
        "plain-2": _build("plain-2"),
    }


def test_ingest_refuses_each_trace_with_a_nul_and_stores_the_rest(
    pg_server: Any, traces: dict[str, Trace], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = str(pg_server.new_database())
    path = tmp_path / "nul.jsonl"
    path.write_text("".join(t.to_json() + "\n" for t in traces.values()), encoding="utf-8")
    assert main(["ingest", str(path), "--db", url]) == 1
    out = capsys.readouterr().out
    assert "ingested 2 new traces" in out, out
    assert f"{path}:2: cannot be stored here: a NUL character (U+0000) in a packet's content" in out
    assert f"{path}:3: cannot be stored here: a NUL character (U+0000) in traces.session_id" in out
    with read_store(url) as store:
        assert store.count() == 2
        assert store.get_trace("plain-2") == traces["plain-2"]
        assert store.get_trace("content") is None and store.get_trace("session") is None
        assert len(store.ingest_errors()) == 2


def test_add_traces_names_the_trace_and_stores_nothing(
    pg_server: Any, traces: dict[str, Trace]
) -> None:
    url = str(pg_server.new_database())
    with open_store(url) as store:
        with pytest.raises(InputError, match=r"trace_id 'session' cannot be stored here: a NUL"):
            store.add_traces([traces["plain"], traces["session"]], source="tests")
        assert store.count() == 0


def test_a_nul_only_the_json_holds_is_kept(pg_server: Any, traces: dict[str, Trace]) -> None:
    """The trace's JSON is stored packed: a NUL of a text the store keeps only there (a
    metadata value) comes back as it was."""
    t = traces["plain"]
    t = t.model_copy(update={"trace_id": "json-nul", "metadata": {**t.metadata, "note": "x\x00y"}})
    url = str(pg_server.new_database())
    with open_store(url) as store:
        assert store.add_traces([t], source="tests") == 1
        got = store.get_trace("json-nul")
    assert got == t and got is not None and got.metadata["note"] == "x\x00y"
