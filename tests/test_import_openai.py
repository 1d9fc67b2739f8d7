"""OpenAI-style imports on the real corpus: every sample imports and adds back up to its source."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ctxcore.cli import main
from ctxcore.diagnostics import diagnose
from ctxcore.errors import ImportFormatError
from ctxcore.formats.derive import FORMAT_ID, TASK_ID, TOOLS_ID, tools_text
from ctxcore.formats.load import load_file, traces_from_value
from ctxcore.formats.openai import (
    captured_input_from_messages,
    messages_from_sharegpt,
    trace_from_request,
)
from ctxcore.models import Status, Trace
from ctxcore.pipeline.common import INSTRUCTIONS_ID
from ctxcore.tokens import get_counter

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(p["value"] for p in content if p["type"] == "text")


def check_sums(trace: Trace) -> None:
    """Derived decisions: all kept, counted with the real tokenizer, adding up to totals."""
    assert trace.result is not None
    counter = get_counter(trace.result.totals.tokenizer)
    decisions = {d.packet_id: d for d in trace.result.decisions}
    assert all(d.status is Status.KEPT for d in decisions.values())
    assert all(d.reason.value == "FITS" for d in decisions.values())
    assert sum(d.tokens_after for d in decisions.values()) == trace.result.totals.used
    assert sum(p.used for p in trace.result.partitions) == trace.result.totals.used
    for p in trace.input.packets:
        assert decisions[p.id].tokens_before == counter.count(p.content)
    assert decisions[TASK_ID].tokens_before == counter.count(trace.input.query)
    if trace.input.tools:
        assert decisions[TOOLS_ID].tokens_before == counter.count(tools_text(trace.input.tools))
        assert decisions[TOOLS_ID].tokens_before > 0
    # the chat format's own tokens: 3 per message (system counted once) + 3 for the reply
    n_messages = sum(
        1 for m in trace.result.messages or [] if m.role not in ("system", "developer")
    )
    n_messages += bool(trace.input.system_instructions)
    assert decisions[FORMAT_ID].tokens_before == 3 * n_messages + 3
    # one decision per packet, per history message, plus instructions/tools/task/format
    expected = len(trace.input.packets) + len(trace.input.history) + 2
    expected += bool(trace.input.system_instructions) + bool(trace.input.tools)
    assert len(decisions) == expected


def _steps(src: list[dict[str, Any]]) -> list[int]:
    """The positions of a trajectory's model calls: one per assistant message."""
    return [i for i, m in enumerate(src) if m["role"] == "assistant"]


@pytest.mark.parametrize(
    "name",
    [
        "a01_sweagent_marshmallow-1867_function-calling.traj.json",
        "a02_sweagent_function_calling_simple.traj.json",
    ],
)
def test_sweagent_function_calling(corpus: Path, name: str) -> None:
    data = json.loads((corpus / name).read_text(encoding="utf-8"))
    src = data["history"]
    traces = load_file(corpus / name)
    steps = _steps(src)
    # one trace per model call (turn = step), one session
    assert len(traces) == len(steps)
    assert [t.turn for t in traces] == list(range(len(steps)))
    assert len({t.session_id for t in traces}) == 1
    for t in traces:
        check_sums(t)
        assert t.builder.name == "import/swe-agent"
        assert t.config.preset == "ctxscope"
        assert t.input.system_instructions == "\n\n".join(
            m["content"] for m in src if m["role"] == "system"
        )
    # call k sees everything before its reply: the results of the k calls before it
    recorded = "trajectory" in data  # a01 keeps the messages each step sent
    for k, (t, at) in enumerate(zip(traces, steps, strict=True)):
        before = src[:at]
        tool_msgs = [m for m in before if m["role"] == "tool"]
        expected_ids: list[str] = []
        for m in tool_msgs:
            pid, n = f"tool:{m['tool_call_ids'][0]}", 2
            while pid in expected_ids:  # a01's replay reuses one call id: "#2"
                pid, n = f"tool:{m['tool_call_ids'][0]}#{n}", n + 1
            expected_ids.append(pid)
        assert [p.id for p in t.input.packets] == expected_ids
        assert {p.kind for p in t.input.packets} <= {"tool_result"}
        if not recorded:
            assert [p.content for p in t.input.packets] == [m["content"] for m in tool_msgs]
        users = [m for m in before if m["role"] == "user"]
        assert t.input.query == users[-1]["content"]
        assert len(t.input.history) == k + len(users) - 1
        # the reply this call produced, and its tool calls, are the trace's output
        reply = src[at]
        assert t.outcome is not None and t.outcome.output is not None
        assert [c["id"] for c in t.metadata["session_log"]["tool_calls"]] == [
            c["id"] for c in reply["tool_calls"]
        ] or recorded
    # the assistant's tool calls are part of its history message, compactly
    last = traces[-1]
    by_id = {m.id: m for m in last.input.history}
    for i, m in enumerate(src[: steps[-1]]):
        if m["role"] != "assistant":
            continue
        hist = by_id[f"msg-{i}"]
        assert hist.content.startswith(m["content"])
        for call in m["tool_calls"]:
            fn = call["function"]
            assert f"{fn['name']}({fn['arguments']})" in hist.content
            assert {"id": call["id"], "name": fn["name"], "arguments": fn["arguments"]} in (
                hist.metadata["tool_calls"]
            )
    # the tool name travels with the result
    first_call = src[steps[0]]["tool_calls"][0]
    assert last.input.packets[0].metadata["name"] == first_call["function"]["name"]
    # what came after the last call (the submission's output) is said, not dropped
    assert last.metadata["session_log"]["after_last_call"] == {"messages": 1, "tool_results": 1}


def test_a01_steps_keep_what_the_model_saw(corpus: Path) -> None:
    """SWE-agent elides old outputs before each call; its steps record what was sent."""
    data = json.loads(
        (corpus / "a01_sweagent_marshmallow-1867_function-calling.traj.json").read_text()
    )
    traces = load_file(corpus / "a01_sweagent_marshmallow-1867_function-calling.traj.json")
    for step, t in zip(data["trajectory"], traces, strict=True):
        sent = step["messages"][
            : max(i for i, m in enumerate(step["messages"]) if m["role"] == "assistant")
        ]
        assert [p.content for p in t.input.packets] == [
            m["content"] for m in sent if m["role"] == "tool"
        ]
    elided = [p for p in traces[-1].input.packets if p.content.startswith("Old environment output")]
    assert elided, "a01's later steps see elided observations"
    assert "tool definitions" in traces[0].metadata["import"]["reconstructed"]


def test_a03_bare_message_list(corpus: Path) -> None:
    src = json.loads((corpus / "a03_mini-swe-agent_github_issue.traj.json").read_text())
    traces = load_file(corpus / "a03_mini-swe-agent_github_issue.traj.json")
    steps = _steps(src)
    assert len(traces) == len(steps) and traces[0].builder.name == "import/mini-swe-agent"
    for k, (t, at) in enumerate(zip(traces, steps, strict=True)):
        check_sums(t)
        assert t.turn == k
        # the task is the first user message; each later one is a result (a bash block's)
        assert t.input.query == src[1]["content"]
        assert len(t.input.packets) == k
        assert [p.content for p in t.input.packets] == [
            m["content"] for m in src[2:at] if m["role"] == "user"
        ]
        assert len(t.input.history) == k


def test_a04_jsonl_parts_parallel_calls_and_tools(corpus: Path) -> None:
    path = corpus / "a04_llamafactory_reason_tool_use_demo_50.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    traces = load_file(path)
    assert len(traces) == len(rows) == 50
    assert [t.turn for t in traces] == list(range(50))
    n_tool_msgs = sum(m["role"] == "tool" for r in rows for m in r["messages"])
    assert sum(len(t.input.packets) for t in traces) == n_tool_msgs > 0
    for row, trace in zip(rows, traces, strict=True):
        check_sums(trace)
        msgs = row["messages"]
        assert len(trace.input.tools) == len(json.loads(row["tools"]))
        tools = [m for m in msgs if m["role"] == "tool"]
        assert [p.content for p in trace.input.packets] == [_text(m["content"]) for m in tools]
        # tool calls without ids get call ids; each result answers the next pending call
        calls = [
            json.loads(p["value"])
            for m in msgs
            if m["role"] == "assistant"
            for p in m["content"]
            if p["type"] == "tool_call"
        ]
        names = [p.metadata.get("name") for p in trace.input.packets]
        assert names == [c["name"] for c in calls][: len(names)]
        reasoning = [p["value"] for m in msgs for p in m["content"] if p["type"] == "reasoning"]
        kept_reasoning = [
            m.metadata["reasoning"] for m in trace.input.history if "reasoning" in m.metadata
        ]
        # reasoning is kept beside the message, not counted as context
        assert all(r in reasoning for r in kept_reasoning)
        assert all(r not in trace.result.prompt for r in kept_reasoning)  # type: ignore[union-attr]
    parallel = [
        t for t in traces if any(len(m.metadata.get("tool_calls", [])) > 1 for m in t.input.history)
    ]
    assert parallel, "a04 has parallel tool calls"


@pytest.mark.parametrize(
    "name",
    [
        "b01_mswea_gemini3pro_pytest-dev__pytest-7571.traj.json",
        "b02_mswea_gemini3pro_django__django-16560.traj.json",
        "b03_sweagent_pydicom-1458.traj.json",
    ],
)
def test_long_trajectories(corpus: Path, name: str) -> None:
    data = json.loads((corpus / name).read_text(encoding="utf-8"))
    src = data.get("messages") or data["history"]
    traces = load_file(corpus / name)
    steps = _steps(src)
    assert len(traces) == len(steps)
    assert [t.turn for t in traces] == list(range(len(steps)))
    counter = get_counter("cl100k_base")
    counts = counter.count_many([_text(m["content"]) for m in src])
    for t, at in zip(traces, steps, strict=True):
        check_sums(t)
        # the call's context is every message before its reply (the bash action of a reply
        # is a tool call line, so the totals are compared on a plain-text reply only)
        assert len(t.result.messages or []) == at  # type: ignore[union-attr]
        if not any(m["role"] == "assistant" for m in src[:at]):
            assert t.result.totals.used == sum(counts[:at]) + 3 * (at - 1) + 3 + 3  # type: ignore[union-attr]
    # each call's usage is its own response's (mini-swe-agent keeps them)
    if "messages" in data:
        for t, at in zip(traces, steps, strict=True):
            response = src[at]["extra"]["response"]
            assert t.outcome is not None
            assert t.outcome.usage["prompt_tokens"] == response["usage"]["prompt_tokens"]
            assert t.created_at == datetime.fromtimestamp(response["created"], tz=UTC)
            assert t.metadata["model"] == response["model"]
        assert {t.session_id for t in traces} == {data["instance_id"]}


def test_b01_provider_usage_kept_beside_our_count(corpus: Path) -> None:
    data = json.loads(
        (corpus / "b01_mswea_gemini3pro_pytest-dev__pytest-7571.traj.json").read_text()
    )
    msgs = data["messages"]
    i = next(k for k in range(20, len(msgs)) if msgs[k]["role"] == "assistant")
    response = msgs[i]["extra"]["response"]
    req = {
        "model": response["model"],
        "messages": [{"role": m["role"], "content": m["content"]} for m in msgs[:i]],
        "response": response,
    }
    trace = trace_from_request(req)
    assert trace.outcome is not None and trace.result is not None
    reported = response["usage"]["prompt_tokens"]
    assert trace.outcome.usage["prompt_tokens"] == reported
    assert trace.outcome.usage["completion_tokens"] == response["usage"]["completion_tokens"]
    assert trace.outcome.output == response["choices"][0]["message"]["content"]
    assert trace.created_at == datetime.fromtimestamp(response["created"], tz=UTC)
    ours = trace.result.totals.used
    off = abs(ours - reported) / reported > 0.10
    has_warning = any("provider reported" in w for w in trace.result.warnings)
    assert has_warning == off
    # the same request with a usage matching our count carries no such warning
    req2 = dict(req, response=None, usage={"prompt_tokens": ours, "completion_tokens": 5})
    t2 = trace_from_request(req2)
    assert not any("provider reported" in w for w in t2.result.warnings)  # type: ignore[union-attr]


def test_c02_sharegpt_converter(corpus: Path) -> None:
    path = corpus / "c02_llamafactory_glaive_toolcall_zh_demo.json"
    src = json.loads(path.read_text(encoding="utf-8"))
    traces = load_file(path)
    assert len(traces) == len(src)
    n_obs = sum(t["from"] == "observation" for r in src for t in r["conversations"])
    assert sum(len(t.input.packets) for t in traces) == n_obs
    for rec, trace in zip(src, traces, strict=True):
        check_sums(trace)
        conv = rec["conversations"]
        obs = [t["value"] for t in conv if t["from"] == "observation"]
        assert [p.content for p in trace.input.packets] == obs
        assert len(trace.input.tools) == len(json.loads(rec["tools"]))
        humans = [t["value"] for t in conv if t["from"] == "human"]
        assert trace.input.query == humans[-1]
        for t in conv:
            if t["from"] == "function_call":
                call = json.loads(t["value"])
                args = json.dumps(call["arguments"], ensure_ascii=False, separators=(",", ":"))
                line = f"{call['name']}({args})"
                assert any(line in m.content for m in trace.input.history)
    # the conversion itself pairs each observation with the call before it
    msgs = messages_from_sharegpt(src[0]["conversations"])
    call_ids = [c["id"] for m in msgs for c in m.get("tool_calls", [])]
    result_ids = [m["tool_call_id"] for m in msgs if m["role"] == "tool"]
    assert result_ids == call_ids[: len(result_ids)]


def test_developer_and_parts_and_unknown_shapes() -> None:
    inp = captured_input_from_messages(
        [
            {"role": "system", "content": [{"type": "text", "text": "You are terse."}]},
            {"role": "user", "content": "hi"},
            {"role": "developer", "content": "Never run rm -rf."},
            {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "x"}},
                ],
            },
        ],
        tools=[{"type": "function", "function": {"name": "bash", "parameters": {}}}],
        now=NOW,
    )
    assert inp.system_instructions == "You are terse."
    assert inp.query == "look\n[image_url: x]"
    assert [(p.id, p.kind, p.must_keep) for p in inp.packets] == [("policy:msg-2", "policy", True)]
    assert [m.content for m in inp.history] == ["hi", "hello"]
    assert inp.tools[0].name == "bash"
    with pytest.raises(ImportFormatError, match="messages\\[0\\]: missing 'role'"):
        captured_input_from_messages([{"content": "x"}], now=NOW)
    with pytest.raises(ImportFormatError, match="not an OpenAI-style chat request"):
        from ctxcore.formats.openai import requests_from_obj

        requests_from_obj({"foo": 1})


def test_trace_id_is_stable_and_instructions_reported_must_keep(corpus: Path) -> None:
    req = {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]}
    a = trace_from_request(req, now=NOW)
    b = trace_from_request(req, now=NOW)
    assert a.trace_id == b.trace_id
    d = {x.packet_id: x for x in a.result.decisions}  # type: ignore[union-attr]
    assert d[INSTRUCTIONS_ID].reason.value == "FITS"
    assert INSTRUCTIONS_ID in a.result.report.mustKeep  # type: ignore[union-attr]
    assert d[INSTRUCTIONS_ID].partition == "system"


def test_cli_import_to_file(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.jsonl"
    rc = main(
        ["import", str(corpus / "a02_sweagent_function_calling_simple.traj.json"), "-o", str(out)]
    )
    assert rc == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 5  # one trace per model call of the trajectory
    again = load_file(out)
    direct = load_file(corpus / "a02_sweagent_function_calling_simple.traj.json")
    # identical but for the stage timings, which are measurements
    assert again[0].to_dict()["result"].pop("timings") is not None
    strip = lambda t: {**t.to_dict(), "result": {**t.to_dict()["result"], "timings": {}}}  # noqa: E731
    assert [strip(t) for t in again] == [strip(t) for t in direct]
    assert "5 trace(s)" in capsys.readouterr().out


def test_cli_import_bad_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"foo": [1, 2]}', encoding="utf-8")
    rc = main(["import", str(bad), "-o", str(tmp_path / "x.jsonl")])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "bad.json" in err and "matches no format" in err
    assert "its fields: foo" in err and "--from NAME" in err


def test_window_from_request_or_known_model() -> None:
    msgs = [{"role": "user", "content": "hello there"}]
    unknown = trace_from_request({"messages": msgs, "model": "my-local-llm"}, now=NOW)
    assert unknown.result is not None
    assert unknown.result.totals.window == unknown.result.totals.used
    assert any("window is unknown" in w for w in unknown.result.warnings)
    known = trace_from_request(
        {"messages": msgs, "model": "gpt-4o-2024-08-06", "max_tokens": 1000}, now=NOW
    )
    assert known.result is not None
    assert known.result.totals.window == 128_000
    assert known.result.totals.available == 128_000 - 1000
    assert known.result.totals.tokenizer == "o200k_base"
    assert not any("window is unknown" in w for w in known.result.warnings)
    given = trace_from_request({"messages": msgs, "model": "gpt-4o", "window": 4096}, now=NOW)
    assert given.result is not None and given.result.totals.window == 4096


def test_oversized_tool_log_is_a_clear_error(tmp_path: Path, capsys: Any) -> None:
    from ctxcore.models import MAX_CONTENT_CHARS

    big = "x" * (MAX_CONTENT_CHARS + 10)
    req = {
        "messages": [
            {"role": "user", "content": "run it"},
            {"role": "tool", "tool_call_id": "c1", "content": big},
            {"role": "user", "content": "and?"},
        ]
    }
    with pytest.raises(
        ImportFormatError,
        match=r"messages\[1\] \(tool\): content: is 10,485,770 characters; the limit is 10,485,760",
    ):
        trace_from_request(req, now=NOW)
    path = tmp_path / "big.json"
    path.write_text(json.dumps(req), encoding="utf-8")
    assert main(["import", str(path), "-o", str(tmp_path / "o.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "big.json" in err and "messages[1] (tool)" in err and "Traceback" not in err
    assert "closest: openai" in err


def test_gzipped_jsonl_imports_like_the_plain_file(corpus: Path, tmp_path: Path) -> None:
    import gzip
    import os

    src = corpus / "a04_llamafactory_reason_tool_use_demo_50.jsonl"
    gz = tmp_path / "a04.jsonl.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    st = src.stat()
    os.utime(gz, (st.st_atime, st.st_mtime))  # same clock stand-in as the source
    plain, zipped = load_file(src), load_file(gz)
    assert len(zipped) == 50
    assert [t.input for t in zipped] == [t.input for t in plain]
    assert [t.trace_id for t in zipped] == [t.trace_id for t in plain]


def test_a_recorded_reply_that_calls_tools_keeps_its_calls_as_the_output() -> None:
    # a completion log: the request with the response beside it; the reply only calls tools
    folder = Path(__file__).resolve().parent / "fixtures" / "imports" / "openai-chat"
    request = json.loads((folder / "otel-contrib-tool-calls-turn1.request.json").read_text())
    response = json.loads((folder / "otel-contrib-tool-calls-turn1.response.json").read_text())
    [trace] = traces_from_value({**request, "response": response})
    calls = response["choices"][0]["message"]["tool_calls"]
    assert trace.outcome is not None
    assert trace.outcome.output == "\n".join(
        f"{c['function']['name']}({c['function']['arguments']})" for c in calls
    )
    # a reply with text only is its text, as before
    [trace] = traces_from_value(
        {**request, "response": {"choices": [{"message": {"content": "Sunny."}}]}}
    )
    assert trace.outcome is not None and trace.outcome.output == "Sunny."


def test_an_openhands_completion_log_keeps_the_replys_tool_call() -> None:
    # OpenHands SDK llm-logs: the request with the provider's response beside it
    path = (
        Path(__file__).resolve().parent
        / "fixtures/imports/openai-chat/openhands-sdk-llm-log-tool-call.request.json"
    )
    message = json.loads(path.read_text())["response"]["choices"][0]["message"]
    [trace] = load_file(path)
    assert trace.outcome is not None
    assert trace.outcome.output == "\n".join(
        [message["content"]]
        + [f"{c['function']['name']}({c['function']['arguments']})" for c in message["tool_calls"]]
    )


def test_a_part_with_no_type_and_no_text_is_kept_and_reported() -> None:
    # a real Gemini request's contents written as chat messages ({role, parts}): a part with
    # no 'type' is text when it holds some; a functionCall or functionResponse part holds
    # none, so it is kept as JSON text and reported, not read as empty text
    fixtures = Path(__file__).resolve().parent / "fixtures" / "imports" / "gemini"
    req = json.loads((fixtures / "openinference-automatic-tool-calling.request.json").read_text())
    messages = [{"role": c["role"], "parts": c["parts"]} for c in req["contents"]]
    untyped = [p for c in req["contents"] for p in c["parts"] if "text" not in p]
    assert untyped  # the call and its response
    [trace] = traces_from_value({"messages": messages})
    kept = [m.content for m in trace.result.messages if '"function' in m.content]
    assert len(kept) == len(untyped)
    loss = [f for f in diagnose(trace) if f.detector == "import_loss"]
    assert loss and f"{len(untyped)} part(s)" in loss[0].message
