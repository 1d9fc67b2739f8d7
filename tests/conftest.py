"""Shared fixtures: every data path and cache points at tmp_path. And no test leaves a process
behind: a child of the pytest process still running at the end of the session fails the run,
naming the test that started it (and is then killed)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxcore import settings

ROOT = Path(__file__).resolve().parent.parent
CORPUS = settings.corpus_dir(ROOT / "corpus")

#: multiprocessing's helper processes: started once per pytest process by whatever first uses
#: a fork server, they end with it (their pipes from it close); what they started does not.
_SHARED_HELPERS = ("multiprocessing.forkserver", "multiprocessing.resource_tracker")
#: how long a leftover has to exit on its own at the end of the session
_GRACE_S = 5.0


@pytest.fixture(autouse=True)
def _isolated_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken-cache"))
    monkeypatch.setenv("CTXSCOPE_DB", str(tmp_path / "ctxscope.duckdb"))
    monkeypatch.setenv("CTXSCOPE_TRACES", str(tmp_path / "traces"))


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """A throwaway PostgreSQL cluster for this pytest process (tests/pg_cluster.py), stopped
    and removed at the end of the session."""
    from pg_cluster import running

    with running() as cluster:
        yield cluster


@pytest.fixture
def corpus() -> Path:
    if not CORPUS.exists():
        pytest.skip(f"corpus not found at {CORPUS}")
    return CORPUS


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/children") as fh:
                kids += [int(k) for k in fh.read().split()]
    return kids


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except OSError:
        return False


def _descendants() -> dict[int, str]:
    """The running descendants of this process (pid -> command line), but for
    ``_SHARED_HELPERS`` themselves."""
    out: dict[int, str] = {}
    todo = _children(os.getpid())
    while todo:
        pid = todo.pop()
        todo += _children(pid)
        cmd = _cmdline(pid)
        if _running(pid) and not any(h in cmd for h in _SHARED_HELPERS):
            out[pid] = cmd
    return out


#: descendant pid -> the test during which it was first seen
_STARTED_BY: dict[int, str] = {}
_CHECKED = os.path.isdir("/proc/self/task")


@pytest.fixture(autouse=True)
def _note_new_processes(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if _CHECKED:
        for pid in _descendants():
            _STARTED_BY.setdefault(pid, request.node.nodeid)


#: what pytest-xdist's workers found (the controller reports it)
_FROM_WORKERS: list[str] = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    _FROM_WORKERS.extend(getattr(node, "workeroutput", {}).get("ctxscope_leftovers", []))


def _leftovers() -> list[str]:
    """Lines naming the processes still running (each killed once named)."""
    end = time.monotonic() + _GRACE_S
    left = _descendants()
    while left and time.monotonic() < end:
        time.sleep(0.1)
        left = _descendants()
    lines = []
    for pid, cmd in sorted(left.items()):
        lines.append(f"  pid {pid}, started in {_STARTED_BY.get(pid, '?')}: {cmd[:200]}")
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return lines


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if config.pluginmanager.get_plugin("dsession") is not None:
        lines = _FROM_WORKERS  # pytest-xdist's controller: its children are the workers
    elif _CHECKED:
        lines = _leftovers()
        if hasattr(config, "workerinput"):  # a worker: the controller says it
            config.workeroutput["ctxscope_leftovers"] = lines
            return
    else:
        return
    if not lines:
        return
    head = (
        f"a test left {len(lines)} process(es) running (a test must end what it starts: "
        "kill its process group in a finally):"
    )
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("\n".join([head, *lines]), red=True)
    else:
        print("\n".join([head, *lines]))
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
