"""``ctxscope collect``: the OTLP/HTTP receiver as a real process on loopback.

The main test sends what a real agent would: the official ``openai`` client, instrumented by
``opentelemetry-instrumentation-openai-v2`` through the OpenTelemetry Python SDK, replays a
recorded call against the fake upstream, and the SDK's own OTLP/HTTP exporters
(``opentelemetry-exporter-otlp-proto-http``) post the span and, separately, the log records
that hold its messages. The rest speaks the protocol by hand: JSON, partial success, errors.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.rpc import status_pb2  # type: ignore[import-untyped]
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from proxy_support import (
    FIXTURES,
    Proc,
    read_traces,
    start_collector,
    start_upstream,
    wait_for,
)

from ctxcore.formats.otlp import traces_from_otlp

JSON = "application/json"

AGENT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path

    import openai
    from opentelemetry import trace
    from opentelemetry._logs import set_logger_provider
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    collector, upstream, fixtures = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    resource = Resource.create({"service.name": "collect-test-agent"})
    spans = TracerProvider(resource=resource)
    span_exporter = OTLPSpanExporter(endpoint=collector + "/v1/traces")
    spans.add_span_processor(BatchSpanProcessor(span_exporter))
    trace.set_tracer_provider(spans)
    logs = LoggerProvider(resource=resource)
    log_exporter = OTLPLogExporter(endpoint=collector + "/v1/logs")
    logs.add_log_record_processor(BatchLogRecordProcessor(log_exporter))
    set_logger_provider(logs)
    OpenAIInstrumentor().instrument(tracer_provider=spans, logger_provider=logs)

    client = openai.OpenAI(base_url=upstream + "/v1", api_key="sk-not-a-key", max_retries=0)
    tracer = spans.get_tracer("collect-test")
    stem = "openai-chat/otel-contrib-tool-calls-turn1"
    req = json.loads((fixtures / f"{stem}.request.json").read_text())
    with tracer.start_as_current_span("agent weather") as span:
        span.set_attribute("session.id", "conv-weather")
        got = client.chat.completions.create(
            **req, extra_headers={"x-test-scenario": f"json:{stem}.response.json"}
        )
    print(got.choices[0].message.tool_calls[0].function.name)
    logs.shutdown()   # the log records first, as their batch delay is the shorter one
    spans.shutdown()
    """
)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("collect")


@pytest.fixture(scope="module")
def collector(workdir: Path) -> Iterator[Proc]:
    p = start_collector(workdir / "traces")
    yield p
    p.stop()


def out_file(workdir: Path) -> Path:
    return workdir / "traces" / "live" / "otlp.jsonl"


def post(port: int, path: str, body: bytes, ctype: str, **headers: str) -> tuple[int, bytes, str]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=body,
        headers={"Content-Type": ctype, **headers},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read(), resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as err:
        return err.code, err.read(), err.headers.get("Content-Type", "")


@pytest.mark.slow
def test_sdk_exporter_spans_and_log_events_become_a_trace(
    workdir: Path, collector: Proc, tmp_path: Path
) -> None:
    upstream = start_upstream(tmp_path / "upstream")
    try:
        script = tmp_path / "agent.py"
        script.write_text(AGENT)
        env = dict(os.environ, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true")
        proc = subprocess.run(
            [
                sys.executable,
                str(script),
                f"http://127.0.0.1:{collector.port}",
                f"http://127.0.0.1:{upstream.port}",
                str(FIXTURES),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
    finally:
        upstream.stop()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "get_current_weather"
    # the span and its log records came in two requests: joined into one trace
    [t] = wait_for(out_file(workdir), lambda t: t["session_id"] == "conv-weather")
    req = json.loads(
        (FIXTURES / "openai-chat/otel-contrib-tool-calls-turn1.request.json").read_text()
    )
    assert t["input"]["query"] == req["messages"][-1]["content"]
    # (the 2.3b0 events carry no tool definitions, so the trace has none either)
    assert t["outcome"]["usage"] == {"input_tokens": 75, "output_tokens": 51}
    assert t["metadata"]["otlp"]["messages_from"] == "gen_ai.*.message events"
    assert t["tags"] == ["live", "otlp"]
    assert t["trace_id"].count("-") == 1  # <trace id>-<span id>, as the importer names it


def test_json_export_of_span_only_content(workdir: Path, collector: Proc) -> None:
    line = (
        (FIXTURES / "otlp-json/openai-v2-latest-span-only.otlp.jsonl").read_text().splitlines()[0]
    )
    status, body, ctype = post(collector.port, "/v1/traces", line.encode(), "application/json")
    assert status == 200 and ctype == "application/json"
    assert json.loads(body) == {}
    weather = wait_for(out_file(workdir), lambda t: t["session_id"] == "conv-weather-seattle-sf", 2)
    assert [t["turn"] for t in weather] == [0, 1]


def _span(span_id: str, messages: str) -> dict[str, object]:
    return {
        "traceId": "5b8aa5a2d2c872e8321cf37308d69df2",
        "spanId": span_id,
        "name": "chat gpt-4o-mini",
        "startTimeUnixNano": "1796078064712464003",
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.request.model", "value": {"stringValue": "gpt-4o-mini"}},
            {"key": "gen_ai.input.messages", "value": {"stringValue": messages}},
        ],
    }


def _export(*spans: dict[str, object]) -> dict[str, object]:
    return {
        "resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": list(spans)}]}]
    }


GOOD = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hello there"}]}])


def test_partial_success_names_the_rejected_span(workdir: Path, collector: Proc) -> None:
    export = _export(_span("051581bf3cb55c13", GOOD), _span("051581bf3cb55c14", "[{"))
    raw = json.dumps(export).encode()
    status, body, _ = post(collector.port, "/v1/traces", raw, "application/json")
    assert status == 200
    partial = json.loads(body)["partialSuccess"]
    assert partial["rejectedSpans"] == "1"
    assert "gen_ai.input.messages" in partial["errorMessage"]
    # protobuf, gzip: the same (other span ids), answered in protobuf
    from google.protobuf.json_format import ParseDict

    export = _export(_span("051581bf3cb55c15", GOOD), _span("051581bf3cb55c16", "[{"))
    pb = ParseDict(_b64_ids(export), ExportTraceServiceRequest()).SerializeToString()
    status, body, ctype = post(
        collector.port,
        "/v1/traces",
        gzip.compress(pb),
        "application/x-protobuf",
        **{"Content-Encoding": "gzip"},
    )
    assert status == 200 and ctype == "application/x-protobuf"
    resp = ExportTraceServiceResponse.FromString(body)
    assert resp.partial_success.rejected_spans == 1
    got = wait_for(out_file(workdir), lambda t: t["trace_id"].startswith("5b8aa5a2"), 2)
    assert [t["input"]["query"] for t in got] == ["hello there"] * 2


def _b64_ids(export: dict[str, object]) -> dict[str, object]:
    import base64
    import copy

    out = copy.deepcopy(export)
    for s in out["resourceSpans"][0]["scopeSpans"][0]["spans"]:  # type: ignore[index]
        for key in ("traceId", "spanId"):
            s[key] = base64.b64encode(bytes.fromhex(s[key])).decode()
    return out


def test_what_the_protocol_refuses(collector: Proc) -> None:
    status, body, _ = post(collector.port, "/v1/traces", b"\x0a\xff\xff", "application/x-protobuf")
    assert status == 400
    assert status_pb2.Status.FromString(body).message
    status, _, _ = post(collector.port, "/v1/traces", b"{}", "text/plain")
    assert status == 415
    status, _, _ = post(collector.port, "/v1/metrics", b"{}", "application/json")
    assert status == 404
    status, body, _ = post(collector.port, "/v1/traces", b"[1, 2]", "application/json")
    assert status == 400 and "resourceSpans" in json.loads(body)["message"]
    status, body, _ = post(collector.port, "/v1/logs", b"", "application/x-protobuf")
    assert status == 200
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"http://127.0.0.1:{collector.port}/v1/traces", timeout=10)
    assert err.value.code == 405


def _status(port: int) -> dict[str, object]:
    url = f"http://127.0.0.1:{port}/__ctxscope__/collect"
    with urllib.request.urlopen(url, timeout=10) as resp:
        got: dict[str, object] = json.loads(resp.read())
        return got


def _settled(port: int, written: int) -> dict[str, object]:
    """The receiver's status once it has written ``written`` traces and holds nothing back."""
    deadline = time.monotonic() + 60
    while True:
        status = _status(port)
        if status["written"] == written and status["backlog"] == 0:
            return status
        if time.monotonic() > deadline:
            raise AssertionError(f"the receiver did not settle at {written} traces: {status}")
        time.sleep(0.1)


def test_a_batch_posted_again_is_written_once(tmp_path: Path) -> None:
    """Exporters retry a batch whose answer they missed: its spans, and log records joined to
    a span, must not become duplicate traces with new turn numbers."""
    collector = start_collector(tmp_path / "traces")
    try:
        trace_id = "7c9d" * 8
        first = {**_span("00000000000000a1", GOOD), "traceId": trace_id}
        spans = json.dumps(_export(first)).encode()
        for _ in range(2):
            status, body, _ = post(collector.port, "/v1/traces", spans, "application/json")
            assert status == 200 and json.loads(body) == {}
        # a span whose messages come as log records, the log records posted twice
        second = {
            **_span("00000000000000a2", GOOD),
            "traceId": trace_id,
            "attributes": [
                {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                {"key": "gen_ai.request.model", "value": {"stringValue": "gpt-4o-mini"}},
            ],
        }
        records = [
            {
                "timeUnixNano": str(1796078064712464003 + i),
                "traceId": trace_id,
                "spanId": "00000000000000a2",
                "eventName": name,
                "body": {
                    "kvlistValue": {"values": [{"key": "content", "value": {"stringValue": text}}]}
                },
            }
            for i, (name, text) in enumerate(
                [("gen_ai.system.message", "be brief"), ("gen_ai.user.message", "once only")]
            )
        ]
        logs = {"resourceLogs": [{"scopeLogs": [{"logRecords": records}]}]}
        for _ in range(2):
            status, _, _ = post(collector.port, "/v1/logs", json.dumps(logs).encode(), JSON)
            assert status == 200
        status, _, _ = post(
            collector.port, "/v1/traces", json.dumps(_export(second)).encode(), JSON
        )
        assert status == 200
        got = wait_for(
            tmp_path / "traces" / "live" / "otlp.jsonl",
            lambda t: t["trace_id"].startswith(trace_id),
            2,
        )
        settled = _settled(collector.port, 2)
        assert settled["duplicates"] == 1
        got = read_traces(tmp_path / "traces" / "live" / "otlp.jsonl")
        assert sorted(t["turn"] for t in got) == [0, 1]
        # the log records' messages once each, as the importer reads the batch sent once
        [joined] = [t for t in got if t["trace_id"].endswith("00000000000000a2")]
        once = traces_from_otlp({**_export(second), **logs})[0]
        assert joined["input"] == json.loads(once.input.model_dump_json())
    finally:
        collector.stop()


def _peak_rss(pid: int) -> int:
    """The most memory the process has held (VmHWM, bytes)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def _gzip_of_zeros(n: int) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    block = bytes(1 << 20)
    return b"".join(z.compress(block) for _ in range(n >> 20)) + z.flush()


def test_a_gzip_bomb_is_refused_while_it_unpacks(tmp_path: Path) -> None:
    """A 0.5 MB gzip body that unpacks to 512 MB: 413 in one line, and the receiver never
    holds much more than its 64 MB limit (it used to unpack all of it, then refuse)."""
    bomb = _gzip_of_zeros(512 << 20)
    assert len(bomb) < 1 << 20
    collector = start_collector(tmp_path / "traces")
    try:
        before = _peak_rss(collector.proc.pid)
        status, body, _ = post(
            collector.port, "/v1/traces", bomb, JSON, **{"Content-Encoding": "gzip"}
        )
        assert status == 413
        message = json.loads(body)["message"]
        assert "unpacks past 67,108,864 bytes" in message and "\n" not in message
        grew = _peak_rss(collector.proc.pid) - before
        assert grew < 3 * (64 << 20), f"the receiver grew by {grew >> 20} MB"
        # broken and cut gzip bodies: 400, one line each
        status, body, _ = post(
            collector.port, "/v1/traces", b"not gzip", JSON, **{"Content-Encoding": "gzip"}
        )
        assert status == 400 and "does not unpack" in json.loads(body)["message"]
        cut = gzip.compress(json.dumps(_export(_span("00000000000000b1", GOOD))).encode())[:-12]
        status, body, _ = post(
            collector.port, "/v1/traces", cut, JSON, **{"Content-Encoding": "gzip"}
        )
        assert status == 400 and "ends before its end" in json.loads(body)["message"]
        assert "Traceback" not in collector.text
    finally:
        collector.stop()
