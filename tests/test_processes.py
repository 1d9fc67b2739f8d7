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


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except OSError:
        return False


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


LEAKY = """
import subprocess, sys

def test_clean():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_leaves_one():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    with open("leftover.pid", "w") as fh:
        fh.write(str(proc.pid))
"""


@pytest.mark.parametrize(
    ("leaky", "xdist"),
    [(False, False), (True, False), (True, True)],
    ids=["clean", "leaky", "leaky-xdist"],
)
def test_a_test_that_leaves_a_process_fails_the_session(
    tmp_path: Path, leaky: bool, xdist: bool
) -> None:
    """tests/conftest.py's guard, on a suite of its own: the process is named, with the
    test that started it, the run fails, and the process is killed (also where
    pytest-xdist's worker ran the test)."""
    (tmp_path / "test_some.py").write_text(
        LEAKY if leaky else LEAKY.split("def test_leaves_one")[0], encoding="utf-8"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), "-n", "1" if xdist else "0", "test_some.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if not leaky:
        assert run.returncode == 0, run.stdout + run.stderr
        assert "left" not in run.stdout
        return
    pid = int((tmp_path / "leftover.pid").read_text())
    try:
        assert run.returncode == 1, run.stdout + run.stderr
        assert "2 passed" in run.stdout
        assert "a test left 1 process(es) running" in run.stdout
        named = [ln for ln in run.stdout.splitlines() if ln.strip().startswith(f"pid {pid},")]
        assert len(named) == 1 and "test_some.py::test_leaves_one" in named[0], run.stdout
        assert "time.sleep(300)" in named[0]
        wait_for(lambda: not running(pid), 10)  # and killed
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
