"""``ctxscope app`` as a process: its Streamlit child never outlives it; the network needs a token.

Real processes: the command starts ``streamlit run`` on a free loopback port; the tests stop
the command the ways a user or a supervisor does (SIGTERM, SIGINT, SIGKILL) and check that
the child is gone within the grace period and the store is free for the next command.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ctxcore.cli.app import is_loopback
from ctxcore.store import TraceStore

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _children(pid: int) -> list[int]:
    out = []
    for task in Path("/proc").glob("[0-9]*"):
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            out.append(int(task.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _start(tmp_path: Path) -> tuple[subprocess.Popen[bytes], int, Path]:
    db = tmp_path / "store.duckdb"
    port = _free_port()
    env = dict(os.environ, CTXSCOPE_NO_WATCH="1")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ctxcore",
            "app",
            "--db",
            str(db),
            "--traces",
            str(tmp_path / "traces"),
            "--port",
            str(port),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2):
                break
        except OSError:
            time.sleep(0.3)
    else:
        proc.kill()
        pytest.fail("the app did not come up in 60 s")
    [child] = _children(proc.pid)
    return proc, child, db


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT])
def test_stopping_the_command_stops_its_streamlit_child(tmp_path: Path, how: int) -> None:
    proc, child, db = _start(tmp_path)
    t0 = time.monotonic()
    proc.send_signal(how)
    proc.wait(timeout=10)
    while _alive(child) and time.monotonic() - t0 < 10:
        time.sleep(0.1)
    assert not _alive(child), "streamlit outlived `ctxscope app`"
    assert time.monotonic() - t0 <= 6.0
    with TraceStore(db) as store:  # the store is free again
        assert store.count() >= 0


def test_a_killed_command_takes_its_child_with_it(tmp_path: Path) -> None:
    proc, child, db = _start(tmp_path)
    t0 = time.monotonic()
    proc.kill()
    proc.wait(timeout=10)
    while _alive(child) and time.monotonic() - t0 < 10:
        time.sleep(0.1)
    assert not _alive(child), "streamlit outlived a SIGKILLed `ctxscope app`"
    with TraceStore(db) as store:
        assert store.count() >= 0


def test_a_network_host_needs_a_token(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ctxcore",
            "app",
            "--host",
            "0.0.0.0",
            "--db",
            str(tmp_path / "s.duckdb"),
            "--port",
            str(_free_port()),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "CTXSCOPE_TOKEN"},
    )
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert "--token" in line and "0.0.0.0" in line


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("localhost", True),
        ("::1", True),
        ("127.0.0.2", True),
        ("0.0.0.0", False),
        ("192.168.1.5", False),
        ("example.org", False),
    ],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
