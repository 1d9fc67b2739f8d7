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


# --------------------------------------------------------------------------- --otlp


def _collect_service(port: int) -> dict[str, object] | None:
    import json

    try:
        url = f"http://127.0.0.1:{port}/__ctxscope__/collect"
        with urllib.request.urlopen(url, timeout=2) as resp:
            data = json.loads(resp.read())
    except OSError:
        return None
    return data if isinstance(data, dict) else None


def _start_with_otlp(
    tmp_path: Path, otlp: int
) -> tuple[subprocess.Popen[bytes], int, Path, list[int]]:
    db = tmp_path / "store.duckdb"
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxcore", "app", "--db", str(db)]
        + ["--traces", str(tmp_path / "traces"), "--port", str(port), "--otlp", str(otlp)],
        env=dict(os.environ, CTXSCOPE_NO_WATCH="1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2):
                break
        except OSError:
            if proc.poll() is not None:
                pytest.fail(f"`ctxscope app --otlp` exited: {proc.stderr.read()!r}")  # type: ignore[union-attr]
            time.sleep(0.3)
    else:
        proc.kill()
        pytest.fail("the app did not come up in 90 s")
    return proc, port, db, _children(proc.pid)


def test_otlp_runs_a_receiver_beside_the_app_and_both_stop_with_it(tmp_path: Path) -> None:
    import json

    otlp = _free_port()
    proc, _port, db, children = _start_with_otlp(tmp_path, otlp)
    assert len(children) == 2, "one Streamlit child and one receiver"
    service = _collect_service(otlp)
    assert service is not None and service["service"] == "ctxscope-collect"
    assert Path(str(service["traces"])) == (tmp_path / "traces").resolve()
    assert service["pid"] in children
    # the note tells the app (and `ctxscope import`) where it listens
    note = json.loads((tmp_path / "store.duckdb.app.json").read_text())
    assert note["otlp_port"] == otlp and note["traces"] == str((tmp_path / "traces").resolve())
    # a span posted to it lands in the folder the app watches
    line = (
        (Path(__file__).parent / "fixtures/imports/otlp-json/openai-v2-latest-span-only.otlp.jsonl")
        .read_text()
        .splitlines()[0]
    )
    req = urllib.request.Request(
        f"http://127.0.0.1:{otlp}/v1/traces",
        data=line.encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200
    out = tmp_path / "traces" / "live" / "otlp.jsonl"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (out.exists() and out.read_text().strip()):
        time.sleep(0.2)
    sessions = {json.loads(x)["session_id"] for x in out.read_text().splitlines()}
    assert "conv-weather-seattle-sf" in sessions
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    while any(_alive(c) for c in children) and time.monotonic() - t0 < 40:
        time.sleep(0.1)
    assert not any(_alive(c) for c in children), "a child outlived `ctxscope app --otlp`"
    assert not (tmp_path / "store.duckdb.app.json").exists()
    with TraceStore(db) as store:
        assert store.count() >= 0


def test_otlp_on_a_taken_port_fails_before_the_app_starts(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        app_port = _free_port()
        done = subprocess.run(
            [sys.executable, "-m", "ctxcore", "app", "--db", str(tmp_path / "s.duckdb")]
            + ["--traces", str(tmp_path / "t"), "--port", str(app_port), "--otlp", str(taken)],
            capture_output=True,
            text=True,
            timeout=90,
        )
    assert done.returncode != 0
    assert f"--otlp {taken}" in done.stderr and "port" in done.stderr
    with pytest.raises(OSError):  # nothing was left listening on the app's port
        urllib.request.urlopen(f"http://127.0.0.1:{app_port}/_stcore/health", timeout=2)
