"""``ctxscope app``: the Streamlit debugger as a child process that lives and dies with us.

The app is ``streamlit run app.py`` in a child process. The child must never outlive the
command: it holds the store open, so an orphan would lock every later command out of it.
SIGTERM, SIGINT and SIGHUP are forwarded to it (Streamlit shuts down cleanly on them) and it
is killed if it has not exited 5 s later; on Linux the kernel also sends it SIGTERM when
this process dies without a chance to forward anything (``PR_SET_PDEATHSIG``, e.g. after a
SIGKILL).

Binding anything but loopback serves every trace (and whatever secrets they hold) to the
network, so it needs a token: the app then shows nothing until the URL carries
``?token=...`` (see ``ui.boot``).

While it runs, the command leaves a note beside the store (``<store>.app.json``: the child's
pid and the folder it watches), so that ``ctxscope import`` on a store the app holds can drop
its traces into that very folder rather than into one nobody watches.
"""

from __future__ import annotations

import argparse
import ctypes
import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from ctxcore import settings
from ctxcore.errors import InputError

#: How long the child gets to exit after a forwarded signal before it is killed.
STOP_GRACE_S = 5.0
_PR_SET_PDEATHSIG = 1


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost: it may resolve anywhere


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the signal handlers below still stop the child on SIGTERM/SIGINT


def note_path(db: Path) -> Path:
    """Where a running app leaves its note: beside the store, ``<store>.app.json``."""
    return db.with_name(db.name + ".app.json")


def write_note(db: Path, traces_dir: Path, pid: int) -> Path:
    note = note_path(db)
    data = {"pid": pid, "db": str(db), "traces": str(traces_dir)}
    tmp = note.with_name(f".{note.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, note)
    return note


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def app_folder(db: Path) -> Path | None:
    """The folder a running ``ctxscope app`` on ``db`` watches, from its note; None when no
    live app left one (a stale note of a dead app does not count)."""
    try:
        data = json.loads(note_path(db.resolve()).read_text(encoding="utf-8"))
        pid, folder = int(data["pid"]), Path(data["traces"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return folder if _pid_alive(pid) and folder.is_dir() else None


def run_child(cmd: list[str], env: dict[str, str], note: Path | None = None) -> int:
    """Run ``cmd``; forward SIGTERM/SIGINT/SIGHUP to it; kill it 5 s after if it lingers."""
    preexec = _die_with_parent if sys.platform.startswith("linux") else None
    proc = subprocess.Popen(cmd, env=env, preexec_fn=preexec)
    if note is not None:
        write_note(Path(env[settings.ENV_DB]), Path(env[settings.ENV_TRACES]), proc.pid)
    asked_at: list[float] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        if proc.poll() is None:
            proc.send_signal(signum)
        if not asked_at:
            asked_at.append(time.monotonic())

    stops = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP]
    previous = {s: signal.signal(s, forward) for s in stops}
    try:
        while True:
            try:
                return proc.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                if asked_at and time.monotonic() - asked_at[0] > STOP_GRACE_S:
                    proc.kill()
                    return proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if note is not None:
            note.unlink(missing_ok=True)


def cmd_app(args: argparse.Namespace) -> int:
    app = Path(__file__).resolve().parents[2] / "app.py"
    if not app.exists():
        raise InputError(f"{app} not found; run `ctxscope app` from a ctxscope checkout")
    token = args.token or settings.app_token()
    if not is_loopback(args.host) and not token:
        raise InputError(
            f"--host {args.host} serves every trace (and any secret in them) to the network; "
            f"pass --token SECRET (or set {settings.ENV_TOKEN}) and open the URL with "
            "?token=SECRET, or keep the default --host 127.0.0.1"
        )
    env = dict(os.environ)
    env[settings.ENV_DB] = str(Path(args.db).resolve())
    env[settings.ENV_TRACES] = str(Path(args.traces).resolve())
    Path(env[settings.ENV_TRACES]).mkdir(parents=True, exist_ok=True)
    if token:
        env[settings.ENV_TOKEN] = token
        print(
            f"ctxscope app: open http://{args.host}:{args.port}/?token=<your token>; "
            "without it the app shows nothing",
            file=sys.stderr,
        )
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(app),
        "--server.address",
        args.host,
        "--server.port",
        str(args.port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
    ]
    return run_child(cmd, env, note=note_path(Path(env[settings.ENV_DB])))
