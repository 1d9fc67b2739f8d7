"""What ``ctxscope import`` prints per source file: what it held against what reached the
traces, per category, and a line when they differ (docs/design.md, "Capture, import, export,
redaction"). Run through the real command on real fixtures; the counts are EXPECTED.json's
hand counts.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from ctxcore.cli import main
from ctxcore.formats.load import load_file

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "imports"
EXPECTED: dict[str, dict[str, Any]] = json.loads((FIXTURES / "EXPECTED.json").read_text())["files"]


def _import(capsys: pytest.CaptureFixture[str], tmp_path: Path, *paths: Path) -> list[str]:
    assert main(["import", *map(str, paths), "-o", str(tmp_path / "out.jsonl")]) == 0
    return capsys.readouterr().out.splitlines()


def _line_of(lines: list[str], path: Path) -> tuple[str, list[str]]:
    """The file's summary line and the lines under it."""
    k = next(i for i, line in enumerate(lines) if line.startswith(f"  {path} ("))
    return lines[k], [line for line in lines[k + 1 :] if line.startswith("    ")][:1]


@pytest.mark.parametrize(
    "name",
    [
        "claude-code/ccviewer-init-session.jsonl",
        "claude-code/ccviewer-task-sidechain-session.jsonl",
    ],
)
def test_a_session_log_says_its_tool_calls_and_results_once(
    name: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    exp = EXPECTED[name]
    path = FIXTURES / name
    line, under = _line_of(_import(capsys, tmp_path, path), path)
    calls, results = exp["tool_calls"], exp["tool_results"]
    # each call holds the context of those before it: counted once per session, not per call
    assert line == (
        f"  {path} (claude-code, {exp['model_calls']} trace(s)): in the source → in the "
        f"traces: messages {line.split('messages ')[1].split(',')[0]}, tool calls {calls}, "
        f"tool results {results}"
    )
    assert under == []  # nothing lost, nothing kept as text


def test_each_file_of_an_import_says_each_category_as_the_hand_counts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    name = "anthropic-messages/openllmetry-image-with-history-system-string.request.json"
    exp = EXPECTED[name]
    path = FIXTURES / name
    other = FIXTURES / "claude-code" / "ccviewer-init-session.jsonl"
    line, under = _line_of(_import(capsys, tmp_path, path, other), path)
    want = {
        "messages": exp["messages"]["total"],
        "system parts": exp["system_parts"],
        "tool calls": exp["tool_calls"],
        "tool results": exp["tool_results"],
        "tool definitions": exp["tool_definitions"],
        "images/documents": exp["images"] + exp["documents"],
    }
    said = ", ".join(f"{label} {n}" for label, n in want.items() if n)
    assert line.endswith(f"in the source → in the traces: {said}")
    assert under == []


def test_a_part_kept_as_text_is_said_under_its_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # a real request with a block of a type no importer knows planted in its last message
    source = (
        FIXTURES / "anthropic-messages" / "openllmetry-prompt-caching-system-blocks.request.json"
    )
    request = json.loads(source.read_text())
    msg = request["messages"][-1]
    if isinstance(msg["content"], str):
        msg["content"] = [{"type": "text", "text": msg["content"]}]
    msg["content"].append(copy.deepcopy({"type": "martian_block", "payload": {"x": 1}}))
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request))
    _, under = _line_of(_import(capsys, tmp_path, path, source), path)
    k = len(request["messages"]) - 1
    assert under == [
        "    1 part(s) of a type the importer does not know kept as JSON text (first: "
        f"messages[{k}].content[{len(msg['content']) - 1}].type='martian_block')"
    ]


def test_what_a_trace_lost_is_said_even_if_a_later_one_has_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # the real session's traces, one of which claims its source held a tool call more than
    # reached it: read back as ctxscope traces, the loss is said
    name = "claude-code/ccviewer-init-session.jsonl"
    _import(capsys, tmp_path, FIXTURES / name)
    traces = [t.to_dict() for t in load_file(tmp_path / "out.jsonl", "trace")]
    traces[2]["metadata"]["import"]["source"]["tool_calls"] += 1
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in traces))
    assert main(["import", str(path), "-o", str(tmp_path / "again.jsonl")]) == 0
    line, under = _line_of(capsys.readouterr().out.splitlines(), path)
    exp = EXPECTED[name]
    # the most any call held is the last one's, which lost nothing
    assert f"tool calls {exp['tool_calls']}," in line
    assert under == ["    lost in 1 trace(s): tool calls 1"]
