"""Many writers on one PostgreSQL store, and their faults (issue 35, "Load and faults"):
several ``ctxscope ingest`` processes write at once while a reader reads, a writer killed
with SIGKILL in the middle of its transaction, and the server restarted in the middle of an
ingest. Every trace is stored once and whole: none lost, none twice, none half.

Real processes on the session's throwaway server (tests/pg_cluster.py); no mock.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers_store import make_trace, write_jsonl

from ctxcore.store.engines import open_store

ROOT = Path(__file__).resolve().parent.parent
PACKETS = 5  # make_trace's default: decisions per trace


def _files(where: Path, writers: int, each: int, shared: int) -> tuple[list[Path], int]:
    """A trace file per writer: its own traces and ``shared`` traces every writer also
    has (all racing on the same ids); how many distinct traces there are."""
    common = [make_trace(900_000 + i, session_id="shared") for i in range(shared)]
    files = []
    for w in range(writers):
        own = [make_trace(w * 100_000 + i, session_id=f"w{w}") for i in range(each)]
        path = where / f"writer{w}.jsonl"
        write_jsonl(path, own + common)
        files.append(path)
    return files, writers * each + shared


def _ingest(url: str, path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ctxcore", "ingest", str(path), "--db", url, "--defer-diagnostics"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        start_new_session=True,
    )


def _whole(url: str) -> dict[str, Any]:
    """What the database holds, counted in SQL: traces, distinct ids, traces missing their
    JSON or decisions, and decision rows."""
    with psycopg.connect(url) as con:
        row = con.execute(
            "SELECT count(*), count(DISTINCT trace_id), "
            "count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM trace_parts p "
            "WHERE p.tseq = t.tseq)), "
            "count(*) FILTER (WHERE (SELECT count(*) FROM decisions d "
            "WHERE d.tseq = t.tseq) <> n_packets) FROM traces t"
        ).fetchone()
        decisions = con.execute("SELECT count(*) FROM decisions").fetchone()
    assert row is not None and decisions is not None
    return {
        "traces": row[0],
        "ids": row[1],
        "no_json": row[2],
        "bad_decisions": row[3],
        "decisions": decisions[0],
    }


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)


@pytest.mark.slow
def test_four_writers_and_a_reader_store_every_trace_once(pg_server: Any, tmp_path: Path) -> None:
    url = pg_server.new_database()
    open_store(url).close()  # migrated once, before the race on the rows
    files, distinct = _files(tmp_path, writers=4, each=500, shared=100)
    seen: list[int] = []
    done = threading.Event()
    failures: list[BaseException] = []

    def read() -> None:
        try:
            with open_store(url, read_only=True) as store:
                while not done.is_set():
                    seen.append(store.count())
                    page = store.list_traces(limit=20)
                    assert len(page.rows) == min(20, page.total)
                    time.sleep(0.05)
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    procs = [_ingest(url, f) for f in files]
    try:
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        done.set()
        reader.join(timeout=60)
        for p in procs:
            _stop(p)
    assert [p.returncode for p in procs] == [0] * 4, [err for _, err in outs]
    assert not failures, failures
    got = _whole(url)
    assert got == {
        "traces": distinct,
        "ids": distinct,
        "no_json": 0,
        "bad_decisions": 0,
        "decisions": distinct * PACKETS,
    }
    assert seen == sorted(seen) and seen[-1] <= distinct  # the reader saw the store grow
    with open_store(url, read_only=True) as store:
        assert store.count() == distinct
        sessions = {s.session_id: s.traces for s in store.sessions()}
        assert sessions == {"w0": 500, "w1": 500, "w2": 500, "w3": 500, "shared": 100}


def _wait_for_rows(url: str, proc: subprocess.Popen[str], timeout: float = 120) -> None:
    """Until the writer's transaction has sent rows (its staging table or COPY is under
    way: a backend of that database is busy in a statement of it)."""
    end = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as con:
        while time.monotonic() < end:
            assert proc.poll() is None, proc.communicate()
            busy = con.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND state IN ('active', 'idle in transaction') "
                "AND backend_xid IS NOT NULL"
            ).fetchone()
            if busy and busy[0]:
                return
            time.sleep(0.02)
    raise AssertionError("the writer never began writing")


@pytest.mark.slow
def test_a_writer_killed_mid_transaction_leaves_nothing_half(
    pg_server: Any, tmp_path: Path
) -> None:
    url = pg_server.new_database()
    open_store(url).close()
    [path], distinct = _files(tmp_path, writers=1, each=3000, shared=0)
    proc = _ingest(url, path)
    try:
        _wait_for_rows(url, proc)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        _stop(proc)
    time.sleep(0.5)  # the server notices the dropped connection and rolls back
    after_kill = _whole(url)
    assert after_kill["no_json"] == 0 and after_kill["bad_decisions"] == 0
    assert after_kill["traces"] == after_kill["ids"] < distinct
    again = _ingest(url, path)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert _whole(url) == {
        "traces": distinct,
        "ids": distinct,
        "no_json": 0,
        "bad_decisions": 0,
        "decisions": distinct * PACKETS,
    }


@pytest.mark.slow
def test_a_server_restart_mid_ingest_fails_in_one_line_and_a_rerun_completes(
    pg_server: Any, tmp_path: Path
) -> None:
    url = pg_server.new_database()
    open_store(url).close()
    [path], distinct = _files(tmp_path, writers=1, each=3000, shared=0)
    proc = _ingest(url, path)
    try:
        _wait_for_rows(url, proc)
        pg_server.restart()
        out, err = proc.communicate(timeout=120)
    finally:
        _stop(proc)
    assert proc.returncode != 0
    # the progress bar (drawn when the ingest runs long, as on a loaded machine) aside
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("[")]
    assert len(lines) == 1 and "went away" in lines[0], err
    assert "Traceback" not in err
    half = _whole(url)
    assert half["no_json"] == 0 and half["bad_decisions"] == 0
    assert half["traces"] == half["ids"] < distinct
    again = _ingest(url, path)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert _whole(url)["traces"] == _whole(url)["ids"] == distinct


@pytest.mark.slow
def test_eight_writers_of_5000_and_two_app_readers(pg_server: Any, tmp_path: Path) -> None:
    """The issue's load: 8 writer processes x 5,000 traces (and 100 every writer also has,
    racing on their ids) while 2 readers run the app's Traces page and a session's Timeline
    throughout; every trace stored once and whole, and no reader waits long for an answer."""
    url = pg_server.new_database()
    open_store(url).close()
    files, distinct = _files(tmp_path, writers=8, each=5000, shared=100)
    done = threading.Event()
    answers: list[list[float]] = [[], []]  # per reader: when each answer came
    failures: list[BaseException] = []

    def read(me: list[float]) -> None:
        try:
            with open_store(url, read_only=True) as store:
                while not done.is_set():
                    page = store.list_traces(limit=50)
                    assert len(page.rows) == min(50, page.total)
                    if page.rows:
                        rows = store.session_statuses(page.rows[0].session_id)
                        assert {r["trace_id"] for r in rows} >= {page.rows[0].trace_id}
                    me.append(time.monotonic())
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)

    readers = [threading.Thread(target=read, args=(a,)) for a in answers]
    for r in readers:
        r.start()
    start = time.monotonic()
    procs = [_ingest(url, f) for f in files]
    try:
        outs = [p.communicate(timeout=1800) for p in procs]
    finally:
        end = time.monotonic()
        done.set()
        for r in readers:
            r.join(timeout=60)
        for p in procs:
            _stop(p)
    assert [p.returncode for p in procs] == [0] * 8, [err for _, err in outs]
    assert not failures, failures
    for got in answers:  # answers all along the writes, none after a long wait
        marks = [start, *[t for t in got if t <= end], end]
        assert len(marks) > 10
        assert max(b - a for a, b in itertools.pairwise(marks)) < 30
    assert _whole(url) == {
        "traces": distinct,
        "ids": distinct,
        "no_json": 0,
        "bad_decisions": 0,
        "decisions": distinct * PACKETS,
    }
