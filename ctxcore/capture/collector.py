"""``ctxscope collect``: an OTLP/HTTP receiver that turns GenAI spans into traces as they come.

An agent instrumented with OpenTelemetry already exports its model calls; pointed at this
receiver (``OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318``) it needs no other change.
Each span that carries a prompt becomes one trace line in the watched folder
(``live/otlp.jsonl``), read by the same code as ``ctxscope import`` of an OTLP file
(``ctxcore.formats.otlp``): the same conventions, the same session and trace ids, and like an
import, secrets are redacted only with ``CTXSCOPE_REDACT_ON_INGEST=1``.

The protocol, as the OTLP specification says it (docs/design.md, "Capture, import, export,
redaction"):

- ``POST /v1/traces`` and ``POST /v1/logs``, ``application/x-protobuf`` (decoded with the
  ``opentelemetry-proto`` classes, as ``ctxcore.formats.otlp_proto`` does) or
  ``application/json``,
  optionally gzip-compressed. The answer is an ``Export…ServiceResponse`` in the request's
  encoding; spans whose prompt cannot be read (a GenAI span with broken message JSON) are
  *rejected* and counted in its ``partial_success`` with the first error, the rest are kept;
- a body that is not an export is 400 with a ``google.rpc.Status``; another content type or
  encoding 415; another path 404; another method 405; more spans waiting to be written than
  the receiver holds, 503 with ``Retry-After`` (exporters retry it, so nothing is lost).

Where a span's prompt is, differs: on the span itself (current GenAI conventions), or in log
records that the SDK exports separately, usually earlier (events of
opentelemetry-instrumentation-openai-v2 up to 2.3b0). So a GenAI span without a prompt waits a
moment (``settle``) for its log records, and log records wait longer (``orphan_wait``) for
their span before they are read on their own, as the importer reads log records whose span is
not in the file. Exporters retry a batch whose answer they missed, so a span seen again (by
its trace and span id, among the last 100,000) and a log record seen again (the same record
at the same time) are not written twice. The session is the importer's (a
``gen_ai.conversation.id`` or ``session.id`` on the span or an ancestor seen so far, else the
trace id); turns count per session in the order calls are written.

Traces are built by worker processes (reading a prompt and counting its tokens costs about a
millisecond a span), which append to the trace file themselves.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import multiprocessing
import os
import socket
import time
from collections import OrderedDict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf.json_format import MessageToJson
from google.protobuf.message import DecodeError
from google.protobuf.message import Message as ProtoMessage
from google.rpc import status_pb2  # type: ignore[import-untyped]
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from ctxcore import settings
from ctxcore.capture.calls import LIVE_TAG
from ctxcore.capture.inflate import Broken, Inflater, TooBig
from ctxcore.capture.proxy import Receive, Scope, Send, serve
from ctxcore.capture.recorder import append_line
from ctxcore.capture.spool import live_file
from ctxcore.errors import CtxscopeError, ImportFormatError
from ctxcore.formats import otlp
from ctxcore.formats.otlp_records import (
    ATTRIBUTE_PREFIXES,
    EventRecord,
    Prompt,
    SpanRecord,
    records_from_exports,
)
from ctxcore.formats.protodict import message_to_dict
from ctxcore.formats.redact_memo import Redactor
from ctxcore.loading import too_deep

log = logging.getLogger("ctxscope.collect")

#: ``GET`` here answers who is listening and what it has done.
SERVICE_PATH = "/__ctxscope__/collect"
SERVICE_NAME = "ctxscope-collect"
SIGNALS = {"/v1/traces": "resourceSpans", "/v1/logs": "resourceLogs"}
_REQUESTS: dict[str, type[ProtoMessage]] = {
    "/v1/traces": trace_service_pb2.ExportTraceServiceRequest,
    "/v1/logs": logs_service_pb2.ExportLogsServiceRequest,
}
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
#: The largest request body read, and the most a gzip body is unpacked to (an exporter's
#: batch is far smaller).
MAX_BODY = 64 * 1024 * 1024
#: The session keys read on ancestors (``otlp.SESSION_KEYS``), kept for spans seen so far.
_SESSION_KEYS = frozenset(otlp.SESSION_KEYS)


@dataclass(frozen=True)
class CollectorConfig:
    """What ``ctxscope collect`` was asked for."""

    traces_dir: Path = field(default_factory=settings.traces_dir)
    #: seconds a GenAI span without its prompt waits for log records after the last piece
    settle: float = 1.0
    #: seconds log records wait for their span before they are read on their own
    orphan_wait: float = 10.0
    #: processes that build traces (reading a prompt and counting it is the costly part)
    workers: int = field(default_factory=lambda: max(2, os.cpu_count() or 2))
    #: spans handed to the workers and not yet written; past it, exporters are told to retry
    max_backlog: int = 50_000
    redact: bool = field(default_factory=settings.redact_on_ingest)


# --------------------------------------------------------------------------- writing (workers)


Ready = tuple[SpanRecord, str, str, int, Prompt | None]
#: what a worker's earlier spans' texts redacted to: the calls of a session repeat them
_REDACTOR = Redactor()


def write_traces(items: list[Ready], traces_dir: str, redact: bool) -> tuple[int, list[str]]:
    """Build the trace of each span (with its session, turn and the prompt the receiver
    read from it) and append them to ``live/otlp.jsonl``; runs in a worker process. Returns
    how many were written and the errors of those that could not be read."""
    lines: list[bytes] = []
    errors: list[str] = []
    for span, session, session_from, turn, prompt in items:
        try:
            trace = otlp.trace_from_record(
                span, session=session, session_from=session_from, turn=turn, prompt=prompt
            )
        except CtxscopeError as exc:
            errors.append(str(exc))
            continue
        if trace is None:
            continue
        meta = dict(trace.metadata)
        meta["capture"] = {"via": "otlp"}
        trace = trace.model_copy(update={"tags": [LIVE_TAG, "otlp"], "metadata": meta})
        text = _REDACTOR.line(trace)[0] if redact else trace.to_json()
        lines.append(text.encode("utf-8") + b"\n")
    if lines:
        target = live_file(Path(traces_dir), "otlp")
        target.parent.mkdir(parents=True, exist_ok=True)
        append_line(target, b"".join(lines))
    return len(lines), errors


# --------------------------------------------------------------------------- joining


@dataclass
class _Waiting:
    """A GenAI span waiting for its log records, or log records waiting for their span
    (gathered on a span of their own, as ``otlp_records.join_logs`` does for a file)."""

    span: SpanRecord | None
    orphan: SpanRecord | None
    first: float
    last: float


def _known(span: SpanRecord) -> bool:
    return bool(span.events) or any(k.startswith(ATTRIBUTE_PREFIXES) for k in span.attrs)


def _add_events(span: SpanRecord, events: list[EventRecord]) -> None:
    """Log records joined to their span, in time order; a record already there with the same
    timestamp is an exporter's retry and is not added twice."""
    have = {(e.time_ns, e.name, repr(e.attrs), repr(e.body)) for e in span.events if e.time_ns}
    for e in events:
        if e.time_ns and (e.time_ns, e.name, repr(e.attrs), repr(e.body)) in have:
            continue
        span.events.append(e)
    if all(e.time_ns for e in span.events):
        span.events.sort(key=lambda e: e.time_ns)


class Joiner:
    """Spans and log records on their way to traces: which are ready, which wait for the
    other half, and the session and turn of each (see the module docstring)."""

    def __init__(self, settle: float, orphan_wait: float, remember: int = 100_000) -> None:
        self.settle = settle
        self.orphan_wait = orphan_wait
        self.remember = remember
        self.waiting: dict[tuple[str, str], _Waiting] = {}
        #: spans seen so far, with only the attributes a descendant's session can come from
        self.seen: OrderedDict[tuple[str, str], SpanRecord] = OrderedDict()
        self.trace_sessions: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self.turns: dict[str, int] = {}
        #: spans already read: log records that come after them are too late to join
        self.done: OrderedDict[tuple[str, str], None] = OrderedDict()
        self.without_prompt = 0
        self.late_log_records = 0
        #: spans received again (an exporter retrying a batch that did arrive)
        self.duplicates = 0
        self.failed: list[str] = []
        #: the prompt read from each ready span (by its key), handed on with it
        self.prompts: dict[tuple[str, str], Prompt] = {}

    def _remember(self, span: SpanRecord) -> None:
        slim = SpanRecord(
            trace_id=span.trace_id,
            span_id=span.span_id,
            parent_id=span.parent_id,
            name=span.name,
            start=None,
            attrs={k: v for k, v in span.attrs.items() if k in _SESSION_KEYS},
        )
        self.seen[(span.trace_id, span.span_id)] = slim
        while len(self.seen) > self.remember:
            self.seen.popitem(last=False)

    def spans(self, spans: list[SpanRecord], now: float) -> tuple[list[SpanRecord], list[str]]:
        """Spans received: those ready now, and the errors of those rejected."""
        ready: list[SpanRecord] = []
        rejected: list[str] = []
        taken: set[tuple[str, str]] = set()
        for span in spans:
            key = (span.trace_id, span.span_id)
            waiting = self.waiting.get(key)
            if key in self.done or key in taken or (waiting is not None and waiting.span):
                # an exporter's retry (or a batch sent twice): the span has its trace, or is
                # waiting for its log records, already
                self.duplicates += 1
                continue
            taken.add(key)
            self._remember(span)
            early = self.waiting.pop(key, None)
            if early is not None and early.orphan is not None:
                _add_events(span, early.orphan.events)
            if not _known(span):
                continue
            try:
                prompt = otlp.read_prompt(span)
            except ImportFormatError as exc:
                rejected.append(str(exc))
                continue
            if prompt is not None:
                ready.append(span)
                self.prompts[key] = prompt
            elif any(k.startswith("gen_ai.") for k in span.attrs):
                # its messages may be in log records still on their way
                self.waiting[key] = _Waiting(span, None, now, now)
            else:
                self.without_prompt += 1
        return ready, rejected

    def logs(self, orphans: list[SpanRecord], now: float) -> None:
        """Log records received, grouped by the span they were emitted in."""
        for orphan in orphans:
            key = (orphan.trace_id, orphan.span_id)
            if key in self.done:
                self.late_log_records += len(orphan.events)
                continue
            waiting = self.waiting.get(key)
            if waiting is None:
                self.waiting[key] = _Waiting(None, orphan, now, now)
                continue
            into = waiting.span or waiting.orphan
            assert into is not None
            _add_events(into, orphan.events)
            waiting.last = now

    def due(self, now: float, *, everything: bool = False) -> list[SpanRecord]:
        """Spans whose wait is over, now complete as far as they will get."""
        ready: list[SpanRecord] = []
        for key, w in list(self.waiting.items()):
            if w.span is not None:
                if not everything and now - w.last < self.settle:
                    continue
                span = w.span
            else:
                # log records whose span never came: read on their own, as a file's are
                if not everything and now - w.first < self.orphan_wait:
                    continue
                assert w.orphan is not None
                span = w.orphan
            del self.waiting[key]
            try:
                prompt = otlp.read_prompt(span)
            except ImportFormatError as exc:
                self.failed = [*self.failed[-19:], str(exc)]
                continue
            if prompt is None:
                self.without_prompt += 1
            else:
                ready.append(span)
                self.prompts[key] = prompt
        return ready

    def assign(self, spans: list[SpanRecord]) -> list[Ready]:
        """Each ready span with its session, what named it, its turn and its prompt."""
        out: list[Ready] = []
        for span in spans:
            self.done[(span.trace_id, span.span_id)] = None
        while len(self.done) > self.remember:
            self.done.popitem(last=False)
        for span in sorted(spans, key=lambda s: (s.start is None, s.start or 0, s.order)):
            session, named = otlp.session_of(span, self.seen)
            if named == "trace id":
                # an ancestor seen earlier may have named the trace's session
                session, named = self.trace_sessions.get(span.trace_id, (session, named))
            elif span.trace_id:
                self.trace_sessions[span.trace_id] = (session, named)
                while len(self.trace_sessions) > self.remember:
                    self.trace_sessions.popitem(last=False)
            turn = self.turns.get(session, 0)
            self.turns[session] = turn + 1
            prompt = self.prompts.pop((span.trace_id, span.span_id), None)
            out.append((span, session, named, turn, prompt))
        return out


# --------------------------------------------------------------------------- HTTP


def _status_body(code: int, message: str, encoding: str) -> bytes:
    status: ProtoMessage = status_pb2.Status(code=code, message=message)
    if encoding == JSON:
        return MessageToJson(status, indent=None).encode()
    return status.SerializeToString()


class CollectorApp:
    """The receiver as an ASGI application (see the module docstring)."""

    def __init__(self, config: CollectorConfig) -> None:
        self.config = config
        self.joiner = Joiner(config.settle, config.orphan_wait)
        self.pool: ProcessPoolExecutor | None = None
        self.backlog = 0
        self.received = {"spans": 0, "log_records": 0}
        self.rejected = 0
        self.written = 0
        self.errors: list[str] = []
        self._ticker: asyncio.Task[None] | None = None
        self._inflight: set[asyncio.Future[tuple[int, list[str]]]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.pool = ProcessPoolExecutor(
                    max_workers=self.config.workers,
                    mp_context=multiprocessing.get_context("spawn"),
                )
                self._ticker = asyncio.ensure_future(self._tick())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._ticker is not None:
                    self._ticker.cancel()
                self._dispatch(self.joiner.due(time.monotonic(), everything=True))
                if self._inflight:
                    await asyncio.gather(*self._inflight, return_exceptions=True)
                if self.pool is not None:
                    self.pool.shutdown(wait=True)
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(0.2)
            self._dispatch(self.joiner.due(time.monotonic()))

    def _dispatch(self, ready: list[SpanRecord]) -> None:
        if not ready or self.pool is None:
            return
        items = self.joiner.assign(ready)
        loop = asyncio.get_running_loop()
        for i in range(0, len(items), 128):
            batch = items[i : i + 128]
            self.backlog += len(batch)
            fut = loop.run_in_executor(
                self.pool, write_traces, batch, str(self.config.traces_dir), self.config.redact
            )
            self._inflight.add(fut)
            fut.add_done_callback(functools.partial(self._done, n=len(batch)))

    def _done(self, fut: asyncio.Future[tuple[int, list[str]]], *, n: int) -> None:
        self._inflight.discard(fut)
        self.backlog -= n
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            log.warning("ctxscope collect: %d span(s) not written: %s", n, exc)
            return
        written, errors = fut.result()
        self.written += written
        for e in errors:
            log.warning("ctxscope collect: %s", e)
        self.errors = (self.errors + errors)[-20:]

    async def _reply(
        self, send: Send, status: int, body: bytes, ctype: str, extra: list[tuple[bytes, bytes]]
    ) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", ctype.encode()), *extra],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def _fail(self, send: Send, status: int, message: str, encoding: str) -> None:
        code = {400: 3, 404: 5, 405: 12, 413: 8, 415: 3, 503: 14}.get(status, 2)
        extra = [(b"retry-after", b"1")] if status == 503 else []
        if status == 405:
            extra.append((b"allow", b"POST"))
        await self._reply(send, status, _status_body(code, message, encoding), encoding, extra)

    async def _service(self, send: Send) -> None:
        body = {
            "service": SERVICE_NAME,
            "pid": os.getpid(),
            "traces": str(self.config.traces_dir.resolve()),
            "received": self.received,
            "rejected": self.rejected,
            "written": self.written,
            "waiting": len(self.joiner.waiting),
            "without_prompt": self.joiner.without_prompt,
            "late_log_records": self.joiner.late_log_records,
            "duplicates": self.joiner.duplicates,
            "backlog": self.backlog,
            "errors": [*self.joiner.failed, *self.errors][-20:],
        }
        await self._reply(send, 200, json.dumps(body).encode(), JSON, [])

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        headers = {k.lower(): v.decode("latin-1") for k, v in scope["headers"]}
        ctype = headers.get(b"content-type", "").split(";")[0].strip().lower()
        encoding = JSON if ctype == JSON else PROTOBUF
        if path == SERVICE_PATH and scope["method"] == "GET":
            await self._service(send)
            return
        if path not in SIGNALS:
            await self._fail(send, 404, f"{path}: this receiver takes /v1/traces, /v1/logs", JSON)
            return
        if scope["method"] != "POST":
            await self._fail(send, 405, f"{path} takes POST", encoding)
            return
        if ctype not in (PROTOBUF, JSON):
            await self._fail(
                send, 415, f"Content-Type {ctype or '(none)'}: send {PROTOBUF} or {JSON}", JSON
            )
            return
        coding = headers.get(b"content-encoding", "identity").strip().lower()
        if coding not in ("identity", "", "gzip"):
            await self._fail(send, 415, f"Content-Encoding {coding}: send gzip or none", encoding)
            return
        # a gzip body is unpacked as it arrives, to MAX_BODY at most: a small body can
        # unpack to gigabytes (docs/design.md, "Live capture")
        inflater = Inflater("gzip", MAX_BODY) if coding == "gzip" else None
        chunks: list[bytes] = []
        size = 0
        try:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                piece: bytes = message.get("body", b"")
                size += len(piece)
                if size > MAX_BODY:
                    await self._fail(send, 413, f"the body is over {MAX_BODY:,} bytes", encoding)
                    return
                chunks.append(piece if inflater is None else inflater.feed(piece))
                if not message.get("more_body", False):
                    break
        except TooBig as exc:
            await self._fail(send, 413, str(exc), encoding)
            return
        except Broken as exc:
            await self._fail(send, 400, str(exc), encoding)
            return
        if inflater is not None and not inflater.complete and size:
            await self._fail(send, 400, "the gzip body ends before its end", encoding)
            return
        raw = b"".join(chunks)
        del chunks
        if self.backlog >= self.config.max_backlog:
            await self._fail(send, 503, "traces are still being written; retry", encoding)
            return
        try:
            records = self._decode(path, raw, encoding)
        except (ImportFormatError, ValueError) as exc:
            await self._fail(send, 400, str(exc), encoding)
            return
        now = time.monotonic()
        rejected: list[str] = []
        if path == "/v1/traces":
            self.received["spans"] += len(records)
            ready, rejected = self.joiner.spans(records, now)
            self.rejected += len(rejected)
            self._dispatch(ready)
        else:
            self.received["log_records"] += sum(len(r.events) for r in records)
            self.joiner.logs(records, now)
        await self._reply(send, 200, self._response(path, rejected, encoding), encoding, [])

    def _decode(self, path: str, raw: bytes, encoding: str) -> list[SpanRecord]:
        key = SIGNALS[path]
        if not raw.strip():
            return []
        if encoding == JSON:
            try:
                data = json.loads(raw)
            except RecursionError as exc:  # a 400 in one line, as every reader says it
                raise too_deep("the JSON body") from exc
            if not isinstance(data, dict) or (data and key not in data):
                raise ImportFormatError(f"not an OTLP JSON export of {path[4:]}: no {key!r}")
        else:
            # the path says which request it is (``otlp_proto.decode_message`` has to try
            # both); ids stay base64 here and ``otlp_records`` reads them as hex
            cls = _REQUESTS[path]
            try:
                data = message_to_dict(cls.FromString(raw))
            except DecodeError as exc:
                raise ImportFormatError(f"not an OTLP protobuf {cls.__name__} ({exc})") from exc
        return records_from_exports([(f"{path} request", data)]) if data else []

    def _response(self, path: str, rejected: list[str], encoding: str) -> bytes:
        message: ProtoMessage
        if path == "/v1/traces":
            message = trace_service_pb2.ExportTraceServiceResponse()
            if rejected:
                message.partial_success.rejected_spans = len(rejected)
                message.partial_success.error_message = self._said(rejected)
        else:
            message = logs_service_pb2.ExportLogsServiceResponse()
        if encoding == JSON:
            return MessageToJson(message, indent=None).encode()
        return message.SerializeToString()

    @staticmethod
    def _said(rejected: list[str]) -> str:
        more = f" (and {len(rejected) - 1} more)" if len(rejected) > 1 else ""
        return rejected[0] + more


def run_collector(config: CollectorConfig, sock: socket.socket) -> None:
    """Serve the receiver on ``sock`` until SIGINT/SIGTERM; on the way out, every span that
    waited is read and every trace written."""
    serve(CollectorApp(config), sock)


__all__ = [
    "CollectorApp",
    "CollectorConfig",
    "Joiner",
    "SERVICE_NAME",
    "SERVICE_PATH",
    "run_collector",
    "write_traces",
]
