"""Live capture's size limits: the peak memory of each process against hostile sizes.

    .venv/bin/python bench/bench_limits.py [--bomb-mb 1024] [--body-mb 60]

Everything on loopback, as separate processes: the fake upstream of the tests
(``tests/fake_upstream.py``), ``ctxscope proxy`` and ``ctxscope collect``
(docs/design.md, "Live capture"). Each row is one request: what went over the wire, what
it declares or unpacks to, the answer, and the peak resident size (``VmHWM``) of the process
that handles it, before and after:

- a gzip reply from the upstream that unpacks to ``--bomb-mb`` (the converter's peak);
- a request body of ``--body-mb`` (under the proxy's 64 MB limit), forwarded and converted;
- a 200 MB request body, declared and then chunked: refused by the proxy;
- a gzip OTLP body that unpacks to ``--bomb-mb`` (the receiver's peak).

Prints a table.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "imports"
STEM = "openai-chat/otel-contrib-tool-calls-turn1"
MB = 1 << 20


def start(cmd: list[str], pattern: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    rx = re.compile(pattern)
    for line in proc.stdout:
        m = rx.search(line)
        if m:
            # keep reading its output, or the pipe fills and it blocks
            threading.Thread(target=lambda: [None for _ in proc.stdout or []], daemon=True).start()
            return proc, int(m.group(1))
    raise RuntimeError(f"{cmd} did not start")


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def status(port: int, path: str) -> dict[str, object]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as resp:
        got: dict[str, object] = json.loads(resp.read())
        return got


def request(port: int, head: str, body: bytes = b"", chunked_mb: int = 0) -> int:
    """The status of one request; ``chunked_mb`` megabytes are sent chunked after the head
    (on a thread, as the server may answer before it has read them)."""
    with socket.create_connection(("127.0.0.1", port), timeout=300) as sock:
        sock.sendall(head.encode() + body)

        def feed() -> None:
            chunk = b"%x\r\n%s\r\n" % (MB, b" " * MB)
            try:
                for _ in range(chunked_mb):
                    sock.sendall(chunk)
                if chunked_mb:
                    sock.sendall(b"0\r\n\r\n")
            except OSError:
                pass

        sender = threading.Thread(target=feed)
        sender.start()
        buf = b""
        while b"\r\n" not in buf:
            data = sock.recv(65536)
            if not data:
                break
            buf += data
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # the server closed it first
        sender.join()
    return int(buf.split(b" ", 2)[1]) if buf else 0


def gzip_of_zeros(megabytes: int) -> bytes:
    z = zlib.compressobj(6, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    block = bytes(MB)
    return b"".join(z.compress(block) for _ in range(megabytes)) + z.flush()


def wait_lines(path: Path, n: int) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= n:
            return
        time.sleep(0.2)
    raise RuntimeError(f"{path}: fewer than {n} traces")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bomb-mb", type=int, default=1024)
    ap.add_argument("--body-mb", type=int, default=60)
    args = ap.parse_args()
    py = sys.executable
    rows: list[tuple[str, str, str, int, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        traces = Path(tmp) / "traces"
        up, up_port = start([py, str(ROOT / "tests" / "fake_upstream.py")], r"^PORT (\d+)")
        base = f"http://127.0.0.1:{up_port}"
        proxy, port = start(
            [py, "-m", "ctxcore", "proxy", "--port", "0", "--traces", str(traces)]
            + ["--upstream-openai", base, "--upstream-anthropic", base],
            r"listening on http://127\.0\.0\.1:(\d+)",
        )
        collector, otlp_port = start(
            [py, "-m", "ctxcore", "collect", "--port", "0", "--traces", str(traces)],
            r"OTLP/HTTP on http://127\.0\.0\.1:(\d+)",
        )
        try:
            live = traces / "live" / "proxy.jsonl"
            chat = json.loads((FIXTURES / f"{STEM}.request.json").read_text())

            def call(body: bytes, scenario: str) -> int:
                head = (
                    f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                    f"Content-Type: application/json\r\nx-test-scenario: {scenario}\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n"
                )
                return request(port, head, body)

            # one small call first: the converter's imports and tokenizer are loaded
            call(json.dumps(chat).encode(), f"json:{STEM}.response.json")
            wait_lines(live, 1)
            converter = int(status(port, "/__ctxscope__/proxy")["converter"]["pid"])  # type: ignore[index]

            before = peak_mb(converter)
            code = call(json.dumps(chat).encode(), f"bomb:{args.bomb_mb}")
            wait_lines(live, 2)
            rows.append(
                (
                    "converter",
                    "gzip reply",
                    f"{args.bomb_mb} MB",
                    code,
                    before,
                    peak_mb(converter),
                )
            )

            big = dict(chat, user="x" * (args.body_mb * MB))
            body = json.dumps(big).encode()
            before_p, before_c = peak_mb(proxy.pid), peak_mb(converter)
            code = call(body, f"json:{STEM}.response.json")
            wait_lines(live, 3)
            rows.append(
                (
                    "proxy",
                    "request body",
                    f"{len(body) / MB:.0f} MB",
                    code,
                    before_p,
                    peak_mb(proxy.pid),
                )
            )
            rows.append(
                (
                    "converter",
                    "its trace",
                    f"{len(body) / MB:.0f} MB",
                    0,
                    before_c,
                    peak_mb(converter),
                )
            )
            before = peak_mb(proxy.pid)
            head = (
                "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                f"Content-Length: {200 * MB}\r\n\r\n"
            )
            code = request(port, head)
            rows.append(("proxy", "declared body", "200 MB", code, before, peak_mb(proxy.pid)))
            head = (
                "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                "Transfer-Encoding: chunked\r\n\r\n"
            )
            code = request(port, head, chunked_mb=200)
            rows.append(("proxy", "chunked body", "200 MB", code, before, peak_mb(proxy.pid)))

            bomb = gzip_of_zeros(args.bomb_mb)
            before = peak_mb(collector.pid)
            head = (
                "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Encoding: gzip\r\nContent-Length: {len(bomb)}\r\n\r\n"
            )
            code = request(otlp_port, head, bomb)
            rows.append(
                (
                    "collect",
                    f"gzip body {len(bomb) / MB:.1f} MB",
                    f"{args.bomb_mb} MB",
                    code,
                    before,
                    peak_mb(collector.pid),
                )
            )
        finally:
            stop(collector)
            stop(proxy)
            stop(up)
    print(f"{'process':<10} {'what':<22} {'size':>8} {'status':>6}  peak RSS before → after (MB)")
    for who, what, size, code, before_mb, after_mb in rows:
        shown = str(code) if code else "-"
        print(f"{who:<10} {what:<22} {size:>8} {shown:>6}  {before_mb:8.0f} → {after_mb:8.0f}")


if __name__ == "__main__":
    main()
