"""Live-capture benchmark: what ``ctxscope proxy`` adds to a model call, and the OTLP receiver.

    .venv/bin/python bench/bench_proxy.py [--calls 2000] [--burst 10000] [--spans 10240]

Everything on loopback, as separate processes: the fake upstream of the tests
(``tests/fake_upstream.py``, replaying a recorded response), ``ctxscope proxy`` and
``ctxscope collect``. Measured:

- added latency of a non-streamed call: the same recorded call sent directly to the upstream
  and through the proxy, one at a time on a keep-alive connection, in alternating blocks;
  the difference of the medians and of the 99th percentiles;
- added time to the first streamed chunk (a recorded SSE stream, events 20 ms apart);
- throughput with 50 concurrent clients (keep-alive connections), ``--burst`` calls in all;
- memory: the proxy's and its converter's resident size after the first 10 % of the burst
  and at its end; and how long the converter took to turn the burst into traces;
- a running session (issue 34): a chat session whose calls grow by one message each, to
  ~30 KB at call ``--session-calls`` (300). In this process, the converter's CPU time per
  call on its last 100 calls (spooled, then ``Converter.step``: read, import, redact,
  write), and the traces/s that makes on 2 cores; through the proxy, ``--session-burst``
  (500) calls of such a session sent by 50 clients in order: how long after the burst the
  last trace is written, and the converter process's CPU time per call;
- the OTLP receiver: ``--spans`` GenAI spans (the recorded span-only export, ids varied) in
  batches of 512 posted as protobuf by 2 senders, until every trace is in the folder.

Prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import copy
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "imports"
STEM = "openai-chat/otel-contrib-tool-calls-turn1"
#: a recorded stream of tests/fixtures/streams (the fake upstream's sse: scenario)
STREAMS = ROOT / "tests" / "fixtures" / "streams"
STREAM = "openai-chat-otel-contrib-streaming"


def start(cmd: list[str], pattern: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    rx = re.compile(pattern)
    for line in proc.stdout:
        m = rx.search(line)
        if m:
            return proc, int(m.group(1))
    raise RuntimeError(f"{cmd} did not start")


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def converter_of(pid: int) -> list[int]:
    """The proxy's converter process (its spawned child; not multiprocessing's tracker)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                out.append(int(child))
    return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))]


# --------------------------------------------------------------------------- latency


def latencies(port: int, path: str, n: int, body: bytes) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port)
    headers = {
        "content-type": "application/json",
        "authorization": "Bearer sk-bench",
        "x-test-scenario": f"json:{STEM}.response.json",
    }
    out = []
    for _ in range(n):
        t = time.perf_counter()
        conn.request("POST", path, body, headers)
        resp = conn.getresponse()
        resp.read()
        out.append(time.perf_counter() - t)
    conn.close()
    return out


def first_chunk(port: int, path: str, n: int, body: bytes) -> list[float]:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
        f"x-test-scenario: sse:{STREAM}.response.sse\r\nx-test-delay-ms: 20\r\n\r\n"
    ).encode()
    out = []
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(n):
            t = time.perf_counter()
            sock.sendall(head + body)
            buf = b""
            while b"data: " not in buf:
                buf += sock.recv(65536)
            out.append(time.perf_counter() - t)
            while not buf.endswith(b"0\r\n\r\n"):
                buf += sock.recv(65536)
    return out


# --------------------------------------------------------------------------- throughput


async def burst(port: int, path: str, total: int, clients: int, body: bytes, mark: Any) -> float:
    req = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer sk-bench\r\nx-test-scenario: json:{STEM}.response.json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    done = 0

    async def client() -> None:
        nonlocal done
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while done < total:
            done += 1
            writer.write(req)
            head = await reader.readuntil(b"\r\n\r\n")
            n = int(re.search(rb"content-length: (\d+)", head, re.I).group(1))  # type: ignore[union-attr]
            await reader.readexactly(n)
            mark(done)
        writer.close()

    t = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return time.perf_counter() - t


# --------------------------------------------------------------------------- a running session


def session_bodies(n: int, last_bytes: int = 30_000) -> list[bytes]:
    """The requests of a chat session of ``n`` calls: the recorded request, then one new
    message a call (user and assistant in turn, varied words) sized so that the last
    request is about ``last_bytes``."""
    import random

    base = json.loads((FIXTURES / f"{STEM}.request.json").read_bytes())
    rnd = random.Random(34)
    syllables = ["ka", "to", "ren", "mi", "su", "lo", "pe", "dar", "ix", "on", "test", "def"]
    words = ["".join(rnd.choices(syllables, k=rnd.randint(1, 4))) for _ in range(2000)]
    per = max(40, (last_bytes - len(json.dumps(base))) // max(n, 1) - 40)
    messages = list(base["messages"])
    out = []
    for i in range(n):
        text = f"{i}:"
        while len(text) < per:
            text += " " + rnd.choice(words)
        role = "user" if i % 2 == 0 else "assistant"
        messages = messages + [{"role": role, "content": text}]
        out.append(json.dumps({**base, "messages": messages}).encode())
    return out


def _record(i: int) -> Any:
    from ctxcore.capture.calls import CallRecord

    return CallRecord(
        id=f"bench-{i:05d}",
        api="openai.chat",
        path="/v1/chat/completions",
        source="bench",
        started_at=1_760_000_000.0 + i,
        latency_ms=5.0,
        status=200,
        content_type="application/json",
    )


def converter_in_process(work: Path, bodies: list[bytes], last: int = 100) -> tuple[float, float]:
    """CPU and wall ms per call of ``Converter.step`` on the session's last ``last`` calls
    (the earlier ones converted first, as a running session's converter has)."""
    sys.path.insert(0, str(ROOT))
    from ctxcore.capture.spool import Converter, SpoolWriter, spool_dir

    reply = (FIXTURES / f"{STEM}.response.json").read_bytes()
    traces = work / "in-process"
    conv = Converter(traces)
    head, tail = bodies[:-last], bodies[-last:]
    for part, first in ((head, 0), (tail, len(head))):
        writer = SpoolWriter(spool_dir(traces))
        for k, body in enumerate(part):
            writer.put(_record(first + k), body, reply)
        writer.close()
        t, w = time.process_time(), time.perf_counter()
        assert conv.step() == len(part)
        cpu, wall = time.process_time() - t, time.perf_counter() - w
    return cpu / last * 1000, wall / last * 1000


async def burst_session(port: int, path: str, bodies: list[bytes], clients: int) -> float:
    """Every body sent once, in order, by ``clients`` connections taking the next one."""
    at = 0

    async def client() -> None:
        nonlocal at
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while at < len(bodies):
            body = bodies[at]
            at += 1
            writer.write(
                (
                    f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    f"Authorization: Bearer sk-bench\r\n"
                    f"x-test-scenario: json:{STEM}.response.json\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n"
                ).encode()
                + body
            )
            head = await reader.readuntil(b"\r\n\r\n")
            n = int(re.search(rb"content-length: (\d+)", head, re.I).group(1))  # type: ignore[union-attr]
            await reader.readexactly(n)
        writer.close()

    t = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return time.perf_counter() - t


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def session_rows(
    px_port: int, converter: list[int], work: Path, args: argparse.Namespace
) -> list[tuple[str, str, str]]:
    """The running-session measures (see the module docstring)."""
    rows = []
    bodies = session_bodies(args.session_calls)
    # best of 3 (load varies): each run a fresh converter going through the whole session
    runs = [converter_in_process(work / f"run{k}", bodies) for k in range(3)]
    ms, wall = min(runs)
    rows.append(
        (
            f"converter CPU per call, running session (calls {args.session_calls - 99}-"
            f"{args.session_calls}, ~30 KB), in process, best of 3",
            f"{ms:.2f} ms CPU ({wall:.2f} wall, load {os.getloadavg()[0]:.1f}) = "
            f"{2000 / ms:,.0f} traces/s on 2 cores",
            "<= 5 ms, >= 150 traces/s",
        )
    )
    bodies = session_bodies(args.session_burst, 30_000 * args.session_burst // 300)
    out = work / "traces" / "live" / "session.jsonl"
    before = count_lines(out)
    cpu0 = cpu_s(converter[0]) if converter else 0.0
    took = asyncio.run(burst_session(px_port, "/session/v1/chat/completions", bodies, 50))
    t0 = time.perf_counter()
    while count_lines(out) - before < len(bodies) and time.perf_counter() - t0 < 600:
        time.sleep(0.05)
    lag = time.perf_counter() - t0
    cpu = (cpu_s(converter[0]) - cpu0) if converter else float("nan")
    rows.append(
        (
            f"session burst, {len(bodies)} calls (to {len(bodies[-1]) / 1000:.0f} KB), "
            "50 clients: burst / last trace after it",
            f"{took:.1f} s / +{lag:.1f} s",
            "<= 5 s after",
        )
    )
    rows.append(
        (
            "  converter process CPU per call in it",
            f"{cpu / len(bodies) * 1000:.2f} ms (load {os.getloadavg()[0]:.1f})",
            "",
        )
    )
    return rows


# --------------------------------------------------------------------------- OTLP


def otlp_batches(spans: int, size: int = 512) -> list[bytes]:
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    line = (FIXTURES / "otlp-json/openai-v2-latest-span-only.otlp.jsonl").read_text()
    export = json.loads(line.splitlines()[0])
    rs = export["resourceSpans"][0]
    genai = [
        s
        for ss in rs["scopeSpans"]
        for s in ss["spans"]
        if any(a["key"] == "gen_ai.input.messages" for a in s["attributes"])
    ][0]
    out = []
    for b in range((spans + size - 1) // size):
        batch = []
        for i in range(min(size, spans - b * size)):
            s = copy.deepcopy(genai)
            s["traceId"] = base64.b64encode(os.urandom(16)).decode()
            s["spanId"] = base64.b64encode(os.urandom(8)).decode()
            s.pop("parentSpanId", None)
            s["attributes"].append(
                {"key": "session.id", "value": {"stringValue": f"bench-{b}-{i % 8}"}}
            )
            batch.append(s)
        body = {"resourceSpans": [{"resource": rs["resource"], "scopeSpans": [{"spans": batch}]}]}
        out.append(ParseDict(body, ExportTraceServiceRequest()).SerializeToString())
    return out


def post_all(port: int, bodies: list[bytes], senders: int = 2) -> None:
    def post(body: bytes) -> None:
        while True:
            req = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/traces",
                data=body,
                headers={"Content-Type": "application/x-protobuf"},
                method="POST",
            )
            try:
                with urllib.request.urlopen(req, timeout=120) as resp:
                    resp.read()
                    return
            except urllib.error.HTTPError as err:
                if err.code != 503:
                    raise
                time.sleep(1)

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(senders) as pool:
        list(pool.map(post, bodies))


def count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as fh:
            return sum(1 for _ in fh)
    except FileNotFoundError:
        return 0


# --------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--burst", type=int, default=10_000)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--spans", type=int, default=10_240)
    ap.add_argument("--session-calls", type=int, default=300)
    ap.add_argument("--session-burst", type=int, default=500)
    ap.add_argument("--session-only", action="store_true", help="only the running-session measures")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    py = sys.executable
    upstream, up_port = start([py, str(ROOT / "tests" / "fake_upstream.py")], r"^PORT (\d+)")
    up = f"http://127.0.0.1:{up_port}"
    proxy, px_port = start(
        [py, "-m", "ctxcore", "proxy", "--port", "0", "--traces", str(work / "traces")]
        + ["--upstream-openai", up, "--upstream-anthropic", up],
        r"listening on http://127\.0\.0\.1:(\d+)",
    )
    rows: list[tuple[str, str, str]] = []
    if args.session_only:
        try:
            t0 = time.perf_counter()  # the converter process starts with the proxy
            while not converter_of(proxy.pid) and time.perf_counter() - t0 < 10:
                time.sleep(0.05)
            rows += session_rows(px_port, converter_of(proxy.pid), work, args)
        finally:
            stop(proxy)
            stop(upstream)
        print_rows(rows)
        return
    try:
        body = (FIXTURES / f"{STEM}.request.json").read_bytes()
        path = "/v1/chat/completions"
        latencies(up_port, path, 200, body)  # warm both up
        latencies(px_port, path, 200, body)
        direct: list[float] = []
        proxied: list[float] = []
        block = max(1, args.calls // 10)
        for _ in range(10):
            direct += latencies(up_port, path, block, body)
            proxied += latencies(px_port, "/bench" + path, block, body)
        p50 = (pct(proxied, 0.5) - pct(direct, 0.5)) * 1000
        p99 = (pct(proxied, 0.99) - pct(direct, 0.99)) * 1000
        rows.append(
            (
                "non-streaming call, direct p50 / p99",
                f"{pct(direct, 0.5) * 1000:.2f} / {pct(direct, 0.99) * 1000:.2f} ms",
                "",
            )
        )
        rows.append(
            (
                "non-streaming call, via proxy p50 / p99",
                f"{pct(proxied, 0.5) * 1000:.2f} / {pct(proxied, 0.99) * 1000:.2f} ms",
                "",
            )
        )
        rows.append(("added latency p50", f"{p50:.2f} ms", "<= 1 ms"))
        rows.append(("added latency p99", f"{p99:.2f} ms", "<= 10 ms"))

        sbody = (STREAMS / f"{STREAM}.request.json").read_bytes()
        first_chunk(up_port, path, 20, sbody)
        fd = first_chunk(up_port, path, 200, sbody)
        fp = first_chunk(px_port, "/bench" + path, 200, sbody)
        rows.append(
            (
                "time to first streamed chunk, direct / via proxy (p50)",
                f"{pct(fd, 0.5) * 1000:.2f} / {pct(fp, 0.5) * 1000:.2f} ms",
                "",
            )
        )
        rows.append(
            (
                "added time to first chunk (p50)",
                f"{(pct(fp, 0.5) - pct(fd, 0.5)) * 1000:.2f} ms",
                "<= 2 ms",
            )
        )

        converter = converter_of(proxy.pid)
        rows += session_rows(px_port, converter, work, args)

        traces_file = work / "traces" / "live" / "burst.jsonl"
        before = count_lines(traces_file)
        pids = [proxy.pid, *converter]
        mem: dict[str, list[int]] = {"first": [], "last": []}

        def mark(done: int) -> None:
            if done == args.burst // 10 and not mem["first"]:
                mem["first"] = [rss_kb(p) for p in pids]

        took = asyncio.run(burst(px_port, "/burst" + path, args.burst, args.clients, body, mark))
        mem["last"] = [rss_kb(p) for p in pids]
        rows.append(
            (
                f"throughput, {args.clients} clients, {args.burst:,} calls",
                f"{args.burst / took:,.0f} calls/s",
                ">= 500 calls/s",
            )
        )
        rows.append(
            (
                "proxy memory after 10 % / 100 % of the burst",
                f"{mem['first'][0] / 1024:.1f} / {mem['last'][0] / 1024:.1f} MB",
                "flat",
            )
        )
        if converter:
            rows.append(
                (
                    "converter memory after 10 % / 100 % of the burst",
                    f"{mem['first'][1] / 1024:.1f} / {mem['last'][1] / 1024:.1f} MB",
                    "flat",
                )
            )
        t0 = time.perf_counter()
        written_at_end = count_lines(traces_file) - before
        while count_lines(traces_file) - before < args.burst:
            time.sleep(0.2)
            if time.perf_counter() - t0 > 900:
                break
        lag = time.perf_counter() - t0
        rows.append(
            (
                "traces written during the burst / all written after",
                f"{written_at_end:,} / +{lag:.1f} s",
                "",
            )
        )
        rows.append(
            (
                "converter rate (redacted traces)",
                f"{args.burst / (took + lag):,.0f} traces/s",
                "",
            )
        )
    finally:
        stop(proxy)
        stop(upstream)

    collector, co_port = start(
        [py, "-m", "ctxcore", "collect", "--port", "0", "--traces", str(work / "otlp")],
        r"OTLP/HTTP on http://127\.0\.0\.1:(\d+)",
    )
    try:
        bodies = otlp_batches(args.spans)
        out = work / "otlp" / "live" / "otlp.jsonl"
        post_all(co_port, otlp_batches(512))  # warm the workers up
        while count_lines(out) < 512:
            time.sleep(0.1)
        t = time.perf_counter()
        post_all(co_port, bodies)
        while count_lines(out) < 512 + args.spans:
            time.sleep(0.05)
        took = time.perf_counter() - t
        rows.append(
            (
                f"OTLP receiver, {args.spans:,} GenAI spans (protobuf, 512/batch)",
                f"{args.spans / took:,.0f} spans/s into the folder",
                ">= 2,000 spans/s",
            )
        )
    finally:
        stop(collector)

    print_rows(rows)
    print(f"(work dir {work})")


def print_rows(rows: list[tuple[str, str, str]]) -> None:
    """The table, and the machine it ran on."""
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    print(f"\n{'measure':<{w0}}  {'result':<{w1}}  target")
    print(f"{'-' * w0}  {'-' * w1}  ------")
    for a, b, c in rows:
        print(f"{a:<{w0}}  {b:<{w1}}  {c}")
    print(f"(loopback, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
