"""``ctxscope proxy``: a reverse proxy for the model APIs that records every call as a trace.

An agent (Claude Code, Codex, aider, an SDK script) is pointed at the proxy by its base URL
and changes nothing else. The proxy forwards each request to the real API and each answer
back, and for every call to ``/v1/chat/completions``, ``/v1/responses`` (OpenAI) or
``/v1/messages`` (Anthropic) it spools the request and the reply, from which a converter
process writes one trace line into the watched folder (``capture.spool``, ``capture.calls``).

What the proxy promises the agent (docs/design.md, "Capture, import, export, redaction"):

- **Nothing changes on the way.** The request body goes upstream byte for byte with the
  client's headers (only ``Host`` names the upstream, and hop-by-hop headers such as
  ``Connection`` stay on their hop); the status, headers and body come back as the upstream
  sent them, still compressed if they were. Every other path (``/v1/models``,
  ``/v1/messages/count_tokens``, …) is passed through the same way and not recorded.
- **Nothing waits.** Reply bytes are handed to the client as they arrive, a server-sent
  event stream included; the copy for the trace is taken on the side and written by another
  thread, and the trace is built by another process.
- **Failures stay what they were.** A 4xx/5xx goes back as it came. A timeout or a failed
  connection before any reply becomes a 504 or 502 that says it is the proxy's; a reset or a
  stall mid-reply cuts the client's connection (as the upstream cut ours), so a truncated
  stream never looks complete. A client that hangs up has its upstream request cancelled.
  Each of these is the trace's outcome.
- **No credential is written.** Headers never reach the spool, a trace or a log; traces are
  redacted as exports are (``ctxcore.formats.redact``).
- **Limits are said, not suffered.** A request body past ``MAX_REQUEST_BYTES`` is 413 before
  it is read, a request target that is no path (``OPTIONS *``) 400, each one JSON line; a
  converter that dies is started again, and says so on stderr and in the status
  (``ConverterProcess``; docs/design.md, "Live capture").

Routing: a path ``/<source>/v1/...`` tags the calls with ``source:<source>`` (e.g.
``http://127.0.0.1:4040/claude``) and is forwarded as ``/v1/...``. Paths under
``/v1/messages`` and requests with an ``anthropic-version`` header go to the Anthropic
upstream, everything else to the OpenAI one.

The server side is uvicorn (the ASGI server Streamlit already brings) running this module's
plain ASGI callable; the upstream side is an aiohttp client session (keep-alive connections,
no decompression, no headers of its own): its C-accelerated HTTP parsing costs the proxy
less than half the CPU per call that httpx/httpcore did.
"""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import os
import re
import socket
import ssl
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_for_exit
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import certifi
import uvicorn
from yarl import URL

from ctxcore import settings
from ctxcore.capture.calls import CLIENT_GONE, CallRecord
from ctxcore.capture.spool import SpoolWriter, converter_main, spool_dir
from ctxcore.errors import InputError
from ctxcore.formats import registry

log = logging.getLogger("ctxscope.proxy")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: ``GET`` here answers who is listening (``ctxscope run`` looks before it starts a proxy).
SERVICE_PATH = b"/__ctxscope__/proxy"
SERVICE_NAME = "ctxscope-proxy"
#: Headers that belong to one hop of the connection, not to the message (RFC 9110, 7.6.1),
#: and ``host``, which names the upstream instead.
_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        # 100-continue is answered by this hop (uvicorn); the upstream gets the whole body
        b"expect",
    }
)
_SOURCE = re.compile(rb"^/([A-Za-z0-9][A-Za-z0-9._-]{0,63})(/v1(?:/.*)?)$")
#: The calls that become traces: path -> how (the formats the registry marks ``live``).
CAPTURED: dict[bytes, registry.Live] = {
    f.live.path: f.live for f in registry.live_formats() if f.live is not None
}
#: Headers aiohttp would add by itself; a proxy sends only the client's.
_AUTO_HEADERS = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")
#: The largest reply copied for a trace; past it the trace keeps the beginning.
MAX_CAPTURE_BYTES = 32 * 1024 * 1024
#: The largest request body the proxy takes (it holds a body whole to forward and spool it;
#: the APIs' own limits are lower: Anthropic 32 MB, OpenAI 50 MB of files in one request).
MAX_REQUEST_BYTES = 64 * 1024 * 1024
#: A converter that stops on its own is started again, up to this many times a minute.
CONVERTER_RESTARTS = 5


@dataclass(frozen=True)
class Upstream:
    """Where one API's calls go: scheme, host, port and a base path put before ``/v1``."""

    url: str
    scheme: str
    host: str
    port: int | None
    base: bytes

    @property
    def origin(self) -> str:
        port = f":{self.port}" if self.port else ""
        return f"{self.scheme}://{self.host}{port}"

    @classmethod
    def parse(cls, url: str) -> Upstream:
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InputError(f"upstream {url!r}: expected http(s)://host[:port][/path]")
        # the SDKs' base URLs end in /v1; the request path brings its own
        base = parts.path.rstrip("/").removesuffix("/v1").encode()
        return cls(
            url=url,
            scheme=parts.scheme,
            host=parts.hostname,
            port=parts.port,
            base=base,
        )


@dataclass(frozen=True)
class ProxyConfig:
    """What ``ctxscope proxy`` was asked for."""

    port: int = settings.DEFAULT_PROXY_PORT
    traces_dir: Path = field(default_factory=settings.traces_dir)
    upstream_openai: str = settings.DEFAULT_UPSTREAM_OPENAI
    upstream_anthropic: str = settings.DEFAULT_UPSTREAM_ANTHROPIC
    #: seconds without a byte from the upstream before the call counts as stalled
    read_timeout: float = 600.0
    connect_timeout: float = 10.0
    #: larger request bodies are refused with 413 before they are read
    max_request_bytes: int = MAX_REQUEST_BYTES


@dataclass
class Route:
    upstream: Upstream
    path: bytes
    api: str | None
    source: str


def route(raw_path: bytes, headers: list[tuple[bytes, bytes]], ups: dict[str, Upstream]) -> Route:
    """Which upstream a request goes to, its path there, and whether it is recorded."""
    source = ""
    path = raw_path
    m = _SOURCE.match(raw_path)
    if m is not None:
        source, path = m.group(1).decode(), m.group(2)
    anthropic = path.startswith((b"/v1/messages", b"/v1/complete"))
    if not anthropic:
        anthropic = any(k == b"anthropic-version" for k, _ in headers)
    upstream = ups["anthropic" if anthropic else "openai"]
    live = CAPTURED.get(path)
    # a recorded path sent to the other upstream is passed through, not recorded
    api = live.api if live is not None and (live.upstream == "anthropic") == anthropic else None
    return Route(upstream, path, api, source)


class _Broken(Exception):
    """The upstream broke off mid-reply: the client's connection is cut the same way."""


@dataclass
class _Call:
    started: float
    status: int | None = None
    first_byte: float | None = None
    content_type: str = ""
    content_encoding: str = ""
    request_id: str = ""
    chunks: list[bytes] = field(default_factory=list)
    kept: int = 0
    sent: int = 0
    truncated: bool = False
    error: str | None = None


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str:
    for k, v in headers:
        if k.lower() == name:
            return v.decode("latin-1")
    return ""


def _error_body(kind: str, message: str) -> bytes:
    return json.dumps({"error": {"type": kind, "message": message}}).encode()


class ProxyApp:
    """The proxy as an ASGI application (see the module docstring)."""

    def __init__(
        self,
        config: ProxyConfig,
        spool: SpoolWriter | None,
        converter: ConverterProcess | None = None,
    ) -> None:
        self.config = config
        self.spool = spool
        self.converter = converter
        self.upstreams = {
            "openai": Upstream.parse(config.upstream_openai),
            "anthropic": Upstream.parse(config.upstream_anthropic),
        }
        self.timeout = aiohttp.ClientTimeout(
            total=None, connect=config.connect_timeout, sock_read=config.read_timeout
        )
        self.session: aiohttp.ClientSession | None = None
        self.calls = 0
        self.recorded = 0
        self.on_shutdown: list[Callable[[], None]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.session = aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(
                        limit=0,
                        keepalive_timeout=30,
                        ssl=ssl.create_default_context(cafile=certifi.where()),
                    ),
                    auto_decompress=False,
                    # the client's headers only: none of aiohttp's defaults
                    skip_auto_headers=_AUTO_HEADERS,
                    cookie_jar=aiohttp.DummyCookieJar(),
                    timeout=self.timeout,
                )
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.session is not None:
                    await self.session.close()
                for stop in self.on_shutdown:
                    stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _service(self, send: Send) -> None:
        body = json.dumps(
            {
                "service": SERVICE_NAME,
                "pid": os.getpid(),
                "traces": str(self.config.traces_dir.resolve()),
                "calls": self.calls,
                # spooled: the converter writes their traces (``converter`` says if it runs)
                "recorded": self.recorded,
                "converter": None if self.converter is None else self.converter.status(),
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        call = _Call(started=time.perf_counter())
        wall = time.time()
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
        if raw_path == SERVICE_PATH and scope["method"] == "GET":
            await self._service(send)
            return
        if not raw_path.startswith(b"/"):
            # ``OPTIONS *`` and the like: there is no path to forward
            said = raw_path.decode("latin-1")
            await self._refuse(send, 400, f"request target {said!r}: the proxy forwards paths")
            return
        headers: list[tuple[bytes, bytes]] = list(scope["headers"])
        r = route(raw_path, headers, self.upstreams)
        limit = self.config.max_request_bytes
        declared = _header(headers, b"content-length").strip()
        size = int(declared) if declared.isdigit() else 0
        chunks: list[bytes] = []
        received = 0
        while size <= limit:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # gone before it finished asking: nothing was sent upstream
            chunks.append(message.get("body", b""))
            received += len(chunks[-1])
            size = max(size, received)
            if not message.get("more_body", False):
                break
        if size > limit:
            # refused before it is held: a declared length is trusted, a chunked body is
            # counted as it comes
            why = f"the request body is over {limit:,} bytes, the proxy's limit"
            path = r.path.decode("latin-1")
            log.warning("ctxscope proxy: refused %s %s: %s", scope["method"], path, why)
            await self._refuse(send, 413, why)
            return
        body = b"".join(chunks)
        chunks.clear()  # the body is held once, not twice, while the call lasts
        self.calls += 1
        capture = r.api is not None and scope["method"] == "POST" and self.spool is not None
        query: bytes = scope.get("query_string", b"")
        target = r.upstream.base + r.path + (b"?" + query if query else b"")
        dropped = {t.strip().lower().encode() for t in _header(headers, b"connection").split(",")}
        # aiohttp writes Host (the upstream's) and Content-Length (the body's, unchanged)
        forwarded = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in headers
            if k.lower() not in _HOP and k.lower() not in dropped and k.lower() != b"content-length"
        ]
        url = URL(r.upstream.origin + target.decode("latin-1"), encoded=True)
        exchange = asyncio.ensure_future(
            self._exchange(scope["method"], url, forwarded, body, send, call, capture)
        )
        gone = asyncio.ensure_future(receive())
        try:
            await asyncio.wait((exchange, gone), return_when=asyncio.FIRST_COMPLETED)
            if not exchange.done():
                # the client hung up (its receive says so): stop asking the upstream too
                exchange.cancel()
                await asyncio.gather(exchange, return_exceptions=True)
                call.error = (
                    f"{CLIENT_GONE} after {call.sent} bytes of the reply"
                    if call.status is not None
                    else f"{CLIENT_GONE} before the upstream answered"
                )
            else:
                exchange.result()  # _Broken propagates: uvicorn cuts the connection
        finally:
            gone.cancel()
            if capture and self.spool is not None:
                self._record(r, call, wall, body)

    def _record(self, r: Route, call: _Call, wall: float, body: bytes) -> None:
        assert r.api is not None and self.spool is not None
        now = time.perf_counter()
        record = CallRecord(
            id=uuid.uuid4().hex,
            api=r.api,
            path=r.path.decode("latin-1"),
            source=r.source,
            started_at=wall,
            latency_ms=(now - call.started) * 1000,
            ttfb_ms=None if call.first_byte is None else (call.first_byte - call.started) * 1000,
            status=call.status,
            content_type=call.content_type,
            content_encoding=call.content_encoding,
            request_id=call.request_id,
            error=call.error,
            truncated=call.truncated,
        )
        self.spool.put(record, body, b"".join(call.chunks))
        self.recorded += 1

    async def _fail(self, send: Send, call: _Call, status: int, kind: str, message: str) -> None:
        call.error = message
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"x-ctxscope-proxy", b"error"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": _error_body(kind, message)})

    async def _refuse(self, send: Send, status: int, message: str) -> None:
        """A request the proxy does not forward: one line that says why (nothing recorded)."""
        body = _error_body("ctxscope_proxy_refused", message) + b"\n"
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"x-ctxscope-proxy", b"error"),
                    # what of the body was not read stays unread: the connection ends here
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def _exchange(
        self,
        method: str,
        url: URL,
        headers: list[tuple[str, str]],
        body: bytes,
        send: Send,
        call: _Call,
        capture: bool,
    ) -> None:
        assert self.session is not None
        where = f"{url.scheme}://{url.raw_authority}"
        try:
            response = await self.session.request(
                method, url, headers=headers, data=body or None, allow_redirects=False
            )
        except TimeoutError as exc:
            connecting = isinstance(exc, aiohttp.ConnectionTimeoutError)
            what = "connecting to" if connecting else "waiting for"
            await self._fail(send, call, 504, "ctxscope_proxy_timeout", f"timed out {what} {where}")
            return
        except (aiohttp.ClientError, OSError) as exc:
            await self._fail(
                send,
                call,
                502,
                "ctxscope_proxy_upstream_error",
                f"{where} failed before answering ({type(exc).__name__}: {exc})",
            )
            return
        complete = False
        try:
            call.status = response.status
            raw = list(response.raw_headers)
            call.content_type = _header(raw, b"content-type")
            call.content_encoding = _header(raw, b"content-encoding")
            call.request_id = _header(raw, b"request-id") or _header(raw, b"x-request-id")
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status,
                    "headers": [(k, v) for k, v in raw if k.lower() not in _HOP],
                }
            )
            try:
                async for chunk in response.content.iter_any():
                    if not chunk:
                        continue
                    if call.first_byte is None:
                        call.first_byte = time.perf_counter()
                    if capture and not call.truncated:
                        if call.kept + len(chunk) <= MAX_CAPTURE_BYTES:
                            call.chunks.append(chunk)
                            call.kept += len(chunk)
                        else:
                            call.truncated = True
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    call.sent += len(chunk)
            except TimeoutError as exc:
                call.error = (
                    f"the upstream stalled after {call.sent} bytes of the reply "
                    f"(nothing for {self.config.read_timeout:g} s)"
                )
                raise _Broken(call.error) from exc
            except (aiohttp.ClientError, OSError) as exc:
                call.error = (
                    f"the upstream connection broke after {call.sent} bytes of the reply "
                    f"({type(exc).__name__})"
                )
                raise _Broken(call.error) from exc
            complete = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            if complete:
                response.release()  # read to the end: the connection is kept alive
            else:
                response.close()  # cut short (or cancelled): the connection goes with it


class _QuietBroken(logging.Filter):
    """uvicorn logs an application error with its traceback; a reply the upstream broke off
    is no error of ours, so it is one line instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, _Broken):
            record.msg, record.args, record.exc_info = "ctxscope proxy: %s", (str(exc),), None
        return True


def bind(port: int, host: str = settings.DEFAULT_HOST) -> socket.socket:
    """A listening socket on loopback (``port`` 0: any free port), or one clear error."""
    # proto IPPROTO_TCP, not 0: asyncio turns Nagle off only on sockets that say they are TCP,
    # and with Nagle on, a reply's headers and body written apart wait out the peer's
    # delayed ACK (40 ms a call)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(4096)
        return sock
    except OSError as exc:
        sock.close()
        raise InputError(
            f"cannot listen on {host}:{port} ({exc.strerror or exc}); another program (a "
            "running ctxscope proxy?) has it: pass another --port"
        ) from exc


def serve(
    app: Callable[[Scope, Receive, Send], Awaitable[None]],
    sock: socket.socket,
    *,
    graceful_s: float = 30.0,
) -> None:
    """Serve an ASGI app on a bound socket until SIGINT/SIGTERM (uvicorn)."""
    logging.getLogger("uvicorn.error").addFilter(_QuietBroken())
    config = uvicorn.Config(
        app,
        lifespan="on",
        log_level="warning",
        access_log=False,
        proxy_headers=False,
        server_header=False,
        date_header=False,
        timeout_graceful_shutdown=int(graceful_s),
        timeout_keep_alive=75,
    )
    uvicorn.Server(config).run(sockets=[sock])


class ConverterProcess:
    """The converter process, started again when it stops on its own (killed, out of
    memory), at most ``CONVERTER_RESTARTS`` times a minute; each stop is one line on stderr
    and the status endpoint says whether one runs (docs/design.md, "Live capture")."""

    def __init__(self, traces_dir: Path) -> None:
        self.traces_dir = traces_dir
        self._ctx = multiprocessing.get_context("spawn")
        self._stop = self._ctx.Event()
        self._proc: Any = None
        self._stopping = False
        self._lock = threading.Lock()
        self._stops: deque[float] = deque()
        self.restarts = 0
        self.alive = False
        self.error: str | None = None
        self._watch = threading.Thread(target=self._run, name="ctxscope-converter-watch")
        self._watch.daemon = True

    def start(self) -> None:
        self._spawn()
        self._watch.start()

    def _spawn(self) -> None:
        proc = self._ctx.Process(
            target=converter_main,
            args=(str(self.traces_dir), os.getpid(), self._stop, True),
            name="ctxscope-converter",
        )
        proc.start()
        self._proc = proc
        self.alive = True

    def _run(self) -> None:
        # only this thread reaps the process until ``stop`` (two threads waiting for one
        # child would take its exit status from each other)
        while True:
            wait_for_exit([self._proc.sentinel])
            with self._lock:
                if self._stopping:
                    return
                proc = self._proc
                proc.join()
                self.alive = False
                code = proc.exitcode
                how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
                now = time.monotonic()
                self._stops.append(now)
                while self._stops and now - self._stops[0] > 60:
                    self._stops.popleft()
                if len(self._stops) > CONVERTER_RESTARTS:
                    self.error = (
                        f"the converter stopped {len(self._stops)} times in a minute (last: "
                        f"{how}); calls are still spooled in {spool_dir(self.traces_dir)} "
                        "but no traces are written until a ctxscope proxy starts again"
                    )
                    log.error("ctxscope proxy: %s", self.error)
                    return
                self.restarts += 1
                self._spawn()
                log.warning(
                    "ctxscope proxy: the converter (pid %d) stopped (%s); started another "
                    "(pid %d): calls it had not written are still spooled and it writes them",
                    proc.pid,
                    how,
                    self._proc.pid,
                )

    def status(self) -> dict[str, Any]:
        return {
            "pid": None if self._proc is None else self._proc.pid,
            "alive": self.alive,
            "restarts": self.restarts,
            "error": self.error,
        }

    def stop(self) -> None:
        """Tell the converter to finish what is spooled, and wait for it."""
        with self._lock:
            self._stopping = True
            self._stop.set()
        if self._proc is not None:
            self._proc.join()
            self.alive = False


def run_proxy(config: ProxyConfig, sock: socket.socket) -> None:
    """Serve the proxy on ``sock`` with its spool and its converter process until
    SIGINT/SIGTERM; on the way out, wait until every recorded call is a trace."""
    traces = config.traces_dir
    spool = SpoolWriter(spool_dir(traces))
    converter = ConverterProcess(traces)
    converter.start()
    finished: list[bool] = []

    def finish() -> None:
        if finished:
            return
        finished.append(True)
        spool.close()
        converter.stop()

    app = ProxyApp(config, spool, converter)
    app.on_shutdown.append(finish)
    try:
        serve(app, sock)
    finally:
        finish()


__all__ = [
    "CAPTURED",
    "CONVERTER_RESTARTS",
    "ConverterProcess",
    "MAX_CAPTURE_BYTES",
    "MAX_REQUEST_BYTES",
    "ProxyApp",
    "ProxyConfig",
    "Route",
    "SERVICE_NAME",
    "SERVICE_PATH",
    "Upstream",
    "bind",
    "route",
    "run_proxy",
    "serve",
]
