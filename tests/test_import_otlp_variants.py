"""OpenTelemetry as instrumentations really emit it: every variant imports the same calls.

The ``otlp-*`` fixtures were made by ``scripts/make_otlp_fixtures.py`` with the real
opentelemetry-instrumentation-openai-v2 and SDK exporters, replaying three recorded OpenAI
exchanges (``openai-chat/*.request.json`` / ``*.response.json``). Whatever the variant (log
records, span events, span attributes, a details event, JSON or protobuf), the import must
find what those recorded requests hold, by the hand counts of ``EXPECTED.json``, reach the
captured input the OpenAI importer builds from the request itself, carry the response's
usage and answer, and name the sessions the agent set. The public OpenInference and Vercel
AI SDK span dumps are checked against their hand counts too.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import ParseDict
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from ctxcore.errors import CtxscopeError, ImportFormatError
from ctxcore.formats.accounting import describe, imported_counts
from ctxcore.formats.load import detect_format, load_file
from ctxcore.formats.otlp import traces_from_protobuf
from ctxcore.formats.otlp_proto import decode_message, looks_binary
from ctxcore.models import Trace

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "imports"
EXPECTED: dict[str, dict[str, Any]] = json.loads((FIXTURES / "EXPECTED.json").read_text())["files"]

#: The recorded exchanges the generator replayed, in call order: (stem, session, turn).
CALLS: list[tuple[str, str, int]] = [
    ("otel-contrib-tool-calls-turn1", "conv-weather-seattle-sf", 0),
    ("otel-contrib-tool-calls-turn2", "conv-weather-seattle-sf", 1),
    ("openinference-tool-calls", "conv-city-facts-sf", 0),
]
#: fixture -> where its messages travelled.
VARIANTS: dict[str, str] = {
    "otlp-logs/openai-v2-events.otlp.jsonl": "gen_ai.*.message events",
    "otlp-span-events/openai-v2-span-events.otlp.jsonl": "gen_ai.*.message events",
    "otlp-protobuf/openai-v2-events.otlp.binpb": "gen_ai.*.message events",
    "otlp-logs/openai-v2-latest-event-only.otlp.jsonl": "gen_ai.input.messages",
    "otlp-json/openai-v2-latest-span-only.otlp.jsonl": "gen_ai.input.messages",
    "otlp-protobuf/openai-v2-latest-span-only.traces.binpb": "gen_ai.input.messages",
}


def _counts(exp: dict[str, Any]) -> dict[str, int]:
    return {
        "messages": exp["messages"]["total"],
        "system_parts": exp["system_parts"],
        "tool_calls": exp["tool_calls"],
        "tool_results": exp["tool_results"],
        "tools": exp["tool_definitions"],
        "media": exp["images"] + exp["documents"],
    }


def _view(trace: Trace) -> dict[str, Any]:
    """What a captured input says, with tool-call arguments compared as JSON (one
    instrumentation re-serialises them, so their spacing differs)."""
    history = []
    for m in trace.input.history:
        calls = m.metadata.get("tool_calls") or []
        history.append(
            (
                m.role,
                m.content if not calls else None,
                [(c["id"], c["name"], json.loads(c["arguments"])) for c in calls],
            )
        )
    return {
        "query": trace.input.query,
        "system": trace.input.system_instructions,
        "history": history,
        "packets": [(p.id, p.kind, p.content) for p in trace.input.packets],
    }


@pytest.fixture(scope="module")
def recorded() -> list[Trace]:
    """The recorded requests, imported as OpenAI chat requests."""
    return [load_file(FIXTURES / "openai-chat" / f"{stem}.request.json")[0] for stem, *_ in CALLS]


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_a_generated_variant_imports_the_recorded_calls(name: str, recorded: list[Trace]) -> None:
    path = FIXTURES / name
    if path.suffix == ".binpb":
        assert looks_binary(path.read_bytes())
    else:
        first = json.loads(path.read_text().splitlines()[0])
        assert detect_format(first) == "otlp"
    traces = load_file(path)
    assert len(traces) == len(CALLS)
    for trace, want, (stem, session, turn) in zip(traces, recorded, CALLS, strict=True):
        req = EXPECTED[f"openai-chat/{stem}.request.json"]
        resp = EXPECTED[f"openai-chat/{stem}.response.json"]
        meta = trace.metadata["import"]
        # the instrumentation does not record tool definitions, in any mode
        assert meta["source"] == {**_counts(req), "tools": 0}, stem
        assert imported_counts(trace) == meta["source"]
        assert "kept_as_text" not in meta and "skipped" not in meta
        assert _view(trace) == _view(want), stem
        assert trace.outcome is not None
        assert trace.outcome.usage == {
            "input_tokens": resp["usage"]["input_tokens"],
            "output_tokens": resp["usage"]["output_tokens"],
        }
        body = json.loads((FIXTURES / "openai-chat" / f"{stem}.response.json").read_text())
        reply = body["choices"][0]["message"]
        # the reply's text, or the tool calls it made (name, and the arguments as the
        # variant recorded them: a JSON string or an object)
        calls = [c["function"] for c in reply.get("tool_calls") or []]
        if reply["content"] is not None or not calls:
            assert trace.outcome.output == reply["content"]
        else:
            got = [x.partition("(") for x in (trace.outcome.output or "").split("\n")]
            assert [(n, json.loads(a[:-1])) for n, _, a in got] == [
                (c["name"], json.loads(c["arguments"])) for c in calls
            ]
        assert (trace.session_id, trace.turn) == (session, turn)
        assert trace.metadata["otlp"]["messages_from"] == VARIANTS[name]
        assert trace.metadata["model"] == "gpt-4o-mini"
        assert trace.builder.name == "import/otlp"


def test_json_and_protobuf_of_one_run_give_the_same_traces() -> None:
    for json_name, pb_name in (
        ("otlp-logs/openai-v2-events.otlp.jsonl", "otlp-protobuf/openai-v2-events.otlp.binpb"),
        (
            "otlp-json/openai-v2-latest-span-only.otlp.jsonl",
            "otlp-protobuf/openai-v2-latest-span-only.traces.binpb",
        ),
    ):
        a, b = load_file(FIXTURES / json_name), load_file(FIXTURES / pb_name)
        assert [(t.trace_id, t.session_id, t.turn, t.created_at) for t in a] == [
            (t.trace_id, t.session_id, t.turn, t.created_at) for t in b
        ]
        assert [t.input for t in a] == [t.input for t in b]


def test_sessions_come_from_the_agent_span_and_say_so() -> None:
    legacy = load_file(FIXTURES / "otlp-logs/openai-v2-events.otlp.jsonl")
    assert legacy[0].metadata["otlp"]["session_from"] == "session.id of span 'agent weather'"
    latest = load_file(FIXTURES / "otlp-json/openai-v2-latest-span-only.otlp.jsonl")
    assert latest[0].metadata["otlp"]["session_from"] == (
        "gen_ai.conversation.id of span 'invoke_agent weather'"
    )
    # the same call is in the same trace as its turn-1 sibling: one OpenTelemetry trace id
    assert {t.trace_id.split("-")[0] for t in latest[:2]} == {
        latest[0].metadata["otlp"]["trace_id"]
    }


def _lines(name: str) -> list[str]:
    return [x for x in (FIXTURES / name).read_text().splitlines() if x.strip()]


def test_log_records_without_their_spans_still_import(tmp_path: Path) -> None:
    """A logs-only file: each span's events make a call; no usage, sessions by trace id."""
    spans_line, logs_line = _lines("otlp-logs/openai-v2-events.otlp.jsonl")
    path = tmp_path / "logs.json"
    path.write_text(logs_line)
    traces = load_file(path)
    assert [t.input.query for t in traces] == [
        t.input.query for t in load_file(FIXTURES / "otlp-logs/openai-v2-events.otlp.jsonl")
    ]
    assert all(t.outcome is None or not t.outcome.usage for t in traces)
    trace_ids = [
        s["traceId"] for s in json.loads(spans_line)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    ]
    assert [(t.session_id, t.turn) for t in traces] == [
        (trace_ids[0], 0),
        (trace_ids[0], 1),
        (trace_ids[2], 0),
    ]


def test_spans_without_their_log_records_say_to_export_the_logs(tmp_path: Path) -> None:
    spans_line, _ = _lines("otlp-logs/openai-v2-events.otlp.jsonl")
    path = tmp_path / "spans.json"
    path.write_text(spans_line)
    with pytest.raises(ImportFormatError) as err:
        load_file(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: none of the 5 spans carries a prompt")
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true" in msg
    assert "export the logs too" in msg
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only" in msg
    assert "OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental" in msg


def test_events_recorded_without_content_give_the_capture_hint() -> None:
    path = FIXTURES / "otlp-logs/openai-v2-no-content.otlp.jsonl"
    with pytest.raises(ImportFormatError) as err:
        load_file(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: none of the 5 spans carries a prompt")
    assert "recorded without content" in msg
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true" in msg
    assert "\n" not in msg


def test_protobuf_messages_are_told_apart_and_framing_is_optional() -> None:
    raw = (FIXTURES / "otlp-protobuf/openai-v2-events.otlp.binpb").read_bytes()
    (size,) = struct.unpack(">I", raw[:4])
    traces_msg, rest = raw[4 : 4 + size], raw[4 + size :]
    assert "resourceSpans" in decode_message(traces_msg, "t")
    logs_msg = rest[4:]
    decoded = decode_message(logs_msg, "l")
    assert "resourceLogs" in decoded and "resourceSpans" not in decoded
    # ids come back as OTLP JSON writes them (hex), not as protobuf's JSON mapping (base64)
    record = decoded["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]
    assert len(record["spanId"]) == 16 and int(record["spanId"], 16) >= 0
    # a bare ExportLogsServiceRequest, as an OTLP/HTTP exporter posts it
    _, logs_line = _lines("otlp-logs/openai-v2-events.otlp.jsonl")
    bare = ParseDict(json.loads(logs_line), ExportLogsServiceRequest()).SerializeToString()
    assert len(traces_from_protobuf(bare, "bare.binpb")) == len(CALLS)


def test_broken_protobuf_gives_one_line_errors() -> None:
    raw = (FIXTURES / "otlp-protobuf/openai-v2-latest-span-only.traces.binpb").read_bytes()
    mutants = [raw[:n] for n in (1, 7, len(raw) // 2, len(raw) - 1)]
    mutants += [raw[:k] + bytes([raw[k] ^ 0xFF]) + raw[k + 1 :] for k in range(0, len(raw), 97)]
    imported = 0
    for data in mutants:
        try:
            imported += len(traces_from_protobuf(data, "f.binpb"))
        except CtxscopeError as exc:
            assert "\n" not in str(exc).strip()
    assert imported > 0  # most single-byte flips land in text and still import


def test_a_broken_span_is_reported_and_the_rest_imported(tmp_path: Path) -> None:
    line = json.loads(_lines("otlp-json/openai-v2-latest-span-only.otlp.jsonl")[0])
    spans = line["resourceSpans"][0]["scopeSpans"][0]["spans"]
    broken = next(s for s in spans if s["name"].startswith("chat"))
    for kv in broken["attributes"]:
        if kv["key"] == "gen_ai.input.messages":
            kv["value"] = {"stringValue": "[{not json"}
    path = tmp_path / "one-broken.jsonl"
    path.write_text(json.dumps(line) + "\n" + json.dumps({"resourceLogs": []}) + "\n")
    traces = load_file(path)
    assert len(traces) == len(CALLS) - 1
    [skipped] = traces[0].metadata["import"]["skipped"]
    assert skipped.startswith(f"{path}:1: resourceSpans[0].scopeSpans[0].spans[")
    assert "gen_ai.input.messages is not valid JSON" in skipped
    assert any("not imported" in line and "not valid JSON" in line for line in describe(traces))


# --------------------------------------------------------------------------- public dumps


def test_openinference_attributes_match_the_hand_counts() -> None:
    for stem in (
        "openinference-genai-client-span-tool-calls",
        "openinference-genai-client-span-input-output-only",
    ):
        name = f"openinference/{stem}.attributes.json"
        exp = EXPECTED[name]
        assert detect_format(json.loads((FIXTURES / name).read_text())) == "otlp"
        [trace] = load_file(FIXTURES / name)
        meta = trace.metadata["import"]
        from_value = exp["messages"].get("from_input_value")
        if from_value:  # no llm.input_messages: the request is read from input.value
            assert trace.metadata["otlp"]["messages_from"] == "input.value"
            want_messages = from_value["total"]
            want_calls, want_results = (
                exp["tool_calls_in_input_value"],
                exp["tool_results_in_input_value"],
            )
        else:
            assert trace.metadata["otlp"]["messages_from"] == "llm.input_messages"
            want_messages, want_calls, want_results = (
                exp["messages"]["total"],
                exp["tool_calls"],
                exp["tool_results"],
            )
        assert meta["format"] == "openinference"
        assert meta["source"] == {
            "messages": want_messages,
            "system_parts": 0,
            "tool_calls": want_calls,
            "tool_results": want_results,
            "tools": 0,
            "media": 0,
        }
        assert imported_counts(trace) == meta["source"]
        assert trace.outcome is not None and trace.outcome.usage == exp["usage"]
        assert trace.outcome.output == (
            "The weather in Paris is currently rainy with a temperature of 57°F."
        )
        assert trace.input.query == "Weather in Paris?"
        assert [p.id for p in trace.input.packets] == ["tool:1234"]
        assert trace.metadata["model"] == "gpt-4-0613"
        assert trace.input.output_reserve == 200  # llm.invocation_parameters
        assert trace.session_id == stem  # no session.id, no trace id: the file's name


def test_vercel_ai_spans_match_the_hand_counts() -> None:
    for name in sorted(n for n in EXPECTED if n.startswith("vercel-ai/")):
        exp = EXPECTED[name]
        assert detect_format(json.loads((FIXTURES / name).read_text())) == "otlp", name
        traces = load_file(FIXTURES / name)
        assert len(traces) == exp["model_calls"], name
        per_call = exp.get("per_span_messages") or exp.get("per_call_messages") or [exp["messages"]]
        usages = exp.get("per_span_usage") or exp.get("per_call_usage") or [exp["usage"]]
        for trace, msgs, usage in zip(traces, per_call, usages, strict=True):
            meta = trace.metadata["import"]
            assert meta["format"] == "vercel-ai"
            assert meta["source"]["messages"] == msgs["total"], name
            assert meta["source"]["system_parts"] == msgs["by_role"].get("system", 0)
            assert imported_counts(trace) == meta["source"], name
            assert trace.outcome is not None and trace.outcome.usage == usage, name
        totals = {
            k: sum(t.metadata["import"]["source"][k] for t in traces)
            for k in ("tool_calls", "tool_results")
        }
        assert totals == {"tool_calls": exp["tool_calls"], "tool_results": exp["tool_results"]}
        # tools are declared on every call that offers them
        assert max(len(t.input.tools) for t in traces) == exp["tool_definitions"]


def test_vercel_tool_step_becomes_packets_and_reasoning() -> None:
    traces = load_file(FIXTURES / "vercel-ai/vercel-otel-snapshot-streamText-two-steps.spans.json")
    second = traces[1]
    [packet] = second.input.packets
    assert (packet.id, packet.content) == ("tool:call-1", "result1")
    [assistant] = second.input.history
    assert assistant.metadata["reasoning"] == "thinking"
    assert assistant.metadata["tool_calls"] == [
        {"id": "call-1", "name": "tool1", "arguments": '{"value":"value"}'}
    ]
    [tool] = second.input.tools
    assert tool.name == "tool1" and tool.parameters["required"] == ["value"]
    assert [t.session_id for t in traces] == ["vercel-otel-snapshot-streamText-two-steps"] * 2
    assert [t.turn for t in traces] == [0, 1]
    assert second.outcome is not None and second.outcome.output == "Hello, world!"
    # real calls carry their trace ids: each is its own session
    real = load_file(FIXTURES / "vercel-ai/openinference-v6-generateText-doGenerate.spans.json")
    assert [t.session_id for t in real] == [
        "b3e700af9eab81e19f72f964d62a35af",
        "edff2fc5854be6170e8cccccec0c82cf",
    ]
    assert real[1].input.system_instructions == "You are a helpful assistant."


def _recorded_replies(name: str) -> list[str]:
    """Each span's gen_ai.output.messages, read here: its text, then each tool call as a
    ``name(args)`` line (arguments as compact JSON)."""
    out: list[str] = []
    for line in _lines(name):
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    attrs = {a["key"]: a["value"] for a in span["attributes"]}
                    if "gen_ai.output.messages" not in attrs:
                        continue
                    [reply] = json.loads(attrs["gen_ai.output.messages"]["stringValue"])
                    lines = [p["content"] for p in reply["parts"] if p["type"] == "text"]
                    lines += [
                        f"{p['name']}({json.dumps(p['arguments'], separators=(',', ':'))})"
                        for p in reply["parts"]
                        if p["type"] == "tool_call"
                    ]
                    out.append("\n".join(lines))
    return out


def test_a_reply_that_calls_tools_keeps_its_calls_as_its_output() -> None:
    # gen_ai.output.messages with tool_call parts (span attributes) or a gen_ai.choice
    # event with tool_calls (logs): the reply is its calls, not nothing
    want = _recorded_replies("otlp-json/openai-v2-latest-span-only.otlp.jsonl")
    assert sum("(" in r for r in want) == 2
    for name in (
        "otlp-json/openai-v2-latest-span-only.otlp.jsonl",
        "otlp-protobuf/openai-v2-latest-span-only.traces.binpb",
        "otlp-logs/openai-v2-latest-event-only.otlp.jsonl",
    ):
        got = [t.outcome.output if t.outcome else None for t in load_file(FIXTURES / name)]
        assert got == want, name
