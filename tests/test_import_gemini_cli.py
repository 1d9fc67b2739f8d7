"""Gemini CLI chat files imported as one trace per model reply (``formats/gemini_cli.py``).

The samples in ``tests/fixtures/imports/gemini-cli`` are real chat files (``SOURCES.md``):
one in the older layout (string contents, gemini-2.5-pro), one in the newer (user contents
as parts, gemini-3.1-pro-preview). ``EXPECTED.json`` holds their hand counts.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from test_import_sessions import EXPECTED, FIXTURES, LOSS_ONLY, _check_sums

from ctxcore.cli import main
from ctxcore.diagnostics import diagnose
from ctxcore.errors import ImportFormatError
from ctxcore.formats.accounting import imported_counts
from ctxcore.formats.load import detect_format, load_file

GEMINI_CLI = sorted(n for n in EXPECTED if n.startswith("gemini-cli/"))


@pytest.mark.parametrize("name", GEMINI_CLI)
def test_one_trace_per_reply_with_its_context_tools_thoughts_and_usage(name: str) -> None:
    exp = EXPECTED[name]
    path = FIXTURES / name
    assert detect_format(json.loads(path.read_text(encoding="utf-8"))) == "gemini-cli"
    traces = load_file(path)
    assert len(traces) == exp["model_calls"]
    assert {t.session_id for t in traces} == {exp["session_id"]}
    assert [t.turn for t in traces] == list(range(len(traces)))
    for t in traces:
        meta = t.metadata["import"]
        assert meta["format"] == "gemini-cli"
        assert meta["source"] == imported_counts(t)
        assert "kept_as_text" not in meta and "skipped" not in meta
        assert set(meta["reconstructed"]) == {"system prompt", "tool definitions"}
        assert t.metadata["model"] == exp["model"]
        assert t.builder.name == "import/gemini-cli"
        _check_sums(t)
        assert not diagnose(t, options=LOSS_ONLY)
    # the last call saw every message but its own reply, and every tool result before it
    last = traces[-1].metadata["import"]["source"]
    assert last["messages"] == exp["messages"]["total"] - 1
    calls = [c for t in traces for c in t.metadata["session_log"].get("tool_calls", [])]
    assert Counter(c["name"] for c in calls) == exp["tool_calls_by_name"]
    results = {p.id for t in traces for p in t.input.packets if p.kind == "tool_result"}
    assert results <= {f"tool:{c['id']}" for c in calls}
    # every result reached a later call, but those of the last reply (no call after it)
    after_last = len(traces[-1].metadata["session_log"].get("tool_calls", []))
    assert len(results) == exp["tool_results"] - after_last
    for key, total in exp["usage"].items():
        assert sum(t.outcome.usage[key] for t in traces if t.outcome) == total, key
    # thought summaries are the reasoning of the replies that had them
    reasoned = [m for m in traces[-1].input.history if m.metadata.get("reasoning")]
    assert reasoned and all(m.role == "assistant" for m in reasoned)


def test_a_tool_result_is_a_structured_result_answering_its_call() -> None:
    name = "gemini-cli/ai-sessions-pomodoro-timer.json"
    raw = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    failed = next(
        c for m in raw["messages"] for c in m.get("toolCalls") or [] if c["status"] == "error"
    )
    traces = load_file(FIXTURES / name)
    packet = next(p for t in traces for p in t.input.packets if p.id == f"tool:{failed['id']}")
    assert packet.kind == "tool_result"
    assert packet.metadata["name"] == failed["name"]
    error = failed["result"][0]["functionResponse"]["response"]["error"]
    assert json.loads(packet.content) == {"error": error}  # the response, as Gemini got it


def test_a_broken_message_is_one_error_and_the_rest_imports(tmp_path: Path) -> None:
    name = "gemini-cli/aim-matrix-pro.json"
    data = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    data["messages"][5]["toolCalls"] = ["not a call"]
    p = tmp_path / "session-x.json"
    p.write_text(json.dumps(data), encoding="utf-8")
    traces = load_file(p)
    assert len(traces) == EXPECTED[name]["model_calls"] - 1
    [error] = [e for t in traces for e in t.metadata["import"].get("skipped", [])]
    assert error == f"{p}: messages[5]: toolCalls: a tool call is an object"


def test_through_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = "gemini-cli/ai-sessions-pomodoro-timer.json"
    out = tmp_path / "t.jsonl"
    assert main(["import", str(FIXTURES / name), "-o", str(out)]) == 0
    assert len(out.read_text().splitlines()) == EXPECTED[name]["model_calls"]
    said = capsys.readouterr()
    assert "(gemini-cli)" in said.out + said.err


def test_a_chat_file_with_no_reply_says_so_in_one_line(tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "gemini-cli/aim-matrix-pro.json").read_text())
    data["messages"] = [m for m in data["messages"] if m["type"] == "user"]
    p = tmp_path / "session-y.json"
    p.write_text(json.dumps(data))
    with pytest.raises(ImportFormatError, match="no model call") as exc:
        load_file(p)
    assert "\n" not in str(exc.value)
