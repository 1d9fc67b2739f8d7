"""The app and its store: its own note is never read as a trace file, and a second app on a
store another process holds says so in one line and shows the store read-only.

Real parts: a real DuckDB store in tmp_path, real ingest and watcher, the note written by
``ctxcore.cli.app``, a real second process holding the store, the real app through AppTest
and through ``ctxscope app``.
"""

from __future__ import annotations

import json
from pathlib import Path

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
