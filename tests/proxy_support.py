"""Processes and a raw HTTP client for the live-capture tests (proxy, run, collect).

Everything runs as real processes on 127.0.0.1: the fake upstream (``fake_upstream.py``),
``python -m ctxcore proxy`` and ``python -m ctxcore collect``. The raw client writes exactly
the bytes a test gives it and returns the body exactly as it came (chunked framing removed,
compression kept), so tests can compare bytes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "imports"
#: the recorded streams the fake upstream replays (not import samples)
STREAM_FIXTURES = ROOT / "tests" / "fixtures" / "streams"
FAKE_UPSTREAM = ROOT / "tests" / "fake_upstream.py"


@dataclass
class Proc:
    """A child process and the lines it wrote to stderr (read on a thread)."""

    proc: subprocess.Popen[str]
    port: int
    lines: list[str] = field(default_factory=list)

    def stop(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def _pump(stream: Any, lines: list[str], found: threading.Event, pattern: re.Pattern[str]) -> None:
    for line in stream:
        lines.append(line.rstrip("\n"))
        if pattern.search(line):
            found.set()


def start(cmd: list[str], pattern: str, *, env: dict[str, str] | None = None) -> Proc:
    """Start ``cmd`` and wait until a line of its output matches ``pattern``, whose first
    group is the port it listens on."""
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env or dict(os.environ),
        cwd=ROOT,
    )
    lines: list[str] = []
    found = threading.Event()
    rx = re.compile(pattern)
    threading.Thread(target=_pump, args=(proc.stdout, lines, found, rx), daemon=True).start()
    deadline = time.monotonic() + 60
    while not found.wait(0.1):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"{cmd[2:5]} did not start: " + "\n".join(lines))
    port = next(int(m.group(1)) for ln in lines if (m := rx.search(ln)))
    return Proc(proc, port, lines)


def start_upstream(record: Path) -> Proc:
    return start([sys.executable, str(FAKE_UPSTREAM), "--record", str(record)], r"^PORT (\d+)")


def start_proxy(traces: Path, upstream_port: int, *extra: str) -> Proc:
    up = f"http://127.0.0.1:{upstream_port}"
    cmd = [sys.executable, "-m", "ctxcore", "proxy", "--port", "0", "--traces", str(traces)]
    cmd += ["--upstream-openai", up, "--upstream-anthropic", up, *extra]
    return start(cmd, r"listening on http://127\.0\.0\.1:(\d+)")


def start_collector(traces: Path) -> Proc:
    cmd = [sys.executable, "-m", "ctxcore", "collect", "--port", "0", "--traces", str(traces)]
    return start(cmd, r"OTLP/HTTP on http://127\.0\.0\.1:(\d+)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# --------------------------------------------------------------------------- raw HTTP


@dataclass
class Reply:
    status: int
    headers: list[tuple[str, str]]
    body: bytes
    complete: bool = True

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name), None)


def raw_request(
    port: int,
    method: str,
    path: str,
    headers: list[tuple[str, str]],
    body: bytes = b"",
) -> bytes:
    """The request's exact bytes (Host and Content-Length first, then ``headers``)."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}"]
    if body or method == "POST":
        lines.append(f"Content-Length: {len(body)}")
    lines += [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _read_head(sock: socket.socket, buf: bytearray) -> tuple[int, list[tuple[str, str]]]:
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("closed before the headers")
        buf += data
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    buf[:] = rest
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = [(k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in lines[1:])]
    return status, headers


def send(
    port: int,
    method: str,
    path: str,
    headers: list[tuple[str, str]],
    body: bytes = b"",
    *,
    timeout: float = 30.0,
) -> Reply:
    """One request on a fresh connection; the reply's body as it came (chunks joined), and
    whether it was complete (a cut connection leaves ``complete`` False)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(raw_request(port, method, path, headers, body))
        buf = bytearray()
        status, hdrs = _read_head(sock, buf)
        lower = {k.lower(): v for k, v in hdrs}
        out = bytearray()
        complete = True
        try:
            if "content-length" in lower:
                n = int(lower["content-length"])
                while len(buf) < n:
                    data = sock.recv(65536)
                    if not data:
                        complete = False
                        break
                    buf += data
                out = buf[:n]
            elif lower.get("transfer-encoding", "").lower() == "chunked":
                complete = _dechunk(sock, buf, out)
            else:
                while data := sock.recv(65536):
                    buf += data
                out = buf
        except (ConnectionError, TimeoutError):
            complete = False
        return Reply(status, hdrs, bytes(out), complete)


def _dechunk(sock: socket.socket, buf: bytearray, out: bytearray) -> bool:
    def need(n: int) -> bool:
        while len(buf) < n:
            data = sock.recv(65536)
            if not data:
                return False
            buf.extend(data)
        return True

    while True:
        while b"\r\n" not in buf:
            if not need(len(buf) + 1):
                return False
        line, _, rest = bytes(buf).partition(b"\r\n")
        size = int(line.split(b";")[0], 16)
        buf[:] = rest
        if size == 0:
            return True
        if not need(size + 2):
            out.extend(buf[:size])
            return False
        out.extend(buf[:size])
        del buf[: size + 2]


# --------------------------------------------------------------------------- traces


def read_traces(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def wait_traces(path: Path, n: int, timeout: float = 60.0) -> list[dict[str, Any]]:
    """The traces in ``path`` once there are at least ``n`` (or fail after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        got = read_traces(path)
        if len(got) >= n:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{path}: {len(got)} traces after {timeout} s, expected {n}")
        time.sleep(0.1)


def wait_for(
    path: Path, want: Callable[[dict[str, Any]], bool], n: int = 1, timeout: float = 60.0
) -> list[dict[str, Any]]:
    """The traces in ``path`` that ``want`` accepts, once there are ``n`` of them."""
    deadline = time.monotonic() + timeout
    while True:
        got = [t for t in read_traces(path) if want(t)]
        if len(got) >= n:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{path}: {len(got)} matching traces after {timeout} s")
        time.sleep(0.1)
