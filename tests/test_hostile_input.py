"""Hostile values every command must refuse the same way: one line naming the file, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from proxy_support import start_collector, wait_for

from ctxcore.capture.calls import CallError, CallRecord, Sessions, trace_from_call
from ctxcore.cli import main
from ctxcore.formats.load import load_file
from ctxcore.store import TraceStore

ROOT = Path(__file__).resolve().parent.parent

INPUT = {
    "query": "why does test_login fail?",
    "now": "2026-01-01T00:00:00Z",
    "packets": [{"id": "tool:1", "kind": "tool_result", "content": "FAILED", "metadata": {}}],
}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxcore", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


@pytest.mark.parametrize("command", ["build", "check", "import"])
def test_a_number_too_large_for_a_float_is_refused_not_nulled(tmp_path: Path, command: str) -> None:
    path = tmp_path / "input.json"
    text = json.dumps(INPUT).replace('"metadata": {}', '"metadata": {"score": 1e400}')
    path.write_text(text)
    args = [command, str(path)]
    if command == "import":
        args += ["-o", str(tmp_path / "out.jsonl")]
    proc = _run(*args)
    assert proc.returncode == 2, proc.stdout[-500:]
    [line] = proc.stderr.strip().splitlines()
    assert str(path) in line and "1e400" in line
    assert not (tmp_path / "out.jsonl").exists()


# --------------------------------------------------------------------------- deep JSON and BOMs

FIXTURES = ROOT / "tests" / "fixtures" / "imports"
#: Past Python's parsers' recursion limit (about a thousand levels) wherever the stack stands.
DEPTH = 3000
DEEP = "[" * DEPTH + "]" * DEPTH
BOM = b"\xef\xbb\xbf"
#: One real file of each format ``ctxscope import`` detects by itself.
SOURCES = {
    "openai": "openai-chat/otel-contrib-tool-calls-turn1.request.json",
    "anthropic": "anthropic-messages/openllmetry-thinking.request.json",
    "openai-responses": "openai-responses/openllmetry-agents-function-call.request.json",
    "gemini": "gemini/openinference-automatic-tool-calling.request.json",
    "bedrock-converse": "bedrock-converse/openinference-converse-tool-use.request.json",
    "langchain": "langchain/vercel-ai-langgraph-response-2.state.json",
    "openhands": "openhands/runtime-traj-basic.json",
    "otlp": "otlp-json/openai-v2-latest-span-only.otlp.jsonl",
    "claude-code": "claude-code/ccviewer-init-session.jsonl",
    "codex": "codex/localpush-rollout-2034.jsonl",
}
DOCUMENTS = [k for k, v in SOURCES.items() if v.endswith(".json")]
LOGS = [k for k, v in SOURCES.items() if v.endswith(".jsonl")]


def _import(
    capsys: pytest.CaptureFixture[str], path: Path, out: Path, *extra: str
) -> tuple[int, list[dict[str, Any]], list[str]]:
    """``ctxscope import PATH -o OUT`` in this process: exit code, the traces written, and
    the lines on stderr."""
    rc = main(["import", str(path), "-o", str(out), *extra])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    traces = [t.to_dict() for t in load_file(out, "trace")] if out.exists() else []
    return rc, traces, err.strip().splitlines()


def _said(traces: list[dict[str, Any]]) -> list[tuple[str, list[str], list[str]]]:
    """What each trace's prompt holds: the query, the messages' and the packets' texts."""
    return [
        (
            t["input"]["query"],
            [m["content"] for m in t["input"]["history"]],
            [p["content"] for p in t["input"]["packets"]],
        )
        for t in traces
    ]


def _copy_time(src: Path, dst: Path) -> None:
    """``dst`` dated as ``src``: an imported prompt's clock is its file's time."""
    st = src.stat()
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))


def _deep_document(fmt: str) -> str:
    """The format's real file with one more field nested DEPTH levels deep."""
    text = (FIXTURES / SOURCES[fmt]).read_text(encoding="utf-8")
    start = text.index("{")
    return f'{text[: start + 1]}"nested": {DEEP}, {text[start + 1 :]}'


@pytest.mark.parametrize("fmt", DOCUMENTS)
def test_a_document_nested_too_deeply_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    path = tmp_path / f"{fmt}.json"
    path.write_text(_deep_document(fmt))
    rc, traces, err = _import(capsys, path, tmp_path / "out.jsonl")
    assert rc == 2 and not traces
    [line] = err
    assert str(path) in line and "nested too deeply" in line


@pytest.mark.parametrize("fmt", LOGS)
def test_a_line_nested_too_deeply_costs_that_line_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    lines = (FIXTURES / SOURCES[fmt]).read_text(encoding="utf-8").splitlines(keepends=True)
    whole = tmp_path / f"whole-{fmt}.jsonl"
    whole.write_text("".join(lines))
    rc, want, _ = _import(capsys, whole, tmp_path / "whole-out.jsonl")
    assert rc == 0 and want
    # a line of its own that no parser can follow, after the first (a session log's first
    # lines tell its format)
    hostile = tmp_path / f"{fmt}.jsonl"
    hostile.write_text("".join([lines[0], '{"nested": ' + DEEP + "}\n", *lines[1:]]))
    _copy_time(whole, hostile)
    rc, got, err = _import(capsys, hostile, tmp_path / "out.jsonl")
    assert rc in (0, 1)
    assert _said(got) == _said(want)
    assert all(str(hostile) in line and "nested too deeply" in line for line in err), err


def test_a_jsonl_line_that_cannot_be_read_costs_that_line_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request = json.loads((FIXTURES / SOURCES["openai"]).read_text(encoding="utf-8"))
    good = json.dumps(request)
    path = tmp_path / "requests.jsonl"
    path.write_text(f"{good}\n" + '{"nested": ' + DEEP + "}\n" + '{"model": oops}\n' + f"{good}\n")
    rc, traces, err = _import(capsys, path, tmp_path / "out.jsonl")
    assert rc == 1  # something was not imported: said, and the rest imported
    assert len(traces) == 2
    assert [line.split(": ")[2] for line in err if line.startswith("ctxscope import: error")] == [
        f"{path}:2",
        f"{path}:3",
    ]
    assert "nested too deeply" in err[0] and "malformed JSON" in err[1]


@pytest.mark.parametrize("command", ["build", "replay"])
def test_a_set_value_nested_too_deeply_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    path = tmp_path / "input.json"
    path.write_text(json.dumps(INPUT))
    if command == "replay":
        assert main(["build", str(path)]) == 0
        path.write_text(capsys.readouterr().out)
    rc = main([command, str(path), "--set", f"max_tokens={DEEP}"])
    out, err = capsys.readouterr()
    assert rc == 2 and not out
    [line] = err.strip().splitlines()
    assert "--set max_tokens" in line and "nested too deeply" in line


@pytest.mark.parametrize("fmt", list(SOURCES))
def test_a_byte_order_mark_costs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    source = FIXTURES / SOURCES[fmt]
    rc, want, _ = _import(capsys, source, tmp_path / "plain.jsonl")
    assert rc == 0 and want
    marked = tmp_path / source.name
    marked.write_bytes(BOM + source.read_bytes())
    _copy_time(source, marked)
    rc, got, err = _import(capsys, marked, tmp_path / "marked.jsonl")
    assert rc == 0, err
    assert [t["input"] for t in got] == [t["input"] for t in want]


def test_a_byte_order_mark_costs_no_trace_to_build_check_or_ingest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "input.json"
    src.write_bytes(BOM + json.dumps(INPUT).encode())
    assert main(["build", str(src)]) == 0
    trace = json.loads(capsys.readouterr().out)
    second = {**trace, "trace_id": "t-second", "turn": 1}
    jsonl = tmp_path / "traces.jsonl"
    jsonl.write_bytes(BOM + (json.dumps(trace) + "\n" + json.dumps(second) + "\n").encode())
    one = tmp_path / "trace.json"
    one.write_bytes(BOM + json.dumps(trace).encode())
    for path in (jsonl, one):
        assert main(["check", str(path)]) in (0, 1)  # 2: the file could not be read
        assert "error:" not in capsys.readouterr().err
    db = tmp_path / "store.duckdb"
    assert main(["ingest", str(jsonl), "--db", str(db)]) == 0
    assert "0 errors" in capsys.readouterr().out
    with TraceStore(str(db), read_only=True) as store:
        assert store.get_trace(trace["trace_id"]) is not None
        assert store.get_trace("t-second") is not None
    db.unlink()
    assert main(["ingest", str(one), "--db", str(db)]) == 0
    assert "0 errors" in capsys.readouterr().out
    with TraceStore(str(db), read_only=True) as store:
        assert store.get_trace(trace["trace_id"]) is not None


def test_the_receiver_answers_400_in_one_line_to_json_nested_too_deeply(tmp_path: Path) -> None:
    collector = start_collector(tmp_path / "traces")
    try:
        body = ('{"resourceSpans": ' + DEEP + "}").encode()
        status, reply = _post(collector.port, body)
        assert status == 400
        [line] = json.loads(reply)["message"].splitlines()
        assert "nested too deeply" in line
        # and it goes on serving
        export = (FIXTURES / SOURCES["otlp"]).read_text().splitlines()[0].encode()
        assert _post(collector.port, export)[0] == 200
    finally:
        collector.stop()
    assert "Traceback" not in collector.text


def _post(port: int, body: bytes) -> tuple[int, bytes]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/traces",
        data=body,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


# --------------------------------------------------------------------------- --set values


def _trace_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> Path:
    """A trace built from INPUT (``args``: more for ``ctxscope build``), as a file."""
    src = tmp_path / "input.json"
    src.write_text(json.dumps(INPUT))
    assert main(["build", str(src), *args]) == 0
    path = tmp_path / "trace.json"
    path.write_text(capsys.readouterr().out)
    return path


@pytest.mark.parametrize(
    "knob", ["max_tokens", "min_relevance", "history_limit", "lexical_weight", "window"]
)
@pytest.mark.parametrize("value", ["true", "false"])
def test_true_or_false_for_a_number_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], knob: str, value: str
) -> None:
    path = tmp_path / "input.json"
    path.write_text(json.dumps(INPUT))
    assert main(["build", str(path), "--set", f"{knob}={value}"]) == 2
    out, err = capsys.readouterr()
    [line] = err.strip().splitlines()
    assert not out and repr(knob) in line and f"must be a number, not {value}" in line


def test_set_output_reserve_takes_the_place_of_the_recorded_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _trace_file(tmp_path, capsys)
    recorded = json.loads(path.read_text())
    assert recorded["config"]["output_reserve"] != 500
    assert main(["build", str(path), "--set", "output_reserve=500"]) == 0
    rebuilt = json.loads(capsys.readouterr().out)
    assert rebuilt["config"]["output_reserve"] == 500
    assert rebuilt["result"]["totals"]["output_reserve"] == 500
    assert main(["replay", str(path), "--set", "output_reserve=500", "--format", "json"]) == 0
    [turn] = json.loads(capsys.readouterr().out)["turns"]
    totals = rebuilt["result"]["totals"]
    assert turn["budget_after"] == totals["window"] - 500 - totals["safety_margin"]
    assert turn["budget_after"] > turn["budget_before"]


@pytest.mark.parametrize("command", ["build", "replay"])
@pytest.mark.parametrize("fact", ["output_reserve=500", "window=4000"])
def test_set_of_what_a_preset_never_reads_is_refused_naming_its_knobs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, fact: str
) -> None:
    path = _trace_file(tmp_path, capsys, "--preset", "hello-agents")
    assert main([command, str(path), "--set", fact]) == 2
    out, err = capsys.readouterr()
    [line] = err.strip().splitlines()
    name = fact.split("=")[0]
    assert f"preset hello-agents does not read {name}" in line
    assert "the knobs it takes: tokenizer, max_tokens, reserve_ratio, min_relevance" in line


# --------------------------------------------------------------------------- the app's upload


def _upload(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, body: bytes) -> Any:
    """The Share page with ``body`` uploaded as ``name`` and imported (the real app)."""
    from app_support import open_page

    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    at = open_page("share")
    at.get("file_uploader")[0].set_value((name, body, "application/json")).run()
    at.button(key="sh_import").click().run()
    assert not at.exception
    return at


def test_an_upload_nested_too_deeply_is_one_line_in_the_app(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = _upload(tmp_path, monkeypatch, "req.json", _deep_document("openai").encode())
    [error] = [e.value for e in at.error]
    assert "nested too deeply" in error and len(error.splitlines()) == 1


def test_an_uploaded_jsonl_keeps_its_good_lines_and_bom(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = (
        json.dumps(
            json.loads(
                (FIXTURES / f"openai-chat/otel-contrib-tool-calls-turn{n}.request.json").read_text()
            )
        )
        for n in (1, 2)
    )
    body = f"{first}\n" + '{"nested": ' + DEEP + "}\n" + f"{second}\n"
    at = _upload(tmp_path, monkeypatch, "calls.jsonl", BOM + body.encode())
    assert not at.error, [e.value for e in at.error]
    assert any("Imported 2 trace(s)" in s.value for s in at.success)
    said = [t.value for t in at.text if t.value.startswith("not imported:")]
    assert len(said) == 1 and "calls.jsonl:2: JSON nested too deeply" in said[0]


# --------------------------------------------------------------------------- JSON inside strings


def _span(span_id: str, key: str, value: str) -> dict[str, Any]:
    return {
        "traceId": "5b8aa5a2d2c872e8321cf37308d69df2",
        "spanId": span_id,
        "name": "chat gpt-4o-mini",
        "startTimeUnixNano": "1796078064712464003",
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.request.model", "value": {"stringValue": "gpt-4o-mini"}},
            {"key": key, "value": {"stringValue": value}},
        ],
    }


#: An OTLP export of three spans: messages nested too deeply (refused, that span only), a
#: prompt nested too deeply (its text, as any prompt that is not JSON) and a good one.
DEEP_SPANS = {
    "resourceSpans": [
        {
            "resource": {"attributes": []},
            "scopeSpans": [
                {
                    "spans": [
                        _span("00000000000000a1", "gen_ai.input.messages", DEEP),
                        _span("00000000000000a2", "gen_ai.prompt", DEEP),
                        _span(
                            "00000000000000a3",
                            "gen_ai.input.messages",
                            json.dumps([{"role": "user", "parts": [{"content": "hello there"}]}]),
                        ),
                    ]
                }
            ],
        }
    ]
}


def test_json_nested_too_deeply_in_an_attribute_costs_its_span_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "spans.otlp.json"
    path.write_text(json.dumps(DEEP_SPANS))
    rc = main(["import", str(path), "-o", str(tmp_path / "out.jsonl")])
    out, err = capsys.readouterr()
    assert rc == 0 and not err
    traces = [t.to_dict() for t in load_file(tmp_path / "out.jsonl", "trace")]
    assert [t["input"]["query"] for t in traces] == [DEEP, "hello there"]
    [said] = [line for line in out.splitlines() if "not imported" in line]
    assert "spans[0]" in said and "gen_ai.input.messages: JSON nested too deeply" in said


def test_the_receiver_rejects_only_the_span_whose_attribute_is_nested_too_deeply(
    tmp_path: Path,
) -> None:
    collector = start_collector(tmp_path / "traces")
    try:
        status, reply = _post(collector.port, json.dumps(DEEP_SPANS).encode())
        assert status == 200
        partial = json.loads(reply)["partialSuccess"]
        assert partial["rejectedSpans"] == "1" and "nested too deeply" in partial["errorMessage"]
        written = wait_for(tmp_path / "traces" / "live" / "otlp.jsonl", lambda t: True, 2)
        assert sorted(t["input"]["query"] for t in written) == sorted([DEEP, "hello there"])
    finally:
        collector.stop()
    assert "Traceback" not in collector.text


def _call(api: str, **kw: Any) -> CallRecord:
    base: dict[str, Any] = {
        "id": "call-1",
        "api": api,
        "path": "/v1/chat/completions",
        "source": "",
        "started_at": 1796078064.0,
        "latency_ms": 5.0,
        "status": 200,
        "content_type": "application/json",
    }
    return CallRecord(**{**base, **kw})


def test_the_proxy_converter_says_a_body_nested_too_deeply_in_one_line() -> None:
    request = (FIXTURES / SOURCES["openai"]).read_bytes()
    deep = ('{"nested": ' + DEEP + "}").encode()
    with pytest.raises(CallError, match="the request body: JSON nested too deeply"):
        trace_from_call(_call("openai.chat"), deep, b"{}", Sessions())
    # a reply nested too deeply: the call is kept, and says why it has no reply
    trace = trace_from_call(_call("openai.chat"), request, deep, Sessions())
    assert trace.outcome is not None and "the reply: JSON nested too deeply" in trace.outcome.note
    # a stream whose events nest too deeply: read as events that say nothing
    stream = f"data: {deep.decode()}\n\ndata: [DONE]\n\n".encode()
    sse = _call("openai.chat", content_type="text/event-stream")
    assert trace_from_call(sse, request, stream, Sessions()).input.query


def test_tool_arguments_nested_too_deeply_are_exported_as_their_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request = json.loads((FIXTURES / SOURCES["openai"]).read_text(encoding="utf-8"))
    request["messages"].append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c9", "type": "function", "function": {"name": "f", "arguments": DEEP}}
            ],
        }
    )
    src = tmp_path / "req.json"
    src.write_text(json.dumps(request))
    traces = tmp_path / "traces.jsonl"
    assert main(["import", str(src), "-o", str(traces)]) == 0
    out = tmp_path / "export.json"
    assert main(["export", str(traces), "--format", "otlp", "-o", str(out)]) == 0
    capsys.readouterr()
    assert DEEP in out.read_text()  # the arguments as the model wrote them
