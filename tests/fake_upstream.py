"""A stand-in for the model APIs on loopback: records the exact bytes it receives and
replays recorded responses, for the proxy's tests and bench.

Run as ``python tests/fake_upstream.py [--record DIR]``; it prints ``PORT <n>`` once it
listens. It speaks just enough HTTP/1.1 (keep-alive, Content-Length and chunked bodies) to
be a faithful peer, on a raw asyncio socket so that what it records is what came over the
wire. What it answers is chosen by the request's ``x-test-scenario`` header (the proxy
forwards it like any other header):

- ``json:<path>`` — 200 with the file's bytes as ``application/json``; ``gzip:<path>`` —
  the same gzip-compressed (``Content-Encoding: gzip``, deterministic bytes);
- ``sse:<path>`` — the recorded stream's events as ``text/event-stream``, one chunk per
  event, ``x-test-delay-ms`` apart;
- ``echo`` — a Chat Completions stream whose reply is ``echo: <the last user message>``,
  in several chunks with usage last (to tell 200 concurrent calls apart);
- ``bomb:<MB>`` — 200 with a gzip-encoded Chat Completions reply that unpacks to that many
  megabytes (its JSON padded with spaces): a decompression bomb, small on the wire;
- ``status:<code>`` — that status with a provider-style JSON error and ``retry-after``;
- ``stall`` — read the request and never answer; ``stall-mid:<path>`` — send the headers
  and two events, then nothing;
- ``reset`` — drop the connection without answering (RST); ``reset-mid:<path>`` — send the
  headers and two events, then reset.

A reply's path (``json``, ``gzip``) is relative to ``tests/fixtures/imports``, a recorded
stream's (``sse``, ``stall-mid``, ``reset-mid``) to ``tests/fixtures/streams``. Every other
request gets ``200 {"ok":
true, "path": ...}``. With ``--record DIR`` each request is written to ``DIR/<n>.http``
whole, and a connection the peer closed mid-answer is noted in ``DIR/<n>.gone``.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import socket
import struct
import sys
import zlib
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "imports"
STREAMS = Path(__file__).resolve().parent / "fixtures" / "streams"


class Request:
    def __init__(self, head: bytes, body: bytes) -> None:
        lines = head.split(b"\r\n")
        self.method, self.path, _ = lines[0].decode("latin-1").split(" ", 2)
        self.headers: list[tuple[str, str]] = []
        for line in lines[1:]:
            if line:
                k, _, v = line.decode("latin-1").partition(":")
                self.headers.append((k.strip().lower(), v.strip()))
        self.body = body

    def header(self, name: str) -> str:
        return next((v for k, v in self.headers if k == name), "")


async def read_request(reader: asyncio.StreamReader) -> tuple[Request, bytes] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    req = Request(head[:-4], b"")
    raw = head
    if req.header("transfer-encoding").lower() == "chunked":
        body = b""
        while True:
            size_line = await reader.readuntil(b"\r\n")
            raw += size_line
            size = int(size_line.split(b";")[0], 16)
            data = await reader.readexactly(size + 2)
            raw += data
            if size == 0:
                break
            body += data[:-2]
    else:
        n = int(req.header("content-length") or 0)
        body = await reader.readexactly(n) if n else b""
        raw += body
    req.body = body
    return req, raw


def _events(text: bytes) -> list[bytes]:
    parts = text.split(b"\n\n")
    out = [p + b"\n\n" for p in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _head(status: int, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {status} X"] + [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _echo_stream(req: Request) -> bytes:
    body = json.loads(req.body)
    last = [m for m in body.get("messages", []) if m.get("role") == "user"][-1]["content"]
    reply = f"echo: {last}"
    pieces = [reply[i : i + 7] for i in range(0, len(reply), 7)]
    base = {"id": "chatcmpl-echo", "object": "chat.completion.chunk", "model": "echo-1"}
    events = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
    events += [{**base, "choices": [{"index": 0, "delta": {"content": p}}]} for p in pieces]
    events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    usage = {"prompt_tokens": len(last.split()) + 8, "completion_tokens": len(pieces)}
    events.append({**base, "choices": [], "usage": {**usage, "total_tokens": sum(usage.values())}})
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + (
        b"data: [DONE]\n\n"
    )


def _bomb(megabytes: int) -> bytes:
    """A valid JSON reply padded to ``megabytes`` MB with spaces, gzip-compressed a
    megabyte at a time (never held unpacked)."""
    reply = {
        "id": "chatcmpl-bomb",
        "object": "chat.completion",
        "model": "bomb-1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "boom"}}],
    }
    z = zlib.compressobj(6, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    pad = b" " * (1 << 20)
    parts = [z.compress(b"{")]
    parts += [z.compress(pad) for _ in range(megabytes)]
    parts += [z.compress(json.dumps(reply).encode()[1:]), z.flush()]
    return b"".join(parts)


class Upstream:
    def __init__(self, record: Path | None) -> None:
        self.record = record
        self.seq = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                got = await read_request(reader)
                if got is None:
                    return
                req, raw = got
                self.seq += 1
                n = self.seq
                if self.record is not None:
                    (self.record / f"{n:05d}.http").write_bytes(raw)
                try:
                    keep = await self.answer(req, reader, writer)
                except (ConnectionError, asyncio.CancelledError):
                    if self.record is not None:
                        (self.record / f"{n:05d}.gone").write_text("peer closed mid-answer")
                    return
                if not keep:
                    return
        finally:
            writer.close()

    async def answer(
        self, req: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        scenario = req.header("x-test-scenario")
        kind, _, arg = scenario.partition(":")
        delay = int(req.header("x-test-delay-ms") or 0) / 1000
        if kind in ("json", "gzip"):
            data = (FIXTURES / arg).read_bytes()
            headers = [("content-type", "application/json"), ("request-id", "req_fake_1")]
            if kind == "gzip":
                data = gzip.compress(data, mtime=0)
                headers.append(("content-encoding", "gzip"))
            writer.write(_head(200, [*headers, ("content-length", str(len(data)))]) + data)
            await writer.drain()
            return True
        if kind in ("sse", "echo", "stall-mid", "reset-mid"):
            data = _echo_stream(req) if kind == "echo" else (STREAMS / arg).read_bytes()
            events = _events(data)
            writer.write(
                _head(
                    200,
                    [
                        ("content-type", "text/event-stream; charset=utf-8"),
                        ("transfer-encoding", "chunked"),
                        ("x-request-id", "req_fake_stream"),
                    ],
                )
            )
            if kind in ("stall-mid", "reset-mid"):
                events = events[:2]
            for i, ev in enumerate(events):
                if i and delay:
                    await asyncio.sleep(delay)
                writer.write(_chunk(ev))
                await writer.drain()
            if kind == "stall-mid":
                await reader.read()  # until the peer gives up
                raise ConnectionError("peer gave up")
            if kind == "reset-mid":
                self._reset(writer)
                return False
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return True
        if kind == "bomb":
            data = _bomb(int(arg))
            headers = [
                ("content-type", "application/json"),
                ("content-encoding", "gzip"),
                ("content-length", str(len(data))),
            ]
            writer.write(_head(200, headers) + data)
            await writer.drain()
            return True
        if kind == "status":
            code = int(arg)
            data = json.dumps(
                {
                    "type": "error",
                    "error": {"type": "rate_limit_error", "message": f"fake {code}"},
                }
            ).encode()
            writer.write(
                _head(
                    code,
                    [
                        ("content-type", "application/json"),
                        ("retry-after", "7"),
                        ("content-length", str(len(data))),
                    ],
                )
                + data
            )
            await writer.drain()
            return True
        if kind == "stall":
            await reader.read()
            raise ConnectionError("peer gave up")
        if kind == "reset":
            self._reset(writer)
            return False
        data = json.dumps({"ok": True, "path": req.path, "method": req.method}).encode()
        writer.write(
            _head(200, [("content-type", "application/json"), ("content-length", str(len(data)))])
            + data
        )
        await writer.drain()
        return True

    @staticmethod
    def _reset(writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--record")
    args = p.parse_args()
    record = Path(args.record) if args.record else None
    if record is not None:
        record.mkdir(parents=True, exist_ok=True)
    up = Upstream(record)
    server = await asyncio.start_server(up.handle, "127.0.0.1", args.port, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    print(f"PORT {port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
