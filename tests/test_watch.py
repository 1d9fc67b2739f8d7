"""The watcher: new, appended, half-written and renamed files reach the store by themselves."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers_store import make_trace, write_jsonl

from ctxcore.store.records import IngestCounts
from ctxcore.store.tracestore import TraceStore
from ctxcore.store.watch import Watcher

ROOT = Path(__file__).resolve().parent.parent


def wait_for(cond: Callable[[], bool], timeout: float = 15.0) -> float:
    """Seconds until ``cond()`` held; fails after ``timeout`` (generous: shared machine)."""
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.05)
    return time.monotonic() - start


def line(i: int) -> str:
    return make_trace(i).to_json() + "\n"


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[tuple[TraceStore, Path, Watcher, list[IngestCounts]]]:
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "old.jsonl").write_text(line(0), encoding="utf-8")
    store = TraceStore(folder / "ctxscope.duckdb")  # the store lives in the watched folder
    seen: list[IngestCounts] = []
    w = Watcher(store, folder, rescan_every=3600, on_ingest=seen.append).start()
    yield store, folder, w, seen
    w.stop()
    store.close()


def test_existing_new_and_appended_files(watched) -> None:  # type: ignore[no-untyped-def]
    store, folder, w, seen = watched
    wait_for(lambda: store.count() == 1)  # the initial scan
    with (folder / "new.jsonl").open("w", encoding="utf-8") as fh:
        fh.write(line(1))
    wait_for(lambda: store.count() == 2)
    with (folder / "new.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(line(2) + "{broken\n")
    wait_for(lambda: store.count() == 3)
    wait_for(lambda: len(store.ingest_errors()) == 1)
    err = store.ingest_errors()[0]
    assert err.file.endswith("new.jsonl") and err.line == 3
    assert sum(c.traces_added for c in seen) == 3
    assert w.running and w.last_error is None


def test_half_written_line_waits_for_its_end(watched) -> None:  # type: ignore[no-untyped-def]
    store, folder, _w, _seen = watched
    wait_for(lambda: store.count() == 1)
    text = line(5)
    f = folder / "slow.jsonl"
    with f.open("w", encoding="utf-8") as fh:
        fh.write(text[:200])
        fh.flush()
        time.sleep(1.5)  # the watcher sees the half line (debounce 0.2 s, max wait 1 s)
        assert store.count() == 1 and store.ingest_errors() == []
        fh.write(text[200:])
    wait_for(lambda: store.count() == 2)
    assert store.get_trace("t000005") == make_trace(5)
    assert store.ingest_errors() == []


def test_temp_file_renamed_into_place(watched) -> None:  # type: ignore[no-untyped-def]
    store, folder, _w, _seen = watched
    wait_for(lambda: store.count() == 1)
    tmp = folder / ".batch.jsonl.tmp"
    tmp.write_text(line(7) + line(8), encoding="utf-8")
    time.sleep(0.5)
    assert store.count() == 1  # hidden temp files are not read
    os.rename(tmp, folder / "batch.jsonl")
    wait_for(lambda: store.count() == 3)
    sub = folder / "sub"
    sub.mkdir()
    (sub / "deep.jsonl").write_text(line(9), encoding="utf-8")
    wait_for(lambda: store.count() == 4)


@contextlib.contextmanager
def watch_command(
    folder: Path, db: Path, sigint_ignored: bool = False
) -> Iterator[subprocess.Popen[str]]:
    """A real ``ctxscope watch``, in a process group of its own that is killed on the way out
    whatever happened (a test never leaves a process behind). ``sigint_ignored``: started as a
    background job of a non-interactive shell is (``ctxscope watch &`` in a script)."""

    def ignore_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxcore", "watch", str(folder), "--db", str(db)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=ignore_sigint if sigint_ignored else None,
    )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def test_watch_command(tmp_path: Path) -> None:
    folder = tmp_path / "w"
    db = tmp_path / "w.duckdb"
    with watch_command(folder, db) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        assert first.startswith("watching ")
        (folder / "a.jsonl").write_text(line(1) + line(2) + "{x\n", encoding="utf-8")
        out = proc.stdout.readline()
        assert "ingested 2 new traces from 1 files (0 already stored, 1 errors)" in out
        err = proc.stdout.readline().rstrip()
        assert err.startswith(str((folder / "a.jsonl").resolve()) + ":3: malformed JSON")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        assert proc.stderr.read().startswith("stopped; ")
    with TraceStore(db) as store:
        assert store.count() == 2


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_watch_stops_on_a_signal_when_started_in_the_background(
    tmp_path: Path, how: signal.Signals
) -> None:
    folder = tmp_path / "w"
    db = tmp_path / "w.duckdb"
    with watch_command(folder, db, sigint_ignored=True) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline().startswith("watching ")
        (folder / "a.jsonl").write_text(line(1), encoding="utf-8")
        assert "ingested 1 new traces" in proc.stdout.readline()
        proc.send_signal(how)
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"ctxscope watch did not stop on {how.name}")
        assert rc == 0
        assert proc.stderr.read().startswith("stopped; 1 new traces")
    with TraceStore(db) as store:  # closed cleanly: the store opens, the trace is in
        assert store.count() == 1


def test_watcher_fills_in_deferred_diagnostics(tmp_path: Path) -> None:
    pytest.importorskip("ctxcore.diagnostics")
    folder = tmp_path / "traces"
    folder.mkdir()
    t = make_trace(1, 8, must_keep_dropped=True)
    (folder / "a.jsonl").write_text(t.to_json() + "\n", encoding="utf-8")
    with TraceStore(tmp_path / "d.duckdb", diagnose=False) as store:
        with Watcher(store, folder, rescan_every=3600):
            wait_for(lambda: store.count() == 1)
            wait_for(lambda: bool(store.findings(t.trace_id)))
        detectors = {f["detector"] for f in store.findings(t.trace_id)}
        assert "must_have_lost" in detectors  # the must-keep packet 0 was dropped


class _Terminal(io.StringIO):
    """A text stream that says it is a terminal, as stderr does in an interactive shell."""

    def isatty(self) -> bool:
        return True


def test_progress_bar_draws_on_long_runs() -> None:
    from ctxcore.cli.ingest import ProgressBar

    out = _Terminal()
    bar = ProgressBar(out, after_s=0.0)
    bar(5_000_000, 10_000_000)
    bar.finish()
    text = out.getvalue()
    assert "50.0%" in text and "5.0 MB" in text and text.endswith("\n")
    quiet = _Terminal()
    fast = ProgressBar(quiet, after_s=60.0)
    fast(1, 2)
    fast.finish()
    assert quiet.getvalue() == ""


def test_progress_bar_is_not_drawn_into_a_file_or_pipe() -> None:
    """A log file or a pipe (CI, ``2> log``) gets no carriage-return frames."""
    from ctxcore.cli.ingest import ProgressBar

    piped = io.StringIO()
    bar = ProgressBar(piped, after_s=0.0)
    bar(5_000_000, 10_000_000)
    bar.finish()
    assert piped.getvalue() == ""


def test_many_small_ingests_leave_no_threads_behind(tmp_path: Path) -> None:
    """The watcher runs an ingest per event: each one's writer thread and read cursor end
    with it."""
    import threading

    import duckdb

    from ctxcore.store import TraceStore
    from ctxcore.store.ingest import ingest_paths

    d = tmp_path / "in"
    d.mkdir()
    with TraceStore(tmp_path / "s.duckdb", diagnose=False) as s:
        opened = []
        real = s._db.read_cursor  # the DuckDB engine's writer reads through one of these

        def tracked() -> duckdb.DuckDBPyConnection:
            opened.append(real())
            return opened[-1]

        s._db.read_cursor = tracked  # type: ignore[method-assign]
        before = {t.name for t in threading.enumerate()}
        for i in range(15):
            write_jsonl(d / f"t{i}.jsonl", [make_trace(i)])
            assert ingest_paths(s, [d]).traces_added == 1
        after = [t.name for t in threading.enumerate() if t.name not in before]
        assert not [n for n in after if n.startswith("ctxscope-ingest")], after
        assert len(opened) == 15
        for cur in opened:
            with pytest.raises(duckdb.ConnectionException):
                cur.execute("SELECT 1")
        assert s.count() == 15
