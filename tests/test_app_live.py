"""The app's store lifecycle: demo traces on an empty store, and live ingest of new files."""

from __future__ import annotations

import time
from pathlib import Path

import app_support as data
import pytest
from streamlit.testing.v1 import AppTest

from ctxcore.formats.load import write_jsonl

APP = str(Path(__file__).resolve().parent.parent / "ctxapp" / "app.py")


def _ids(at: AppTest) -> set[str]:
    frame = next(d.value for d in at.dataframe if "trace_id" in d.value.columns)
    return set(frame["trace_id"])


def test_empty_store_opens_on_the_demo_traces(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    demo = data.session("demo-sess", 2)
    write_jsonl(demo, tmp_path / "traces" / "demo" / "demo.jsonl")
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception
    assert _ids(at) == {t.trace_id for t in demo}


@pytest.mark.slow
def test_a_file_dropped_in_the_folder_shows_up(tmp_path: Path, monkeypatch) -> None:
    first, second = data.session("live", 2)
    data.fill(tmp_path / "ctxscope.duckdb", [first])
    (tmp_path / "traces").mkdir()
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert _ids(at) == {first.trace_id}
    write_jsonl([second], tmp_path / "traces" / "agent.jsonl")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        time.sleep(0.5)
        at.run()
        if second.trace_id in _ids(at):
            break
    assert _ids(at) == {first.trace_id, second.trace_id}
    assert any("Live" in c.value for c in at.caption)
