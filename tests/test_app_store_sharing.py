"""The app and its store: its own note is never read as a trace file, and a second app on a
store another process holds says so in one line and shows the store read-only.

Real parts: a real DuckDB store in tmp_path, real ingest and watcher, the note written by
``ctxcore.cli.app``, a real second process holding the store, the real app through AppTest
and through ``ctxscope app``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import app_support as data
import pytest
from app_support import ROOT, open_page
from helpers_store import make_trace, write_jsonl
from watchdog.events import FileCreatedEvent, FileModifiedEvent

from ctxcore.cli.app import note_path, write_note
from ctxcore.store.ingest import ingest_paths
from ctxcore.store.readers import find_files, is_trace_file
from ctxcore.store.tracestore import TraceStore
from ctxcore.store.watch import Watcher, _Handler

# --------------------------------------------------------------------------- the note


def _default_layout(tmp_path: Path) -> tuple[Path, Path, Path]:
    """What ``ctxscope app`` makes by default: the store inside the folder it watches, its
    note beside the store."""
    folder = tmp_path / "traces"
    folder.mkdir()
    db = folder / "ctxscope.duckdb"
    TraceStore(db).close()
    note = write_note(db, folder, pid=1)
    assert note == folder / "ctxscope.duckdb.app.json" and json.loads(note.read_text())
    return folder, db, note


def test_ingest_of_the_watched_folder_skips_the_apps_note(tmp_path: Path) -> None:
    folder, db, note = _default_layout(tmp_path)
    write_jsonl(folder / "agent.jsonl", [make_trace(0)])
    # a user's own trace document whose name only looks like a note (no store beside it)
    mine = folder / "mine.app.json"
    mine.write_text(json.dumps({"traces": [json.loads(make_trace(1).to_json())]}))
    assert note not in find_files([folder]) and mine in find_files([folder])
    with TraceStore(db) as store:
        counts = ingest_paths(store, [folder])
        assert counts.errors == 0, store.ingest_errors()
        assert counts.traces_added == 2
        assert store.ingest_errors() == [] and store.failing_files() == []


def test_the_watcher_ignores_events_on_the_note(tmp_path: Path) -> None:
    folder, db, note = _default_layout(tmp_path)
    with TraceStore(db) as store:
        w = Watcher(store, folder)  # not started: its event handler is what is checked
        handler = _Handler(w)
        handler.on_any_event(FileCreatedEvent(str(note)))
        handler.on_any_event(FileModifiedEvent(str(note)))
        assert w._pending == {}
        handler.on_any_event(FileModifiedEvent(str(folder / "agent.jsonl")))
        assert list(w._pending) == [folder / "agent.jsonl"]
    assert not is_trace_file(note_path(db))


# --------------------------------------------------------------------------- a held store


@pytest.fixture
def held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, int, list]]:
    """A store with a session in it, held for writing by another real process (as a first
    ``ctxscope app`` holds it); the app under test is pointed at it."""
    db = tmp_path / "traces" / "ctxscope.duckdb"
    db.parent.mkdir()
    traces = data.session("sess-held", 2)
    data.fill(db, traces)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(db)],
        stdout=subprocess.PIPE,
        stdin=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        monkeypatch.setenv("CTXSCOPE_DB", str(db))
        monkeypatch.setenv("CTXSCOPE_TRACES", str(db.parent))
        yield db, holder.pid, traces
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()


#: holds the store until its stdin closes (or it is killed)
HOLD = (
    "import sys; from ctxcore.store import TraceStore; s = TraceStore(sys.argv[1]); "
    "print('ready', flush=True); sys.stdin.read()"
)


def test_a_second_app_on_a_held_store_shows_it_read_only(held) -> None:  # type: ignore[no-untyped-def]
    db, pid, traces = held
    at = open_page("traces")
    assert not at.exception, [e.value for e in at.exception]
    [plain] = [_plain(w.value) for w in at.warning if "Read-only" in _plain(w.value)]
    assert f"PID {pid}" in plain and str(db) in plain and "\n" not in plain.strip()
    assert not at.error, [e.value for e in at.error]
    # the stored traces are listed, from a copy of the store as it is
    listed = next(d.value for d in at.dataframe if "trace_id" in d.value.columns)
    assert set(listed["trace_id"]) == {t.trace_id for t in traces}
    assert any("Read-only copy" in c.value for c in at.caption)
    # Inspect reads a trace whole
    at = open_page("inspect", trace=traces[1].trace_id)
    assert not at.exception and not at.error
    assert at.title[0].value == "Inspect"
    assert any("Read-only" in _plain(w.value) for w in at.warning)


def test_saving_in_a_read_only_app_is_one_line(held) -> None:  # type: ignore[no-untyped-def]
    db, _pid, traces = held
    at = open_page("playground", trace=traces[0].trace_id)
    at.session_state["pg_section"] = "Permalink & save"
    at.run()
    at.button(key="pg_save").click().run()
    assert not at.exception, [e.value for e in at.exception]
    [error] = [e.value for e in at.error]
    assert _plain(error).startswith("Not saved") and "\n" not in error.strip(), error
    assert "read-only" in _plain(error)


def test_ctxscope_app_on_a_held_store_says_so_at_start(held, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    db, pid, _traces = held
    note = write_note(db, db.parent, pid)  # the holder's note: the second app leaves it be
    before = note.read_text()
    port = _free_port()
    app = subprocess.Popen(
        [sys.executable, "-m", "ctxcore", "app", "--db", str(db), "--traces", str(db.parent)]
        + ["--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=dict(os.environ, CTXSCOPE_NO_WATCH="1"),
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2):
                    break
            except OSError:
                assert app.poll() is None, "the second app exited"
                assert time.monotonic() < deadline, "the second app did not come up"
                time.sleep(0.3)
        assert note.read_text() == before
    finally:
        os.killpg(app.pid, signal.SIGTERM)
        _, err = app.communicate(timeout=30)
    # said once, before anything else, in one line
    first = err.splitlines()[0] if err else ""
    assert f"{db} is held by PID {pid}" in first and "read-only" in first, err
    assert note.read_text() == before, "the second app removed the holder's note"


def _plain(markdown: str) -> str:
    """Our one-line messages as read (``views.md`` escapes every markdown character)."""
    return markdown.replace("\\", "")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port
