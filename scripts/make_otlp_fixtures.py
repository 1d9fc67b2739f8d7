"""Generate the OTLP import fixtures with the real OpenTelemetry instrumentation, offline.

    .venv/bin/python scripts/make_otlp_fixtures.py [--out tests/fixtures/imports]

No public OTLP export (JSON or protobuf) holding GenAI content was found under a usable
licence, so the fixtures in ``tests/fixtures/imports/otlp-*/`` are made here by the real
thing: the official ``openai`` client, instrumented by ``opentelemetry-instrumentation-openai-v2``
through the OpenTelemetry Python SDK, sends the recorded requests of
``tests/fixtures/imports/openai-chat/*.request.json`` to a local HTTP server on 127.0.0.1
that answers each with the recorded response beside it (``*.response.json``). What the SDK
collects is written by the SDK's own OTLP encoders: JSON
(``opentelemetry-exporter-otlp-json-common``, one export per line as its file exporter
writes them) and protobuf (``opentelemetry-exporter-otlp-proto-common``, the body an
OTLP/HTTP exporter posts).

Two generations of the instrumentation record content differently, and both are in use:

- ``legacy``: openai-v2 2.3b0 (the dev extra's pin), semantic conventions 1.30 — with
  ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` the content is in log records
  (``gen_ai.{system,user,assistant,tool}.message`` and ``gen_ai.choice`` events), not on
  the span; ``legacy-no-content`` is the same without that variable (what a default install
  records); ``legacy-span-events`` moves the same events, with a log-record processor
  defined below, onto the span they belong to as span events, the body as JSON in
  ``gen_ai.event.content`` (the shape Azure AI Inference tracing writes; the instrumentation
  has no such mode);
- ``latest-span`` / ``latest-event``: openai-v2 2.4b0 with opentelemetry-util-genai 1.1b0
  (``LATEST``, installed with ``pip --target`` into a temporary folder put first on the
  subprocess's path, since a venv holds one version), which always follows the latest
  conventions: content ``span_only`` (``gen_ai.input.messages`` on the span) or
  ``event_only`` (a ``gen_ai.client.inference.operation.details`` log record).

Each mode runs in a subprocess of its own, because the instrumentation reads its environment
once, when it instruments the client. The two weather turns run inside one agent span (one
trace; ``session.id`` on an app span in the legacy modes, an ``invoke_agent`` span with
``gen_ai.conversation.id`` in the latest ones), the third request in a trace of its own.
Span and trace ids come from a seeded generator, so a re-run changes only timestamps,
durations, ``service.instance.id`` and the local port.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
IMPORTS = ROOT / "tests" / "fixtures" / "imports"
RECORDED = IMPORTS / "openai-chat"
#: The recorded exchanges replayed, in call order: (request file stem, agent run it belongs to).
CALLS: tuple[tuple[str, str], ...] = (
    ("otel-contrib-tool-calls-turn1", "weather"),
    ("otel-contrib-tool-calls-turn2", "weather"),
    ("openinference-tool-calls", "city-facts"),
)
CONVERSATION_IDS = {"weather": "conv-weather-seattle-sf", "city-facts": "conv-city-facts-sf"}
SERVICE = "ctxscope-fixture-agent"
#: The latest instrumentation generation (see the module docstring).
LATEST: tuple[str, ...] = (
    "opentelemetry-instrumentation-openai-v2==2.4b0",
    "opentelemetry-util-genai==1.1b0",
)

#: mode -> its environment (beside the process's own).
MODES: dict[str, dict[str, str]] = {
    "legacy": {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"},
    "legacy-no-content": {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "false"},
    "legacy-span-events": {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"},
    "latest-span": {
        "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "span_only",
    },
    "latest-event": {
        "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "event_only",
    },
}

#: output file (under --out) -> (mode, what is written: "json" lines of traces then logs,
#: "traces-json", "framed-pb" (the collector file exporter's protobuf framing: each
#: export request preceded by its length, 4 bytes big-endian), "traces-pb" (one bare
#: ExportTraceServiceRequest)).
OUTPUTS: dict[str, tuple[str, str]] = {
    "otlp-logs/openai-v2-events.otlp.jsonl": ("legacy", "json"),
    "otlp-logs/openai-v2-no-content.otlp.jsonl": ("legacy-no-content", "json"),
    "otlp-logs/openai-v2-latest-event-only.otlp.jsonl": ("latest-event", "json"),
    "otlp-span-events/openai-v2-span-events.otlp.jsonl": ("legacy-span-events", "traces-json"),
    "otlp-json/openai-v2-latest-span-only.otlp.jsonl": ("latest-span", "traces-json"),
    "otlp-protobuf/openai-v2-events.otlp.binpb": ("legacy", "framed-pb"),
    "otlp-protobuf/openai-v2-latest-span-only.traces.binpb": ("latest-span", "traces-pb"),
}


# --------------------------------------------------------------------------- replay server


def _recorded() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    out = []
    for stem, _ in CALLS:
        req = json.loads((RECORDED / f"{stem}.request.json").read_text(encoding="utf-8"))
        resp = json.loads((RECORDED / f"{stem}.response.json").read_text(encoding="utf-8"))
        out.append((req, resp))
    return out


class _Replay(BaseHTTPRequestHandler):
    """Answers POST /v1/chat/completions with the recorded response of the recorded request
    whose messages equal the ones received (anything else: 404)."""

    exchanges: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def do_POST(self) -> None:  # noqa: N802 - the http.server hook's name
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        match = next(
            (resp for req, resp in self.exchanges if req["messages"] == body.get("messages")),
            None,
        )
        if self.path.rstrip("/") != "/v1/chat/completions" or match is None:
            self.send_response(404)
            self.end_headers()
            return
        data = json.dumps(match).encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet server
        return


# --------------------------------------------------------------------------- one mode


def run_mode(mode: str, dest: Path) -> None:
    """Run the recorded calls under the instrumentation in ``mode`` (its environment is
    already set) and write what the SDK collected to ``dest`` as one JSON document:
    ``{"spans": <OTLP JSON line>, "logs": <OTLP JSON line, or "">, "spans_pb": <hex>,
    "logs_pb": <hex, or "">}``."""
    import openai
    from opentelemetry import trace
    from opentelemetry._logs import set_logger_provider
    from opentelemetry.exporter.otlp.json.common._log_encoder import encode_logs as logs_json
    from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans as spans_json
    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    from opentelemetry.sdk._logs import LoggerProvider, LogRecordProcessor, ReadWriteLogRecord
    from opentelemetry.sdk._logs.export import (
        InMemoryLogRecordExporter,
        SimpleLogRecordProcessor,
    )
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.sdk.trace.id_generator import IdGenerator

    class SeededIds(IdGenerator):
        """Span and trace ids from a seeded generator: re-runs give the same ids."""

        def __init__(self) -> None:
            self._rng = random.Random(f"ctxscope-otlp-{mode}")

        def generate_span_id(self) -> int:
            return self._rng.getrandbits(64)

        def generate_trace_id(self) -> int:
            return self._rng.getrandbits(128)

    class EventsOnSpan(LogRecordProcessor):
        """Copies each GenAI event log record onto the span it was emitted in, as a span
        event of the same name with the body as JSON in ``gen_ai.event.content``."""

        def on_emit(self, log_record: ReadWriteLogRecord) -> None:
            record = log_record.log_record
            span = trace.get_current_span()
            ctx = span.get_span_context()
            if not span.is_recording() or ctx.span_id != record.span_id:
                return
            attrs = dict(record.attributes or {})
            if record.body is not None:
                attrs["gen_ai.event.content"] = json.dumps(record.body, ensure_ascii=False)
            span.add_event(str(record.event_name), attributes=attrs)

        def shutdown(self) -> None:
            return

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

    resource = Resource.create({"service.name": SERVICE})
    spans_mem = InMemorySpanExporter()
    tracer_provider = TracerProvider(resource=resource, id_generator=SeededIds())
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans_mem))
    trace.set_tracer_provider(tracer_provider)
    logs_mem = InMemoryLogRecordExporter()
    logger_provider = LoggerProvider(resource=resource)
    if mode == "legacy-span-events":
        logger_provider.add_log_record_processor(EventsOnSpan())
    else:
        logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs_mem))
    set_logger_provider(logger_provider)

    OpenAIInstrumentor().instrument(
        tracer_provider=tracer_provider, logger_provider=logger_provider
    )
    _Replay.exchanges = _recorded()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Replay)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{server.server_address[1]}/v1",
            api_key="sk-fixture-not-a-key",
            max_retries=0,
            timeout=30,
        )
        tracer = tracer_provider.get_tracer("ctxscope.fixture.agent")
        by_run: dict[str, list[dict[str, Any]]] = {}
        for (_, run), (req, _) in zip(CALLS, _recorded(), strict=True):
            by_run.setdefault(run, []).append(req)
        for run, requests in by_run.items():
            if mode.startswith("latest"):
                from opentelemetry.util.genai.handler import TelemetryHandler

                handler = TelemetryHandler(
                    tracer_provider=tracer_provider, logger_provider=logger_provider
                )
                with handler.invoke_local_agent(agent_name=run) as agent:
                    agent.conversation_id = CONVERSATION_IDS[run]
                    for req in requests:
                        client.chat.completions.create(**req)
            else:
                with tracer.start_as_current_span(f"agent {run}") as span:
                    span.set_attribute("session.id", CONVERSATION_IDS[run])
                    for req in requests:
                        client.chat.completions.create(**req)
    finally:
        server.shutdown()
        OpenAIInstrumentor().uninstrument()
    tracer_provider.force_flush()
    logger_provider.force_flush()
    spans = list(spans_mem.get_finished_spans())
    logs = list(logs_mem.get_finished_logs())
    out = {
        "spans": _line(spans_json(spans).to_dict()),
        "logs": _line(logs_json(logs).to_dict()) if logs else "",
        "spans_pb": encode_spans(spans).SerializeToString().hex(),
        "logs_pb": encode_logs(logs).SerializeToString().hex() if logs else "",
    }
    dest.write_text(json.dumps(out), encoding="utf-8")


def _line(export: dict[str, Any]) -> str:
    """One export as the OTLP JSON file exporter writes it: compact JSON, one line."""
    return json.dumps(export, separators=(",", ":")) + "\n"


# --------------------------------------------------------------------------- writing


def _frame(*messages: bytes) -> bytes:
    return b"".join(struct.pack(">I", len(m)) + m for m in messages)


def generate(out: Path, workdir: Path) -> list[Path]:
    latest = workdir / "latest-site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(latest)]
        + list(LATEST),
        check=True,
    )
    collected: dict[str, dict[str, str]] = {}
    for mode in sorted({m for m, _ in OUTPUTS.values()}):
        dest = workdir / f"{mode}.json"
        env = {**os.environ, **MODES[mode]}
        if mode.startswith("latest"):
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(latest), os.environ.get("PYTHONPATH", "")) if p
            )
        subprocess.run(
            [sys.executable, __file__, "--mode", mode, "--dest", str(dest)],
            env=env,
            check=True,
        )
        collected[mode] = json.loads(dest.read_text(encoding="utf-8"))
        dest.unlink()
    written = []
    for name, (mode, kind) in OUTPUTS.items():
        got = collected[mode]
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "json":
            path.write_text(got["spans"] + got["logs"], encoding="utf-8")
        elif kind == "traces-json":
            path.write_text(got["spans"], encoding="utf-8")
        elif kind == "framed-pb":
            path.write_bytes(_frame(bytes.fromhex(got["spans_pb"]), bytes.fromhex(got["logs_pb"])))
        else:
            path.write_bytes(bytes.fromhex(got["spans_pb"]))
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=IMPORTS)
    ap.add_argument("--mode", choices=sorted(MODES), help=argparse.SUPPRESS)
    ap.add_argument("--dest", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.mode:
        run_mode(args.mode, args.dest)
        return 0
    with tempfile.TemporaryDirectory(prefix="ctxscope-otlp-") as tmp:
        for path in generate(args.out, Path(tmp)):
            print(f"wrote {path.relative_to(args.out)} ({path.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
