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
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.rpc import status_pb2  # type: ignore[import-untyped]
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from proxy_support import FIXTURES, Proc, start_collector, start_upstream, wait_for

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


def test_partial_success_names_the_rejected_span(workdir: Path, collector: Proc) -> None:
    good = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hello there"}]}])
    export = {
        "resourceSpans": [
            {
                "resource": {"attributes": []},
                "scopeSpans": [
                    {"spans": [_span("051581bf3cb55c13", good), _span("051581bf3cb55c14", "[{")]}
                ],
            }
        ]
    }
    raw = json.dumps(export).encode()
    status, body, _ = post(collector.port, "/v1/traces", raw, "application/json")
    assert status == 200
    partial = json.loads(body)["partialSuccess"]
    assert partial["rejectedSpans"] == "1"
    assert "gen_ai.input.messages" in partial["errorMessage"]
    # protobuf, gzip: the same, answered in protobuf
    from google.protobuf.json_format import ParseDict

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
