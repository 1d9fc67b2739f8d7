"""``ctxscope app``: the Streamlit debugger as a child process that lives and dies with us.

The app is ``streamlit run ctxapp/app.py`` in a child process; the app ships in the same package
as ctxcore, and this command finds its file by the package's import spec, without importing it
(ctxcore never imports the app: docs/design.md, "The app"). The child must never outlive the
command: it holds the store open, so an orphan would lock every later command out of it.
SIGTERM, SIGINT and SIGHUP are forwarded to it (Streamlit shuts down cleanly on them) and it
is killed if it has not exited 5 s later; on Linux the kernel also sends it SIGTERM when
this process dies without a chance to forward anything (``PR_SET_PDEATHSIG``, e.g. after a
SIGKILL).

Binding anything but loopback serves every trace (and whatever secrets they hold) to the
network, so it needs a token: the app then shows nothing until the URL carries
``?token=...`` (see ``ui.boot``).

While it runs, the command leaves a note beside the store (``<store>.app.json``: the child's
pid, the folder it watches, the OTLP port it receives on and its URL, never its token), so that
``ctxscope import`` on a store the app holds can drop its traces into that very folder rather
than into one nobody watches, ``ctxscope run`` can name the app that shows its calls, and the
app can say where it listens.

``--otlp [PORT]`` also runs the OTLP/HTTP receiver of ``ctxscope collect`` beside the app,
writing into the folder the app watches: spans an instrumented agent exports show up on Traces
like any other call. It is a second child of this command, not a thread of Streamlit's
process: decoding spans and counting their prompts stays off the event loop that serves the
pages, and a receiver that fails does not take the app down (it is said on stderr). It starts
first, so a taken port is an error before anything else runs, and it stops after the app,
with time to write the spans it holds (docs/design.md, "Live capture").
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import FrameType
from typing import Any

from ctxcore import settings
from ctxcore.errors import InputError, StoreError, StoreLockedError
from ctxcore.processes import pid_alive
from ctxcore.store.engines import is_server, shown
from ctxcore.store.readers import APP_NOTE_SUFFIX

#: How long the child gets to exit after a forwarded signal before it is killed.
STOP_GRACE_S = 5.0
#: How long the OTLP receiver gets to start listening, and to write what it holds at the end.
OTLP_START_S = 30.0
OTLP_DRAIN_S = 30.0
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
    return db.with_name(db.name + APP_NOTE_SUFFIX)


def write_note(
    db: Path, traces_dir: Path, pid: int, otlp_port: int | None = None, url: str | None = None
) -> Path:
    note = note_path(db)
    data = {
        "pid": pid,
        "db": str(db),
        "traces": str(traces_dir),
        "otlp_port": otlp_port,
        "url": url,
    }
    tmp = note.with_name(f".{note.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, note)
    return note


def app_folder(db: Path) -> Path | None:
    """The folder a running ``ctxscope app`` on ``db`` watches, from its note; None when no
    live app left one (a stale note of a dead app does not count)."""
    try:
        data = json.loads(note_path(db.resolve()).read_text(encoding="utf-8"))
        pid, folder = int(data["pid"]), Path(data["traces"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return folder if pid_alive(pid) and folder.is_dir() else None


def app_note(db: Path) -> dict[str, object] | None:
    """What a live ``ctxscope app`` on ``db`` wrote in its note (pid, folder, OTLP port)."""
    try:
        data = json.loads(note_path(db.resolve()).read_text(encoding="utf-8"))
        alive = isinstance(data, dict) and pid_alive(int(data["pid"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return data if alive else None


def holder(exc: StoreLockedError) -> str:
    """Who holds a store, from the error of opening it ("PID 123 (python3)")."""
    m = re.search(r"in use by (.+?);", str(exc))
    return m[1] if m else "another process"


def held_by(db: Path) -> str | None:
    """Who holds ``db`` for writing when another process does (another app, an ingest);
    None when nobody does, or the file is not there yet or cannot be read (the app says why
    itself then)."""
    if not db.is_file():
        return None
    from ctxcore.store.engines import open_store

    try:
        open_store(db, read_only=True).close()
    except StoreLockedError as exc:
        return holder(exc)
    except StoreError:
        return None
    return None


def stop_companion(proc: subprocess.Popen[bytes], name: str, grace: float) -> None:
    """SIGTERM a helper process, give it ``grace`` seconds to finish its work, then kill it."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        print(f"ctxscope: {name} did not stop within {grace:g} s; killed", file=sys.stderr)
        proc.kill()
        proc.wait()


def run_child(
    cmd: list[str],
    env: dict[str, str],
    note: Path | None = None,
    companion: tuple[subprocess.Popen[bytes], str, int] | None = None,
    url: str | None = None,
) -> int:
    """Run ``cmd``; forward SIGTERM/SIGINT/SIGHUP to it; kill it 5 s after if it lingers.

    ``companion`` (process, name, port) is a helper started before it (the OTLP receiver): it
    is stopped after ``cmd`` exits, and its exit while ``cmd`` runs is said once. ``url``
    (where the app listens, without its token) goes in the ``note``."""
    preexec = _die_with_parent if sys.platform.startswith("linux") else None
    proc = subprocess.Popen(cmd, env=env, preexec_fn=preexec)
    if note is not None:
        write_note(
            Path(env[settings.ENV_DB]),
            Path(env[settings.ENV_TRACES]),
            proc.pid,
            otlp_port=companion[2] if companion else None,
            url=url,
        )
    asked_at: list[float] = []
    companion_said = False

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
            if companion and not companion_said and companion[0].poll() is not None:
                companion_said = True
                print(
                    f"ctxscope app: the {companion[1]} exited (code {companion[0].returncode}); "
                    "the app goes on without it",
                    file=sys.stderr,
                )
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if companion is not None:
            stop_companion(companion[0], companion[1], OTLP_DRAIN_S)
        if note is not None:
            note.unlink(missing_ok=True)


def app_script() -> Path:
    """The app's main file, ``app.py`` of the installed ``ctxapp`` package."""
    spec = importlib.util.find_spec("ctxapp")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        if (Path(folder) / "app.py").is_file():
            return Path(folder) / "app.py"
    raise InputError(
        "the ctxscope app (package ctxapp) is not installed beside ctxcore; reinstall ctxscope "
        "(pip install ctxscope)"
    )


def seed_demo(db: Path, traces: Path) -> int:
    """On a first start in an empty folder (no store yet, no traces), copy the demo traces that
    ship in the package into ``<traces>/demo``, which the app loads into its empty store; the
    number of files copied (0 when anything is there already)."""
    if db.exists() or (traces.is_dir() and any(traces.iterdir())):
        return 0
    out = traces / settings.DEMO_SUBDIR
    out.mkdir(parents=True, exist_ok=True)
    files = sorted(settings.DEMO_DIR.glob("*.jsonl"))
    for src in files:
        shutil.copyfile(src, out / src.name)
    return len(files)


def _store_env(args: argparse.Namespace, team: bool) -> dict[str, str]:
    """The app's environment: the store and folder it shows, the demo traces copied into a
    new file store's folder (said on stderr), a team store said as such."""
    env = dict(os.environ)
    # a team store's URL goes to the app as given (a Path would fold its //); the app reads
    # it by --reader-url when given (a login that may only read)
    reader = getattr(args, "reader_url", None) or args.db
    env[settings.ENV_DB] = reader if team else str(Path(args.db).resolve())
    env[settings.ENV_TRACES] = str(Path(args.traces).resolve())
    seeded = 0 if team else seed_demo(Path(env[settings.ENV_DB]), Path(env[settings.ENV_TRACES]))
    if seeded:
        print(
            f"ctxscope app: a new store, so the {seeded} demo trace files are copied into "
            f"{Path(env[settings.ENV_TRACES]) / settings.DEMO_SUBDIR} and shown; traces you "
            "write or import into that folder appear beside them",
            file=sys.stderr,
        )
    Path(env[settings.ENV_TRACES]).mkdir(parents=True, exist_ok=True)
    if team:
        print(
            f"ctxscope app: {shown(args.db)} is a team store: the app asks each person for "
            "their token (ctxscope token add NAME) and reads as ctxscope_reader",
            file=sys.stderr,
        )
    return env


def cmd_app(args: argparse.Namespace) -> int:
    app = app_script()
    token = args.token or settings.app_token()
    team = is_server(args.db)
    # a team store asks every person for their own token (ctxscope token add)
    if not is_loopback(args.host) and not token and not team:
        raise InputError(
            f"--host {args.host} serves every trace (and any secret in them) to the network; "
            f"pass --token SECRET (or set {settings.ENV_TOKEN}) and open the URL with "
            "?token=SECRET, or keep the default --host 127.0.0.1"
        )
    if team and token and not is_loopback(args.host):
        # a team store's token opens every session it is given to: from the environment,
        # every browser that reaches --host would get in as its holder, with no token
        raise InputError(
            f"--host {args.host} with {settings.ENV_TOKEN} (or --token) on a team store lets "
            "every browser on the network in as that token's holder, asking none for theirs; "
            f"unset {settings.ENV_TOKEN} (each person gives their own token), or keep the "
            "default --host 127.0.0.1"
        )
    env = _store_env(args, team)
    if token:
        env[settings.ENV_TOKEN] = token
        print(
            f"ctxscope app: open http://{args.host}:{args.port}/?token=<your token>; "
            "without it the app shows nothing",
            file=sys.stderr,
        )
    db = Path(env[settings.ENV_DB])
    by = None if team else held_by(db)
    if by is not None:
        # DuckDB lets no other process open a store one holds, not even to read: this app
        # reads a copy, and leaves the holder's note (import finds that app's folder by it)
        print(
            f"ctxscope app: {db} is held by {by}; this app shows it read-only, as it is now "
            "(nothing is ingested or saved here)",
            file=sys.stderr,
        )
    companion = None
    if args.otlp is not None:
        # on a team store the receiver feeds the store itself: this app watches no folder
        receiver = start_collector(
            args.otlp, Path(env[settings.ENV_TRACES]), args.db if team else None
        )
        companion = (receiver, "OTLP receiver", args.otlp)
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
        # the app's own source does not change under a user: watching it only costs inotify
        # watches (and floods their queue when a checkout changes)
        "--server.fileWatcherType",
        "none",
    ]
    host = f"[{args.host}]" if ":" in args.host else args.host
    url = f"http://{host}:{args.port}" + ("/?token=<your token>" if token else "")
    try:
        note = None if by or team else note_path(db)
        return run_child(cmd, env, note=note, companion=companion, url=url)
    finally:
        if companion is not None:  # run_child stops it; this covers a failure to start the app
            stop_companion(companion[0], companion[1], OTLP_DRAIN_S)


def service_info(port: int, path: str, name: str, timeout: float = 1.0) -> dict[str, Any] | None:
    """What a ctxscope service (proxy, receiver) on ``port`` says about itself at ``path``;
    None if nothing answers there, or something that is not ``name``."""
    url = f"http://{settings.DEFAULT_HOST}:{port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - loopback
            data = json.loads(resp.read())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("service") == name else None


def start_service(
    cmd: list[str], port: int, path: str, name: str, what: str, hint: str, start_s: float
) -> subprocess.Popen[bytes]:
    """Start ``cmd`` (a ctxscope service that dies with us) and return it once it answers on
    ``port``; an error naming ``what`` (and ``hint``) if it exits or stays silent."""
    preexec = _die_with_parent if sys.platform.startswith("linux") else None
    proc = subprocess.Popen(cmd, preexec_fn=preexec)
    deadline = time.monotonic() + start_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise InputError(
                f"{what} did not start (exit code {proc.returncode}; its message is above){hint}"
            )
        if service_info(port, path, name, timeout=0.5) is not None:
            return proc
        time.sleep(0.1)
    stop_companion(proc, what, 1.0)
    raise InputError(f"{what} did not listen on port {port} within {start_s:g} s")


def start_collector(port: int, traces_dir: Path, db: str | None = None) -> subprocess.Popen[bytes]:
    """``ctxscope collect`` on ``port`` writing into ``traces_dir`` (and into the team store
    ``db`` when given), listening when this returns."""
    from ctxcore.capture.collector import SERVICE_NAME, SERVICE_PATH

    cmd = [sys.executable, "-m", "ctxcore", "collect", "--port", str(port)]
    cmd += ["--traces", str(traces_dir)]
    if db:
        cmd += ["--db", db]
    return start_service(
        cmd,
        port,
        SERVICE_PATH,
        SERVICE_NAME,
        f"--otlp {port}: the OTLP receiver",
        ": is the port taken? pass another, e.g. --otlp 4319",
        OTLP_START_S,
    )
