"""OTLP GenAI span imports: structured and JSON-string attributes, corpus conversations."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ctxcore.errors import ImportFormatError
from ctxcore.formats.derive import TOOLS_ID, tools_text
from ctxcore.formats.load import detect_format, load_file
from ctxcore.formats.otlp import any_value, traces_from_otlp
from ctxcore.models import Status
from ctxcore.tokens import get_counter

START = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)


# ---- an independent encoder for OTLP JSON AnyValues (written for the test)
def av(v: Any) -> dict[str, Any]:
    if v is None:
        return {}  # an empty AnyValue is OTLP's null
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, str):
        return {"stringValue": v}
    if isinstance(v, list):
        return {"arrayValue": {"values": [av(x) for x in v]}}
    if isinstance(v, dict):
        return {"kvlistValue": {"values": [{"key": k, "value": av(x)} for k, x in v.items()]}}
    raise TypeError(v)


def span(attrs: dict[str, Any], *, i: int = 0, trace_id: str = "ab" * 16) -> dict[str, Any]:
    ns = int(START.timestamp() * 1e9) + i * 1_000_000_000
    return {
        "traceId": trace_id,
        "spanId": f"{i + 1:016x}",
        "name": f"chat {attrs.get('gen_ai.request.model', 'x')}",
        "kind": 3,
        "startTimeUnixNano": str(ns),
        "endTimeUnixNano": str(ns + 5_000_000),
        "attributes": [{"key": k, "value": av(v)} for k, v in attrs.items()],
    }


def otlp(*spans: dict[str, Any]) -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": av("agent")}]},
                "scopeSpans": [
                    {
                        "scope": {"name": "opentelemetry.instrumentation.openai"},
                        "spans": list(spans),
                    }
                ],
            }
        ]
    }


def a04_as_genai(row: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list]:
    """A LLaMA-Factory conversation converted by hand to GenAI parts (system, messages, tools)."""
    system: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []
    pending: list[str] = []
    n = 0
    for m in row["messages"]:
        if m["role"] == "system":
            system += [{"type": "text", "content": p["value"]} for p in m["content"]]
            continue
        parts: list[dict[str, Any]] = []
        for p in m["content"]:
            if p["type"] == "text" and m["role"] == "tool":
                parts.append(
                    {"type": "tool_call_response", "id": pending.pop(0), "response": p["value"]}
                )
            elif p["type"] in ("text", "reasoning"):
                parts.append({"type": p["type"], "content": p["value"]})
            elif p["type"] == "tool_call":
                call = json.loads(p["value"])
                n += 1
                pending.append(f"call_{n}")
                parts.append(
                    {
                        "type": "tool_call",
                        "id": f"call_{n}",
                        "name": call["name"],
                        "arguments": call["arguments"],
                    }
                )
        messages.append({"role": m["role"], "parts": parts})
    tools = [dict(t["function"], type="function") for t in json.loads(row["tools"])]
    return system, messages, tools


def _a04_rows(corpus: Path) -> list[dict[str, Any]]:
    path = corpus / "a04_llamafactory_reason_tool_use_demo_50.jsonl"
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("as_json_string", [True, False], ids=["json-string", "structured"])
def test_a04_conversations_as_genai_spans(corpus: Path, as_json_string: bool) -> None:
    rows = [r for r in _a04_rows(corpus) if any(m["role"] == "tool" for m in r["messages"])][:8]
    spans = []
    for i, row in enumerate(rows):
        system, messages, tools = a04_as_genai(row)
        enc = json.dumps if as_json_string else (lambda x: x)
        spans.append(
            span(
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "gpt-4o-mini",
                    "gen_ai.conversation.id": f"conv-{i % 2}",
                    "gen_ai.system_instructions": enc(system),
                    "gen_ai.input.messages": enc(messages),
                    "gen_ai.tool.definitions": enc(tools),
                    "gen_ai.usage.input_tokens": 1000 + i,
                    "gen_ai.usage.output_tokens": 50,
                },
                i=i,
            )
        )
    traces = traces_from_otlp(otlp(*spans))
    assert len(traces) == len(rows)
    counter = get_counter("o200k_base")  # gpt-4o family
    for i, (row, trace) in enumerate(zip(rows, traces, strict=True)):
        tool_texts = [
            p["value"]
            for m in row["messages"]
            if m["role"] == "tool"
            for p in m["content"]
            if p["type"] == "text"
        ]
        assert [p.content for p in trace.input.packets] == tool_texts
        assert [p.kind for p in trace.input.packets] == ["tool_result"] * len(tool_texts)
        assert trace.input.packets[0].id == "tool:call_1"
        assert trace.input.system_instructions == "\n".join(
            p["value"] for m in row["messages"] if m["role"] == "system" for p in m["content"]
        )
        users = [m for m in row["messages"] if m["role"] == "user"]
        assert trace.input.query == users[-1]["content"][0]["value"]
        assert len(trace.input.tools) == len(json.loads(row["tools"]))
        assert trace.result is not None
        d = {x.packet_id: x for x in trace.result.decisions}
        assert d[TOOLS_ID].tokens_before == counter.count(tools_text(trace.input.tools)) > 0
        assert all(x.status is Status.KEPT for x in trace.result.decisions)
        assert trace.result.totals.tokenizer == "o200k_base"
        assert trace.outcome is not None
        assert trace.outcome.usage == {"input_tokens": 1000 + i, "output_tokens": 50}
        assert trace.session_id == f"conv-{i % 2}"
        assert trace.turn == i // 2
        assert trace.created_at.timestamp() == pytest.approx(START.timestamp() + i)
        assert trace.builder.name == "import/otlp"
        assert trace.metadata["otlp"]["span_id"] == f"{i + 1:016x}"


def test_usage_far_from_our_count_warns_and_file_detection(corpus: Path, tmp_path: Path) -> None:
    row = _a04_rows(corpus)[1]
    system, messages, tools = a04_as_genai(row)
    attrs = {
        "gen_ai.system_instructions": json.dumps(system),
        "gen_ai.input.messages": json.dumps(messages),
        "gen_ai.usage.input_tokens": 7,
        "gen_ai.output.messages": json.dumps(
            [
                {
                    "role": "assistant",
                    "parts": [{"type": "text", "content": "done"}],
                    "finish_reason": "stop",
                }
            ]
        ),
    }
    path = tmp_path / "spans.otlp.json"
    path.write_text(json.dumps(otlp(span(attrs))), encoding="utf-8")
    assert detect_format(json.loads(path.read_text())) == "otlp"
    (trace,) = load_file(path)
    assert trace.result is not None and trace.outcome is not None
    assert trace.result.totals.used > 7 * 1.1
    assert any("provider reported 7 prompt tokens" in w for w in trace.result.warnings)
    assert trace.outcome.output == "done"


def test_legacy_flattened_prompt_attributes() -> None:
    attrs = {
        "gen_ai.system": "openai",
        "gen_ai.prompt.0.role": "system",
        "gen_ai.prompt.0.content": "Be brief.",
        "gen_ai.prompt.1.role": "user",
        "gen_ai.prompt.1.content": "What is 2+2?",
    }
    (trace,) = traces_from_otlp(otlp(span(attrs)))
    assert trace.input.system_instructions == "Be brief."
    assert trace.input.query == "What is 2+2?"


def test_spans_without_prompt_are_skipped_and_none_is_an_error() -> None:
    tool_span = span({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "bash"}, i=0)
    chat = span(
        {
            "gen_ai.input.messages": json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]
            )
        },
        i=1,
    )
    traces = traces_from_otlp(otlp(tool_span, chat))
    assert len(traces) == 1 and traces[0].input.query == "hi"
    with pytest.raises(ImportFormatError, match="none of the 1 spans carries a prompt"):
        traces_from_otlp(otlp(tool_span))
    with pytest.raises(ImportFormatError, match="not OTLP JSON"):
        traces_from_otlp({"spans": []})
    bad = span({"gen_ai.input.messages": "[{not json"})
    with pytest.raises(ImportFormatError, match="gen_ai.input.messages is not valid JSON"):
        traces_from_otlp(otlp(bad))


def test_any_value_decoding() -> None:
    value = {"a": [1, 2.5, True, "x"], "b": {"c": "d"}}
    assert any_value(av(value)) == value
    assert any_value({"bytesValue": "aGk="}) == "hi"


@pytest.mark.parametrize(
    "data",
    [
        {"resourceSpans": [None]},
        {"resourceSpans": [{"scopeSpans": "x"}]},
        {"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": "soon"}]}]}]},
    ],
)
def test_malformed_otlp_is_an_import_error(data: dict[str, Any]) -> None:
    with pytest.raises(ImportFormatError):
        traces_from_otlp(data)


def test_collector_file_exporter_jsonl(tmp_path: Path) -> None:
    """One OTLP export per line (the collector's file exporter): turns count across lines."""
    lines = []
    for i in range(3):
        msgs = [{"role": "user", "parts": [{"type": "text", "content": f"question {i}"}]}]
        attrs = {"gen_ai.conversation.id": "c1", "gen_ai.input.messages": json.dumps(msgs)}
        lines.append(json.dumps(otlp(span(attrs, i=i))))
    path = tmp_path / "collector.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    traces = load_file(path)
    assert [(t.session_id, t.turn, t.input.query) for t in traces] == [
        ("c1", i, f"question {i}") for i in range(3)
    ]


# ---- the other places instrumentations put a prompt (synthetic spans, one feature each)


def _event(name: str, attrs: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "attributes": [{"key": k, "value": av(v)} for k, v in attrs.items()]}


def test_span_events_with_the_body_in_attributes_or_as_json() -> None:
    """Azure AI Inference writes the body as JSON in gen_ai.event.content (Azure AI Agents
    nests text as {"text": {"value": ...}}); others put the body fields on the event."""
    s = span({"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"})
    s["events"] = [
        _event("gen_ai.system.message", {"gen_ai.event.content": '{"content": "Be terse."}'}),
        _event(
            "gen_ai.user.message",
            {"gen_ai.event.content": '{"content": {"text": {"value": "first"}}, "role": "user"}'},
        ),
        _event(
            "gen_ai.assistant.message",
            {
                "gen_ai.event.content": json.dumps(
                    {
                        "tool_calls": [
                            {"id": "c1", "function": {"name": "ls", "arguments": '{"p": "/"}'}}
                        ]
                    }
                )
            },
        ),
        _event("gen_ai.tool.message", {"content": "a b c", "id": "c1"}),
        _event("gen_ai.user.message", {"content": "and now?"}),
        _event(
            "gen_ai.choice",
            {"gen_ai.event.content": '{"index": 0, "message": {"content": "done"}}'},
        ),
    ]
    (trace,) = traces_from_otlp(otlp(s))
    assert trace.input.system_instructions == "Be terse."
    assert [m.content for m in trace.input.history] == ["first", 'ls({"p": "/"})']
    assert [(p.id, p.content) for p in trace.input.packets] == [("tool:c1", "a b c")]
    assert trace.input.query == "and now?"
    assert trace.outcome is not None and trace.outcome.output == "done"
    assert trace.metadata["otlp"]["messages_from"] == "gen_ai.*.message events"


def test_content_prompt_events_and_details_span_events() -> None:
    """Conventions 1.26-1.27 (gen_ai.content.prompt with gen_ai.prompt), and the current
    details event carried as a span event with JSON-string attributes."""
    old = span({"gen_ai.system": "openai"}, i=0)
    old["events"] = [
        _event(
            "gen_ai.content.prompt",
            {"gen_ai.prompt": json.dumps([{"role": "user", "content": "old style"}])},
        ),
        _event(
            "gen_ai.content.completion",
            {"gen_ai.completion": '[{"role": "assistant", "content": "old answer"}]'},
        ),
    ]
    new = span({"gen_ai.operation.name": "chat"}, i=1)
    new["events"] = [
        _event(
            "gen_ai.client.inference.operation.details",
            {
                "gen_ai.system_instructions": '[{"type": "text", "content": "sys"}]',
                "gen_ai.input.messages": json.dumps(
                    [{"role": "user", "parts": [{"type": "text", "content": "new style"}]}]
                ),
                "gen_ai.tool.definitions": '[{"type": "function", "name": "grep"}]',
            },
        )
    ]
    a, b = traces_from_otlp(otlp(old, new))
    assert a.input.query == "old style"
    assert a.outcome is not None and a.outcome.output == "old answer"
    assert (b.input.query, b.input.system_instructions) == ("new style", "sys")
    assert [t.name for t in b.input.tools] == ["grep"]


def test_openllmetry_flattened_tool_calls_and_functions() -> None:
    attrs = {
        "gen_ai.system": "openai",
        "gen_ai.prompt.0.role": "user",
        "gen_ai.prompt.0.content": "list files",
        "gen_ai.prompt.1.role": "assistant",
        "gen_ai.prompt.1.tool_calls.0.id": "t1",
        "gen_ai.prompt.1.tool_calls.0.name": "ls",
        "gen_ai.prompt.1.tool_calls.0.arguments": "{}",
        "gen_ai.prompt.2.role": "tool",
        "gen_ai.prompt.2.tool_call_id": "t1",
        "gen_ai.prompt.2.content": "README.md",
        "gen_ai.prompt.3.role": "user",
        "gen_ai.prompt.3.content": "thanks",
        "llm.request.functions.0.name": "ls",
        "llm.request.functions.0.parameters": '{"type": "object"}',
        "gen_ai.completion.0.content": "you're welcome",
    }
    (trace,) = traces_from_otlp(otlp(span(attrs)))
    assert [(p.id, p.content) for p in trace.input.packets] == [("tool:t1", "README.md")]
    assert [(t.name, t.parameters) for t in trace.input.tools] == [("ls", {"type": "object"})]
    assert trace.outcome is not None and trace.outcome.output == "you're welcome"


def _chat(i: int, parent: str, **attrs: Any) -> dict[str, Any]:
    msgs = [{"role": "user", "parts": [{"type": "text", "content": f"q{i}"}]}]
    s = span({"gen_ai.input.messages": json.dumps(msgs), **attrs}, i=i)
    s["parentSpanId"] = parent
    return s


def test_sessions_are_inherited_from_ancestors_else_the_trace_id() -> None:
    root = span({"session.id": "user-42-chat"}, i=10)
    agent = span({"gen_ai.operation.name": "invoke_agent"}, i=11)
    agent["parentSpanId"] = root["spanId"]
    own = _chat(0, agent["spanId"], **{"gen_ai.conversation.id": "conv-own"})
    inherited = _chat(1, agent["spanId"])
    other = _chat(
        2,
        "",
    )
    other["traceId"] = "cd" * 16
    traces = traces_from_otlp(otlp(root, agent, own, inherited, other))
    assert [(t.session_id, t.turn) for t in traces] == [
        ("conv-own", 0),
        ("user-42-chat", 0),
        ("cd" * 16, 0),
    ]
    assert traces[1].metadata["otlp"]["session_from"] == "session.id of span 'chat x'"


def test_ids_in_base64_and_python_span_dumps() -> None:
    """protobuf's JSON mapping writes ids in base64; Python's span.to_json() as 0x-hex with
    flat attributes and an ISO start time."""
    s = _chat(0, "")
    s["traceId"] = base64.b64encode(bytes.fromhex("ab" * 16)).decode()
    s["spanId"] = base64.b64encode(bytes.fromhex("01" * 8)).decode()
    (trace,) = traces_from_otlp(otlp(s))
    assert trace.trace_id == f"{'ab' * 16}-{'01' * 8}"
    dumped = [
        {
            "name": "chat gpt-4o",
            "context": {"trace_id": "0x" + "ef" * 16, "span_id": "0x" + "02" * 8},
            "parent_id": None,
            "start_time": "2025-03-04T05:06:07.000000Z",
            "attributes": {
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.input.messages": '[{"role": "user", "parts": [{"type": "text", '
                '"content": "hi"}]}]',
            },
            "events": [],
        }
    ]
    assert detect_format(dumped) == "otlp"
    (trace,) = traces_from_otlp(dumped)
    assert trace.session_id == "ef" * 16 and trace.created_at == START


def test_log_records_named_by_attribute_and_other_logs_ignored() -> None:
    """Older SDKs named an event by its event.name attribute; an application's own log lines
    (no gen_ai.* name) are not part of any prompt."""
    chat = span({"gen_ai.operation.name": "chat"})
    logs = {
        "resourceLogs": [
            {
                "scopeLogs": [
                    {
                        "logRecords": [
                            {
                                "traceId": chat["traceId"],
                                "spanId": chat["spanId"],
                                "attributes": [
                                    {"key": "event.name", "value": av("gen_ai.user.message")}
                                ],
                                "body": av({"content": "from an old SDK"}),
                            },
                            {"spanId": "99" * 8, "body": av("GET /health 200")},
                        ]
                    }
                ]
            }
        ]
    }
    (trace,) = traces_from_otlp({**otlp(chat), **logs})
    assert trace.input.query == "from an old SDK"


@pytest.mark.parametrize(
    ("attrs", "says"),
    [
        ({"openinference.span.kind": "LLM", "llm.model_name": "m"}, "OPENINFERENCE_HIDE_INPUTS"),
        ({"ai.operationId": "ai.generateText.doGenerate"}, "recordInputs: true"),
        ({"traceloop.span.kind": "llm", "gen_ai.system": "openai"}, "TRACELOOP_TRACE_CONTENT"),
        (
            {"gen_ai.operation.name": "chat"},
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only",
        ),
    ],
)
def test_the_hint_names_what_the_instrumentation_needs(attrs: dict[str, Any], says: str) -> None:
    with pytest.raises(ImportFormatError, match="none of the 1 spans carries a prompt") as err:
        traces_from_otlp(otlp(span(attrs)))
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_protobuf_gz_that_unpacks_past_the_cap_is_refused_while_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A protobuf file is decoded whole, so what it unpacks to is capped: a small .gz that
    expands past the cap is one error naming the file and the limit, and reading stops at the
    cap (it is not unpacked whole first)."""
    import gzip
    import tracemalloc

    from ctxcore.formats import otlp_proto

    fixtures = Path(__file__).resolve().parent / "fixtures" / "imports" / "otlp-protobuf"
    real = (fixtures / "openai-v2-events.otlp.binpb").read_bytes()
    packed = tmp_path / "events.otlp.binpb.gz"
    packed.write_bytes(gzip.compress(real))
    assert len(load_file(packed)) == len(load_file(fixtures / "openai-v2-events.otlp.binpb"))
    # the cap just below what the real file unpacks to
    monkeypatch.setattr(otlp_proto, "MAX_PROTOBUF_BYTES", len(real) - 1)
    with pytest.raises(ImportFormatError) as err:
        load_file(packed)
    assert str(err.value).startswith(f"{packed}: over {len(real) - 1:,} bytes unpacked")
    assert "the limit for an OTLP protobuf file" in str(err.value)
    # a bomb: 256 MiB of zeros in a few hundred KB, refused after reading 1 MiB of it
    bomb = tmp_path / "bomb.pb.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as f:
        for _ in range(64):
            f.write(bytes(4 << 20))
    assert bomb.stat().st_size < 1 << 20
    monkeypatch.setattr(otlp_proto, "MAX_PROTOBUF_BYTES", 1 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(ImportFormatError, match=r"bomb\.pb\.gz: over 1,048,576 bytes"):
            load_file(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"held {peak / 2**20:.0f} MiB while refusing it"
    # uncompressed, the same cap
    raw = tmp_path / "big.binpb"
    raw.write_bytes(real)
    monkeypatch.setattr(otlp_proto, "MAX_PROTOBUF_BYTES", len(real) // 2)
    with pytest.raises(ImportFormatError, match=rf"big\.binpb: over {len(real) // 2:,} bytes, "):
        load_file(raw)
