"""Worker processes end with the command that started them, however it ends, and their number
is bounded (docs/design.md, "Ingest and the watcher" and "Diagnostics")."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers_store import make_trace

from ctxcore.store import TraceStore

ROOT = Path(__file__).resolve().parent.parent


def wait_for(cond: Callable[[], bool], timeout: float) -> None:
    """Until ``cond()`` holds; fails after ``timeout`` seconds (generous: shared machine)."""
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.1)


def in_session(sid: int) -> list[int]:
    """The live (not zombie) processes of session ``sid``: a command started with
    ``start_new_session`` and everything it started, also once reparented."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[3]) == sid:
            out.append(int(name))
    return out


@pytest.fixture
def replay_db(tmp_path: Path) -> Path:
    """A store big enough for replay's pool and long enough to replay to be killed in it."""
    db = tmp_path / "r.duckdb"
    traces = [
        make_trace(i, n_packets=30, session_id=f"s{i // 10:02d}", turn=i % 10) for i in range(400)
    ]
    with TraceStore(db, diagnose=False) as store:
        store.add_traces(traces)
    return db


@pytest.mark.slow
def test_kill_9_of_replay_all_leaves_no_process(replay_db: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxcore", "replay", "--all", "--db", str(replay_db),
         "--workers", "2", "--set", "max_tokens=300", "--fail-on", "never"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    try:
        # the command, the resource tracker, the fork server and two workers
        wait_for(lambda: len(in_session(proc.pid)) >= 5 or proc.poll() is not None, 120)
        assert proc.poll() is None, "the replay ended before it could be killed"
        started = in_session(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        wait_for(lambda: not in_session(proc.pid), 30)
        assert len(started) >= 5, started
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        assert proc.stderr is not None
        proc.stderr.close()


@pytest.mark.parametrize("n", ["1000000000", "0", "-2"])
def test_workers_out_of_bounds_is_one_line(
    tmp_path: Path, n: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from ctxcore.cli import main
    from ctxcore.processes import workers_limit

    db = tmp_path / "w.duckdb"
    with TraceStore(db, diagnose=False) as store:
        store.add_traces([make_trace(i, session_id="s") for i in range(3)])
    assert main(["replay", "--all", "--db", str(db), "--workers", n, "--no-findings"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"ctxscope replay: error: --workers {n}: give a number from 1 to {workers_limit()} "
        "(each worker is a process of its own)"
    ]
    # the bound itself is accepted
    limit = str(workers_limit())
    assert main(["replay", "--all", "--db", str(db), "--workers", limit, "--no-findings"]) == 0
