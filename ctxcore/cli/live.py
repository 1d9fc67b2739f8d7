"""``ctxscope proxy``, ``ctxscope run -- CMD`` and ``ctxscope collect``: live capture.

``proxy`` and ``collect`` are long-running servers on loopback (``ctxcore.capture.proxy``,
``ctxcore.capture.collector``). ``run`` is the one-liner for an agent that should change
nothing: it uses the proxy already listening on its port, or starts one for as long as the
command runs, points the OpenAI and Anthropic SDKs' base URLs at it, and exits with the
command's exit code. The command's name becomes the calls' source tag.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from ctxcore import settings
from ctxcore.cli.app import app_note, run_child, service_info, start_service
from ctxcore.errors import InputError
from ctxcore.store.engines import is_server, open_store, shown

#: How long ``run`` waits for the proxy it started to listen, and to finish its traces.
START_S = 30.0
DRAIN_S = 120.0


def _upstream(given: str | None, env_name: str, default: str) -> str:
    # A base URL the user already set is where their calls were going: keep it upstream.
    inherited = os.environ.get(env_name, "").strip()
    return given or inherited or default


def _print(command: str, text: str) -> None:
    print(f"ctxscope {command}: {text}", file=sys.stderr, flush=True)


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def _stop_cleanly_on_sigterm() -> None:
    """SIGTERM ends the server with the interpreter's normal exit. uvicorn stops gracefully on
    it and then raises it again for the handler it found; the default one killed the process
    there, skipping the interpreter's exit, where multiprocessing unlinks the named
    semaphores of the converter's stop event (or the collector's pool): the resource tracker
    then warned of 5 'leaked semaphore objects' every time."""
    signal.signal(signal.SIGTERM, _exit_on_sigterm)


@contextmanager
def _feeding(command: str, db: str | None, traces: str) -> Iterator[None]:
    """With a team store (``--db postgresql://…``), what the command writes into DIR/live/ is
    ingested into it as it lands, by a watcher of this process, and once more when the command
    stops (what its last calls wrote meanwhile) (docs/design.md, "Store"). The files stay: a
    store that was unreachable gets them from the next run or ``ctxscope ingest``."""
    if not db:
        yield
        return
    if not is_server(db):
        raise InputError(
            f"--db {db}: {command} feeds a team store (postgresql://…); a DuckDB file is fed "
            "from the folder by the app or `ctxscope watch`, which hold it"
        )
    from ctxcore.store.ingest import ingest_paths
    from ctxcore.store.watch import Watcher

    live = Path(traces) / settings.LIVE_SUBDIR
    with open_store(db) as store:
        _print(command, f"and ingested into the team store {shown(db)}")
        watcher = Watcher(store, live).start()
        try:
            yield
        finally:
            watcher.stop()
            ingest_paths(store, [live])
            t = watcher.totals
            _print(command, f"{t.traces_added} trace(s) ingested into {shown(db)} by the watcher")


def cmd_proxy(args: argparse.Namespace) -> int:
    from ctxcore.capture.proxy import ProxyConfig, Upstream, bind, run_proxy

    cfg = ProxyConfig(
        port=args.port,
        traces_dir=Path(args.traces),
        upstream_openai=args.upstream_openai or settings.DEFAULT_UPSTREAM_OPENAI,
        upstream_anthropic=args.upstream_anthropic or settings.DEFAULT_UPSTREAM_ANTHROPIC,
        read_timeout=args.timeout,
    )
    Upstream.parse(cfg.upstream_openai)  # a bad URL is an error before anything listens
    Upstream.parse(cfg.upstream_anthropic)
    sock = bind(args.port)
    port = sock.getsockname()[1]
    live = Path(args.traces) / settings.LIVE_SUBDIR
    _print(
        "proxy",
        f"listening on http://{settings.DEFAULT_HOST}:{port} (OpenAI → {cfg.upstream_openai}, "
        f"Anthropic → {cfg.upstream_anthropic}); traces go to {live}/",
    )
    _print(
        "proxy",
        f"point an agent at it: {settings.ENV_OPENAI_BASE_URL}=http://{settings.DEFAULT_HOST}:"
        f"{port}/v1 {settings.ENV_ANTHROPIC_BASE_URL}=http://{settings.DEFAULT_HOST}:{port}",
    )
    _stop_cleanly_on_sigterm()
    with _feeding("proxy", args.db, args.traces):
        run_proxy(cfg, sock)
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    from ctxcore.capture.collector import CollectorConfig, run_collector
    from ctxcore.capture.proxy import bind

    sock = bind(args.port)
    port = sock.getsockname()[1]
    cfg = CollectorConfig(traces_dir=Path(args.traces))
    _print(
        "collect",
        f"OTLP/HTTP on http://{settings.DEFAULT_HOST}:{port} (/v1/traces, /v1/logs; protobuf "
        f"or JSON); traces go to {Path(args.traces) / settings.LIVE_SUBDIR}/",
    )
    _print(
        "collect",
        f"point an exporter at it: OTEL_EXPORTER_OTLP_ENDPOINT=http://{settings.DEFAULT_HOST}:"
        f"{port} OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
    )
    _stop_cleanly_on_sigterm()
    with _feeding("collect", args.db, args.traces):
        run_collector(cfg, sock)
    return 0


# --------------------------------------------------------------------------- run


def probe(port: int, timeout: float = 1.0) -> dict[str, Any] | None:
    """What a ctxscope proxy on ``port`` says about itself; None if nothing answers."""
    from ctxcore.capture.proxy import SERVICE_NAME, SERVICE_PATH

    return service_info(port, SERVICE_PATH.decode(), SERVICE_NAME, timeout)


def _port_taken(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex((settings.DEFAULT_HOST, port)) == 0


def _source_tag(cmd: list[str]) -> str:
    name = Path(cmd[0]).name
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:64] or "run"


def _start_proxy(args: argparse.Namespace) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "ctxcore",
        "proxy",
        "--port",
        str(args.port),
        "--traces",
        str(args.traces),
        "--upstream-openai",
        _upstream(
            args.upstream_openai, settings.ENV_OPENAI_BASE_URL, settings.DEFAULT_UPSTREAM_OPENAI
        ),
        "--upstream-anthropic",
        _upstream(
            args.upstream_anthropic,
            settings.ENV_ANTHROPIC_BASE_URL,
            settings.DEFAULT_UPSTREAM_ANTHROPIC,
        ),
    ]
    if args.db:
        cmd += ["--db", args.db]
    from ctxcore.capture.proxy import SERVICE_NAME, SERVICE_PATH

    path = SERVICE_PATH.decode()
    return start_service(cmd, args.port, path, SERVICE_NAME, "the proxy", "", START_S)


def _stop_proxy(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=DRAIN_S)
    except subprocess.TimeoutExpired:
        _print(
            "run",
            "the proxy is still writing traces; stopping it (the rest stay in the spool "
            "and the next proxy writes them)",
        )
        proc.kill()
        proc.wait()


def cmd_run(args: argparse.Namespace) -> int:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise InputError("nothing to run: ctxscope run [--port N] -- CMD ARGS...")
    port = args.port
    info = probe(port)
    started: subprocess.Popen[bytes] | None = None
    if info is None:
        if _port_taken(port):
            raise InputError(
                f"port {port} is taken by something that is not a ctxscope proxy; "
                "pass another --port"
            )
        started = _start_proxy(args)
        info = probe(port) or {}
    traces = Path(str(info.get("traces") or args.traces))
    before = int(info.get("recorded", 0))
    source = _source_tag(cmd)
    base = f"http://{settings.DEFAULT_HOST}:{port}/{source}"
    env = dict(os.environ)
    env[settings.ENV_OPENAI_BASE_URL] = f"{base}/v1"
    env[settings.ENV_ANTHROPIC_BASE_URL] = base
    _print(
        "run",
        f"{cmd[0]} calls the model APIs through "
        f"{'a new' if started else 'the running'} proxy on port {port} "
        f"(tagged source:{source}); traces go to {traces / settings.LIVE_SUBDIR}/",
    )
    try:
        rc = run_child(cmd, env)
    except FileNotFoundError as exc:
        raise InputError(f"cannot run {cmd[0]!r}: {exc.strerror or exc}") from exc
    finally:
        after = probe(port)
        recorded = int(after.get("recorded", before)) - before if after else None
        if started is not None:
            _stop_proxy(started)
    said = f"{recorded} call(s) recorded" if recorded is not None else "calls recorded"
    _print("run", f"{said} in {traces / settings.LIVE_SUBDIR}/; {_where_to_see(traces)}")
    return rc if rc >= 0 else 128 - rc


def _where_to_see(traces: Path) -> str:
    """The running app that shows what went into ``traces``, from the note ``ctxscope app``
    leaves beside its store (``ctxcore.cli.app``), at its own address; else the command that
    starts one."""
    note = app_note(settings.db_path()) or {}
    watched, url = note.get("traces"), note.get("url")
    if isinstance(watched, str) and isinstance(url, str):
        live = (traces / settings.LIVE_SUBDIR).resolve()
        if live.is_relative_to(Path(watched).resolve()):  # the watcher reads subfolders
            return f"the running app shows them at {url}"
    return (
        f"see them with `ctxscope app --traces {traces}` at "
        f"http://{settings.DEFAULT_HOST}:{settings.DEFAULT_PORT}"
    )
