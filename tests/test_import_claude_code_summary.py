"""Claude Code ``summary`` lines (session titles) and parents, on the real sample.

``claude-code/ccviewer-summary-first-calls.subset.jsonl`` is the first 11 lines of a real
session (claude-code-viewer's mock data, SOURCES.md): a ``summary`` line whose leaf is not
in the file, a prompt, and two model calls. Claude Code appends a summary after the lines it
titles and may give such a line a ``uuid`` that a later line names as parent; the tests move
the real summary line to where Claude Code appends it, name a real leaf, and chain a line to
it (docs/design.md, "Capture, import, export, redaction").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ctxcore.formats.load import load_file
from ctxcore.models import Trace

FIXTURE = (
    Path(__file__).resolve().parent
    / "fixtures"
    / "imports"
    / "claude-code"
    / "ccviewer-summary-first-calls.subset.jsonl"
)
TITLE = "Empty Repo Setup: CLAUDE.md Foundation Created"


def _lines() -> list[dict[str, Any]]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines()]


def _write(tmp_path: Path, lines: list[dict[str, Any]]) -> Path:
    p = tmp_path / "session.jsonl"
    p.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return p


def _log(trace: Trace) -> dict[str, Any]:
    log = trace.metadata["session_log"]
    assert isinstance(log, dict)
    return log


def _skipped(traces: list[Trace]) -> list[str]:
    out: list[str] = []
    for t in traces:
        meta = t.metadata["import"]
        assert isinstance(meta, dict)
        out += meta.get("skipped") or []
    return out


def test_the_real_summary_reaches_every_trace_and_says_its_leaf_is_not_in_the_file() -> None:
    traces = load_file(FIXTURE)
    assert len(traces) == 2
    leaf = _lines()[0]["leafUuid"]
    for t in traces:
        log = _log(t)
        assert log["titles"] == [{"summary": TITLE, "leafUuid": leaf, "line": 1, "leaf_line": None}]
        assert "title" not in log  # the conversation it names is not in this file
    assert _skipped(traces) == []


def test_a_summary_appended_after_its_leaf_titles_the_calls_leading_to_it(
    tmp_path: Path,
) -> None:
    lines = _lines()
    summary = lines.pop(0)
    # the first call's reply ends at the 5th line (of the 10 left); its title is written
    # after it, naming it, as Claude Code appends one
    summary["leafUuid"] = lines[4]["uuid"]
    lines.insert(5, summary)
    traces = load_file(_write(tmp_path, lines))
    assert len(traces) == 2
    first, second = (_log(t) for t in traces)
    assert first["title"] == TITLE  # its reply leads to the leaf
    assert second["title"] == TITLE  # its context holds the leaf
    assert first["titles"][0]["line"] == 6 and first["titles"][0]["leaf_line"] == 5


def test_a_line_naming_a_summary_line_as_parent_finds_it(tmp_path: Path) -> None:
    lines = _lines()
    summary = lines.pop(0)
    summary.update(uuid="5e1c0000-0000-4000-8000-000000000001", parentUuid=lines[4]["uuid"])
    lines.insert(5, summary)
    lines[6]["parentUuid"] = summary["uuid"]  # the tool result after it continues it
    traces = load_file(_write(tmp_path, lines))
    assert _skipped(traces) == []
    second = traces[1]
    # the second call still sees the whole chain through the summary line: its prompt,
    # the first reply and the tool results
    assert [m.id for m in second.result.messages if m.role == "assistant"]  # type: ignore[union-attr]
    meta = second.metadata["import"]
    assert isinstance(meta, dict) and meta["source"]["tool_results"] == 2


def test_a_parent_later_in_the_file_is_not_reported_missing(tmp_path: Path) -> None:
    lines = _lines()
    # two result lines of the first call swapped: the second names the first as parent
    # before it is read
    assert lines[6]["parentUuid"] == lines[5]["uuid"]
    lines[5], lines[6] = lines[6], lines[5]
    traces = load_file(_write(tmp_path, lines))
    said = _skipped(traces)
    assert not any("not in the file" in s for s in said)
    assert any("comes after it, at line 7; read as continuing line" in s for s in said)


def test_a_parent_the_file_lacks_is_reported_missing(tmp_path: Path) -> None:
    lines = _lines()
    lines[6]["parentUuid"] = "0000dead-0000-4000-8000-000000000000"
    said = _skipped(load_file(_write(tmp_path, lines)))
    assert any("(0000dead-0000-4000-8000-000000000000) is not in the file" in s for s in said), said
