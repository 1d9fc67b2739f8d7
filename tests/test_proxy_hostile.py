"""``ctxscope proxy`` against hostile input and a converter that dies, as real processes.

A decompression bomb in a reply, a request target that is no path, a request body past the
proxy's limit, the converter killed with SIGKILL, and a spooled call whose conversion kills
every converter that tries it (docs/design.md, "Live capture"). Memory is checked as the
process's own peak (``VmHWM``) against a generous multiple of the limit in question.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proxy_support import (
    FIXTURES,
    ROOT,
    Proc,
    read_traces,
    send,
    start_proxy,
    start_upstream,
    wait_traces,
)

from ctxcore.capture.calls import MAX_DECODED_BYTES, CallRecord
from ctxcore.capture.proxy import CONVERTER_RESTARTS, MAX_REQUEST_BYTES
from ctxcore.capture.spool import FAILED_FILE, SpoolWriter, spool_dir

CHAT = "/v1/chat/completions"
STEM = "openai-chat/otel-contrib-tool-calls-turn1"
AUTH = [("Authorization", "Bearer sk-proj-HOSTILEabcdefghijklmnopqrstuvwxyz0123")]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("proxy-hostile")


@pytest.fixture(scope="module")
def upstream(workdir: Path) -> Iterator[Proc]:
    p = start_upstream(workdir / "upstream")
    yield p
    p.stop()


@pytest.fixture(scope="module")
def proxy(workdir: Path, upstream: Proc) -> Iterator[Proc]:
    p = start_proxy(workdir / "traces", upstream.port)
    yield p
    p.stop()


def live(traces: Path) -> Path:
    return traces / "live" / "proxy.jsonl"


def forwarded(workdir: Path) -> int:
    return len(list((workdir / "upstream").glob("*.http")))


def status(port: int) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/__ctxscope__/proxy"
    with urllib.request.urlopen(url, timeout=10) as resp:
        got: dict[str, Any] = json.loads(resp.read())
        return got


def peak_rss(pid: int) -> int:
    """The most memory the process has held so far (VmHWM, bytes)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


def chat(port: int, scenario: str) -> bytes:
    body = (FIXTURES / f"{STEM}.request.json").read_bytes()
    headers = [*AUTH, ("Content-Type", "application/json"), ("x-test-scenario", scenario)]
    reply = send(port, "POST", CHAT, headers, body)
    assert reply.status == 200 and reply.complete
    return reply.body


def one_line_error(body: bytes) -> str:
    assert body.count(b"\n") == 1 and body.endswith(b"\n")
    message: str = json.loads(body)["error"]["message"]
    return message


# --------------------------------------------------------------------------- bombs


def test_a_gzip_bomb_reply_becomes_one_error_trace_with_memory_bounded(
    workdir: Path, proxy: Proc
) -> None:
    """A 0.3 MB gzip reply that unpacks to 300 MB: the client gets the bytes as they came,
    the converter stops unpacking at its 32 MB limit (it used to unpack all of it) and
    writes the call's trace with the reason as its outcome."""
    traces = workdir / "traces"
    chat(proxy.port, f"json:{STEM}.response.json")
    wait_traces(live(traces), 1)
    converter = status(proxy.port)["converter"]["pid"]
    before = peak_rss(converter)
    got = chat(proxy.port, "bomb:300")
    assert len(got) < 1 << 20 and got[:2] == b"\x1f\x8b"  # still compressed, unchanged
    [_, bomb] = wait_traces(live(traces), 2)
    assert status(proxy.port)["converter"]["pid"] == converter  # it did not die of it
    grew = peak_rss(converter) - before
    assert grew < 3 * MAX_DECODED_BYTES, f"the converter grew by {grew >> 20} MB"
    capture = bomb["metadata"]["capture"]
    assert f"unpacks past {MAX_DECODED_BYTES:,} bytes" in capture["error"]
    assert "failed" in bomb["tags"] and bomb["outcome"]["output"] is None
    assert "Traceback" not in proxy.text


# --------------------------------------------------------------------------- requests


def test_a_request_target_that_is_no_path_is_refused_in_one_line(
    workdir: Path, proxy: Proc
) -> None:
    before = forwarded(workdir)
    reply = send(proxy.port, "OPTIONS", "*", [])
    assert reply.status == 400
    assert "request target '*'" in one_line_error(reply.body)
    assert forwarded(workdir) == before
    assert "Traceback" not in proxy.text and "127.0.0.1*" not in proxy.text


def _read_reply(sock: socket.socket) -> tuple[int, bytes]:
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        assert data, "closed before the reply"
        buf += data
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = next(int(v) for k, _, v in (x.partition(":") for x in lines) if k == "content-length")
    while len(rest) < length:
        rest += sock.recv(65536)
    return int(lines[0].split()[1]), rest[:length]


def test_a_request_body_over_the_limit_is_refused_with_memory_bounded(
    workdir: Path, proxy: Proc
) -> None:
    """A declared body over 64 MB is refused before a byte of it is read (it used to be
    read whole, then held several times over); a chunked one once 64 MB have come."""
    before = forwarded(workdir)
    head = (
        f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {200 << 20}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        sock.sendall(head)
        code, body = _read_reply(sock)
    assert code == 413
    assert f"over {MAX_REQUEST_BYTES:,} bytes" in one_line_error(body)

    peak = peak_rss(proxy.proc.pid)
    chunk = b"%x\r\n%s\r\n" % (1 << 20, b" " * (1 << 20))

    def feed(sock: socket.socket) -> None:
        try:
            for _ in range(100):
                sock.sendall(chunk)
        except OSError:
            pass  # the proxy stopped reading: that is the point

    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        sock.sendall(
            f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        )
        sender = threading.Thread(target=feed, args=(sock,))
        sender.start()
        code, body = _read_reply(sock)
        # the proxy, done with the request, may have closed the connection already (ENOTCONN)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sender.join()
    assert code == 413
    assert f"over {MAX_REQUEST_BYTES:,} bytes" in one_line_error(body)
    grew = peak_rss(proxy.proc.pid) - peak
    assert grew < 3 * MAX_REQUEST_BYTES, f"the proxy grew by {grew >> 20} MB"
    assert forwarded(workdir) == before
    assert proxy.text.count(f"refused POST {CHAT}") == 2
    assert "Traceback" not in proxy.text


# --------------------------------------------------------------------------- the converter


def test_a_killed_converter_is_restarted_and_no_call_is_lost(
    tmp_path: Path, upstream: Proc
) -> None:
    traces = tmp_path / "traces"
    proxy = start_proxy(traces, upstream.port)
    try:
        first = status(proxy.port)["converter"]
        assert first["alive"] and first["restarts"] == 0
        os.kill(first["pid"], signal.SIGKILL)
        # calls made while no converter runs wait in the spool
        for _ in range(3):
            chat(proxy.port, f"json:{STEM}.response.json")
        got = wait_traces(live(traces), 3)
        assert len({t["trace_id"] for t in got}) == 3
        now = status(proxy.port)
        assert now["recorded"] == 3
        assert now["converter"]["restarts"] == 1 and now["converter"]["alive"]
        assert now["converter"]["pid"] != first["pid"]
        said = [ln for ln in proxy.lines if "the converter" in ln]
        assert len(said) == 1
        assert f"(pid {first['pid']}) stopped (signal 9)" in said[0]
    finally:
        proxy.stop()
    assert read_traces(live(traces)) == got  # nothing written twice on the way out


DYING = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path

    import ctxcore.capture.spool as spool

    real = spool.trace_from_call

    def dying(record, *args):
        # what an out-of-memory kill does to the converter, for one call
        if record.id == "poison":
            os.kill(os.getpid(), 9)
        return real(record, *args)

    spool.trace_from_call = dying
    spool.run_converter(Path(sys.argv[1]), lambda: True, drain_s=60)
    """
)


def test_a_call_that_kills_every_converter_is_set_aside(tmp_path: Path) -> None:
    """A spooled call whose conversion kills the converter used to kill every converter
    started on the folder after it, its unredacted body kept on disk. Now the stretch a
    converter died in is taken one call at a time, and the call that was in hand alone when
    one died goes to failed.jsonl (its record only); the others become traces."""
    traces = tmp_path / "traces"
    request = (FIXTURES / f"{STEM}.request.json").read_bytes()
    response = (FIXTURES / f"{STEM}.response.json").read_bytes()
    writer = SpoolWriter(spool_dir(traces))
    for call in ("good-1", "poison", "good-2"):
        record = CallRecord(
            id=call,
            api="openai.chat",
            path=CHAT,
            source="",
            started_at=time.time(),
            latency_ms=3.0,
            status=200,
            content_type="application/json",
        )
        writer.put(record, request, response)
    writer.close()
    codes = []
    for _ in range(3):
        run = subprocess.run(
            [sys.executable, "-c", DYING, str(traces)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        codes.append(run.returncode)
    assert codes == [-9, -9, 0], run.stderr
    assert [t["trace_id"] for t in read_traces(live(traces))] == ["good-1", "good-2"]
    failed = (spool_dir(traces) / FAILED_FILE).read_text().splitlines()
    assert [json.loads(ln)["id"] for ln in failed] == ["poison"]
    assert json.loads(failed[0])["why"] == "converting it stopped the converter"
    assert "no trace for call poison" in run.stderr and "Traceback" not in run.stderr
    # the bodies are gone with the spool file; only the failed list stays
    assert sorted(p.name for p in spool_dir(traces).iterdir()) == [FAILED_FILE]
    assert b"weather in Seattle" not in (spool_dir(traces) / FAILED_FILE).read_bytes()


def test_a_converter_that_keeps_dying_is_given_up_on_loudly(tmp_path: Path, upstream: Proc) -> None:
    """Past CONVERTER_RESTARTS deaths in a minute the proxy stops starting converters and
    says so, on stderr and in its status; calls still pass and stay spooled."""
    traces = tmp_path / "traces"
    proxy = start_proxy(traces, upstream.port)
    try:
        pid = status(proxy.port)["converter"]["pid"]
        for _ in range(CONVERTER_RESTARTS + 1):
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 60
            while (now := status(proxy.port)["converter"])["pid"] == pid and not now["error"]:
                assert time.monotonic() < deadline, "the proxy did not notice"
                time.sleep(0.05)
            pid = now["pid"]
        assert now["restarts"] == CONVERTER_RESTARTS and not now["alive"]
        assert f"stopped {CONVERTER_RESTARTS + 1} times in a minute" in now["error"]
        assert now["error"] in proxy.text
        chat(proxy.port, f"json:{STEM}.response.json")
        assert status(proxy.port)["recorded"] == 1
    finally:
        proxy.stop()
    # the next proxy's converter writes what was spooled
    proxy = start_proxy(traces, upstream.port)
    try:
        [t] = wait_traces(live(traces), 1)
        assert t["metadata"]["capture"]["status"] == 200
    finally:
        proxy.stop()
